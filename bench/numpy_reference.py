"""The plain reference the benchmark measures fabricjax against: what an engineer would write
with networkx and numpy, no JAX.

* fabric: a networkx DiGraph built switch by switch, link by link;
* paths: for each flow slot, the link ids looked up from the graph's edge attributes;
* loads: `np.add.at` over (flow, slot, hop) entries;
* max-min rates: textbook progressive filling (Bertsekas & Gallager 6.5.2), one bottleneck
  level per round, each round vectorised with numpy.
It shares the slot draws with fabricjax (same seeds), so both solve the same problem.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from fabricjax.fabric.clos import ClosGeometry


def build_graph(g: ClosGeometry) -> nx.DiGraph:
    graph = nx.DiGraph()
    link = 0

    def add(u, v):
        nonlocal link
        graph.add_edge(u, v, id=link)
        link += 1

    # same tier-major numbering as fabricjax, so results compare link by link
    for p in range(g.planes):
        for gpu in range(g.gpus):
            add(("gpu", gpu), ("t0", p, gpu // g.gpus_per_t0))
    for p in range(g.planes):
        for t in range(g.t0s):
            for s in range(g.spines):
                add(("t0", p, t), ("t1", p, s))
    for p in range(g.planes):
        for t in range(g.t0s):
            for s in range(g.spines):
                add(("t1", p, s), ("t0", p, t))
    for p in range(g.planes):
        for gpu in range(g.gpus):
            add(("t0", p, gpu // g.gpus_per_t0), ("gpu", gpu))
    return graph


def path_links(graph: nx.DiGraph, g: ClosGeometry, src, dst, plane, spine) -> np.ndarray:
    """Link ids [F, K, 4] looked up hop by hop in the graph (sentinel = number of links)."""
    sentinel = graph.number_of_edges()
    out = np.full(plane.shape + (4,), sentinel, dtype=np.int64)
    edge = graph.edges
    for f in range(plane.shape[0]):
        s_t0, d_t0 = int(src[f]) // g.gpus_per_t0, int(dst[f]) // g.gpus_per_t0
        for k in range(plane.shape[1]):
            p, sp = int(plane[f, k]), int(spine[f, k])
            if s_t0 == d_t0:
                hops = [(("gpu", int(src[f])), ("t0", p, s_t0)),
                        (("t0", p, d_t0), ("gpu", int(dst[f])))]
            else:
                hops = [(("gpu", int(src[f])), ("t0", p, s_t0)), (("t0", p, s_t0), ("t1", p, sp)),
                        (("t1", p, sp), ("t0", p, d_t0)), (("t0", p, d_t0), ("gpu", int(dst[f])))]
            for h, (u, v) in enumerate(hops):
                out[f, k, h] = edge[u, v]["id"]
    return out


def link_load(links, weights, demand, num_links):
    load = np.zeros(num_links + 1)
    contrib = np.broadcast_to((weights * demand[:, None])[:, :, None], links.shape)
    np.add.at(load, links.ravel(), contrib.ravel())
    return load[:num_links]


def max_min_rates(links, weights, flow_cap, capacity, max_rounds=1_000_000):
    """Progressive filling: raise all unfrozen flows to the next saturation level, freeze the
    flows of the saturated link(s) exactly at that level, repeat."""
    num_flows = links.shape[0]
    ids = links.reshape(num_flows, -1)
    w = np.broadcast_to(weights[:, :, None], links.shape).reshape(num_flows, -1)
    cap = np.append(capacity.astype(np.float64), np.inf)
    rates = np.zeros(num_flows)
    frozen = weights.sum(axis=1) <= 0
    level = 0.0
    rounds = 0
    while not frozen.all() and rounds < max_rounds:
        active = ~frozen
        load = np.zeros(cap.shape)
        np.add.at(load, ids.ravel(), (w * np.where(frozen, rates, level)[:, None]).ravel())
        growth = np.zeros(cap.shape)
        np.add.at(growth, ids.ravel(), (w * active[:, None]).ravel())
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(growth > 1e-12, (cap - load) / growth, np.inf)
        step = min(ratio.min(), (flow_cap[active] - level).min())
        level += max(step, 0.0)
        saturated = ratio <= step * (1 + 1e-9) + 1e-12
        hit = (saturated[ids] & (w > 0)).any(axis=1) | (flow_cap <= level * (1 + 1e-12))
        newly = active & hit
        rates[active] = level
        frozen |= newly
        rounds += 1
    return rates, rounds


def clos_links(g: ClosGeometry, src, dst, plane, spine) -> np.ndarray:
    """Link ids [F, K, 4] of (plane, spine) paths, by the layout's formulas (the same numbering
    as `build_graph`), vectorised with numpy: what one MRC iteration needs after a swap."""
    N, P, T, S = g.gpus, g.planes, g.t0s, g.spines
    s_t0 = (src // g.gpus_per_t0)[:, None]
    d_t0 = (dst // g.gpus_per_t0)[:, None]
    up = plane * N + src[:, None]
    t0_t1 = P * N + (plane * T + s_t0) * S + spine
    t1_t0 = P * N + P * T * S + (plane * T + d_t0) * S + spine
    down = P * N + 2 * P * T * S + plane * N + dst[:, None]
    sentinel = 2 * P * N + 2 * P * T * S
    local = s_t0 == d_t0
    hop1 = np.where(local, down, t0_t1)
    hop2 = np.where(local, sentinel, t1_t0)
    hop3 = np.where(local, sentinel, down)
    return np.stack(np.broadcast_arrays(up, hop1, hop2, hop3), axis=-1)


def mrc_iteration(g: ClosGeometry, src, dst, plane, spine, demand, capacity, rng,
                  threshold=1.0, damping=0.3):
    """One MRC EV-swap iteration in numpy (all EVs alive): loads, marks, random same-plane
    moves. Returns the new spine array and the P100 before the move."""
    links = clos_links(g, src, dst, plane, spine)
    weights = np.full(plane.shape, 1.0 / plane.shape[1])
    load = link_load(links, weights, demand, capacity.shape[0])
    util = np.append(load / capacity, 0.0)
    controlled = np.maximum(util[links[..., 1]], util[links[..., 2]])
    cross = (src // g.gpus_per_t0 != dst // g.gpus_per_t0)[:, None]
    marked = cross & (controlled > threshold)
    p_move = np.where(marked, damping * (controlled - threshold) / np.maximum(controlled, 1e-30), 0)
    move = rng.random(spine.shape) < p_move
    hop = rng.integers(1, max(g.spines, 2), size=spine.shape)
    return np.where(move, (spine + hop) % g.spines, spine), float(util[:-1].max())
