"""k-ary fat trees built as a checked `networkx.Graph`, sized like `bom.fat_tree_bom`.

Contract: `fat_tree_graph(gpus, radix, port_gbps, tiers, planes)` gives the graph that
`graph.build_graph_fabric` turns into link arrays: hosts ``gpu0..`` shared by `planes`
parallel trees, switches ``p{plane}/edge{i}``, ``agg``, ``core`` (or ``spine`` at two tiers),
parallel cables between one switch pair as one edge with their summed capacity and count
(``cables``). Sizes are checked in closed form (`spec.check_fat_tree_size`) before the first
node exists.
"""

from __future__ import annotations

import math


from fabricjax.core.lazy import lazy_module
from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.fabric.graphfile import check_graph
from fabricjax.fabric.spec import bundled_switches, check_fat_tree_size

nx = lazy_module("networkx")   # graph fabrics only: a Clos never loads it


def fat_tree_graph(gpus: int, radix: int, port_gbps: float, tiers: int = 3,
                   planes: int = 1) -> nx.Graph:
    """`planes` parallel fat trees of radix-k switches (h = k/2), hosts gpu0..gpuN-1 with one
    port per plane (host nodes shared across planes), sized like `bom.fat_tree_bom`.

    tiers = 3: T0s (``p{plane}/edge{i}``) = ceil(N/h) with h hosts each (the last may have
    fewer); pods of h T0s and h aggregation switches (``p{plane}/agg{pod*h+j}``, pods =
    ceil(N/h^2)); agg j of a pod has one uplink per T0 of its pod, into core group j of
    ceil(pods/2) cores (``p{plane}/core{j*c+i}``), wired round robin (so (k/2)^2 cores, one
    uplink to each of its group's, at full size N = k^3/4). tiers = 2: ceil(N/h) T0s, each
    linked to each of the spines (``p{plane}/spine{s}``); at most k T0s. Below full size a
    partial last pod, and the spines of two tiers, are as many switches as their ports need
    in equal bundles (`spec.bundled_switches`). Cables that land on the same switch pair are
    one edge whose capacity is their sum and whose attribute ``cables`` counts them."""
    if not isinstance(radix, int) or radix < 4 or radix % 2:
        raise ScenarioError("fabric.radix", f"must be an even integer >= 4 (got {radix})")
    if tiers not in (2, 3):
        raise ScenarioError("fabric.tiers", f"must be 2 or 3 (got {tiers})")
    if not isinstance(planes, int) or planes < 1:
        raise ScenarioError("fabric.planes", f"must be an integer >= 1 (got {planes})")
    if not (isinstance(port_gbps, (int, float)) and math.isfinite(port_gbps)
            and port_gbps > 0):
        raise ScenarioError("fabric.port_gbps", f"must be a finite number > 0 "
                            f"(got {short_repr(port_gbps)})")
    h = radix // 2
    reach = 2 * h ** tiers
    if not isinstance(gpus, int) or not 2 <= gpus <= reach:
        raise ScenarioError("fabric.gpus", f"must be an integer in 2..{reach} for {tiers} tiers "
                            f"of radix {radix} (got {gpus})")
    check_fat_tree_size(gpus, radix, tiers, planes)
    graph = nx.Graph()
    host_names = [f"gpu{g}" for g in range(gpus)]
    graph.add_nodes_from(host_names, type="host")
    t0s = -(-gpus // h)

    def cable(u: str, v: str) -> None:
        if graph.has_edge(u, v):
            graph[u][v]["cables"] += 1
            graph[u][v]["capacity"] += float(port_gbps)
        else:
            graph.add_edge(u, v, capacity=float(port_gbps), cables=1)

    for p in range(planes):
        def switch(name: str, layer: str) -> str:
            full = f"p{p}/{name}"
            graph.add_node(full, type="switch", plane=p, layer=layer)
            return full

        edges = [switch(f"edge{t}", "t0") for t in range(t0s)]
        for g in range(gpus):
            cable(host_names[g], edges[g // h])
        if tiers == 2:
            count = bundled_switches(t0s, h, radix)
            spines = [switch(f"spine{s}", "t1") for s in range(count)]
            for t in range(t0s):
                for j in range(h):      # uplink j into spine j // bundle
                    cable(edges[t], spines[j // (h // count)])
            continue
        pods = -(-gpus // h ** 2)
        per_group = -(-pods // 2)
        last_aggs = bundled_switches(t0s - (pods - 1) * h, h, h)
        aggs = [switch(f"agg{a}", "t1") for a in range((pods - 1) * h + last_aggs)]
        cores = [switch(f"core{c}", "t2") for c in range(h * per_group)]
        for t in range(t0s):
            pod = t // h
            bundle = 1 if pod < pods - 1 else h // last_aggs
            for j in range(h):
                # position j of the pod: its own agg in a full pod, agg j // bundle of a
                # partial one (which then bundles its T0s' cables)
                agg = aggs[pod * h + j // bundle]
                cable(edges[t], agg)
                # one uplink per T0 and position, round robin over core group j by T0 index
                cable(agg, cores[j * per_group + t % per_group])
    check_graph(graph, "fabric")
    return graph
