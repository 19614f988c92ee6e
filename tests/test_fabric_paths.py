"""Topology and path slots checked against a graph built link by link from the definition."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricjax.fabric.clos import NUM_TIERS, build_fabric, clos_geometry
from fabricjax.fabric.paths import HOPS, clos_path_links, hashed_slots, path_set, spread_slots
from fabricjax.config import ClosConfig

from conftest import SMALL_CONFIGS
from reference import node_name, reference_fabric_graph, reference_paths


def _named_links(fabric, graph):
    g = graph.graph
    return [
        (node_name(s, g["gpus"], g["planes"], g["t0s"], g["spines"]),
         node_name(d, g["gpus"], g["planes"], g["t0s"], g["spines"]))
        for s, d in zip(fabric.link_src, fabric.link_dst)
    ]


# --------------------------------------------------------------------------- 1. build_fabric

def test_build_fabric_matches_reference_graph(small_config):
    fabric = build_fabric(small_config)
    graph = reference_fabric_graph(small_config)
    geom = fabric.geometry
    assert (geom.gpus, geom.planes, geom.t0s, geom.spines, geom.gpus_per_t0) == (
        graph.graph["gpus"], graph.graph["planes"], graph.graph["t0s"], graph.graph["spines"],
        graph.graph["gpus_per_t0"])
    assert fabric.num_links == graph.number_of_edges() == geom.num_links
    for arr in (fabric.link_src, fabric.link_dst, fabric.capacity, fabric.tier, fabric.plane):
        assert arr.shape == (fabric.num_links,)
    assert fabric.link_src.dtype == np.int32 and fabric.link_dst.dtype == np.int32
    assert fabric.capacity.dtype == np.float32

    named = _named_links(fabric, graph)
    assert len(set(named)) == len(named), "a directed link appears twice"
    built = {(u, v, int(t), int(p)) for (u, v), t, p in zip(named, fabric.tier, fabric.plane)}
    expected = {(u, v, d["tier"], d["plane"]) for u, v, d in graph.edges(data=True)}
    assert built == expected
    for (u, v), cap in zip(named, fabric.capacity):
        assert cap == pytest.approx(graph.edges[u, v]["capacity"])
    # node ids are dense: every GPU/switch node of the graph appears, and nothing else
    ids = np.union1d(fabric.link_src, fabric.link_dst)
    np.testing.assert_array_equal(ids, np.arange(graph.number_of_nodes()))
    assert geom.num_nodes == graph.number_of_nodes()


def test_build_fabric_is_tier_major_with_documented_bounds(small_config):
    fabric = build_fabric(small_config)
    geom = fabric.geometry
    assert np.all(np.diff(fabric.tier.astype(int)) >= 0), "tiers must be contiguous ranges"
    for tier, (start, size) in enumerate(zip(geom.tier_starts, geom.tier_sizes)):
        np.testing.assert_array_equal(np.flatnonzero(fabric.tier == tier),
                                      np.arange(start, start + size))
    assert geom.sentinel == fabric.num_links
    assert sorted(set(fabric.tier.tolist())) == list(range(NUM_TIERS))


def test_switch_port_counts_respect_radix(small_config):
    graph = reference_fabric_graph(small_config)
    fabric = build_fabric(small_config)
    out_degree = Counter(_named_links(fabric, graph)[i][0] for i in range(fabric.num_links))
    for node, degree in out_degree.items():
        if node[0] == "gpu":
            assert degree == small_config.planes
        else:
            assert degree <= small_config.radix, node


# --------------------------------------------------------------------------- 2. paths

def _assert_path_valid(fabric, graph, links, src, dst, plane, spine):
    """links: int[HOPS] from the library; check it against the walked reference path."""
    geom = fabric.geometry
    real = [int(l) for l in links if l != geom.sentinel]
    # from the reference graph, not the geometry: rail-optimised T0s are not GPU ranges
    here = ("gpu", src)
    t0 = next(v for v in graph.successors(here) if graph.edges[here, v]["plane"] == plane)
    same_t0 = graph.has_edge(t0, ("gpu", dst))
    assert len(real) == (2 if same_t0 else 4)
    # sentinel padding only at the end
    assert list(links[:len(real)]) == real
    assert all(int(l) == geom.sentinel for l in links[len(real):])
    # connected chain src -> ... -> dst through real links
    assert fabric.link_src[real[0]] == src and fabric.link_dst[real[-1]] == dst
    for a, b in zip(real, real[1:]):
        assert fabric.link_dst[a] == fabric.link_src[b]
    assert all(int(fabric.plane[l]) == plane for l in real)
    named = _named_links(fabric, graph)
    assert [named[l] for l in real] == reference_paths(graph, src, dst, plane, spine)


def test_clos_path_links_every_pair_every_path(small_config):
    fabric = build_fabric(small_config)
    graph = reference_fabric_graph(small_config)
    geom = fabric.geometry
    n = geom.gpus
    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    off = src != dst
    src, dst = src[off], dst[off]
    rng = np.random.default_rng(0)
    pick = rng.choice(src.size, size=min(src.size, 60), replace=False)
    for i in pick:
        for p in range(geom.planes):
            for s in range(geom.spines):
                links = clos_path_links(geom, src[i], dst[i], p, s)
                assert links.shape == (HOPS,) and links.dtype == np.int32
                _assert_path_valid(fabric, graph, links, int(src[i]), int(dst[i]), p, s)


def _random_flows(geom, num_flows, rng):
    src = rng.integers(0, geom.gpus, size=num_flows)
    dst = (src + rng.integers(1, geom.gpus, size=num_flows)) % geom.gpus
    return src.astype(np.int32), dst.astype(np.int32)


@pytest.mark.parametrize("cfg", SMALL_CONFIGS[::2], ids=lambda c: str(c))
@pytest.mark.parametrize("kind", ["spread", "hashed"])
def test_path_set_slots_are_valid_paths(cfg, kind):
    fabric = build_fabric(ClosConfig(**cfg))
    graph = reference_fabric_graph(ClosConfig(**cfg))
    geom = fabric.geometry
    rng = np.random.default_rng(1)
    src, dst = _random_flows(geom, 25, rng)
    if kind == "spread":
        plane, spine = spread_slots(geom, src.size, 2 * geom.planes + 1, rng)
    else:
        plane, spine = hashed_slots(geom, src.size, 2, rng)
    paths = path_set(geom, src, dst, plane, spine)
    num_slots = plane.shape[1]
    assert paths.links.shape == (src.size, num_slots, HOPS)
    assert paths.links.dtype == np.int32
    np.testing.assert_array_equal(paths.plane, np.broadcast_to(
        np.arange(num_slots) % geom.planes, plane.shape))
    assert np.all((0 <= paths.spine) & (paths.spine < geom.spines))
    for f in range(src.size):
        for k in range(num_slots):
            _assert_path_valid(fabric, graph, paths.links[f, k], int(src[f]), int(dst[f]),
                               int(paths.plane[f, k]), int(paths.spine[f, k]))


@settings(max_examples=40, deadline=None)
@given(radix_half=st.integers(1, 8), planes=st.integers(1, 4), pick=st.integers(0, 7),
       seed=st.integers(0, 2**32 - 1))
def test_spread_slots_distinct_spines_when_they_fit(radix_half, planes, pick, seed):
    """A plane with K_p <= S slots puts them on K_p distinct spines (docstring promise), here
    for K_p dividing S; the general K_p <= S case is the test below."""
    geom = clos_geometry(ClosConfig(gpus=2, planes=planes, radix=2 * radix_half))
    divisors = [d for d in range(1, geom.spines + 1) if geom.spines % d == 0]
    per_plane = divisors[pick % len(divisors)]
    plane, spine = spread_slots(geom, 64, per_plane * planes, np.random.default_rng(seed))
    np.testing.assert_array_equal(plane[0], np.arange(per_plane * planes) % planes)
    for f in range(plane.shape[0]):
        for p in range(planes):
            chosen = spine[f, plane[f] == p]
            assert len(chosen) == per_plane
            assert len(set(chosen.tolist())) == per_plane, (f, p, chosen)


@pytest.mark.parametrize("spines,per_plane", [(3, 2), (5, 2), (5, 3), (4, 3), (8, 3)])
def test_spread_slots_distinct_spines_any_split(spines, per_plane):
    geom = clos_geometry(ClosConfig(gpus=4, planes=2, radix=2 * spines))
    plane, spine = spread_slots(geom, 500, 2 * per_plane, np.random.default_rng(0))
    repeated = 0
    for f in range(plane.shape[0]):
        for p in range(2):
            chosen = spine[f, plane[f] == p].tolist()
            repeated += len(set(chosen)) != len(chosen)
    assert repeated == 0, f"{repeated} of 1000 (flow, plane) pairs reuse a spine"


def test_spread_slots_use_every_spine_once_when_slots_equal_spines():
    geom = clos_geometry(ClosConfig(gpus=16, planes=2, radix=8))
    plane, spine = spread_slots(geom, 200, geom.planes * geom.spines, np.random.default_rng(3))
    for f in range(200):
        for p in range(geom.planes):
            assert sorted(spine[f, plane[f] == p].tolist()) == list(range(geom.spines))


def test_spread_slots_marginals_are_uniform():
    """Each slot's spine is uniform over the plane's spines (the random rotation's job)."""
    geom = clos_geometry(ClosConfig(gpus=4, planes=2, radix=16))   # S = 8
    num_flows = 4000
    _, spine = spread_slots(geom, num_flows, 6, np.random.default_rng(5))
    for k in range(6):
        counts = np.bincount(spine[:, k], minlength=geom.spines)
        _assert_roughly_uniform(counts)


def _assert_roughly_uniform(counts):
    """Pearson chi-square against uniform. With S-1 <= 15 degrees of freedom the 1e-6 upper
    quantile is below 50, so a fair hash fails this about once in a million runs, while a
    hash that skips a spine or favours one by 30% over thousands of draws scores hundreds."""
    counts = np.asarray(counts, dtype=float)
    expected = counts.sum() / counts.size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = counts.size - 1
    assert chi2 < max(50.0, 3.0 * dof), (chi2, counts)


@pytest.mark.parametrize("spines,planes,qps", [(2, 1, 1), (3, 2, 2), (8, 4, 1), (5, 1, 4)])
def test_hashed_slots_planes_and_uniformity(spines, planes, qps):
    geom = clos_geometry(ClosConfig(gpus=4, planes=planes, radix=2 * spines))
    num_flows = 3000
    plane, spine = hashed_slots(geom, num_flows, qps, np.random.default_rng(11))
    assert plane.shape == spine.shape == (num_flows, qps * planes)
    np.testing.assert_array_equal(plane, np.broadcast_to(np.arange(qps * planes) % planes,
                                                         plane.shape))
    for k in range(qps * planes):
        _assert_roughly_uniform(np.bincount(spine[:, k], minlength=spines))
    # slots are hashed independently: two QPs of one plane collide at rate 1/S
    if qps >= 2:
        same = np.mean(spine[:, 0] == spine[:, planes])
        assert abs(same - 1 / spines) < 5 * math.sqrt((1 / spines) / num_flows)


def test_uniformity_check_can_fail():
    """The chi-square bound above does reject a biased hash (guard against a vacuous test)."""
    biased = np.array([1200, 600, 600, 600])
    with pytest.raises(AssertionError):
        _assert_roughly_uniform(biased)
