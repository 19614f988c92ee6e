"""Candidate paths on a graph fabric: K shortest paths per flow as link ids, for the
stored-link-id solver.

Contract: `candidate_paths(gf, src, dst)` gives every flow K path slots as link ids
int32[F, K, H], padded with the sentinel id L, and how many distinct paths each has; `gf` is
a `graph.GraphFabric` (duck-typed here: its `switch_graph`, `host_classes`, `link_ids`,
`paths_per_pair`, `sentinel` and `gpus`), which remembers the answers per phase
(`GraphFabric.paths_for`).

Method: hosts never forward, so a path is host -> switch ... switch ->
host. Hosts with the same set of attachment switches form a class; per distinct (source
class, destination class) pair we run Yen's K shortest simple paths by hop count
(`networkx.shortest_simple_paths`) on the switch graph plus a virtual source joined to the
source class's switches and a virtual sink joined to the destination's. That is exact for
multi-plane fabrics too (a path may start on any of the host's switches) and is cached per
class pair; the expansion to flows is pure numpy indexing. A flow with fewer than K distinct
paths repeats them cyclically (ECMP / spraying over fewer distinct paths); `distinct` says
how many there are. Equal-length paths come in Yen's (deterministic) order, so with more
equal-cost paths than K the slots hold an arbitrary fixed subset of them.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Sequence

import numpy as np

from fabricjax.core.lazy import lazy_module
from fabricjax.core.errors import ScenarioError

nx = lazy_module("networkx")   # graph fabrics only: a Clos never loads it

_SOURCE, _SINK = -1, -2          # virtual path-search endpoints (real node ids are >= 0)


def _class_pair_paths(gf: Any, search: nx.Graph, src_set: Sequence[int],
                      dst_set: Sequence[int], max_extra_hops: int | None) -> list[list[int]]:
    """Up to K switch sequences, shortest first, from a switch of src_set to one of dst_set."""
    search.add_edges_from((_SOURCE, s) for s in src_set)
    search.add_edges_from((d, _SINK) for d in dst_set)
    found: list[list[int]] = []
    # equal-cost only: all_shortest_paths walks the BFS predecessor DAG, far cheaper than Yen
    walk = nx.all_shortest_paths if max_extra_hops == 0 else nx.shortest_simple_paths
    try:
        for path in walk(search, _SOURCE, _SINK):
            if max_extra_hops is not None and found and \
                    len(path) > len(found[0]) + 2 + max_extra_hops:
                break
            found.append(path[1:-1])
            if len(found) == gf.paths_per_pair:
                break
    except nx.NetworkXNoPath:
        pass
    finally:
        search.remove_nodes_from([_SOURCE, _SINK])
    return found


def candidate_paths(gf: Any, src_gpus, dst_gpus, *, max_extra_hops: int | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(links int32[F, K, H], distinct int32[F]): K path slots of each flow src -> dst.

    Slot k of a flow with d distinct paths holds path k % d (shortest first); H is the
    longest path's link count, shorter paths padded with the sentinel after their last link.
    `max_extra_hops`: keep only paths at most that many switch hops longer than the
    shortest (0: equal-cost paths only, as ECMP; None: K shortest of any length, as KSP).
    A flow from a GPU to itself gets sentinel-only slots and distinct = 0."""
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
    search = gf.switch_graph.copy()
    tables = [_class_pair_paths(gf, search, sets[p // n_cls], sets[p % n_cls], max_extra_hops)
              for p in pairs.tolist()]
    # per class pair: first and last switch, switch-switch link ids, hop count of each slot
    mid_len = max((len(q) - 1 for t in tables for q in t), default=0)
    n_pairs = len(tables)
    first = np.zeros((n_pairs, K), np.int64)
    last = np.zeros((n_pairs, K), np.int64)
    mid = np.full((n_pairs, K, max(mid_len, 1)), sentinel, np.int64)
    length = np.zeros((n_pairs, K), np.int64)
    count = np.zeros(n_pairs, np.int64)
    for j, table in enumerate(tables):
        count[j] = len(table)
        for k in range(K if table else 0):
            seq = np.asarray(table[k % len(table)], np.int64)
            first[j, k], last[j, k] = seq[0], seq[-1]
            length[j, k] = seq.shape[0] - 1
            mid[j, k, :length[j, k]] = gf.link_ids(seq[:-1], seq[1:])
    hops = mid_len + 2
    links = np.full((src.shape[0], K, hops), sentinel, np.int64)
    if src.shape[0]:
        up = gf.link_ids(src[:, None], first[pair_of_flow])
        down = gf.link_ids(last[pair_of_flow], dst[:, None])
        links[:, :, 0] = up
        links[:, :, 1:1 + mid_len] = mid[pair_of_flow][:, :, :mid_len]
        np.put_along_axis(links, (1 + length[pair_of_flow])[:, :, None], down[:, :, None],
                          axis=2)
    distinct = count[pair_of_flow]
    self_flow = src == dst
    links[self_flow] = sentinel
    distinct = np.where(self_flow, 0, distinct)
    if np.any(distinct == 0) and not np.all(self_flow[distinct == 0]):
        raise AssertionError("a checked graph left a host pair without a path")
    if np.any(links < 0):
        raise AssertionError("a path step has no link")
    return links.astype(np.int32), distinct.astype(np.int32)
