"""Collectives, placement, servers and jobs sharing the fabric.

Each collective's bytes per GPU are checked against its textbook formula, bus bandwidth
against nccl-tests' definition on an uncontended fabric, incast against n x size / port rate,
and the jobs' sharing simulation against a hand-built two-job reference.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from fabricjax.engine.phase import solve_policy_phase
from fabricjax.engine.timing import wire_factor
from fabricjax.engine.phase import concat_slots, initial_slots
from fabricjax.policies import get
from fabricjax.study.analyze import analyze
from fabricjax.study.sharing import sharing_rows
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric
from fabricjax.scenario import parse_scenario
from fabricjax.workload.build import build_workload
from fabricjax.workload.collectives import binary_tree_parents, double_tree_parents
from fabricjax.workload.flows import Flows

MIB = 2**20
# 32 GPUs, 2 planes of radix-8 switches: 8 T0s of 4 GPUs, 4 spines per plane, full bisection.
FABRIC = {"gpus": 32, "planes": 2, "radix": 8, "gpus_per_server": 4}


def scenario(items=None, *, jobs=None, fabric=None, **extra):
    """A scenario on FABRIC under the fluid model (transport off), whose times the tests work
    out by hand as bytes over rates; `transport=...` turns it back on."""
    data = {"fabric": {**FABRIC, **(fabric or {})}, "policies": ["spray"],
            "spray": {"evs": 8}, "transport": {"enabled": False}, **extra}
    if items is not None:
        data["workload"] = items
    if jobs is not None:
        data["jobs"] = jobs
    return parse_scenario(data)


def build(items, **kw):
    scen = scenario(items, **kw)
    return scen, build_workload(scen, np.random.default_rng([scen.seed, 0]))


def bytes_sent(collective, gpus: int) -> np.ndarray:
    """Bytes each GPU sends over the fabric in the whole collective (repeats included)."""
    out = np.zeros(gpus)
    for phase in collective.phases:
        out += phase.repeat * np.bincount(phase.flows.src, weights=phase.flows.size,
                                          minlength=gpus)
    return out


RANKED = [
    ({"collective": "all-reduce", "algorithm": "ring"}, lambda n: 2 * (n - 1) / n),
    ({"collective": "all-reduce", "algorithm": "halving-doubling"}, lambda n: 2 * (n - 1) / n),
    ({"collective": "all-reduce", "algorithm": "ring", "hierarchical": True},
     lambda n: 2 * (n - 1) / n),
    ({"collective": "all-gather"}, lambda n: (n - 1) / n),
    ({"collective": "all-gather", "hierarchical": True}, lambda n: (n - 1) / n),
    ({"collective": "reduce-scatter"}, lambda n: (n - 1) / n),
    ({"collective": "reduce-scatter", "hierarchical": True}, lambda n: (n - 1) / n),
    ({"collective": "all-to-all"}, lambda n: (n - 1) / n),
    ({"collective": "send-recv"}, lambda n: 1.0),
]


@pytest.mark.parametrize("item,per_gpu", RANKED, ids=lambda v: str(v) if isinstance(v, dict)
                         else "")
@pytest.mark.parametrize("order", ["linear", "random"])
def test_bytes_per_gpu_match_the_textbook(item, per_gpu, order):
    """Every GPU sends exactly the textbook share of `size` (no scale-up: all on the fabric)."""
    n, size = 16, 3 * MIB
    extra = {"order": order} if "algorithm" in item or item["collective"] in (
        "all-gather", "reduce-scatter") else {}
    _, (c,) = build([{**item, **extra, "size": size, "gpus": n}])
    sent = bytes_sent(c, 32)
    np.testing.assert_allclose(sent[:n], per_gpu(n) * size, rtol=1e-12)
    assert np.all(sent[n:] == 0)


def test_double_tree_moves_the_ring_total_and_every_edge_both_ways():
    n, size = 13, MIB
    _, (c,) = build([{"collective": "all-reduce", "algorithm": "tree", "size": size, "gpus": n}])
    (phase,) = c.phases
    assert phase.flows.size.sum() == pytest.approx(2 * (n - 1) * size)
    pairs = set(zip(phase.flows.src.tolist(), phase.flows.dst.tolist()))
    assert all((d, s) in pairs for s, d in pairs)
    assert c.busbw_factor == pytest.approx(2 * (n - 1) / n)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 31, 64])
def test_double_binary_tree_is_two_spanning_trees(n):
    """Both trees span all ranks, binary (<= 2 children), rooted at one rank; with N even most
    inner ranks of one tree are leaves of the other (NCCL's point: halves the per-rank load)."""
    for parents in double_tree_parents(n):
        graph = nx.Graph([(r, int(p)) for r, p in enumerate(parents) if p >= 0])
        graph.add_nodes_from(range(n))
        assert nx.is_tree(graph)
        assert np.bincount(parents[parents >= 0], minlength=n).max() <= 2
        assert np.sum(parents < 0) == 1
    first, second = double_tree_parents(n)
    inner_first = np.bincount(first[first >= 0], minlength=n) > 0
    inner_second = np.bincount(second[second >= 0], minlength=n) > 0
    if n >= 8:
        assert np.sum(inner_first & inner_second) <= 2


def test_binary_tree_matches_hand_drawn_8():
    #        0
    #        4
    #    2       6
    #  1   3   5   7
    assert binary_tree_parents(8).tolist() == [-1, 2, 4, 2, 0, 6, 4, 6]


def test_skewed_all_to_all_follows_zipf():
    n, size = 16, 16 * MIB
    _, (flat, hot) = build([{"collective": "all-to-all", "size": size, "gpus": n},
                            {"collective": "all-to-all", "size": size, "gpus": n, "skew": 1.5}])
    received = np.bincount(hot.phases[0].flows.dst, weights=hot.phases[0].flows.size,
                           minlength=n)[:n]
    ranked = np.sort(received)[::-1]
    # destination popularity ~ rank^-1.5 (each destination also loses its own share)
    assert ranked[0] / ranked[1] == pytest.approx(2**1.5, rel=0.1)
    assert np.all(flat.phases[0].flows.size == size / n)
    assert hot.phases[0].flows.num_flows == n * (n - 1)


def test_incast_completion_is_n_times_size_over_the_port():
    """n senders into one 100G port (one plane): the port is the bottleneck, n x size / 100G,
    static and progressive alike."""
    for n in (2, 12):
        scen = scenario([{"collective": "incast", "size": 10 * MIB, "gpus": n + 1}],
                        fabric={"planes": 1, "port_gbps": 100.0}, policies=["spray", "ecmp"],
                        spray={"evs": 4})
        for record in analyze(scen).records:
            expected = n * 10 * MIB * 8 / 100e9
            assert record.completion_s == pytest.approx(expected, rel=1e-5)
            assert record.progressive_s == pytest.approx(expected, rel=1e-5)
            assert record.busbw_gbps == pytest.approx(100.0, rel=1e-5)


@pytest.mark.parametrize("algorithm", ["ring", "halving-doubling", "tree"])
def test_uncontended_all_reduce_busbw_is_the_nic_rate(algorithm):
    """nccl-tests' busbw of an all-reduce on a full-bisection fabric where every flow has every
    path (spray over all spines) is the NIC rate, port x planes, for the
    ring and halving-doubling, which send 2(N-1)/N x size per GPU. The double tree's inner
    ranks send 2 x size (size/2 to a parent and to two children in one tree, size/2 to a
    parent in the other), so its busbw is the NIC rate x (N-1)/N."""
    n = 32
    # spray with every spine in every flow's EVs (evs = planes x spines) reaches every path
    scen = scenario([{"collective": "all-reduce", "algorithm": algorithm, "size": 64 * MIB,
                      "gpus": n}], policies=["spray"])
    expected = 200.0 * ((n - 1) / n if algorithm == "tree" else 1.0)
    for record in analyze(scen).records:
        assert record.busbw_gbps == pytest.approx(expected, rel=1e-4), record.policy
        assert record.slowdown == pytest.approx(1.0, rel=1e-4)


def test_hierarchical_ring_with_fast_scaleup_sends_one_gth_over_the_fabric():
    """With a (nearly) free scale-up domain only the rail rings cross the fabric: busbw is the
    NIC rate x (N - 1)/(M - 1) for M servers (g = N/M GPUs each), NCCL's NVLink bonus."""
    n, servers = 32, 8
    scen = scenario([{"collective": "all-reduce", "hierarchical": True, "size": 64 * MIB}],
                    fabric={"scaleup_gbps": 1e5})
    (record,) = analyze(scen).records
    nic = 200.0
    fabric_time = 2 * (servers - 1) * 64 * MIB / n * 8e-9 / nic
    scaleup_time = 2 * 3 * (64 * MIB / 4) * 8e-9 / 1e5
    assert record.completion_s == pytest.approx(fabric_time + scaleup_time, rel=1e-4)
    assert record.busbw_gbps == pytest.approx(
        64 * MIB * 8e-9 / (fabric_time + scaleup_time) * 2 * (n - 1) / n, rel=1e-4)


def test_scaleup_takes_intra_server_flows_off_the_fabric():
    scen, (c,) = build([{"collective": "all-reduce", "size": 32 * MIB}],
                       fabric={"scaleup_gbps": 400.0})
    (phase,) = c.phases
    assert phase.flows.num_flows == 8                 # one ring edge per server boundary
    assert phase.scaleup_flows == 24
    # each GPU's scale-up flow: size/N at 400G
    assert phase.scaleup_time == pytest.approx(32 * MIB / 32 * 8e-9 / 400.0)
    (record,) = analyze(scen).records
    step = max(32 * MIB / 32 * 8e-9 / 200.0, phase.scaleup_time)
    assert record.completion_s == pytest.approx(62 * step, rel=1e-5)


def test_step_latency_counts_hops():
    base = scenario([{"collective": "all-reduce", "size": MIB, "gpus": 8}])
    slow = scenario([{"collective": "all-reduce", "size": MIB, "gpus": 8}],
                    solver={"step_latency_us": 2.0, "hop_latency_us": 0.5})
    (a,), (b,) = analyze(base).records, analyze(slow).records
    # ranks 0..7 span two T0s: the ring crosses the spines, 4 links
    assert b.completion_s - a.completion_s == pytest.approx(14 * (2.0 + 4 * 0.5) * 1e-6,
                                                            rel=1e-6)


# --------------------------------------------------------------------------- placement, jobs

def test_placements():
    n = 32
    items = [{"collective": "permutation", "gpus": 8, "placement": p}
             for p in ("contiguous", "strided", "random")]
    items.append({"collective": "permutation", "gpus": [3, 9, 20]})
    _, cs = build(items)
    assert cs[0].gpu_ids.tolist() == list(range(8))
    assert cs[1].gpu_ids.tolist() == list(range(0, n, 4))
    assert len(set(cs[2].gpu_ids.tolist())) == 8 and cs[2].gpu_ids.tolist() != list(range(8))
    assert cs[3].gpu_ids.tolist() == [3, 9, 20]


def test_jobs_get_disjoint_gpus_explicit_first():
    jobs = [{"collective": "all-reduce", "gpus": 12, "placement": "random"},
            {"collective": "all-reduce", "gpus": 12},
            {"collective": "permutation", "gpus": [0, 1, 2, 3]}]
    _, cs = build(None, jobs=jobs)
    ids = [set(c.gpu_ids.tolist()) for c in cs]
    assert ids[2] == {0, 1, 2, 3}
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    # the random job drew from what the list left; the contiguous one takes the lowest rest
    assert ids[1] == set(sorted(set(range(4, 32)) - ids[0])[:12])
    assert all(c.job for c in cs)


@pytest.mark.parametrize("data,field,words", [
    (dict(jobs=[{"collective": "permutation", "gpus": 20},
                {"collective": "permutation", "gpus": 20}]), "jobs", ["40 GPUs", "32"]),
    (dict(jobs=[{"collective": "permutation", "gpus": [1, 2]},
                {"collective": "permutation", "gpus": [2, 3]}]), "jobs[1].gpus", ["GPU 2"]),
    (dict(workload=[{"collective": "permutation", "gpus": 8, "placement": "explicit"}]),
     "workload[0].placement", ["list"]),
    (dict(workload=[{"collective": "permutation", "gpus": [1, 2], "placement": "random"}]),
     "workload[0].placement", ["explicit"]),
    (dict(workload=[{"collective": "all-reduce", "algorithm": "halving-doubling",
                     "gpus": 12}]), "workload[0].algorithm", ["power-of-two", "8 or 16"]),
    (dict(workload=[{"collective": "all-reduce", "algorithm": "tree",
                     "hierarchical": True}]), "workload[0].hierarchical", ["ring"]),
    (dict(workload=[{"collective": "send-recv", "gpus": 7}]), "workload[0].gpus", ["even"]),
    (dict(workload=[{"collective": "all-to-all", "skew": -1}]), "workload[0].skew",
     ["greater than or equal to 0"]),
    (dict(workload=[{"collective": "broadcast"}]), "workload[0].collective",
     ["all-to-all", "incast"]),
    (dict(workload=[]), "workload", ["at least 1", "jobs"]),
    (dict(jobs=[{"collective": "permutation", "bogus": 1}]), "jobs[0]", ["bogus", "placement"]),
])
def test_bad_workloads_name_the_field(data, field, words):
    base = {"fabric": dict(FABRIC)}
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**base, **data})
    assert err.value.field.startswith(field), err.value
    for word in words:
        assert word in str(err.value), err.value


