"""Graph files: GraphML or an edge list read into a checked undirected `networkx.Graph`
(node attribute ``type``: ``host`` or ``switch``; edge attributes ``capacity`` in Gbit/s and
``cables``, the parallel cables an edge stands for).

Contract: `load_graph(path)` reads and checks a file, `check_graph(graph)` checks any graph
(`fattree` builds its own and checks it here). Nothing here knows link ids or paths.

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
  A missing capacity takes `default_gbps`. Parallel cables are one edge in files: its
  capacity is their sum and an optional ``cables`` attribute (GraphML) or dict key (edge
  list, ``{'capacity': 800, 'cables': 2}``) counts them (default 1); an edge repeated is
  refused. `fat_tree_graph` bundles its own the same way. A cable is the unit of every
  count (`graph_summary`, `graph_bom`) and of a ``links:`` failure (see `fabric.failures`).

Errors: anything a user can fix raises `ScenarioError(field, ...)` naming the file field and
what is allowed: a missing, unreadable or unparseable file; no hosts; a host without links or
linked directly to another host; self loops; parallel edges; a missing, non-numeric,
non-positive or non-finite capacity; two hosts that cannot reach each other through switches
(hosts never forward); more than MAX_EDGES edges (counted before a GraphML file is
parsed, and while an edge list is read; a fat tree's in closed form, `spec.fat_tree_edges`).
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import re
import xml.etree.ElementTree as ElementTree


from fabricjax.core.lazy import lazy_module
from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.fabric.spec import MAX_EDGES

nx = lazy_module("networkx")   # graph fabrics only: a Clos never loads it

MAX_FILE_BYTES = 512 * 2 ** 20
FORMATS = ("auto", "graphml", "edgelist")


def natural_key(name: str) -> tuple:
    """Sort key that orders embedded integers numerically: gpu2 < gpu10."""
    parts = re.split(r"(\d+)", str(name))
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


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


def _parse_cables(value, where: str, field: str) -> int:
    """The cable count of a bundle edge: an integer >= 1 (None: one cable)."""
    if value is None:
        return 1
    try:
        count = int(value)
        whole = float(value) == count
    except (TypeError, ValueError, OverflowError):
        count, whole = 0, False
    if not whole or not 1 <= count <= MAX_EDGES:
        raise ScenarioError(field, f"{where} cables {short_repr(value)} is not a cable count; "
                            f"allowed: an integer 1..{MAX_EDGES:,}")
    return count


def _read_edgelist(path: str, field: str) -> list[tuple[str, str, object, object, int]]:
    """(u, v, raw capacity or None, raw cable count or None, line number) per edge of a
    text edge list."""
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
            cap = cables = None
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
                    cables = data.get("cables")
                elif len(rest.split()) == 1:
                    cap = rest
                else:
                    raise ScenarioError(field, f"line {number}: expected 'u v [capacity_gbps]'"
                                        f" (got {short_repr(line)})")
            edges.append((u, v, cap, cables, number))
            if len(edges) > MAX_EDGES:
                raise ScenarioError(field, f"more than {MAX_EDGES:,} edges; allowed: at most "
                                    f"{MAX_EDGES:,}")
    return edges


_EDGE_TAG = re.compile(rb"<(?:\w+:)?edge[\s/>]")
_SCAN_BYTES = 1 << 24


def _check_graphml_edges(path: str, field: str) -> None:
    """Refuse a GraphML file of more than MAX_EDGES edges before parsing it: its edge tags
    counted in a streaming byte scan (a parse holds the whole graph in memory first)."""
    count, data, keep = 0, b"", 64        # a tag starting in the last `keep` bytes may be cut
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_SCAN_BYTES)
            data += chunk
            stop = len(data) if not chunk else max(0, len(data) - keep)
            count += sum(1 for m in _EDGE_TAG.finditer(data) if m.start() < stop)
            data = data[stop:]
            if count > MAX_EDGES:
                raise ScenarioError(field, f"more than {MAX_EDGES:,} edges; allowed: at most "
                                    f"{MAX_EDGES:,}")
            if not chunk:
                return


def _read_graphml(path: str, field: str) -> nx.Graph:
    _check_graphml_edges(path, field)
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
                cables = _parse_cables(data.get("cables"), where, field)
                if graph.has_edge(u, v):
                    if raw.is_directed() and graph[u][v]["capacity"] == cap and (u, v) not in \
                            graph[u][v]["seen"]:
                        graph[u][v]["seen"].add((u, v))
                        continue
                    raise ScenarioError(field, f"{where} is given twice (with different "
                                        "capacities or as parallel edges); allowed: one edge")
                graph.add_edge(u, v, capacity=cap, cables=cables, seen={(u, v)})
            for _, _, data in graph.edges(data=True):
                del data["seen"]
        else:
            for u, v, raw_cap, raw_cables, number in _read_edgelist(path, field):
                where = f"line {number}: edge {u} - {v}"
                _check_pair(u, v, field, where)
                cap = _parse_capacity(raw_cap, where, field, default_gbps)
                cables = _parse_cables(raw_cables, where, field)
                if graph.has_edge(u, v):
                    raise ScenarioError(field, f"{where} repeats a cable; allowed: one line per "
                                        "node pair (sum parallel capacities and give "
                                        "their count as 'cables')")
                for node in (u, v):
                    if node not in graph:
                        graph.add_node(node, type="host" if node.startswith(host_prefix)
                                       else "switch")
                graph.add_edge(u, v, capacity=cap, cables=cables)
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
        _parse_cables(data.get("cables"), f"edge {u} - {v}", field)
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
