"""Fabrics given as a graph (GraphML or an edge list) or built as a k-ary fat tree, with K
shortest candidate paths per flow for the stored-link-id solver.

Contract: `load_graph` / `fat_tree_graph` give a checked undirected `networkx.Graph` (node
attribute ``type``: ``host`` or ``switch``; edge attribute ``capacity`` in Gbit/s);
`build_graph_fabric` turns it into a `GraphFabric` of directed links laid out tier-major
(tier 0 host->switch, tier 1 switch->switch up, tier 2 switch->switch down, tier 3
switch->host: the four-tier layout of `fabricjax.fabric`, so per-tier statistics carry
over); `candidate_paths` gives every flow K path slots as link ids int32[F, K, H], padded
with the sentinel id L, ready for `fabricjax.solver.solve_uniform_phase` with
``tier_bounds=gf.tier_bounds``.

Formats:
  * GraphML (``.graphml`` / ``.xml``): hosts are nodes with ``type`` = ``host``; every other
    node is a switch. When no node has a ``type`` attribute, hosts are the nodes whose name
    starts with `host_prefix`. A directed GraphML graph is read as undirected (every link is
    a full-duplex cable); an edge listed in both directions counts once and both must agree
    on capacity.
  * Edge list (any other suffix): one cable per line, ``u v [capacity_gbps]``, whitespace
    separated, ``#`` starts a comment; the third column may instead be a Python dict literal
    such as ``{'capacity': 400}``. Hosts are the nodes whose name starts with `host_prefix`
    (default ``gpu``).
  A host's GPU index is its rank among the hosts sorted by natural name (gpu2 < gpu10).
  A missing capacity takes `default_gbps`. Parallel cables are rejected in files (give one
  edge with the summed capacity); `fat_tree_graph` merges its own (attribute ``cables``).

Errors: anything a user can fix raises `ScenarioError(field, ...)` naming the file field and
what is allowed: a missing, unreadable or unparseable file; no hosts; a host without links or
linked directly to another host; self loops; parallel edges; a missing, non-numeric,
non-positive or non-finite capacity; two hosts that cannot reach each other through switches
(hosts never forward); more than MAX_EDGES cables.

Paths (`candidate_paths`): hosts never forward, so a path is host -> switch ... switch ->
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

import ast
import dataclasses
import functools
import importlib.util
import itertools
import math
import os
import re
import sys
import xml.etree.ElementTree as ElementTree
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr


def _lazy_module(name: str):
    """`name` imported on its first attribute access (importlib's LazyLoader)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# networkx costs a tenth of a second to import and only graph fabrics use it: a Clos question
# never loads it
nx = _lazy_module("networkx")

TIER_NAMES = ("host-switch", "switch-up", "switch-down", "switch-host")
NUM_TIERS = 4
MAX_EDGES = 1_000_000
MAX_FILE_BYTES = 512 * 2 ** 20
FORMATS = ("auto", "graphml", "edgelist")
PATH_CACHE_PHASES = 16      # phases whose candidate paths a fabric remembers
_SOURCE, _SINK = -1, -2          # virtual path-search endpoints (real node ids are >= 0)


def natural_key(name: str) -> tuple:
    """Sort key that orders embedded integers numerically: gpu2 < gpu10."""
    parts = re.split(r"(\d+)", str(name))
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


@dataclasses.dataclass(frozen=True, eq=False)
class GraphFabric:
    """Directed links of a graph-given fabric (host numpy arrays, N GPUs, L links).

    node_names: list[str], hosts first (GPU g is node g), then switches in natural order.
    link_src, link_dst: int32[L] node ids; each cable is two links. capacity: float32[L]
    Gbit/s. tier: int8[L] in 0..3 (TIER_NAMES), each tier contiguous and sorted by (src, dst)
    inside. A switch's level is its hop distance from the nearest host (edge 1, agg 2, core 3
    in a fat tree); of a cable's two links the one to the higher level (on a tie, the higher
    node id) is up (tier 1), the other down (tier 2), as t0->t1 and t1->t0 in a Clos. Tiers 1
    and 2 are therefore equal in size and empty only without switch-to-switch cables (the
    solver's per-tier statistics need non-empty tiers).
    plane: int16[L] (a switch's ``plane`` attribute, else 0).
    host_switch: int32[N] each GPU's first attachment switch (lowest node id).
    nic_gbps: float32[N] the sum of a host's link capacities. paths_per_pair: K.
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
    paths_per_pair: int
    family: str = "graph"     # "fat-tree": candidate paths are the equal-cost ones only

    kind = "graph"

    @property
    def is_fat_tree(self) -> bool:
        return self.family == "fat-tree"

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
        if self.is_fat_tree:
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
    def switch_graph(self) -> nx.Graph:
        """Undirected switch-to-switch graph on node ids (tier 1 links, one per cable)."""
        start, stop = self.layout_bounds[1]
        graph = nx.Graph()
        graph.add_nodes_from(range(self.gpus, self.num_nodes))
        graph.add_edges_from(zip(self.link_src[start:stop].tolist(),
                                 self.link_dst[start:stop].tolist()))
        return graph


# ---------------------------------------------------------------- loading and checking

def _fmt_for(path: str, fmt: str, field: str) -> str:
    if fmt not in FORMATS:
        raise ScenarioError(field, f"format must be one of {', '.join(FORMATS)} "
                            f"(got {short_repr(fmt)})")
    if fmt != "auto":
        return fmt
    return "graphml" if path.lower().endswith((".graphml", ".xml")) else "edgelist"


def _parse_capacity(value, where: str, field: str, default_gbps) -> float:
    if value is None:
        if default_gbps is None:
            raise ScenarioError(field, f"{where} has no capacity; give a capacity in Gbit/s "
                                "(a number > 0) or a default")
        value = default_gbps
    try:
        cap = float(value)
    except (TypeError, ValueError):
        raise ScenarioError(field, f"{where} capacity {short_repr(value)} is not a number; "
                            "allowed: a finite number of Gbit/s > 0") from None
    if not math.isfinite(cap) or cap <= 0:
        raise ScenarioError(field, f"{where} capacity {short_repr(value)} must be a finite "
                            "number of Gbit/s > 0")
    return cap


def _read_edgelist(path: str, field: str) -> list[tuple[str, str, object, int]]:
    """(u, v, raw capacity or None, line number) per cable of a text edge list."""
    edges = []
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 2)
            if len(parts) < 2:
                raise ScenarioError(field, f"line {number}: expected 'u v [capacity_gbps]' "
                                    f"(got {short_repr(line)})")
            u, v = parts[0], parts[1]
            cap = None
            if len(parts) == 3:
                rest = parts[2].strip()
                if rest.startswith("{"):
                    try:
                        data = ast.literal_eval(rest)
                    except (ValueError, SyntaxError, MemoryError, RecursionError):
                        data = None
                    if not isinstance(data, dict):
                        raise ScenarioError(field, f"line {number}: expected a dict such as "
                                            f"{{'capacity': 400}} (got {short_repr(rest)})")
                    cap = data.get("capacity")
                elif len(rest.split()) == 1:
                    cap = rest
                else:
                    raise ScenarioError(field, f"line {number}: expected 'u v [capacity_gbps]'"
                                        f" (got {short_repr(line)})")
            edges.append((u, v, cap, number))
            if len(edges) > MAX_EDGES:
                raise ScenarioError(field, f"more than {MAX_EDGES:,} edges; allowed: at most "
                                    f"{MAX_EDGES:,}")
    return edges


def _read_graphml(path: str, field: str) -> nx.Graph:
    try:
        return nx.read_graphml(path)
    except (ElementTree.ParseError, nx.NetworkXError, KeyError, ValueError, TypeError,
            IndexError, UnicodeDecodeError) as err:
        raise ScenarioError(field, f"not valid GraphML ({type(err).__name__}: "
                            f"{short_repr(str(err), 80)})") from None


def load_graph(path: str | os.PathLike, fmt: str = "auto", field: str = "fabric.file", *,
               default_gbps: float | None = None, host_prefix: str = "gpu") -> nx.Graph:
    """The checked undirected fabric graph in `path` (see the module docstring for formats).

    Nodes are str names with ``type`` host/switch; edges carry ``capacity`` (Gbit/s)."""
    path = os.fspath(path)
    kind = _fmt_for(path, fmt, field)
    if not os.path.exists(path):
        raise ScenarioError(field, f"file {short_repr(path)} does not exist")
    if not os.path.isfile(path):
        raise ScenarioError(field, f"{short_repr(path)} is not a file; give a GraphML or "
                            "edge-list file")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise ScenarioError(field, f"file is larger than {MAX_FILE_BYTES // 2 ** 20} MiB")
    graph = nx.Graph()
    try:
        if kind == "graphml":
            raw = _read_graphml(path, field)
            if raw.number_of_edges() > MAX_EDGES:
                raise ScenarioError(field, f"more than {MAX_EDGES:,} edges; allowed: at most "
                                    f"{MAX_EDGES:,}")
            typed = any("type" in d for _, d in raw.nodes(data=True))
            for node, data in raw.nodes(data=True):
                name = str(node)
                host = (str(data.get("type", "")).lower() == "host" if typed
                        else name.startswith(host_prefix))
                extra = {}
                if "plane" in data:
                    try:
                        extra["plane"] = int(data["plane"])
                    except (TypeError, ValueError):
                        raise ScenarioError(field, f"node {name}: plane "
                                            f"{short_repr(data['plane'])} is not an "
                                            "integer") from None
                graph.add_node(name, type="host" if host else "switch", **extra)
            for u, v, data in raw.edges(data=True):
                u, v = str(u), str(v)
                where = f"edge {u} - {v}"
                _check_pair(u, v, field)
                cap = _parse_capacity(data.get("capacity"), where, field, default_gbps)
                if graph.has_edge(u, v):
                    if raw.is_directed() and graph[u][v]["capacity"] == cap and (u, v) not in \
                            graph[u][v]["seen"]:
                        graph[u][v]["seen"].add((u, v))
                        continue
                    raise ScenarioError(field, f"{where} is given twice (with different "
                                        "capacities or as parallel edges); allowed: one edge")
                graph.add_edge(u, v, capacity=cap, seen={(u, v)})
            for _, _, data in graph.edges(data=True):
                del data["seen"]
        else:
            for u, v, raw_cap, number in _read_edgelist(path, field):
                where = f"line {number}: edge {u} - {v}"
                _check_pair(u, v, field, where)
                cap = _parse_capacity(raw_cap, where, field, default_gbps)
                if graph.has_edge(u, v):
                    raise ScenarioError(field, f"{where} repeats a cable; allowed: one line per "
                                        "node pair (sum parallel capacities)")
                for node in (u, v):
                    if node not in graph:
                        graph.add_node(node, type="host" if node.startswith(host_prefix)
                                       else "switch")
                graph.add_edge(u, v, capacity=cap)
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(field, f"cannot read {short_repr(path)} "
                            f"({type(err).__name__})") from None
    check_graph(graph, field)
    return graph


def _check_pair(u: str, v: str, field: str, where: str | None = None) -> None:
    if u == v:
        raise ScenarioError(field, f"{where or 'edge'}: self loop on {u}; allowed: links "
                            "between two different nodes")


def check_graph(graph: nx.Graph, field: str = "fabric.file") -> None:
    """Raise ScenarioError unless `graph` is a usable fabric (see the module docstring)."""
    if graph.number_of_edges() > MAX_EDGES:
        raise ScenarioError(field, f"more than {MAX_EDGES:,} edges; allowed: at most "
                            f"{MAX_EDGES:,}")
    hosts = sorted((n for n, d in graph.nodes(data=True) if d.get("type") == "host"),
                   key=natural_key)
    if not hosts:
        raise ScenarioError(field, "no hosts; mark hosts with type=host (GraphML) or name them "
                            "with the host prefix (edge list)")
    for u, v, data in graph.edges(data=True):
        _check_pair(u, v, field)
        _parse_capacity(data.get("capacity"), f"edge {u} - {v}", field, None)
    is_host = {n: d.get("type") == "host" for n, d in graph.nodes(data=True)}
    for host in hosts:
        if graph.degree(host) == 0:
            raise ScenarioError(field, f"host {host} has no links; allowed: a host with one "
                                "or more links to switches")
        for other in graph[host]:
            if is_host[other]:
                raise ScenarioError(field, f"host {host} is linked directly to host {other}; "
                                    "allowed: host-switch and switch-switch links")
    # hosts do not forward: hosts a and b can talk iff some switch component holds a switch
    # of each. Group hosts by their set of components and check every pair of groups.
    switches = [n for n in graph if not is_host[n]]
    comp = {}
    for i, part in enumerate(nx.connected_components(graph.subgraph(switches))):
        comp.update(dict.fromkeys(part, i))
    groups: dict[frozenset, str] = {}
    for host in hosts:
        groups.setdefault(frozenset(comp[s] for s in graph[host]), host)
    reps = list(groups.items())
    for (set_a, host_a), (set_b, host_b) in itertools.combinations(reps, 2):
        if not set_a & set_b:
            first, second = sorted((host_a, host_b), key=natural_key)
            raise ScenarioError(field, f"graph is disconnected: host {second} cannot reach "
                                f"host {first} through switches; allowed: a connected fabric")


# ---------------------------------------------------------------- fat trees

def fat_tree_graph(gpus: int, radix: int, port_gbps: float, tiers: int = 3,
                   planes: int = 1) -> nx.Graph:
    """`planes` parallel fat trees of radix-k switches (h = k/2), hosts gpu0..gpuN-1 with one
    port per plane (host nodes shared across planes), sized like `bom.fat_tree_bom`.

    tiers = 3: T0s (``p{plane}/edge{i}``) = ceil(N/h) with h hosts each (the last may have
    fewer); pods of h T0s and h aggregation switches (``p{plane}/agg{pod*h+j}``, pods =
    ceil(N/h^2)); agg j of a pod has one uplink per T0 of its pod, into core group j of
    ceil(pods/2) cores (``p{plane}/core{j*c+i}``), wired round robin (so (k/2)^2 cores, one
    uplink to each of its group's, at full size N = k^3/4). tiers = 2: ceil(N/h) T0s, each
    linked once to each of h spines (``p{plane}/spine{s}``); at most k T0s. Cables that land
    on the same switch pair (trees far below full size) are merged into one edge whose
    capacity is their sum (attribute ``cables``)."""
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
            spines = [switch(f"spine{s}", "t1") for s in range(h)]
            for t in range(t0s):
                for s in range(h):
                    cable(edges[t], spines[s])
            continue
        pods = -(-gpus // h ** 2)
        per_group = -(-pods // 2)
        aggs = [switch(f"agg{a}", "t1") for a in range(pods * h)]
        cores = [switch(f"core{c}", "t2") for c in range(h * per_group)]
        for t in range(t0s):
            pod = t // h
            for j in range(h):
                agg = aggs[pod * h + j]
                cable(edges[t], agg)
                # one agg uplink per T0 below it, round robin over core group j by T0 index
                cable(agg, cores[j * per_group + t % per_group])
    check_graph(graph, "fabric")
    return graph


# ---------------------------------------------------------------- arrays and paths

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
    edges = list(graph.edges(data="capacity"))
    u = np.fromiter((index[a] for a, _, _ in edges), np.int64, len(edges))
    v = np.fromiter((index[b] for _, b, _ in edges), np.int64, len(edges))
    cap = np.fromiter((float(c) for _, _, c in edges), np.float64, len(edges))
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
    # within the switch tiers, links are grouped by the levels they join (edge -> agg before
    # agg -> core going up, core -> agg before agg -> edge going down), so that each level
    # pair is one contiguous range for the statistics
    direction = np.where(tier == 2, -1, np.where(tier == 1, 1, 0))
    order = np.lexsort((dst, src, direction * level[dst], direction * level[src], tier))
    src, dst, tier, capacity = src[order], dst[order], tier[order], capacity[order]
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
        paths_per_pair=paths)


def _class_pair_paths(gf: GraphFabric, search: nx.Graph, src_set: Sequence[int],
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


def candidate_paths(gf: GraphFabric, src_gpus, dst_gpus, *, max_extra_hops: int | None = None
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


# ---------------------------------------------------------------- summaries

def graph_summary(gf: GraphFabric) -> dict:
    """What `fabricjax topo` prints for a graph fabric: counts, radix range, bandwidths."""
    bounds = gf.layout_bounds
    sizes = [b - a for a, b in bounds]
    n_switch = gf.num_nodes - gf.gpus
    out_degree = np.bincount(gf.link_src, minlength=gf.num_nodes)[gf.gpus:]
    return {
        "gpus": gf.gpus,
        "hosts": gf.gpus,
        "switches": n_switch,
        "links_directed": gf.num_links,
        "cables": gf.num_links // 2,
        "links_by_tier": dict(zip(TIER_NAMES, sizes)),
        "host_cables": sizes[0],
        "fabric_cables": sizes[1],
        "switch_radix_min": int(out_degree.min()) if n_switch else 0,
        "switch_radix_max": int(out_degree.max()) if n_switch else 0,
        "nic_gbps_min": float(gf.nic_gbps.min()),
        "nic_gbps_max": float(gf.nic_gbps.max()),
        "planes": int(gf.plane.max()) + 1 if gf.num_links else 1,
        "paths_per_pair": gf.paths_per_pair,
    }


def graph_bom(gf: GraphFabric) -> dict:
    """Bill-of-materials counts of a graph fabric: switches and cables (undirected links),
    split into host cables and switch-to-switch cables. Merged parallel cables count once."""
    summary = graph_summary(gf)
    return {"gpus": gf.gpus, "switches": summary["switches"], "links": summary["cables"],
            "host_links": summary["host_cables"], "fabric_links": summary["fabric_cables"]}