def test_all_jobs_gpus_all_is_refused_with_two_jobs():
    with pytest.raises(ScenarioError, match="'all' takes every GPU"):
        build(None, jobs=[{"collective": "permutation", "gpus": "all"},
                          {"collective": "permutation", "gpus": 2}])


def test_hierarchical_needs_equal_gpus_per_server():
    with pytest.raises(ScenarioError, match="same number"):
        build([{"collective": "all-reduce", "hierarchical": True, "gpus": [0, 1, 2, 4, 5, 8]}])


def _two_job_reference(policy, scen, fabric, jobs):
    """Two single-phase jobs by hand: solve the mix, run until the first ends its phase, then
    the other alone for the rest of its steps (what sharing_rows must do)."""
    a, b = jobs
    pa, pb = a.phases[0], b.phases[0]
    exact = scen.model_copy(update={"solver": scen.solver.model_copy(
        update={"eps": 0.0, "rates": "full"})})

    def alone(collective, phase):
        out = solve_policy_phase(policy, exact, fabric, phase.flows, (collective.stream, 0))
        return float(out.result.phase_time)

    sa = initial_slots(get(policy), exact, fabric, pa.flows, (a.stream, 0))
    sb = initial_slots(get(policy), exact, fabric, pb.flows, (b.stream, 0))
    mix = Flows(np.concatenate([pa.flows.src, pb.flows.src]),
                np.concatenate([pa.flows.dst, pb.flows.dst]),
                np.concatenate([pa.flows.size, pb.flows.size]))
    out = solve_policy_phase(policy, exact, fabric, mix, (99, 0),
                             slots=concat_slots([sa, sb]))
    rates = out.result.rates
    fa = pa.flows.num_flows
    wire = wire_factor(exact)        # the device's times are of the bytes on the wire
    step_a = float(np.max(pa.flows.size * wire * 8e-9 / rates[:fa]))
    step_b = float(np.max(pb.flows.size * wire * 8e-9 / rates[fa:]))
    ta, tb = pa.repeat * step_a, pb.repeat * step_b
    alone_a, alone_b = pa.repeat * alone(a, pa), pb.repeat * alone(b, pb)
    if ta <= tb:
        return (ta, ta + (pb.repeat - ta / step_b) * alone(b, pb)), (alone_a, alone_b)
    return (tb + (pa.repeat - tb / step_a) * alone(a, pa), tb), (alone_a, alone_b)


