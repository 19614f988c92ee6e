"""Any fabric from a scenario, whatever its kind, and the summary a report prints of it.

Contract: `build(scenario)` returns the multi-plane Clos (`clos.Fabric`) or, for kinds
`fat-tree` and `graph`, a `graph.GraphFabric` (a graph file is read from inside the
scenario's folder); `summary(scenario, fabric)` the dict `fabricjax topo` and the report's
`fabric` field hold. Both fabric objects offer the same view, `AnyFabric` (a Protocol).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Protocol

import numpy as np

from fabricjax.config import FabricKind, Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import build_fabric, fabric_summary
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graph import GraphFabric, build_graph_fabric, graph_summary
from fabricjax.fabric.graphfile import load_graph
from fabricjax.fabric.spec import capped_paths, fat_tree_equal_cost_paths



class AnyFabric(Protocol):
    """What every fabric offers, whatever its kind (`clos.Fabric`, `graph.GraphFabric`): the
    engine, the failure sets, the studies and the reports use this view alone.

    Links: `num_links` L, `link_src`, `link_dst` int32[L], `capacity` float32[L] Gbit/s,
    `tier` [L], `plane` [L], `reverse` (each link's opposite direction), `sentinel` (= L, the
    padding link), `physical_nodes` (each node's switch as built: a Clos's logical spines map
    to their T1). Nodes: `gpus`, `num_nodes`, `planes`, `gpu_nic_gbps` float[N]. Layout:
    `tier_names` and `tier_bounds` (the statistics' tiers), `layout_bounds` (host -> switch,
    switch up, switch down, switch -> host). Routes on the host: `nic_rate()`,
    `candidate_paths(src, dst, pool)` (None where paths are arithmetic), `flow_hops(src,
    dst)`, `slot_links(src, dst, plane, choice, pool)`; `link_name(l)` for reports."""

    kind: FabricKind
    gpus: int
    planes: int
    num_links: int
    num_nodes: int
    sentinel: int
    link_src: np.ndarray
    link_dst: np.ndarray
    capacity: np.ndarray
    tier: np.ndarray
    plane: np.ndarray
    reverse: np.ndarray
    physical_nodes: np.ndarray
    gpu_nic_gbps: np.ndarray
    tier_names: tuple
    tier_bounds: tuple
    layout_bounds: tuple

    def link_name(self, link: int) -> str: ...

    def nic_rate(self) -> float | np.ndarray: ...

    def candidate_paths(self, src: np.ndarray, dst: np.ndarray, pool: str
                        ) -> tuple[np.ndarray, np.ndarray] | None: ...

    def flow_hops(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray: ...

    def slot_links(self, src: np.ndarray, dst: np.ndarray, plane: np.ndarray,
                   choice: np.ndarray, pool: str) -> np.ndarray: ...


def graph_file(scenario: Scenario) -> Path:
    """The scenario's graph file, which must lie inside the scenario's folder (a scenario may
    be someone else's file: it must not make the tool read, and quote in an error, a file
    elsewhere)."""
    cfg = scenario.fabric
    folder = (scenario.base_dir or Path(".")).resolve()
    path = (folder / cfg.file).resolve()
    if folder not in path.parents:
        raise ScenarioError("fabric.file", f"{cfg.file!r} is outside the scenario's "
                            "folder; allowed: a path inside it")
    return path


@functools.lru_cache(maxsize=8)
def _file_equal_cost_paths(path: Path, fmt: str, stamp: tuple[int, int]) -> int:
    """`GraphFabric.equal_cost_paths` of a graph file (`stamp`: its mtime and size, so an
    edited file is read again)."""
    return build_graph_fabric(load_graph(path, fmt, "fabric.file"), 1,
                              "fabric.file").equal_cost_paths


def paths_per_pair(scenario: Scenario) -> int:
    """K, the candidate paths per GPU pair of a fat-tree or graph scenario: `fabric.paths`
    where given, else the fabric's largest equal-cost set (capped, `spec.capped_paths`): in
    closed form for a fat tree, from the file's graph for a graph."""
    cfg = scenario.fabric
    if cfg.paths is not None:
        return cfg.paths
    if cfg.kind == FabricKind.FAT_TREE:
        return capped_paths(fat_tree_equal_cost_paths(cfg.gpus, cfg.radix, cfg.planes),
                            cfg.planes)
    path = graph_file(scenario)
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = (0, 0)      # load_graph names the missing file
    return capped_paths(_file_equal_cost_paths(path, cfg.format, stamp), 1)


def build_graph(scenario: Scenario) -> GraphFabric:
    """The GraphFabric of a fat-tree or graph scenario (a graph file from inside the
    scenario's folder, `graph_file`), with `paths_per_pair(scenario)` slots per flow."""
    cfg = scenario.fabric
    if cfg.kind == FabricKind.FAT_TREE:
        graph = fat_tree_graph(cfg.gpus, cfg.radix, float(cfg.port_gbps), tiers=cfg.tiers,
                               planes=cfg.planes)
    else:
        graph = load_graph(graph_file(scenario), cfg.format, "fabric.file")
    fabric = dataclasses.replace(
        build_graph_fabric(graph, paths_per_pair(scenario), "fabric.file"),
        kind=FabricKind(cfg.kind))
    if cfg.kind == FabricKind.GRAPH and fabric.gpus != cfg.gpus:
        raise ScenarioError("fabric.gpus", f"the graph has {fabric.gpus} hosts; allowed: "
                            f"gpus: {fabric.gpus}")
    return fabric


def build(scenario: Scenario) -> AnyFabric:
    """The scenario's fabric: every link, as host arrays."""
    if scenario.fabric.kind == FabricKind.CLOS:
        return build_fabric(scenario.fabric)
    return build_graph(scenario)


def summary(scenario: Scenario, fabric: AnyFabric) -> dict:
    """The report's `fabric` dict: `clos.fabric_summary` for the Clos; for the others the
    graph's counts plus the keys a report's fabric line prints."""
    cfg = scenario.fabric
    if fabric.kind == FabricKind.CLOS:
        return fabric_summary(cfg)
    counts = graph_summary(fabric)
    # a graph file's links carry their own capacities: its config's port_gbps means nothing
    fat_tree = cfg.kind == FabricKind.FAT_TREE
    port = float(cfg.port_gbps) if fat_tree else None
    return {**counts, "kind": cfg.kind, "port_gbps": port,
            "nic_gbps": counts["nic_gbps_max"], "radix": counts["switch_radix_max"],
            "tiers": cfg.tiers if fat_tree else "graph",
            "switches_t0": counts["switches"], "switches_t1": 0}
