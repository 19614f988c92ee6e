"""Candidate paths on a graph fabric as link ids, for the stored-link-id solver: every flow's
equal-cost set covered evenly, detours after it where a fabric allows them.

Contract: `candidate_paths(gf, src, dst)` gives every flow K path slots as link ids
int32[F, K, H], padded with the sentinel id L, and how many distinct paths each has; `gf` is
a `graph.GraphFabric` (duck-typed here: its `switch_neighbours`, `switch_graph`,
`host_classes`, `link_ids`, `paths_per_pair`, `sentinel` and `gpus`), which remembers the
answers per phase (`GraphFabric.paths_for`). `equal_cost_paths(gf)` is the size of the
largest equal-cost set between two GPUs (what a `fabric.paths` below it caps).

Method: hosts never forward, so a path is host -> switch ... switch -> host. Hosts with the
same set of attachment switches form a class, and paths are found once per (source class,
destination class) pair. The equal-cost (shortest) paths between two classes are counted,
not listed: a breadth-first search from the destination's switches gives every switch its
distance d and its number of shortest paths to the destination sigma (a path continues from
v to a neighbour w with d(w) = d(v) - 1). Numbering the paths in the order of their switch
ids, path r is unranked hop by hop (take the successor whose cumulative sigma passes r), so
a pair with N <= K equal-cost paths gets every one of them, and a pair with more gets K
evenly spaced ranks (k + u) N / K with a fixed offset u in [0, 1) hashed from the class
pair: a stratified uniform sample of the set, which on a fat tree uses every aggregation
switch (and, as K grows, every core) a flow can reach equally often. Where detours are
allowed (a graph file's "candidates" pool) and a pair has fewer than K equal-cost paths, the
slots are filled with Yen's K shortest simple paths (`networkx.shortest_simple_paths`), which
list the equal-cost ones first. A flow with fewer than K distinct paths repeats them
cyclically (ECMP / spraying over fewer distinct paths); `distinct` says how many there are.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Sequence

import numpy as np

from fabricjax.core.lazy import lazy_module
from fabricjax.core.errors import ScenarioError

nx = lazy_module("networkx")   # graph fabrics only: a Clos never loads it

_SOURCE, _SINK = -1, -2          # virtual path-search endpoints (real node ids are >= 0)
_UNREACHED = np.int64(1 << 40)  # the distance of a switch with no path to the destination
# (pair, slot, neighbour) entries one unranking step holds at once (~32 MiB of float64)
_CHUNK_ENTRIES = 1 << 22
# destination classes `equal_cost_paths` searches from on a large graph (every one below)
_SAMPLED_CLASSES = 64


def _yen_paths(gf: Any, search: nx.Graph, src_set: Sequence[int], dst_set: Sequence[int]
               ) -> list[list[int]]:
    """Up to K switch sequences, shortest first, from a switch of src_set to one of dst_set
    (Yen's K shortest simple paths by hop count, detours included)."""
    search.add_edges_from((_SOURCE, s) for s in src_set)
    search.add_edges_from((d, _SINK) for d in dst_set)
    found: list[list[int]] = []
    try:
        for path in nx.shortest_simple_paths(search, _SOURCE, _SINK):
            found.append(path[1:-1])
            if len(found) == gf.paths_per_pair:
                break
    except nx.NetworkXNoPath:
        pass
    finally:
        search.remove_nodes_from([_SOURCE, _SINK])
    return found


def toward(gf: Any, dst_set: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(distance int64[nodes], sigma float64[nodes]): each switch's hop count to the nearest
    switch of `dst_set` (`_UNREACHED` where none is reachable) and its number of shortest
    paths there (float: counts on large graphs overflow int64; they are exact up to 2^53)."""
    table = gf.switch_neighbours
    nodes = table.shape[0]
    dist = np.full(nodes, _UNREACHED, np.int64)
    sigma = np.zeros(nodes, np.float64)
    frontier = np.asarray(sorted(set(dst_set)), np.int64)
    dist[frontier] = 0
    sigma[frontier] = 1.0
    level = 0
    while frontier.size:    # one pass per hop of the fabric's diameter (a handful)
        nb = table[frontier]                                        # [n, deg]
        ok = nb >= 0
        nb_safe = np.where(ok, nb, 0)
        fresh = ok & (dist[nb_safe] >= level + 1)
        targets = nb_safe[fresh]
        if not targets.size:
            break
        level += 1
        dist[targets] = level
        np.add.at(sigma, targets, np.broadcast_to(sigma[frontier][:, None], nb.shape)[fresh])
        frontier = np.unique(targets)
    return dist, sigma


def _choose(weight: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index, position left) of rank `pos` among the successors `weight` [..., n]: the first
    index whose cumulative weight passes pos (never one of weight 0, even after rounding)."""
    cum = np.cumsum(weight, axis=-1)
    idx = np.sum(cum <= pos[..., None], axis=-1)
    last = weight.shape[-1] - 1 - np.argmax(weight[..., ::-1] > 0, axis=-1)
    idx = np.minimum(idx, last)
    before = np.take_along_axis(cum - weight, idx[..., None], axis=-1)[..., 0]
    return idx, np.maximum(pos - before, 0.0)


def _pair_offsets(keys: np.ndarray) -> np.ndarray:
    """float64 in [0, 1) per class-pair key: splitmix64 of the key, so a pair's sample does
    not depend on which other pairs a phase has."""
    z = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def equal_cost_sample(gf: Any, src_sets: np.ndarray, dst_set: Sequence[int], num_slots: int,
                      offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(switches int64[n, K, S], hops int64[n], count float64[n]) for n source classes
    (`src_sets` int64[n, A], their attachment switches padded with -1) toward one destination
    class: K slots of equal-cost switch sequences (-1 padded after hops + 1 switches), every
    path once when count <= K (slot k holds path k % count), else the ranks (k + u) count / K
    with u = `offsets`. count 0: no path (the slots are all -1)."""
    dist, sigma = toward(gf, dst_set)
    table = gf.switch_neighbours
    n = src_sets.shape[0]
    valid = src_sets >= 0
    safe = np.where(valid, src_sets, 0)
    d_src = np.where(valid, dist[safe], _UNREACHED)
    hops = d_src.min(axis=1)
    first_w = np.where(d_src == hops[:, None], sigma[safe], 0.0)
    count = np.where(hops < _UNREACHED, first_w.sum(axis=1), 0.0)
    reach = count > 0
    hops = np.where(reach, hops, 0)
    longest = int(hops.max()) if n else 0
    switches = np.full((n, num_slots, longest + 1), -1, np.int64)
    k = np.arange(num_slots, dtype=np.float64)
    every = count[:, None] <= num_slots
    pos = np.where(every, np.mod(k[None, :], np.maximum(count, 1.0)[:, None]),
                   (k[None, :] + offsets[:, None]) * count[:, None] / num_slots)
    idx, pos = _choose(np.broadcast_to(first_w[:, None, :], (n, num_slots, first_w.shape[1])),
                       pos)
    node = np.take_along_axis(safe, idx, axis=1)
    switches[:, :, 0] = np.where(reach[:, None], node, -1)
    for step in range(1, longest + 1):      # one pass per hop (a handful)
        active = (step <= hops)[:, None]
        nb = table[node]                                            # [n, K, deg]
        ok = nb >= 0
        nb_safe = np.where(ok, nb, 0)
        weight = np.where(ok & (dist[nb_safe] == dist[node][..., None] - 1),
                          sigma[nb_safe], 0.0)
        idx, pos = _choose(weight, pos)
        nxt = np.take_along_axis(nb_safe, idx[..., None], axis=-1)[..., 0]
        node = np.where(active, nxt, node)
        switches[:, :, step] = np.where(active & reach[:, None], nxt, -1)
    return switches, hops, count


def _padded_sets(sets: list[tuple[int, ...]], which: np.ndarray) -> np.ndarray:
    """int64[len(which), A]: the attachment switches of classes `which`, padded with -1."""
    width = max((len(sets[c]) for c in which.tolist()), default=1)
    out = np.full((which.shape[0], width), -1, np.int64)
    for row, c in enumerate(which.tolist()):
        out[row, :len(sets[c])] = sets[c]
    return out


def equal_cost_paths(gf: Any) -> int:
    """The largest equal-cost set between two GPUs of the fabric: the most shortest paths
    any (source class, destination class) pair has. Exact over every destination class up to
    `_SAMPLED_CLASSES` of them, else over that many spread evenly over the classes."""
    _, sets = gf.host_classes
    n_cls = len(sets)
    dst_classes = np.unique(np.linspace(0, n_cls - 1, min(n_cls, _SAMPLED_CLASSES))
                            .round().astype(np.int64))
    src_sets = _padded_sets(sets, np.arange(n_cls))
    valid = src_sets >= 0
    safe = np.where(valid, src_sets, 0)
    best = 0.0
    for d in dst_classes.tolist():
        dist, sigma = toward(gf, sets[d])
        d_src = np.where(valid, dist[safe], _UNREACHED)
        hops = d_src.min(axis=1, keepdims=True)
        count = np.where((d_src == hops) & (hops < _UNREACHED), sigma[safe], 0.0).sum(axis=1)
        count[d] = 0.0       # a class to itself: the GPUs of one switch
        best = max(best, float(count.max(initial=0.0)))
    if best == 0.0 and n_cls:      # one class only: the paths through its shared switches
        best = float(len(sets[0]))
    return int(min(best, np.iinfo(np.int64).max))


def _pair_tables(gf: Any, pairs: np.ndarray, n_cls: int, detours: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(switches int64[n_pairs, K, S], length int64[n_pairs, K], count int64[n_pairs]) of
    each class pair key src_class * n_cls + dst_class: the switch sequence of every slot (-1
    padded), its switch-to-switch hops, and the pair's distinct paths."""
    K = gf.paths_per_pair
    _, sets = gf.host_classes
    n_pairs = pairs.shape[0]
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    src_cls, dst_cls = pairs // n_cls, pairs % n_cls
    offsets = _pair_offsets(pairs)
    for d in np.unique(dst_cls).tolist():
        rows = np.flatnonzero(dst_cls == d)
        src_sets = _padded_sets(sets, src_cls[rows])
        degree = gf.switch_neighbours.shape[1]
        step = max(1, _CHUNK_ENTRIES // (K * max(degree, src_sets.shape[1])))
        for lo in range(0, rows.shape[0], step):
            part = rows[lo:lo + step]
            sw, hops, count = equal_cost_sample(gf, src_sets[lo:lo + step], sets[d], K,
                                                offsets[part])
            parts.append((part, sw, hops, count))
    longest = max((p[1].shape[2] for p in parts), default=1)
    switches = np.full((n_pairs, K, longest), -1, np.int64)
    length = np.zeros((n_pairs, K), np.int64)
    count = np.zeros(n_pairs, np.int64)
    for part, sw, hops, cnt in parts:
        switches[part, :, :sw.shape[2]] = sw
        length[part] = hops[:, None]
        count[part] = np.minimum(cnt, K).astype(np.int64)
        # the true size of a set larger than K is kept apart: `distinct` counts slots' paths
    if detours:
        short = np.flatnonzero(count < K)
        if short.size:
            search = gf.switch_graph.copy()
            tables = {int(j): _yen_paths(gf, search, sets[src_cls[j]], sets[dst_cls[j]])
                      for j in short.tolist()}
            longest = max([switches.shape[2], *(len(q) for t in tables.values() for q in t)])
            if longest > switches.shape[2]:
                wider = np.full((n_pairs, K, longest), -1, np.int64)
                wider[:, :, :switches.shape[2]] = switches
                switches = wider
            for j, table in tables.items():
                count[j] = len(table)
                switches[j] = -1
                for k in range(K if table else 0):
                    seq = table[k % len(table)]
                    switches[j, k, :len(seq)] = seq
                    length[j, k] = len(seq) - 1
    return switches, length, count


def candidate_paths(gf: Any, src_gpus, dst_gpus, *, max_extra_hops: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(links int32[F, K, H], distinct int32[F]): K path slots of each flow src -> dst.

    Slot k of a flow with d <= K distinct paths holds path k % d; a flow with more
    equal-cost paths than K holds an even sample of them (see the module). H is the longest
    path's link count, shorter paths padded with the sentinel after their last link.
    `max_extra_hops`: 0 keeps equal-cost paths only (as ECMP); None fills a pair with fewer
    than K equal-cost paths with the K shortest of any length (as KSP). A flow from a GPU to
    itself gets sentinel-only slots and distinct = 0."""
    src = np.asarray(src_gpus, np.int64).reshape(-1)
    dst = np.asarray(dst_gpus, np.int64).reshape(-1)
    if src.shape != dst.shape:
        raise ValueError(f"src and dst differ in shape: {src.shape} vs {dst.shape}")
    for name, arr in (("src", src), ("dst", dst)):
        if arr.size and (arr.min() < 0 or arr.max() >= gf.gpus):
            raise ScenarioError(f"flows.{name}", f"GPU ids must be in 0..{gf.gpus - 1}")
    K, sentinel = gf.paths_per_pair, gf.sentinel
    cls, sets = gf.host_classes
    n_cls = len(sets)
    pair_key = cls[src].astype(np.int64) * n_cls + cls[dst]
    pairs, pair_of_flow = np.unique(pair_key, return_inverse=True)
    switches, length, count = _pair_tables(gf, pairs, n_cls, max_extra_hops != 0)
    mid_len = int(length.max()) if length.size else 0
    first = np.maximum(switches[:, :, 0], 0)
    last = np.maximum(np.take_along_axis(switches, length[:, :, None], axis=2)[:, :, 0], 0)
    step_ok = (switches[:, :, 1:] >= 0)
    # per class pair, then gathered per flow straight into int32 (F x K x H entries: the
    # largest host array of a fat tree's phase, so no int64 copy of it is ever made)
    mid = np.where(step_ok, gf.link_ids(switches[:, :, :-1], switches[:, :, 1:]),
                   sentinel)[:, :, :mid_len].astype(np.int32)
    hops = mid_len + 2
    links = np.full((src.shape[0], K, hops), sentinel, np.int32)
    if src.shape[0]:
        links[:, :, 0] = gf.link_ids(src[:, None], first[pair_of_flow])
        if mid_len:
            links[:, :, 1:1 + mid_len] = np.take(mid, pair_of_flow, axis=0)
        down = gf.link_ids(last[pair_of_flow], dst[:, None])
        np.put_along_axis(links, (1 + length[pair_of_flow])[:, :, None],
                          down[:, :, None].astype(np.int32), axis=2)
    distinct = count[pair_of_flow]
    self_flow = src == dst
    links[self_flow] = sentinel
    distinct = np.where(self_flow, 0, distinct)
    if np.any(distinct == 0) and not np.all(self_flow[distinct == 0]):
        raise AssertionError("a checked graph left a host pair without a path")
    if np.any(links < 0):
        raise AssertionError("a path step has no link")
    return links, distinct.astype(np.int32)