# the quick run keeps ECMP's hashed paths (spray's run with the slow tests)
@pytest.mark.parametrize("policy", ["ecmp", pytest.param("spray", marks=pytest.mark.slow)])
def test_sharing_matches_the_two_job_reference(policy):
    jobs = [{"name": "ring", "collective": "all-reduce", "order": "random", "size": 8 * MIB,
             "gpus": 16, "placement": "random"},
            {"name": "perm", "collective": "permutation", "size": 16 * MIB, "gpus": 16}]
    scen = scenario(None, jobs=jobs, policies=[policy], ecmp={"qps": 1}, spray={"evs": 2},
                    fabric={"oversubscription": 3.0, "radix": 8, "gpus": 32})
    fabric = build_fabric(scen.fabric)
    cs = build_workload(scen, np.random.default_rng([scen.seed, 0]))
    rows = sharing_rows(policy, scen, fabric, cs)
    (ta, tb), (alone_a, alone_b) = _two_job_reference(policy, scen, fabric, cs)
    assert rows[0].together_s == pytest.approx(ta, rel=1e-5)
    assert rows[1].together_s == pytest.approx(tb, rel=1e-5)
    assert rows[0].alone_s == pytest.approx(alone_a, rel=1e-5)
    assert rows[1].alone_s == pytest.approx(alone_b, rel=1e-5)
    assert rows[0].together_s > rows[0].alone_s or rows[1].together_s > rows[1].alone_s


