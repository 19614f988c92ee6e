"""Graph fabrics (fat trees and graph files) as directed link arrays: `GraphFabric`.

Contract: `build_graph_fabric(graph, paths)` turns a checked undirected `networkx.Graph`
(`graphfile.load_graph`, `fattree.fat_tree_graph`) into a `GraphFabric` of directed links
laid out tier-major (tier 0 host->switch, tier 1 switch->switch up, tier 2 switch->switch
down, tier 3 switch->host: the four-tier layout of `fabricjax.fabric`, so per-tier
statistics carry over); its `paths_for` gives each flow K candidate path slots
(`ksp.candidate_paths`). A bundle of parallel cables is one link each way whose `cables`
counts them; `graph_summary` and `graph_bom` count cables. The readers, the builder and the
paths are re-exported here for callers that name this module.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict

import numpy as np

from fabricjax.config import FabricKind
from fabricjax.core.errors import ScenarioError
from fabricjax.core.lazy import lazy_module
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graphfile import check_graph, load_graph, natural_key
from fabricjax.fabric.ksp import candidate_paths, equal_cost_paths

__all__ = ["GraphFabric", "build_graph_fabric", "candidate_paths", "check_graph",
           "fat_tree_graph", "graph_bom", "graph_summary", "load_graph", "natural_key"]


# networkx costs a tenth of a second to import and only graph fabrics use it: a Clos question
# never loads it
nx = lazy_module("networkx")

TIER_NAMES = ("host-switch", "switch-up", "switch-down", "switch-host")
NUM_TIERS = 4
PATH_CACHE_PHASES = 16      # phases whose candidate paths a fabric remembers


@dataclasses.dataclass(frozen=True, eq=False)
class GraphFabric:
    """Directed links of a graph-given fabric (host numpy arrays, N GPUs, L links).

    node_names: list[str], hosts first (GPU g is node g), then switches in natural order.
    link_src, link_dst: int32[L] node ids; each cable (or bundle) is two links. capacity: float32[L]
    Gbit/s. tier: int8[L] in 0..3 (TIER_NAMES), each tier contiguous and sorted by (src, dst)
    inside. A switch's level is its hop distance from the nearest host (edge 1, agg 2, core 3
    in a fat tree); of a cable's two links the one to the higher level (on a tie, the higher
    node id) is up (tier 1), the other down (tier 2), as t0->t1 and t1->t0 in a Clos. Tiers 1
    and 2 are therefore equal in size and empty only without switch-to-switch cables (the
    solver's per-tier statistics need non-empty tiers).
    plane: int16[L] (a switch's ``plane`` attribute, else 0).
    host_switch: int32[N] each GPU's first attachment switch (lowest node id).
    nic_gbps: float32[N] the sum of a host's link capacities.
    cables: int32[L] the parallel cables a link stands for (a bundle: `capacity` is their
    sum, one failed cable takes 1/cables of it); counts of cables and ports come from it.
    paths_per_pair: K.
    Index L (`sentinel`) pads paths: infinite capacity, always alive."""

    gpus: int
    node_names: list[str]
    link_src: np.ndarray
    link_dst: np.ndarray
    capacity: np.ndarray
    tier: np.ndarray
    plane: np.ndarray
    host_switch: np.ndarray
    nic_gbps: np.ndarray
    cables: np.ndarray
    paths_per_pair: int
    kind: FabricKind = FabricKind.GRAPH    # a fat tree's candidates are all equal-cost

    # ------------------------------------------------------------------ routes on the host
    def nic_rate(self) -> np.ndarray:
        """The NIC rates the host arithmetic uses: float64[N], per GPU (Gbit/s)."""
        return self.gpu_nic_gbps

    def candidate_paths(self, src: np.ndarray, dst: np.ndarray, pool: str
                        ) -> tuple[np.ndarray, np.ndarray]:
        """(cand int32[F, K, H], distinct int32[F]): each flow's candidate paths as stored
        link ids. `pool`: "equal-cost" (the shortest only, as ECMP hashes) or "candidates"
        (the K shortest, detours included; a fat tree's are equal-cost anyway)."""
        detour = 0 if pool == "equal-cost" or self.kind.equal_cost_only else None
        return self.paths_for(src, dst, detour)

    def flow_hops(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """int64[F]: links on each flow's shortest path."""
        if np.size(src) == 0:
            return np.zeros(0, np.int64)
        cand, _ = self.candidate_paths(src, dst, "equal-cost")
        return np.sum(cand[:, 0, :] != self.num_links, axis=-1).astype(np.int64)

    def slot_links(self, src: np.ndarray, dst: np.ndarray, plane: np.ndarray,
                   choice: np.ndarray, pool: str) -> np.ndarray:
        """int32[F, K, H]: the link ids of every slot (a candidate index of `pool`)."""
        cand, _ = self.candidate_paths(src, dst, pool)
        return cand[np.arange(cand.shape[0])[:, None], choice]

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def sentinel(self) -> int:
        return self.num_links

    @property
    def planes(self) -> int:
        """Planes: one more than the largest switch `plane` attribute (1 without any)."""
        return int(self.plane.max()) + 1 if self.num_links else 1

    def paths_for(self, src, dst, max_extra_hops: int | None) -> tuple[np.ndarray, np.ndarray]:
        """`candidate_paths(self, src, dst, max_extra_hops=...)`, remembered for the last
        few phases (a phase's paths serve every policy and failure set that follows)."""
        key = (max_extra_hops, np.asarray(src).tobytes(), np.asarray(dst).tobytes())
        cache = self._path_cache
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        cache[key] = candidate_paths(self, src, dst, max_extra_hops=max_extra_hops)
        while len(cache) > PATH_CACHE_PHASES:
            cache.popitem(last=False)
        return cache[key]

    @functools.cached_property
    def _path_cache(self) -> OrderedDict:
        return OrderedDict()

    @functools.cached_property
    def physical_nodes(self) -> np.ndarray:
        """int64[nodes]: each node's physical switch (every node is one: the identity)."""
        return np.arange(self.num_nodes, dtype=np.int64)

    @functools.cached_property
    def reverse(self) -> np.ndarray:
        """int64[L]: the id of each link's opposite direction (the other half of its cable)."""
        return self.link_ids(self.link_dst, self.link_src).astype(np.int64)

    @functools.cached_property
    def gpu_nic_gbps(self) -> np.ndarray:
        """float64[N]: each host's NIC rate, the sum of its links' capacities, Gbit/s."""
        return self.nic_gbps.astype(np.float64)

    @functools.cached_property
    def switch_level(self) -> np.ndarray:
        """int64[nodes]: hop distance of every node from the nearest host (hosts 0, edge
        switches 1, ...), from the host-switch and switch-switch links."""
        level = np.full(self.num_nodes, -1, np.int64)
        level[:self.gpus] = 0
        frontier = np.arange(self.gpus)
        depth = 0
        while frontier.size:   # one pass per level of the fabric (a handful)
            depth += 1
            reached = np.unique(self.link_dst[np.isin(self.link_src, frontier)])
            reached = reached[level[reached] < 0]
            level[reached] = depth
            frontier = reached
        return level

    @property
    def num_nodes(self) -> int:
        return len(self.node_names)

    @property
    def layout_bounds(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of the 4 structural tiers (host -> switch, switch up, switch down,
        switch -> host; static; some ranges may be empty)."""
        stops = np.searchsorted(self.tier, np.arange(1, NUM_TIERS + 1), side="left")
        starts = np.concatenate([[0], stops[:-1]])
        return tuple((int(a), int(b)) for a, b in zip(starts, stops))

    @functools.cached_property
    def _stat_tiers(self) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
        """The statistics' tiers: the host links, then the switch links grouped by the levels
        they join, upward then downward (links are laid out in that order), then back to the
        hosts; named by level (a fat tree's edge, agg, core; a two-level graph's leaf and
        spine; L1, L2, ... otherwise)."""
        level = self.switch_level
        top = int(level.max()) if self.num_nodes else 0
        if self.kind.equal_cost_only:
            names = {1: "edge", 2: "agg", 3: "core"}
        elif top == 2:
            names = {1: "leaf", 2: "spine"}
        else:
            names = {}
        label = {0: "host", **{l: names.get(l, f"L{l}") for l in range(1, top + 1)}}
        tiers, bounds = [], []
        for tier, (start, stop) in enumerate(self.layout_bounds):
            if stop <= start:
                if tier in (0, 3):      # keep a host tier even when empty (never, in practice)
                    tiers.append("host-switch" if tier == 0 else "switch-host")
                    bounds.append((start, stop))
                continue
            pair = np.stack([level[self.link_src[start:stop]],
                             level[self.link_dst[start:stop]]], axis=1)
            change = np.flatnonzero(np.any(pair[1:] != pair[:-1], axis=1)) + 1
            edges = [0, *change.tolist(), stop - start]
            for a, b in zip(edges[:-1], edges[1:]):
                u, v = pair[a]
                tiers.append(f"{label[int(u)]}-{label[int(v)]}")
                bounds.append((start + a, start + b))
        return tuple(tiers), tuple(bounds)

    @property
    def tier_names(self) -> tuple[str, ...]:
        """The names of the statistics' tiers (`tier_bounds`)."""
        return self._stat_tiers[0]

    @property
    def tier_bounds(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of each of the statistics' tiers (static: per-tier statistics are
        slices): see `_stat_tiers`."""
        return self._stat_tiers[1]

    def link_name(self, link: int) -> str:
        """A readable name such as ``leaf3->spine1`` for link id `link`."""
        link = int(link)
        if link == self.sentinel:
            return "sentinel"
        return f"{self.node_names[self.link_src[link]]}->{self.node_names[self.link_dst[link]]}"

    def link_ids(self, src, dst) -> np.ndarray:
        """Link ids (int64, broadcasting) of the links src -> dst; -1 where there is none."""
        keys, order = self._link_keys
        want = np.asarray(src, np.int64) * self.num_nodes + np.asarray(dst, np.int64)
        pos = np.minimum(np.searchsorted(keys, want), max(keys.shape[0] - 1, 0))
        found = keys[pos] == want if keys.shape[0] else np.zeros(want.shape, bool)
        return np.where(found, order[pos], -1)

    @functools.cached_property
    def _link_keys(self) -> tuple[np.ndarray, np.ndarray]:
        keys = self.link_src.astype(np.int64) * self.num_nodes + self.link_dst
        order = np.argsort(keys, kind="stable")
        return keys[order], order

    @functools.cached_property
    def host_classes(self) -> tuple[np.ndarray, list[tuple[int, ...]]]:
        """(class int32[N], switch sets): hosts with equal attachment-switch sets share a
        class; paths are searched once per class pair."""
        start, stop = self.layout_bounds[0]
        src, dst = self.link_src[start:stop], self.link_dst[start:stop]
        attach: dict[int, list[int]] = {}
        for h, s in zip(src.tolist(), dst.tolist()):
            attach.setdefault(h, []).append(s)
        sets: dict[tuple[int, ...], int] = {}
        cls = np.empty(self.gpus, np.int32)
        for h in range(self.gpus):
            cls[h] = sets.setdefault(tuple(sorted(attach[h])), len(sets))
        return cls, list(sets)

    @functools.cached_property
    def switch_neighbours(self) -> np.ndarray:
        """int64[nodes, D]: each node's switch neighbours (over switch-to-switch cables), in
        ascending id, padded with -1 to the largest degree D (hosts have none)."""
        start, stop = self.layout_bounds[1]
        a = np.concatenate([self.link_src[start:stop], self.link_dst[start:stop]])
        b = np.concatenate([self.link_dst[start:stop], self.link_src[start:stop]])
        order = np.lexsort((b, a))
        a, b = a[order].astype(np.int64), b[order].astype(np.int64)
        degree = np.bincount(a, minlength=self.num_nodes)
        table = np.full((self.num_nodes, max(int(degree.max(initial=0)), 1)), -1, np.int64)
        rank = np.arange(a.shape[0]) - np.repeat(np.cumsum(degree) - degree, degree)
        table[a, rank] = b
        return table

    @functools.cached_property
    def equal_cost_paths(self) -> int:
        """The largest equal-cost set between two GPUs (`ksp.equal_cost_paths`): what a
        `paths_per_pair` below it caps."""
        return equal_cost_paths(self)

    @functools.cached_property
    def switch_graph(self) -> nx.Graph:
        """Undirected switch-to-switch graph on node ids (tier 1 links, one per cable)."""
        start, stop = self.layout_bounds[1]
        graph = nx.Graph()
        graph.add_nodes_from(range(self.gpus, self.num_nodes))
        graph.add_edges_from(zip(self.link_src[start:stop].tolist(),
                                 self.link_dst[start:stop].tolist()))
        return graph


def _switch_levels(graph: nx.Graph, index: dict, n_hosts: int, n_nodes: int) -> np.ndarray:
    """int64[nodes]: hop distance of each switch from the nearest host (hosts 0)."""
    level = np.full(n_nodes, np.iinfo(np.int32).max, np.int64)
    level[:n_hosts] = 0
    hosts = [n for n, i in index.items() if i < n_hosts]
    for node, dist in nx.multi_source_dijkstra_path_length(graph, hosts).items():
        level[index[node]] = dist
    return level


def build_graph_fabric(graph: nx.Graph, paths: int = 8, field: str = "fabric.file"
                       ) -> GraphFabric:
    """The `GraphFabric` of a checked graph (see `load_graph`), K = `paths` slots per flow."""
    if not isinstance(paths, int) or paths < 1:
        raise ScenarioError("fabric.paths", f"must be an integer >= 1 (got {paths})")
    check_graph(graph, field)
    hosts = sorted((n for n, d in graph.nodes(data=True) if d.get("type") == "host"),
                   key=natural_key)
    switches = sorted((n for n, d in graph.nodes(data=True) if d.get("type") != "host"),
                      key=natural_key)
    names = [str(n) for n in hosts + switches]
    index = {n: i for i, n in enumerate(hosts + switches)}
    node_plane = np.zeros(len(names), np.int64)
    for n in switches:
        node_plane[index[n]] = int(graph.nodes[n].get("plane", 0))
    edges = list(graph.edges(data=True))
    u = np.fromiter((index[a] for a, _, _ in edges), np.int64, len(edges))
    v = np.fromiter((index[b] for _, b, _ in edges), np.int64, len(edges))
    cap = np.fromiter((float(d["capacity"]) for _, _, d in edges), np.float64, len(edges))
    bundle = np.fromiter((int(d.get("cables", 1)) for _, _, d in edges), np.int64, len(edges))
    n_hosts = len(hosts)
    # orient host cables host -> switch (hosts have ids < N and never meet another host)
    flip = v < u
    u, v = np.where(flip, v, u), np.where(flip, u, v)
    host_edge = u < n_hosts
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    level = _switch_levels(graph, index, n_hosts, len(names))
    # of a switch cable, u -> v is up when v is farther from the hosts (ties: higher id)
    up = (level[v] > level[u]) | ((level[v] == level[u]) & (v > u))
    tier = np.concatenate([np.where(host_edge, 0, np.where(up, 1, 2)),
                           np.where(host_edge, 3, np.where(up, 2, 1))])
    capacity = np.concatenate([cap, cap])
    cables = np.concatenate([bundle, bundle])
    # within the switch tiers, links are grouped by the levels they join (edge -> agg before
    # agg -> core going up, core -> agg before agg -> edge going down), so that each level
    # pair is one contiguous range for the statistics
    direction = np.where(tier == 2, -1, np.where(tier == 1, 1, 0))
    order = np.lexsort((dst, src, direction * level[dst], direction * level[src], tier))
    src, dst, tier, capacity = src[order], dst[order], tier[order], capacity[order]
    cables = cables[order]
    switch_end = np.where(src < n_hosts, dst, src)
    start, stop = np.searchsorted(tier, [0, 1])
    first_switch = np.full(n_hosts, np.iinfo(np.int32).max, np.int64)
    np.minimum.at(first_switch, src[start:stop], dst[start:stop])
    nic = np.bincount(src[start:stop], weights=capacity[start:stop], minlength=n_hosts)
    return GraphFabric(
        gpus=n_hosts, node_names=names,
        link_src=src.astype(np.int32), link_dst=dst.astype(np.int32),
        capacity=capacity.astype(np.float32), tier=tier.astype(np.int8),
        plane=node_plane[switch_end].astype(np.int16),
        host_switch=first_switch.astype(np.int32), nic_gbps=nic.astype(np.float32),
        cables=cables.astype(np.int32), paths_per_pair=paths)


def graph_summary(gf: GraphFabric) -> dict:
    """What `fabricjax topo` prints for a graph fabric: counts, radix range, bandwidths.
    A cable is the unit: `cables`, `host_cables`, `fabric_cables` and the switch ports count
    every cable of a bundle; `links_directed` and `links_by_tier` count the links the
    solver sees (a bundle is one link each way), `bundles` the switch pairs joined by more
    than one cable. `equal_cost_paths` is the largest equal-cost set between two GPUs:
    `paths_per_pair` below it caps some pairs (the report warns)."""
    bounds = gf.layout_bounds
    sizes = [b - a for a, b in bounds]
    per_tier = [int(gf.cables[a:b].sum()) for a, b in bounds]
    n_switch = gf.num_nodes - gf.gpus
    ports = np.bincount(gf.link_src, weights=gf.cables, minlength=gf.num_nodes)[gf.gpus:]
    up0, up1 = bounds[1]
    return {
        "gpus": gf.gpus,
        "hosts": gf.gpus,
        "switches": n_switch,
        "links_directed": gf.num_links,
        "cables": per_tier[0] + per_tier[1],
        "links_by_tier": dict(zip(TIER_NAMES, sizes)),
        "host_cables": per_tier[0],
        "fabric_cables": per_tier[1],
        "bundles": int(np.count_nonzero(gf.cables[up0:up1] > 1)),
        "bundle_cables_max": int(gf.cables.max()) if gf.num_links else 0,
        "switch_radix_min": int(ports.min()) if n_switch else 0,
        "switch_radix_max": int(ports.max()) if n_switch else 0,
        "nic_gbps_min": float(gf.nic_gbps.min()),
        "nic_gbps_max": float(gf.nic_gbps.max()),
        "planes": int(gf.plane.max()) + 1 if gf.num_links else 1,
        "paths_per_pair": gf.paths_per_pair,
        "equal_cost_paths": gf.equal_cost_paths,
    }


def graph_bom(gf: GraphFabric) -> dict:
    """Bill-of-materials counts of a graph fabric: switches and cables, split into host
    cables and switch-to-switch cables; every cable of a bundle counts."""
    summary = graph_summary(gf)
    return {"gpus": gf.gpus, "switches": summary["switches"], "links": summary["cables"],
            "host_links": summary["host_cables"], "fabric_links": summary["fabric_cables"]}
