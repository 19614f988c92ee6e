"""Entropy placement: spraying's EVs routed by the sender (distinct, even) or hashed
by the switches (independent, with replacement), on the Clos and on stored-path fabrics, and
what a report says about it. References are hand counts over the drawn slots."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from fabricjax.engine.phase import host_routes, initial_slots, solve_policy_phase
from fabricjax.fabric.build import build
from fabricjax.fabric.paths import clos_path_links, hashed_evs, spread_slots
from fabricjax.policies import get
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.workload.flows import Flows
from fabricjax_cli.main import app

MIB = 2**20
# one plane of radix-16 switches: 8 T0s of 8 GPUs, 8 spines, full bisection
FABRIC = {"gpus": 64, "planes": 1, "radix": 16, "gpus_per_server": 8}


def scenario(placement: str, policy: str = "spray", evs: int = 8, **extra):
    return parse_scenario({
        "fabric": FABRIC, "policies": [policy],
        "workload": [{"collective": "permutation", "size": 4 * MIB}],
        "spray": {"evs": evs, "placement": placement},
        "mrc": {"evs": evs, "placement": placement},
        "solver": {"progressive": False}, **extra})


def cross_permutation(fabric) -> Flows:
    """Every GPU sends to the GPU 8 further on (always another T0)."""
    src = np.arange(fabric.geometry.gpus, dtype=np.int32)
    dst = (src + 8) % fabric.geometry.gpus
    return Flows(src, dst.astype(np.int32), np.full(src.size, 4.0 * MIB))


def hand_count_p100(fabric, flows, plane, spine) -> float:
    """P100 of the fabric links, counted by hand: each flow offers its NIC rate, split equally
    over its slots; a link's load is the sum over the slots that cross it."""
    links = clos_path_links(fabric.geometry, flows.src[:, None], flows.dst[:, None], plane, spine)
    share = np.broadcast_to(fabric.geometry.nic_gbps / plane.shape[1], plane.shape)
    load = np.zeros(fabric.num_links + 1)
    for hop in range(links.shape[-1]):
        np.add.at(load, links[..., hop].reshape(-1), share.reshape(-1))
    return float(np.max(load[:-1] / fabric.capacity))


def test_hashed_evs_collide_and_routed_do_not():
    fabric = build(scenario("routed"))
    geom = fabric.geometry
    rng = np.random.default_rng(7)
    _, routed = spread_slots(geom, 500, geom.spines, rng)
    plane, hashed = hashed_evs(geom, 500, geom.spines, rng)
    assert all(len(set(row)) == geom.spines for row in routed)
    # 8 EVs on 8 spines hashed independently: all distinct with probability 8!/8^8 = 0.24%
    distinct = np.array([len(set(row)) for row in hashed])
    assert np.mean(distinct == geom.spines) < 0.05
    assert hashed.min() >= 0 and hashed.max() < geom.spines
    assert np.array_equal(plane, np.zeros_like(plane))


@pytest.mark.parametrize("policy", ["spray", "mrc"])
def test_hashed_placement_draws_what_the_policy_starts_from(policy):
    for placement in ("routed", "hashed"):
        scen = scenario(placement, policy)
        fabric = build(scen)
        flows = cross_permutation(fabric)
        slots = initial_slots(get(policy), scen, fabric, flows, (0, 0))
        distinct = np.array([len(set(row)) for row in slots.choice])
        if placement == "routed":
            assert np.all(distinct == 8)
        else:
            assert np.mean(distinct == 8) < 0.05


def test_hashed_spray_p100_is_the_hand_count_and_above_routed():
    """Routed: 8 EVs on 8 distinct spines put exactly one flow's worth on every link (P100 =
    1). Hashed: some spine gets two EVs of a flow, and the P100 is what counting says."""
    p100 = {}
    for placement in ("routed", "hashed"):
        scen = scenario(placement)
        fabric = build(scen)
        flows = cross_permutation(fabric)
        out = solve_policy_phase("spray", scen, fabric, flows, (0, 0))
        p100[placement] = float(out.result.stats[0, 2])
        expected = hand_count_p100(fabric, flows, out.split.plane, out.split.choice)
        assert p100[placement] == pytest.approx(expected, rel=1e-5)
    assert p100["routed"] == pytest.approx(1.0, rel=1e-5)
    assert p100["hashed"] > 1.2


def test_hashed_aggregated_spray_is_multinomial_per_class():
    """Solved as (T0, T0) classes, hashed spraying draws every class's EVs per spine as
    Multinomial(n_c * K_p, 1/S): counts sum to n_c * K_p and are not all equal."""
    scen = scenario("hashed")
    fabric = build(scen)
    geom = fabric.geometry

    class Classes:          # three cross classes of 8 flows, one local class
        num_classes = 4
        flows = np.array([8, 8, 8, 8])
        cross = np.array([True, True, True, False])

    counts, per_plane = get("spray").class_slots(geom, Classes, scen,
                                                 np.random.default_rng(1))
    assert counts.shape == (4, 1, geom.spines)
    assert per_plane.tolist() == [8.0]
    assert counts[:3].sum(axis=-1).tolist() == [[64], [64], [64]]
    assert counts[3].sum() == 0
    assert len(set(counts[:3].reshape(-1).tolist())) > 1


