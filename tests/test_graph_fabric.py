"""Graph-given fabrics: loading and its errors, fat-tree construction against the BOM closed
forms, K shortest candidate paths against a networkx reference, and the solver on top."""

from __future__ import annotations

import itertools
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from fabricjax.fabric import graphfile as gfm
from fabricjax.fabric.bom import fat_tree_bom
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graph import build_graph_fabric, graph_bom, graph_summary
from fabricjax.fabric.graphfile import load_graph
from fabricjax.fabric.ksp import candidate_paths
from fabricjax.fabric.paths import path_set
from fabricjax.config import ClosConfig
from adapters import solve_uniform_phase

from conftest import assert_close

DATA = Path(__file__).parent / "data" / "graphs"


def check_chains(gf, links, src, dst):
    """Every slot is a connected chain src host -> dst host, sentinel padding only at the end."""
    sentinel = gf.sentinel
    for f, k in itertools.product(range(links.shape[0]), range(links.shape[1])):
        path = links[f, k]
        real = path[path != sentinel]
        assert np.all(path[len(real):] == sentinel), "sentinel before a real hop"
        if src[f] == dst[f]:
            assert len(real) == 0
            continue
        assert gf.link_src[real[0]] == src[f] and gf.link_dst[real[-1]] == dst[f]
        assert np.all(gf.link_dst[real[:-1]] == gf.link_src[real[1:]])
        nodes = np.concatenate([gf.link_src[real], gf.link_dst[real[-1:]]])
        assert len(set(nodes.tolist())) == len(nodes), "path is not simple"
        assert np.all(nodes[1:-1] >= gf.gpus), "a host forwards"


def distinct_paths(links, f):
    return {tuple(p) for p in links[f].tolist()}


def reference_shortest(gf, graph, a, b):
    """All shortest host paths by networkx on the graph with the other hosts removed."""
    names = gf.node_names
    hosts = {n for n, d in graph.nodes(data=True) if d["type"] == "host"}
    sub = graph.subgraph(set(graph) - (hosts - {names[a], names[b]}))
    return list(nx.all_shortest_paths(sub, names[a], names[b]))


# ------------------------------------------------------------------ files

def test_graphml_sample_loads():
    graph = load_graph(DATA / "leaf_spine.graphml")
    gf = build_graph_fabric(graph, paths=4)
    assert gf.gpus == 4 and gf.num_nodes == 8 and gf.num_links == 16
    assert gf.node_names[:4] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert gf.tier_bounds == ((0, 4), (4, 8), (8, 12), (12, 16))
    assert {gf.link_name(i) for i in range(4, 8)} == {
        'leaf0->spine0', 'leaf0->spine1', 'leaf1->spine0', 'leaf1->spine1'}
    assert np.all(np.diff(gf.tier) >= 0)
    assert_close(gf.nic_gbps, [400.0] * 4)
    assert gf.link_name(0) == "gpu0->leaf0" and gf.link_name(gf.sentinel) == "sentinel"
    assert {gf.node_names[s] for s in gf.host_switch} == {"leaf0", "leaf1"}
    summary = graph_summary(gf)
    assert summary["switches"] == 4 and summary["cables"] == 8
    assert summary["switch_radix_min"] == 2 and summary["switch_radix_max"] == 4
    src, dst = np.array([0, 0, 3]), np.array([1, 2, 0])
    links, distinct = candidate_paths(gf, src, dst)
    assert links.shape == (3, 4, 4) and links.dtype == np.int32
    np.testing.assert_array_equal(distinct, [1, 2, 2])
    check_chains(gf, links, src, dst)
    assert len(distinct_paths(links, 0)) == 1       # same leaf: host -> leaf -> host
    assert np.all(links[0, :, 2:] == gf.sentinel)
    np.testing.assert_array_equal(links[1, 2:], links[1, :2])   # cyclic repeat