def test_isolated_jobs_are_not_slowed_and_shared_ones_are():
    """Jobs on their own T0s with every path sprayed never share a link: together = alone.
    Two scattered rings on an oversubscribed fabric do share: together >= alone, and > for
    at least one job under ECMP."""
    isolated = scenario(None, jobs=[{"name": "a", "collective": "all-reduce", "gpus": 16},
                                    {"name": "b", "collective": "all-reduce", "gpus": 16}],
                        policies=["spray"])
    report = analyze(isolated)
    for row in report.sharing:
        assert row.together_s == pytest.approx(row.alone_s, rel=1e-5), row
    shared = scenario(None, jobs=[
        {"name": "a", "collective": "all-reduce", "order": "random", "gpus": 16,
         "placement": "random"},
        {"name": "b", "collective": "all-reduce", "order": "random", "gpus": 16}],
        fabric={"oversubscription": 3.0}, policies=["ecmp"])
    rows = analyze(shared).sharing
    assert all(r.together_s >= r.alone_s * (1 - 1e-6) for r in rows)
    assert any(r.slowdown > 1.01 for r in rows if r.policy == "ecmp")


def test_one_job_or_workload_only_has_no_sharing_table():
    assert analyze(scenario([{"collective": "permutation"}])).sharing is None
    assert analyze(scenario(None, jobs=[{"collective": "permutation", "gpus": 8}])).sharing \
        is None