GRAPH_EDGES = """\
# two leaves of two hosts each, joined by four spines: four equal-cost paths per pair
gpu0 l0 100
gpu1 l0 100
gpu2 l1 100
gpu3 l1 100
l0 s0 100
l0 s1 100
l0 s2 100
l0 s3 100
l1 s0 100
l1 s1 100
l1 s2 100
l1 s3 100
"""


def test_hashed_on_stored_paths_uses_evs_on_equal_cost_paths(tmp_path):
    (tmp_path / "leafspine.txt").write_text(GRAPH_EDGES)
    data = {"fabric": {"kind": "graph", "file": "leafspine.txt", "gpus": 4,
                       "paths": 4},
            "policies": ["spray"],
            "workload": [{"collective": "permutation", "size": MIB}],
            "solver": {"progressive": False}}
    routed = parse_scenario(data).located(tmp_path)
    hashed = parse_scenario({**data, "spray": {"evs": 32, "placement": "hashed"}}
                            ).located(tmp_path)
    assert get("spray").slots_per_flow(routed) == 4
    assert get("spray").slots_per_flow(hashed) == 32
    assert get("spray").pool(hashed) == "equal-cost"
    fabric = build(hashed)
    flows = Flows(np.array([0, 2], np.int32), np.array([2, 0], np.int32), np.full(2, 1.0 * MIB))
    routes = host_routes(fabric, flows, "equal-cost")
    slots = initial_slots(get("spray"), hashed, fabric, flows, (0, 0), routes)
    assert slots.choice.shape == (2, 32)
    # every EV on one of the four equal-cost paths, each path used by some EV of the flow
    # (all four missed one with probability 4 * (3/4)^32 = 4e-4), unevenly
    assert np.array_equal(routes.distinct, [4, 4])
    assert slots.choice.min() >= 0 and slots.choice.max() < 4
    counts = np.stack([np.bincount(row, minlength=4) for row in slots.choice])
    assert np.all(counts > 0) and np.any(counts != 8)


def test_report_and_cli_state_the_placement(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "fabric: {gpus: 64, planes: 1, radix: 16, gpus_per_server: 8}\n"
        "policies: [ecmp, spray, mrc]\n"
        "spray: {evs: 8, placement: hashed}\n"
        "mrc: {evs: 8}\n"
        "workload: [{collective: permutation, size: 1048576}]\n")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(app, ["analyze", str(path), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "model: spray EVs hashed · mrc EVs routed · transport 4096 B MTU" in result.output
    report = json.loads(out.read_text())
    assert report["policies"]["spray"]["placement"] == "hashed"
    assert report["policies"]["mrc"]["placement"] == "routed"
    assert "placement" not in report["policies"]["ecmp"]


def test_unknown_placement_is_a_clear_error(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("fabric: {gpus: 64, planes: 1, radix: 16}\nspray: {placement: random}\n"
                    "workload: [{collective: permutation, size: 1048576}]\n")
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert "spray.placement" in result.output and "hashed" in result.output
    assert "Traceback" not in result.output


def test_analyze_runs_hashed_mrc_to_a_lower_p100_than_hashed_spray():
    scen = scenario("hashed", "spray", policies=["spray", "mrc"])
    report = analyze(scen)
    p100 = {r.policy: r.p100_utilisation for r in report.records}
    assert p100["spray"] > 1.2
    assert p100["mrc"] < p100["spray"]


DEGRADED_EDGES = "".join(
    [f"gpu{h} l{h // 8} 100\n" for h in range(16)] +
    [f"l{leaf} s{s} {100 if s < 2 else 25}\n" for leaf in range(2) for s in range(4)])


def test_mrc_evens_an_over_offered_degraded_fabric_out_by_capacity(tmp_path):
    """Two leaves of 8 hosts, four spines, two of them at a quarter of the speed: 8 flows of
    100G from leaf 0 to leaf 1 are offered 800G over 2 x 100 + 2 x 25 = 250G of uplinks, a
    mean utilisation of 3.2 on every path's best case. Spraying evenly loads the slow spines
    to 800 / 4 / 25 = 8. Every path is over capacity, so mrc marks against the fabric's mean
    (3.2) and moves EVs off the slow spines until the loads follow the capacities."""
    (tmp_path / "g.txt").write_text(DEGRADED_EDGES)
    scen = parse_scenario({
        "fabric": {"kind": "graph", "file": "g.txt", "gpus": 16, "paths": 4},
        "policies": ["spray", "mrc"],
        "spray": {"evs": 64, "placement": "hashed"}, "mrc": {"evs": 64, "placement": "hashed"},
        "workload": [{"collective": "permutation", "size": MIB, "shift": 8, "gpus": 16}],
        "solver": {"progressive": False}}).located(tmp_path)
    p100 = {r.policy: r.p100_utilisation for r in analyze(scen).records}
    assert p100["spray"] > 6.0
    assert 3.2 <= p100["mrc"] < 3.2 * 1.15
