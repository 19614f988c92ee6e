"""A cable is the unit on graph fabrics: parallel cables between two switches are one solver
link each way (a bundle), but `topo`'s cables line, the switch ports and the BOM's links count
every cable, a `links:` failure of a named link takes one cable's capacity, and `a->b*` names
the whole bundle. Checked against hand counts and against a reference that counts cables
one networkx edge at a time."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import yaml

from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.bom import fat_tree_bom
from fabricjax.fabric.build import build
from fabricjax.fabric.failures import (batch_from_components, parse_component, population,
                                       sample_failures)
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graph import build_graph_fabric, graph_bom, graph_summary
from fabricjax.fabric.graphfile import load_graph
from fabricjax.config import FailureKindConfig
from fabricjax.engine.phase import offered_demand
from fabricjax.study.analyze import analyze
from fabricjax.scenario import parse_scenario as _parse

from test_families import phase_of, reference_graph, reference_spray_p100


def _reference_counts(gpus: int, radix: int) -> tuple[int, int, int]:
    """(host cables, switch cables, largest switch port count) of a 3-tier fat tree wired
    cable by cable into a MultiGraph, by the rule `fat_tree_bom` counts (partial last pod
    bundled to its fewest T1s)."""
    h = radix // 2
    t0s = math.ceil(gpus / h)
    pods = math.ceil(t0s / h)
    group = math.ceil(pods / 2)
    last = t0s - (pods - 1) * h
    last_t1s = min(n for n in range(1, h + 1) if h % n == 0 and last <= n)
    graph = nx.MultiGraph()
    for g in range(gpus):
        graph.add_edge(("gpu", g), ("t0", g // h))
    for t in range(t0s):
        pod = t // h
        for j in range(h):
            t1 = ("t1", pod, j if pod < pods - 1 else j // (h // last_t1s))
            graph.add_edge(("t0", t), t1)
            graph.add_edge(t1, ("t2", j, t % group))
    host = sum(1 for u, v in graph.edges() if "gpu" in (u[0], v[0]))
    ports = max(d for n, d in graph.degree() if n[0] != "gpu")
    return host, graph.number_of_edges() - host, ports


@pytest.mark.parametrize("gpus, radix", [(16, 4), (10, 4), (32, 8), (40, 8), (100, 8),
                                         (54, 6)])
def test_cables_agree_everywhere(gpus, radix):
    gf = build_graph_fabric(fat_tree_graph(gpus, radix, 400.0), paths=4)
    summary, counted, closed = graph_summary(gf), graph_bom(gf), fat_tree_bom(
        gpus, radix, 400.0, tiers=3)
    host, switch, ports = _reference_counts(gpus, radix)
    assert (summary["host_cables"], summary["fabric_cables"]) == (host, switch)
    assert summary["cables"] == counted["links"] == closed["links"] == host + switch
    assert summary["switches"] == closed["switches"]
    assert summary["switch_radix_max"] == ports <= radix
    # the solver's capacity is the cables' capacity: nothing lost or doubled by bundling
    assert gf.capacity.sum() == pytest.approx(2 * 400.0 * (host + switch))


def test_radix_128_tree_counts_every_cable():
    """131,072 GPUs on radix-128 switches, counted without building the graph by hand:
    2,048 T0s, 32 pods of 64 aggs, 64 groups of 16 cores; each agg sends its 64 uplinks
    round robin to its group's 16 cores, bundles of 4."""
    closed = fat_tree_bom(131_072, 128, 400.0, tiers=3)
    assert closed["links"] == 3 * 131_072 == 393_216
    assert closed["switches_per_plane"] == {"t0": 2048, "t1": 2048, "t2": 1024}


def parse_scenario(text: str):
    return _parse(yaml.safe_load(text))


FAT_TREE = ("fabric: {kind: fat-tree, tiers: 3, gpus: 32, radix: 8, port_gbps: 400G, "
            "planes: 1, "
            "paths: 4}\nworkload: [{name: p, collective: permutation, size: 1MiB}]\n")
BUNDLE = "p0/agg0->p0/core0"          # 2 pods: agg j of each pod sends 4 cables to core j


def _fabric():
    scenario = parse_scenario(FAT_TREE)
    return scenario, build(scenario)


def test_a_named_link_takes_one_cable():
    _, gf = _fabric()
    up = int(gf.link_ids(gf.node_names.index("p0/agg0"), gf.node_names.index("p0/core0")))
    assert gf.cables[up] == 4 and gf.capacity[up] == 1600.0
    one = parse_component(gf, "links", BUNDLE, "f")
    assert one.name == BUNDLE + "#0" and one.fraction == 0.25
    # either direction, and #0, name the same cable
    assert parse_component(gf, "links", "p0/core0->p0/agg0", "f") == one
    assert parse_component(gf, "links", BUNDLE + "#0", "f") == one
    batch = batch_from_components(gf, [[one]])
    assert set(batch.dead_links[0].tolist()) == {gf.sentinel}
    deg = batch.degraded_links[0] != gf.sentinel
    assert sorted(batch.degraded_links[0][deg].tolist()) == sorted(one.links)
    np.testing.assert_allclose(batch.degraded_factor[0][deg], 0.75)
    # two cables: half the bundle; all four, or the bundle named whole: dead
    two = [parse_component(gf, "links", f"{BUNDLE}#{i}", "f") for i in (1, 3)]
    batch = batch_from_components(gf, [two, [parse_component(gf, "links", f"{BUNDLE}#{i}",
                                                             "f") for i in range(4)],
                                       [parse_component(gf, "links", BUNDLE + "*", "f")]])
    deg = batch.degraded_links[0] != gf.sentinel
    np.testing.assert_allclose(batch.degraded_factor[0][deg], 0.5)
    for b in (1, 2):
        assert sorted(set(batch.dead_links[b].tolist()) - {gf.sentinel}) == sorted(one.links)
        assert set(batch.degraded_links[b].tolist()) == {gf.sentinel}
    # a degraded cable of the bundle takes (1 - factor) of one cable's capacity
    scenario = parse_scenario(FAT_TREE + f"failures: {{degraded: {{names: [{BUNDLE}], "
                              "factor: 0.5}}\n")
    batch = sample_failures(scenario, fabric=gf)
    deg = batch.degraded_links[0] != gf.sentinel
    np.testing.assert_allclose(batch.degraded_factor[0][deg], 1 - 0.5 / 4)