def test_edgelist_sample_loads_with_natural_host_order():
    graph = load_graph(DATA / "ring.edgelist", default_gbps=400.0)
    gf = build_graph_fabric(graph, paths=3)
    assert gf.node_names[:6] == ["gpu0", "gpu1", "gpu2", "gpu3", "gpu5", "gpu10"]
    assert gf.gpus == 6 and graph_bom(gf) == {
        "gpus": 6, "switches": 3, "links": 9, "host_links": 6, "fabric_links": 3}
    assert_close(gf.capacity[(gf.tier == 1) | (gf.tier == 2)], [800.0] * 6)
    src, dst = np.arange(6), np.roll(np.arange(6), 2)
    links, distinct = candidate_paths(gf, src, dst)
    check_chains(gf, links, src, dst)
    # a ring has two simple switch routes between neighbours: one direct, one around
    np.testing.assert_array_equal(distinct, [2] * 6)
    assert links.shape[2] == 4


def test_edgelist_without_default_names_the_edge():
    with pytest.raises(ScenarioError, match=r"fabric\.file: line 7: edge gpu2 - sw1 has no "
                                            r"capacity"):
        load_graph(DATA / "ring.edgelist")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


GRAPHML_HEAD = ('<?xml version="1.0"?><graphml xmlns="http://graphml.graphdrawing.org/xmlns">'
                '<key id="type" for="node" attr.name="type" attr.type="string"/>'
                '<key id="c" for="edge" attr.name="capacity" attr.type="double"/>')

BAD = [
    ("bad.graphml", GRAPHML_HEAD + "<graph", "not valid GraphML"),
    ("bad.xml", "no xml at all", "not valid GraphML"),
    ("nohost.txt", "sw0 sw1 100\n", "no hosts"),
    ("lonely.graphml", GRAPHML_HEAD + '<graph edgedefault="undirected">'
     '<node id="h"><data key="type">host</data></node><node id="g">'
     '<data key="type">host</data></node><node id="s"/>'
     '<edge source="g" target="s"><data key="c">1</data></edge></graph></graphml>',
     "host h has no links"),
    ("hosthost.txt", "gpu0 sw0 100\ngpu1 gpu0 100\n", "linked directly to host"),
    ("loop.txt", "gpu0 sw0 100\nsw0 sw0 100\n", "self loop on sw0"),
    ("zero.txt", "gpu0 sw0 0\n", "must be a finite number of Gbit/s > 0"),
    ("neg.txt", "gpu0 sw0 -5\n", "must be a finite number of Gbit/s > 0"),
    ("nan.txt", "gpu0 sw0 nan\n", "must be a finite number of Gbit/s > 0"),
    ("inf.txt", "gpu0 sw0 inf\n", "must be a finite number of Gbit/s > 0"),
    ("word.txt", "gpu0 sw0 fast\n", "is not a number"),
    ("dict.txt", "gpu0 sw0 {'capacity': \n", "expected a dict"),
    ("short.txt", "gpu0\n", "expected 'u v"),
    ("twice.txt", "gpu0 sw0 1\nsw0 gpu0 1\n", "repeats a cable"),
    ("split.txt", "gpu0 sw0 1\ngpu1 sw1 1\n",
     "disconnected: host gpu1 cannot reach host gpu0"),
    # gpu1 and gpu2 reach gpu0 but not each other: hosts do not forward
    ("planes.txt", "gpu0 a 1\ngpu0 b 1\ngpu1 a 1\ngpu2 b 1\n",
     "host gpu2 cannot reach host gpu1"),
    ("nocap.graphml", GRAPHML_HEAD + '<graph edgedefault="undirected">'
     '<node id="h"><data key="type">host</data></node><node id="s"/>'
     '<edge source="h" target="s"/></graph></graphml>', "edge h - s has no capacity"),
    ("multi.graphml", GRAPHML_HEAD + '<graph edgedefault="undirected">'
     '<node id="h"><data key="type">host</data></node><node id="s"/>'
     '<edge source="h" target="s"><data key="c">1</data></edge>'
     '<edge source="h" target="s"><data key="c">1</data></edge></graph></graphml>',
     "given twice"),
]