def test_failure_study_of_a_phase_inside_servers():
    """A hierarchical ring's in-server phases have no fabric flow: failure sets leave them
    alone, and the sets' completions still add their scale-up time."""
    scen = scenario([{"collective": "all-reduce", "hierarchical": True, "size": 16 * MIB}],
                    fabric={"scaleup_gbps": 1000.0}, policies=["spray", "ecmp"],
                    failures={"links": 2, "samples": 3, "seed": 1})
    report = analyze(scen)
    for summary, record in zip(report.failures.summaries, report.records):
        assert summary.sets == 3
        assert summary.completion_s["p50"] >= record.completion_s * (1 - 1e-6)


def test_tree_pays_its_depth_in_latency_not_one_step():
    """A pipelined tree's chunk climbs and descends the deeper tree: 2 x depth step latencies
    (depth 5 for 32 ranks: log2 32)."""
    item = [{"collective": "all-reduce", "algorithm": "tree", "size": MIB}]
    base, slow = scenario(item), scenario(item, solver={"step_latency_us": 1.0})
    (a,), (b,) = analyze(base).records, analyze(slow).records
    assert b.completion_s - a.completion_s == pytest.approx(2 * 5 * 1e-6, rel=1e-6)


def test_incast_is_bound_by_the_receiver_not_the_fabric():
    """8 senders into one NIC: 8x the line-rate time, all of it the receiver's (before, the
    only figure was against a bound that already shared the receiver: 1.000x)."""
    (record,) = analyze(scenario([{"collective": "incast", "size": MIB, "gpus": 9}],
                                 fabric={"planes": 1})).records
    assert record.slowdown == pytest.approx(8.0, rel=1e-5)
    assert record.fabric_slowdown == pytest.approx(1.0, rel=1e-5)


