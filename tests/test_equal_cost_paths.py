"""Stored-path fabrics cover each GPU pair's equal-cost set evenly: the path counts against
networkx, the fat tree's closed form against the built graph, the even sample where the set
is larger than `fabric.paths`, the default that reaches a full fat tree's bisection
(optimal 1.0 on permutations at k = 8, 16, 32), hashed spraying within balls-in-bins, and
the warning a smaller `paths` earns."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from fabricjax.fabric.build import build, paths_per_pair
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graph import build_graph_fabric
from fabricjax.fabric.ksp import candidate_paths, equal_cost_sample
from fabricjax.fabric.spec import fat_tree_equal_cost_paths
from fabricjax.report.tables import paths_warning
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze


def reference_counts(gf, src_sets, dst_set):
    """Shortest switch paths from any switch of each source set to any of `dst_set`, by
    networkx listing them all (the slow, obvious count)."""
    graph = gf.switch_graph.copy()
    graph.add_edges_from(("sink", d) for d in dst_set)
    counts = []
    for sources in src_sets:
        graph.add_edges_from(("source", s) for s in sources)
        counts.append(sum(1 for _ in nx.all_shortest_paths(graph, "source", "sink")))
        graph.remove_node("source")
    return counts


def random_graph_fabric(seed):
    """A random connected switch graph with hosts on random switches (some on two)."""
    rng = np.random.default_rng(seed)
    switches = int(rng.integers(5, 12))
    graph = nx.connected_watts_strogatz_graph(switches, 4, 0.5, seed=seed)
    g = nx.Graph()
    for u, v in graph.edges:
        g.add_edge(f"s{u}", f"s{v}", capacity=100.0)
    for h in range(10):
        g.add_node(f"gpu{h}", type="host")
        for s in rng.choice(switches, size=int(rng.integers(1, 3)), replace=False):
            g.add_edge(f"gpu{h}", f"s{s}", capacity=100.0)
    for n in g.nodes:
        g.nodes[n].setdefault("type", "switch")
    return build_graph_fabric(g, paths=4)


@pytest.mark.parametrize("seed", range(4))
def test_path_counts_match_networkx(seed):
    gf = random_graph_fabric(seed)
    _, sets = gf.host_classes
    src_sets = np.full((len(sets), max(map(len, sets))), -1, np.int64)
    for i, s in enumerate(sets):
        src_sets[i, :len(s)] = s
    for d, dst_set in enumerate(sets):
        _, _, count = equal_cost_sample(gf, src_sets, dst_set, 4, np.zeros(len(sets)))
        np.testing.assert_array_equal(count, reference_counts(gf, sets, dst_set))


@pytest.mark.parametrize("gpus,radix,planes", [
    (16, 4, 1), (12, 4, 1), (128, 8, 1), (100, 8, 2), (40, 8, 1), (24, 8, 1),
    (1024, 16, 1), (600, 16, 1), (300, 16, 1), (136, 16, 1), (9, 16, 3), (2048, 32, 1)])
def test_fat_tree_closed_form_matches_the_graph(gpus, radix, planes):
    gf = build_graph_fabric(fat_tree_graph(gpus, radix, 100.0, planes=planes), paths=1)
    assert fat_tree_equal_cost_paths(gpus, radix, planes) == gf.equal_cost_paths


def test_a_larger_set_is_sampled_evenly_and_every_path_is_shortest():
    """k = 16, 8 slots of a 64-path set: distinct shortest paths, one per aggregation switch
    of the source pod; with 64 slots every one of the 64 paths once."""
    gf = build_graph_fabric(fat_tree_graph(1024, 16, 100.0), paths=8)
    src, dst = np.arange(0, 1024, 7), (np.arange(0, 1024, 7) + 512) % 1024  # other pods
    links, distinct = candidate_paths(gf, src, dst, max_extra_hops=0)
    assert np.all(distinct == 8) and links.shape[2] == 6
    aggs = gf.link_dst[links[:, :, 1]]
    assert all(len(set(row)) == 8 for row in aggs.tolist())
    assert all(len(set(map(tuple, links[f].tolist()))) == 8 for f in range(len(src)))
    full = build_graph_fabric(fat_tree_graph(1024, 16, 100.0), paths=64)
    links, distinct = candidate_paths(full, src, dst, max_extra_hops=0)
    assert np.all(distinct == 64)
    assert all(len(set(map(tuple, links[f].tolist()))) == 64 for f in range(len(src)))


def fat_tree_scenario(gpus, radix, **extra):
    fabric = {"kind": "fat-tree", "tiers": 3, "gpus": gpus, "radix": radix,
              "port_gbps": 100.0, "planes": 1, **extra.pop("fabric", {})}
    return parse_scenario({"fabric": fabric, "workload": [{"collective": "permutation",
                                                           "size": 2**20}],
                           "seed": 3, **extra})


@pytest.mark.parametrize("gpus,radix", [
    (128, 8), (1024, 16), pytest.param(2048, 32, marks=pytest.mark.slow)])
def test_default_paths_reach_full_bisection(gpus, radix):
    """Left out, `fabric.paths` is the largest equal-cost set, and on a full-bisection fat
    tree the optimal split of a random permutation is at line rate (the bundled example at
    the old default of 8 read 8.0)."""
    scenario = fat_tree_scenario(gpus, radix, policies=["optimal"])
    assert paths_per_pair(scenario) == fat_tree_equal_cost_paths(gpus, radix)
    (record,) = analyze(scenario).records
    assert record.p100_utilisation == pytest.approx(1.0, abs=2e-3)


def test_hashed_spray_is_within_balls_in_bins():
    """EVs hashed onto the equal-cost set: a T0's uplinks carry balls-in-bins loads (its h
    GPUs x E EVs of weight 1/E into h aggregation switches), so the edge tier's P100 lies
    inside the range a direct draw of that model gives; routed, the split is exact."""
    evs = 8
    scenario = fat_tree_scenario(128, 8, policies=["spray"],
                                 spray={"evs": evs, "placement": "hashed"})
    (record,) = analyze(scenario).records
    observed = record.utilisation_by_tier["edge-agg"]["p100"]
    h, edges = 4, 32
    rng = np.random.default_rng(0)
    draws = [np.max([np.bincount(rng.integers(0, h, h * evs), minlength=h).max()
                     for _ in range(edges)]) / evs for _ in range(400)]
    assert np.quantile(draws, 0.005) <= observed <= np.quantile(draws, 0.995)
    routed = fat_tree_scenario(128, 8, policies=["spray"])
    assert analyze(routed).records[0].p100_utilisation == pytest.approx(1.0, abs=1e-5)


def test_a_capping_paths_value_warns_with_the_figure():
    scenario = fat_tree_scenario(128, 8, fabric={"paths": 4})
    summary = {"paths_per_pair": 4, "equal_cost_paths": build(scenario).equal_cost_paths}
    text = paths_warning(summary)
    assert "keeps 4 of up to 16 equal-cost paths" in text and "4x high" in text
    assert paths_warning({"paths_per_pair": 16, "equal_cost_paths": 16}) is None