@pytest.mark.parametrize("name,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_files_name_the_field_and_the_rule(tmp_path, name, text, message):
    with pytest.raises(ScenarioError) as info:
        load_graph(_write(tmp_path, name, text))
    assert info.value.field == "fabric.file"
    assert str(info.value).startswith("fabric.file: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file_directory_and_format(tmp_path):
    with pytest.raises(ScenarioError, match="fabric.file: .*does not exist"):
        load_graph(tmp_path / "nope.graphml")
    with pytest.raises(ScenarioError, match="fabric.file: .*is not a file"):
        load_graph(tmp_path)
    with pytest.raises(ScenarioError, match="format must be one of auto, graphml, edgelist"):
        load_graph(DATA / "ring.edgelist", fmt="gml")
    # an explicit format overrides the suffix
    path = _write(tmp_path, "fabric.dat", (DATA / "leaf_spine.graphml").read_text())
    assert load_graph(path, fmt="graphml").number_of_edges() == 8


def test_too_many_edges(tmp_path, monkeypatch):
    monkeypatch.setattr(gfm, "MAX_EDGES", 2)
    with pytest.raises(ScenarioError, match="at most 2"):
        load_graph(_write(tmp_path, "big.txt", "gpu0 a 1\ngpu1 a 1\ngpu2 a 1\n"))
    with pytest.raises(ScenarioError, match="at most 2"):
        load_graph(DATA / "leaf_spine.graphml")


def test_directed_graphml_is_read_as_cables(tmp_path):
    def edges(pairs):
        return "".join(f'<edge source="{u}" target="{v}"><data key="c">{c}</data></edge>'
                       for u, v, c in pairs)

    head = GRAPHML_HEAD + ('<graph edgedefault="directed"><node id="gpu0"><data key="type">'
                           'host</data></node><node id="gpu1"><data key="type">host</data>'
                           '</node><node id="s"/>')
    both = [("gpu0", "s", 1), ("s", "gpu0", 1), ("gpu1", "s", 2)]
    graph = load_graph(_write(tmp_path, "d.graphml", head + edges(both) + "</graph></graphml>"))
    assert not graph.is_directed() and graph.number_of_edges() == 2
    clash = [("gpu0", "s", 1), ("s", "gpu0", 3), ("gpu1", "s", 2)]
    with pytest.raises(ScenarioError, match="given twice"):
        load_graph(_write(tmp_path, "e.graphml", head + edges(clash) + "</graph></graphml>"))


# ------------------------------------------------------------------ fat trees

@pytest.mark.parametrize("gpus,radix,planes", [(16, 4, 1), (16, 4, 2), (10, 4, 1), (7, 4, 1),
                                               (54, 6, 1), (20, 6, 3), (128, 8, 1)])
def test_fat_tree_counts_match_bom(gpus, radix, planes):
    graph = fat_tree_graph(gpus, radix, 400.0, planes=planes)
    bom = fat_tree_bom(gpus, radix, 400.0, tiers=3, planes=planes)
    switches = [n for n, d in graph.nodes(data=True) if d["type"] == "switch"]
    assert len(switches) == bom["switches"]
    per_layer = {}
    for n in switches:
        layer = graph.nodes[n]["layer"]
        per_layer[layer] = per_layer.get(layer, 0) + 1
    assert per_layer == bom["switches_by_tier"]
    cables = sum(c for _, _, c in graph.edges(data="cables"))
    assert cables == bom["links"]
    capacity = sum(c for _, _, c in graph.edges(data="capacity"))
    assert capacity == pytest.approx(400.0 * bom["links"])
    # no switch uses more ports than it has
    for n in switches:
        assert sum(graph[n][m]["cables"] for m in graph[n]) <= radix


def test_full_k4_fat_tree():
    graph = fat_tree_graph(16, 4, 400.0)
    gf = build_graph_fabric(graph, paths=4)
    assert gf.gpus == 16 and gf.num_nodes - gf.gpus == 20 and gf.num_links == 2 * 48
    assert graph_bom(gf)["links"] == 48 and graph_summary(gf)["switch_radix_max"] == 4
    src = np.array([0, 0, 0, 5])
    dst = np.array([1, 2, 15, 9])          # same edge, same pod, other pod, other pod
    links, distinct = candidate_paths(gf, src, dst)
    check_chains(gf, links, src, dst)
    # K shortest of any length: the same-pod pair adds two 10-link detours via two cores
    np.testing.assert_array_equal(distinct, [1, 4, 4, 4])
    assert links.shape[2] == 10
    links, distinct = candidate_paths(gf, src, dst, max_extra_hops=0)
    check_chains(gf, links, src, dst)
    np.testing.assert_array_equal(distinct, [1, 2, 4, 4])
    assert links.shape[2] == 6 and len(reference_shortest(gf, graph, 0, 2)) == 2
    for f in (2, 3):
        assert len(distinct_paths(links, f)) == 4
        assert np.all(links[f] != gf.sentinel)                     # 6 links, no padding
        ref = reference_shortest(gf, graph, src[f], dst[f])
        assert len(ref) == 4 and all(len(p) == 7 for p in ref)
        got = {tuple(gf.node_names[n] for n in [*gf.link_src[p], gf.link_dst[p[-1]]])
               for p in links[f]}
        assert got == {tuple(p) for p in ref}


def test_extra_hops_limit_keeps_equal_cost_paths():
    gf = build_graph_fabric(fat_tree_graph(16, 4, 400.0), paths=8)
    src, dst = np.arange(16), np.roll(np.arange(16), -5)
    links, distinct = candidate_paths(gf, src, dst)
    assert np.all(distinct == 8) and links.shape[2] > 6     # KSP goes longer than shortest
    check_chains(gf, links, src, dst)
    ecmp, distinct = candidate_paths(gf, src, dst, max_extra_hops=0)
    assert ecmp.shape == (16, 8, 6) and np.all(distinct == 4)
    check_chains(gf, ecmp, src, dst)
    np.testing.assert_array_equal(ecmp[:, 4:], ecmp[:, :4])


def test_two_plane_fat_tree_uses_both_planes():
    graph = fat_tree_graph(16, 4, 200.0, planes=2)
    gf = build_graph_fabric(graph, paths=8)
    assert_close(gf.nic_gbps, np.full(16, 400.0))
    src, dst = np.arange(16), np.roll(np.arange(16), -3)
    links, distinct = candidate_paths(gf, np.r_[src, 4], np.r_[dst, 4], max_extra_hops=0)
    check_chains(gf, links, np.r_[src, 4], np.r_[dst, 4])
    assert np.all(links[-1] == gf.sentinel) and distinct[-1] == 0      # GPU to itself
    for f in range(16):
        planes = gf.plane[links[f, :, 1]]
        assert set(planes.tolist()) == {0, 1}
        assert distinct[f] in (2, 4, 8)
        assert np.bincount(planes, minlength=2)[0] == 4          # K/2 slots per plane


def test_bad_fat_tree_arguments():
    with pytest.raises(ScenarioError, match="fabric.radix: must be an even"):
        fat_tree_graph(16, 5, 400.0)
    with pytest.raises(ScenarioError, match=r"fabric.gpus: must be an integer in 2..16"):
        fat_tree_graph(17, 4, 400.0)
    with pytest.raises(ScenarioError, match="fabric.tiers"):
        fat_tree_graph(16, 4, 400.0, tiers=4)
    with pytest.raises(ScenarioError, match="fabric.port_gbps"):
        fat_tree_graph(16, 4, float("nan"))
    with pytest.raises(ScenarioError, match="fabric.paths"):
        build_graph_fabric(fat_tree_graph(16, 4, 400.0), paths=0)


# ------------------------------------------------------------------ solver

def _solve(gf, links, nic):
    flows = links.shape[0]
    demand = np.full(flows, nic, np.float32)
    return solve_uniform_phase(
        links, demand, np.full(flows, 1e6, np.float32), demand, gf.capacity,
        np.ones(gf.num_links, bool), np.float32(0.0), np.int32(1000),
        tier_bounds=gf.tier_bounds, top_k=4)


def test_full_fat_tree_permutation_has_full_bisection():
    """Spraying evenly over all (k/2)^2 core paths keeps every link of a full fat tree at or
    below line rate for any permutation."""
    gf = build_graph_fabric(fat_tree_graph(16, 4, 400.0), paths=4)
    rng = np.random.default_rng(0)
    for _ in range(3):
        cycle = rng.permutation(16)
        links, _ = candidate_paths(gf, cycle, np.roll(cycle, -1), max_extra_hops=0)
        result = _solve(gf, links, 400.0)
        assert float(result.stats[0, 2]) <= 1.0 + 1e-5
        assert_close(np.asarray(result.rates), np.full(16, 400.0))


def test_two_tier_clos_graph_matches_clos_solver():
    cfg = ClosConfig(gpus=14, planes=2, radix=8, port_gbps=100.0)
    fabric = build_fabric(cfg)
    geom = fabric.geometry
    graph = nx.Graph()
    name = [f"gpu{i}" if i < geom.gpus else f"sw{i}" for i in range(geom.num_nodes)]
    graph.add_nodes_from(name[:geom.gpus], type="host")
    graph.add_nodes_from(name[geom.gpus:], type="switch")
    up = fabric.tier <= 1
    for s, d in zip(fabric.link_src[up], fabric.link_dst[up]):
        graph.add_edge(name[s], name[d], capacity=geom.port_gbps)
    num_slots = geom.planes * geom.spines
    gf = build_graph_fabric(graph, paths=num_slots)
    assert gf.node_names == name                 # same node ids on both sides
    rng = np.random.default_rng(1)
    cycle = rng.permutation(geom.gpus)
    src, dst = cycle, np.roll(cycle, -1)
    links, _ = candidate_paths(gf, src, dst)
    check_chains(gf, links, src, dst)
    k = np.arange(num_slots)
    plane = np.broadcast_to(k % geom.planes, (src.shape[0], num_slots)).astype(np.int32)
    spine = np.broadcast_to(k // geom.planes, (src.shape[0], num_slots)).astype(np.int32)
    clos = path_set(geom, src, dst, plane, spine)
    ours = _solve(gf, links, geom.nic_gbps)
    theirs = solve_uniform_phase(
        clos.links, np.full(src.shape[0], geom.nic_gbps, np.float32),
        np.full(src.shape[0], 1e6, np.float32), np.full(src.shape[0], geom.nic_gbps,
                                                         np.float32),
        fabric.capacity, np.ones(fabric.num_links, bool), np.float32(0.0), np.int32(1000),
        tier_bounds=tuple((s, s + n) for s, n in zip(geom.tier_starts, geom.tier_sizes)),
        top_k=4)
    assert_close(np.asarray(ours.rates), np.asarray(theirs.rates))
    # same tier layout (t0->t1 up, t1->t0 down): per-tier statistics agree too
    assert [b - a for a, b in gf.tier_bounds] == list(geom.tier_sizes)
    assert_close(np.asarray(ours.stats), np.asarray(theirs.stats))
    # the same link sets carry the same load: compare per directed (src, dst) pair
    assert_close(float(ours.total_load), float(theirs.total_load))