@pytest.mark.slow   # 19 s through the real process; test_isolated_jobs_* covers the figures
def test_cli_prints_flow_and_sharing_tables_and_writes_them(tmp_path):
    """The command line shows the flow-level table and the job-isolation table, and the JSON
    carries the same figures (every number finite or null)."""
    import json

    from test_cli import fabricjax

    (tmp_path / "jobs.yaml").write_text(
        "fabric: {gpus: 32, planes: 2, radix: 8, gpus_per_server: 4, scaleup_gbps: 400}\n"
        "jobs:\n"
        "  - {name: train, collective: all-reduce, hierarchical: true, gpus: 16, size: 8MiB}\n"
        "  - {name: moe, collective: all-to-all, skew: 1.0, gpus: 8, placement: strided,\n"
        "     size: 8MiB}\n"
        "policies: [ecmp, spray]\nspray: {evs: 8}\n")
    proc = fabricjax("analyze", "jobs.yaml", "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Jobs sharing the fabric" in proc.stdout and "Flow level" in proc.stdout
    report = json.loads((tmp_path / "out.json").read_text())
    assert {r["job"] for r in report["sharing"]} == {"train", "moe"}
    moe = [r for r in report["results"] if r["workload"] == "moe"]
    assert all(r["progressive_s"] <= r["completion_s"] * (1 + 1e-6) for r in moe)
    assert all(r["fct_p50_s"] <= r["fct_p99_s"] <= r["fct_max_s"] for r in moe)


def test_export_then_import_gives_the_same_step(tmp_path):
    """`fabricjax export` writes a phase as an htsim matrix; a `traffic` item reading it back
    is the same step: same flows, and the same time as one step of the collective."""
    from test_cli import assert_one_line_error, fabricjax

    (tmp_path / "ring.yaml").write_text(
        "fabric: {gpus: 32, planes: 2, radix: 8}\nseed: 5\n"
        "workload: [{name: ring, collective: all-reduce, order: random, size: 32MiB}]\n"
        "policies: [spray]\nspray: {evs: 8}\n")
    proc = fabricjax("export", "ring.yaml", "step.cm", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "back.yaml").write_text(
        "fabric: {gpus: 32, planes: 2, radix: 8}\nseed: 5\n"
        "workload: [{name: step, collective: traffic, file: step.cm}]\n"
        "policies: [spray]\nspray: {evs: 8}\n")
    from fabricjax.scenario import load_scenario

    ring = analyze(load_scenario(tmp_path / "ring.yaml")).records[0]
    step = analyze(load_scenario(tmp_path / "back.yaml")).records[0]
    assert step.completion_s == pytest.approx(ring.completion_s / ring.steps, rel=1e-6)
    proc = fabricjax("export", "ring.yaml", "x.cm", "--item", "nope", cwd=tmp_path)
    assert_one_line_error(proc, "--item", "ring")
    assert not (tmp_path / "x.cm").exists()


def test_rail_optimised_keeps_rail_rings_under_one_t0():
    """Rail-optimised T0s: GPU r of every server hangs off rail T0 r, so the hierarchical
    ring's rails (same local rank across servers) never touch a spine, while in GPU-order T0s
    the same rails cross them."""
    item = [{"collective": "all-reduce", "hierarchical": True, "size": 16 * MIB}]
    fabric = {"gpus": 16, "planes": 2, "radix": 8, "gpus_per_server": 4,
              "scaleup_gbps": 1000.0}
    rails = scenario(item, fabric={**fabric, "rail_optimised": True})
    plain = scenario(item, fabric=fabric)
    (on_rails,), (in_order,) = analyze(rails).records, analyze(plain).records
    assert on_rails.utilisation_by_tier["t0-t1"]["p100"] == 0.0
    assert in_order.utilisation_by_tier["t0-t1"]["p100"] > 0.0
    _, (c,) = build(item, fabric={**fabric, "rail_optimised": True})
    assert all(p.hops == 2 for p in c.phases)