def test_bundle_names_are_validated():
    _, gf = _fabric()
    with pytest.raises(ScenarioError, match=r"bundle of 4 cables; allowed: .*#0\.\..*#3, or "
                                            r".*\* for the whole bundle"):
        parse_component(gf, "links", BUNDLE + "#4", "failures.links.names[0]")
    with pytest.raises(ScenarioError, match="a->b#i: cable i of a bundle"):
        parse_component(gf, "links", "p0/agg0->p0/core9*", "failures.links.names[0]")
    single = parse_component(gf, "links", "p0/edge0->p0/agg0", "f")
    assert single.fraction == 1.0 and single.name == "p0/edge0->p0/agg0"
    assert parse_component(gf, "links", "p0/edge0->p0/agg0*", "f") == single
    with pytest.raises(ScenarioError, match="bundle of 1 cable;"):
        parse_component(gf, "links", "p0/edge0->p0/agg0#1", "f")


def test_random_draws_are_over_cables():
    scenario, gf = _fabric()
    summary = graph_summary(gf)
    assert population(gf, "links", FailureKindConfig()) == summary["fabric_cables"] == 64
    scenario = parse_scenario(FAT_TREE + "failures: {links: {random: 64}, samples: 2}\n")
    batch = sample_failures(scenario, fabric=gf)
    # every cable drawn once: every switch link dead, nothing merely degraded
    switch_links = np.flatnonzero(np.isin(gf.tier, (1, 2)))
    assert sorted(set(batch.dead_links[0].tolist()) - {gf.sentinel}) == switch_links.tolist()
    assert set(batch.degraded_links[0].tolist()) == {gf.sentinel}
    assert len(batch.names[0]) == 64 and len(set(batch.names[0])) == 64


def test_files_give_bundles(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("gpu0 leaf0 400\ngpu1 leaf1 400\n"
                    "leaf0 spine0 {'capacity': 800, 'cables': 2}\nleaf1 spine0 800\n")
    gf = build_graph_fabric(load_graph(path), paths=2)
    summary = graph_summary(gf)
    assert (summary["cables"], summary["fabric_cables"], summary["bundles"]) == (5, 3, 1)
    assert graph_bom(gf)["links"] == 5
    for bad in ("0", "1.5", "'two'"):
        path.write_text(f"gpu0 leaf0 400\ngpu1 leaf0 400\nleaf0 s {{'cables': {bad}}}\n")
        with pytest.raises(ScenarioError, match="cables .* is not a cable count; allowed: an "
                                                "integer 1"):
            load_graph(path, default_gbps=400.0)


@pytest.mark.parametrize("name, share", [(BUNDLE, 0.75), (BUNDLE + "#1", 0.75),
                                         (BUNDLE + "*", 0.0)])
def test_spray_sees_one_cable_gone(name, share):
    """Through `analyze`: a failure set with one cable of the 4-cable bundle down gives the
    spraying P100 of the agg-core links of the networkx reference with that edge at 3/4 of
    its capacity; the bundle named whole is a dead edge (its traffic moves to the other
    paths). (The reference's other edges are made wide so that its maximum is the agg-core
    one.)"""
    scenario = parse_scenario(FAT_TREE + "policies: [spray]\nseed: 1\n"
                              f"failures: {{links: ['{name}']}}\n")
    fabric, flows = phase_of(scenario)
    graph = reference_graph(scenario)
    for u, v, data in graph.edges(data=True):
        if not ("agg" in u + v and "core" in u + v):
            data["capacity"] *= 1e6
    demand = offered_demand(flows, fabric.gpu_nic_gbps, fabric.gpus).astype(np.float64)
    a, b = BUNDLE.split("->")
    intact = reference_spray_p100(graph, fabric, flows, set(), set(), demand)
    dead = set()
    if share == 0.0:
        dead = {frozenset((a, b))}
    else:
        graph[a][b]["capacity"] *= share
    expected = reference_spray_p100(graph, fabric, flows, dead, set(), demand)
    assert expected > intact            # the failed cable is what sets the P100
    (record,) = analyze(scenario).failures.records
    tiers = record["p100_by_tier"]
    assert max(tiers["agg-core"], tiers["core-agg"]) == pytest.approx(expected, rel=1e-5)
