"""Every policy and study on fat trees and graph files, through the same phase program as the
Clos, checked against slow references built from the networkx graph (not from the library's
link ids): spraying's split under failure sets, the optimal bound against an exact LP
(scipy's HiGHS), MRC's and ECMP's reactions to dead links, jobs sharing a fat tree, the link
sensitivity on a graph file, and the bundled scenarios from the command line."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from scipy.optimize import linprog

from fabricjax.core.errors import ScenarioError
from fabricjax.engine.phase import offered_demand, slot_links_host, solve_policy_phase
from fabricjax.fabric.build import build
from fabricjax.fabric.failures import alive_mask_host, sample_failures
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graphfile import load_graph
from fabricjax.scenario import load_scenario, parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.workload.build import build_workload

from test_cli import fabricjax

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "graphs"
# k = 4: 16 hosts, 2 pods of 2 edge + 2 agg switches, 4 cores; 4 equal-cost paths per pod pair
FAT = {"kind": "fat-tree", "tiers": 3, "gpus": 16, "radix": 4, "port_gbps": 100.0,
       "planes": 1, "paths": 4}
# the same tree twice, as two planes: 8 candidate paths between pods, 4 per plane
FAT2 = {**FAT, "planes": 2, "paths": 8}
POLICIES = ["ecmp", "spray", "mrc", "optimal"]
# 4 hosts on 2 leaves, 2 spines (every leaf to every spine at 800G, hosts at 400G)
GRAPH = {"kind": "graph", "file": "leaf_spine.graphml", "gpus": 4, "paths": 4}


def fat_scenario(fabric=FAT, *, seed=0, policies=POLICIES, **extra) -> object:
    return parse_scenario({"fabric": fabric, "seed": seed, "policies": policies,
                           "workload": [{"collective": "permutation", "size": "4MiB"}],
                           "optimal": {"max_iters": 20000, "tol": 1e-4}, **extra})


def phase_of(scenario):
    fabric = build(scenario)
    flows = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))[0].phases[0].flows
    return fabric, flows


def reference_graph(scenario) -> nx.Graph:
    """The fabric as networkx sees it, from the config alone (fat_tree_graph is checked
    against the BOM's closed forms in test_graph_fabric)."""
    cfg = scenario.fabric
    return fat_tree_graph(cfg.gpus, cfg.radix, float(cfg.port_gbps), tiers=cfg.tiers,
                          planes=cfg.planes)


def reference_paths(graph: nx.Graph, a: str, b: str, dead_edges: set, dead_nodes: set):
    """Every shortest host path a -> b through switches (hosts never forward), minus those
    that cross a dead cable or switch: the equal-cost candidates a fat tree sprays over."""
    hosts = {n for n, d in graph.nodes(data=True) if d.get("type") == "host"}
    sub = graph.subgraph(set(graph) - (hosts - {a, b}))
    paths = []
    for path in nx.all_shortest_paths(sub, a, b):
        edges = {frozenset(e) for e in zip(path, path[1:])}
        if not edges & dead_edges and not set(path) & dead_nodes:
            paths.append(path)
    return paths


def dead_of(fabric, batch, b):
    """(cables as frozensets of node names, switch names) of failure set b."""
    names = fabric.node_names
    links = [int(l) for l in batch.dead_links[b] if l != fabric.sentinel]
    edges = {frozenset((names[fabric.link_src[l]], names[fabric.link_dst[l]])) for l in links}
    nodes = {names[n] for n in batch.dead_nodes[b] if n < fabric.num_nodes}
    return edges, nodes


def reference_spray_p100(graph, fabric, flows, dead_edges, dead_nodes, demand) -> float:
    """Max utilisation over alive links when each flow splits equally over its live
    equal-cost paths (float64, link by link)."""
    names = fabric.node_names
    load: dict = {}
    for f in range(flows.num_flows):
        paths = reference_paths(graph, names[flows.src[f]], names[flows.dst[f]], dead_edges,
                                dead_nodes)
        for path in paths:
            for u, v in zip(path, path[1:]):
                load[(u, v)] = load.get((u, v), 0.0) + demand[f] / len(paths)
    worst = 0.0
    for (u, v), value in load.items():
        if frozenset((u, v)) in dead_edges or {u, v} & dead_nodes:
            continue
        worst = max(worst, value / graph[u][v]["capacity"])
    return worst


def test_spray_under_failure_sets_matches_the_graph_reference():
    """A failure study of cables, switches and NIC ports on a two-plane fat tree: every set's
    spraying P100 is the equal split over the surviving shortest paths of the networkx
    graph."""
    scenario = fat_scenario(FAT2, policies=["spray"], seed=2,
                            failures={"links": {"random": 3}, "switches": {"random": 1},
                                      "nic_ports": {"random": 1}, "samples": 6, "seed": 5})
    fabric, flows = phase_of(scenario)
    graph = reference_graph(scenario)
    report = analyze(scenario)
    batch = sample_failures(scenario, fabric=fabric)
    demand = offered_demand(flows, fabric.gpu_nic_gbps, fabric.gpus).astype(np.float64)
    records = report.failures.records
    assert len(records) == 6
    for b, record in enumerate(records):
        dead_edges, dead_nodes = dead_of(fabric, batch, b)
        expected = reference_spray_p100(graph, fabric, flows, dead_edges, dead_nodes, demand)
        assert record["p100_utilisation"] == pytest.approx(expected, rel=1e-5), b
        alive = alive_mask_host(fabric, fabric.link_src, fabric.link_dst, batch.dead_links[b],
                                batch.dead_nodes[b])
        assert alive.sum() < fabric.num_links            # something did fail
    # the names a set holds are the graph's own (cables as a->b, switches by node name)
    assert any("->" in n for n in batch.names[0])


def reference_lp(graph, fabric, flows, demand, planes: int) -> float:
    """The exact min-max utilisation over each flow's shortest paths, each flow sending
    1/P of its demand on each plane (HiGHS)."""
    names = fabric.node_names
    variables, rows = [], {}
    per_flow_plane = []
    for f in range(flows.num_flows):
        paths = reference_paths(graph, names[flows.src[f]], names[flows.dst[f]], set(), set())
        by_plane: dict = {}
        for path in paths:
            plane = graph.nodes[path[1]].get("plane", 0)
            by_plane.setdefault(plane, []).append(path)
        for plane, group in by_plane.items():
            ids = []
            for path in group:
                ids.append(len(variables))
                variables.append((f, path))
            per_flow_plane.append((ids, demand[f] / len(by_plane)))
    n = len(variables) + 1                               # the last variable is lambda
    a_eq, b_eq = [], []
    for ids, share in per_flow_plane:
        row = np.zeros(n)
        row[ids] = 1.0
        a_eq.append(row)
        b_eq.append(share)
    for i, (f, path) in enumerate(variables):
        for u, v in zip(path, path[1:]):
            rows.setdefault((u, v), []).append(i)
    a_ub = []
    for (u, v), ids in rows.items():
        row = np.zeros(n)
        row[ids] = 1.0
        row[-1] = -graph[u][v]["capacity"]
        a_ub.append(row)
    cost = np.zeros(n)
    cost[-1] = 1.0
    res = linprog(cost, A_ub=np.array(a_ub), b_ub=np.zeros(len(a_ub)), A_eq=np.array(a_eq),
                  b_eq=np.array(b_eq), bounds=[(0, None)] * n, method="highs")
    assert res.status == 0
    return float(res.x[-1])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimal_on_a_fat_tree_matches_the_lp(seed):
    """A fat tree with a degraded edge uplink (so the bound is above 1 and not trivial): the
    optimal policy's P100 is the LP's optimum within its certified gap."""
    scenario = fat_scenario(FAT2, policies=["optimal"], seed=seed)
    fabric, flows = phase_of(scenario)
    capacity = fabric.capacity.copy()
    hot = int(np.flatnonzero(fabric.tier == 1)[seed])
    capacity[hot] *= 0.25
    capacity[fabric.reverse[hot]] *= 0.25
    fabric = dataclasses.replace(fabric, capacity=capacity)
    graph = reference_graph(scenario)
    names = fabric.node_names
    u, v = names[fabric.link_src[hot]], names[fabric.link_dst[hot]]
    graph[u][v]["capacity"] *= 0.25
    demand = offered_demand(flows, fabric.gpu_nic_gbps, fabric.gpus).astype(np.float64)
    out = solve_policy_phase("optimal", scenario, fabric, flows, (0, 0))
    exact = reference_lp(graph, fabric, flows, demand, 2)
    upper = float(out.result.stats[0, 2])
    assert exact <= upper + 1e-4
    assert upper <= exact + out.adaptation.residual + 1e-4 * exact
    assert out.adaptation.convergence.startswith("converged")


def _loads(fabric, flows, out):
    """float64 link loads of an outcome's split, from its candidate link ids."""
    links = slot_links_host(fabric, flows, out.split)
    demand = offered_demand(flows, fabric.gpu_nic_gbps, fabric.gpus).astype(np.float64)
    load = np.zeros(fabric.num_links + 1)
    weights = np.asarray(out.split.weights, np.float64)
    for f, k in itertools.product(range(links.shape[0]), range(links.shape[1])):
        for link in links[f, k]:
            load[link] += demand[f] * weights[f, k]
    return load[:-1]


@pytest.mark.parametrize("policy", ["ecmp", "spray", "mrc", "optimal"])
def test_policies_react_to_a_dead_core_on_a_graph_file(policy):
    """A dead spine of the sample leaf-spine graph: every policy leaves its links without
    load, no flow stalls (the other spine still connects every leaf), and weights sum to 1."""
    scenario = parse_scenario({"fabric": GRAPH, "policies": [policy], "seed": 1,
                               "workload": [{"collective": "permutation", "shift": 2,
                                             "size": "1MiB"}]}, base_dir=DATA)
    fabric, flows = phase_of(scenario)
    spine = fabric.node_names.index("spine0")
    alive = ~((fabric.link_src == spine) | (fabric.link_dst == spine))
    out = solve_policy_phase(policy, scenario, fabric, flows, (0, 0), alive=alive)
    assert int(out.result.stalled) == 0
    load = _loads(fabric, flows, out)
    assert np.all(load[~alive] == 0.0)
    np.testing.assert_allclose(np.asarray(out.split.weights).sum(axis=1), 1.0, rtol=1e-5)
    # every flow crosses the one live spine at 400G over 800G cables: P100 is the NIC's 1.0
    assert float(out.result.stats[0, 2]) == pytest.approx(1.0, rel=1e-4)


def test_mrc_moves_evs_off_a_hot_path_on_a_fat_tree():
    """Spraying over 4 candidates with one core cable at a quarter of its capacity: MRC's
    fixed point moves EVs off it (P100 drops), never below the optimal bound."""
    scenario = fat_scenario(FAT, seed=4, policies=["spray", "mrc", "optimal"],
                            mrc={"max_iters": 300})
    fabric, flows = phase_of(scenario)
    capacity = fabric.capacity.copy()
    core = np.flatnonzero((fabric.tier == 1) & (fabric.switch_level[fabric.link_dst] == 3))
    capacity[core[0]] *= 0.25
    fabric = dataclasses.replace(fabric, capacity=capacity)
    p100 = {}
    for policy in ("spray", "mrc", "optimal"):
        out = solve_policy_phase(policy, scenario, fabric, flows, (0, 0))
        p100[policy] = float(out.result.stats[0, 2])
        if policy == "mrc":
            assert out.adaptation.iterations > 0
        if policy == "optimal":
            gap = out.adaptation.residual
    assert p100["mrc"] <= p100["spray"] + 1e-5
    assert p100["optimal"] <= p100["mrc"] + gap + 1e-5


def test_jobs_share_a_fat_tree():
    scenario = parse_scenario({
        "fabric": FAT, "policies": ["spray", "mrc"], "seed": 1,
        "jobs": [{"name": "a", "collective": "all-reduce", "gpus": 8, "order": "random",
                  "size": "8MiB"},
                 {"name": "b", "collective": "all-reduce", "gpus": 8, "order": "random",
                  "size": "8MiB"}]})
    report = analyze(scenario)
    assert len(report.sharing) == 4
    for row in report.sharing:
        assert row.together_s >= row.alone_s * (1 - 1e-6) and row.status == "ok"


def test_sensitivity_on_a_graph_file_names_the_degraded_cable(tmp_path):
    """graph-leaf-spine's leaf3-spine1 cable runs at 400G: spraying's bottleneck, the link
    whose upgrade helps most."""
    shutil.copytree(REPO / "scenarios" / "graphs", tmp_path / "graphs")
    shutil.copy(REPO / "scenarios" / "graph-leaf-spine.yaml", tmp_path / "g.yaml")
    scenario = load_scenario(tmp_path / "g.yaml")
    scenario = scenario.model_copy(update={"policies": ["spray"]})
    report = analyze(scenario, sensitivity=True)
    (row, *_) = report.sensitivity
    assert {"leaf3", "spine1"} == set(row["links"][0]["link"].split("->"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fat-tree-failures.yaml", "graph-failures.yaml"])
def test_bundled_family_failure_scenarios_run(name):
    proc = fabricjax("analyze", f"scenarios/{name}", "-q", cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    for policy in POLICIES:
        assert policy in proc.stdout
    assert "Steady state over" in proc.stdout


def test_graph_names_and_counts(tmp_path):
    """Failure names on a graph file: cables either way round, switches by name, a host's
    only port by the host's name; random draws count what there is."""
    base = {"fabric": GRAPH, "workload": [{"collective": "permutation"}]}
    scenario = parse_scenario({**base, "failures": {
        "links": ["spine0->leaf1"], "switches": ["spine1"], "nic_ports": ["gpu2"]}},
        base_dir=DATA)
    batch = sample_failures(scenario)
    assert batch.names == [["leaf1->spine0", "spine1", "gpu2->leaf1"]]
    for failures, field in (({"links": ["leaf0->gpu9"]}, "failures.links.names[0]"),
                            ({"switches": ["gpu0"]}, "failures.switches.names[0]"),
                            ({"links": {"random": 5}}, "failures.links.random")):
        with pytest.raises(ScenarioError) as err:
            parse_scenario({**base, "failures": failures}, base_dir=DATA)
        assert err.value.field == field
    assert load_graph(DATA / "leaf_spine.graphml").number_of_edges() == 8
