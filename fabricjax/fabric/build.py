"""Any fabric from a scenario, whatever its kind, and the summary a report prints of it.

Contract: `build(scenario)` returns the multi-plane Clos (`clos.Fabric`) or, for kinds
`fat-tree` and `graph`, a `graph.GraphFabric` (a graph file is read from inside the
scenario's folder); `summary(scenario, fabric)` the dict `fabricjax topo` and the report's
`fabric` field hold. Both fabric objects offer the same view (see `clos.Fabric`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fabricjax.config import Scenario
from fabricjax.core.errors import ScenarioError
from fabricjax.fabric.clos import Fabric, build_fabric, fabric_summary
from fabricjax.fabric.fattree import fat_tree_graph
from fabricjax.fabric.graph import GraphFabric, build_graph_fabric, graph_summary
from fabricjax.fabric.graphfile import load_graph

AnyFabric = Fabric | GraphFabric


def build_graph(scenario: Scenario) -> GraphFabric:
    """The GraphFabric of a fat-tree or graph scenario. A graph file must lie inside the
    scenario's folder (a scenario may be someone else's file: it must not make the tool read,
    and quote in an error, a file elsewhere)."""
    cfg = scenario.fabric
    if cfg.kind == "fat-tree":
        graph = fat_tree_graph(cfg.gpus, cfg.radix, float(cfg.port_gbps), tiers=cfg.tiers,
                               planes=cfg.planes)
    else:
        folder = (scenario.base_dir or Path(".")).resolve()
        path = (folder / cfg.file).resolve()
        if folder not in path.parents:
            raise ScenarioError("fabric.file", f"{cfg.file!r} is outside the scenario's "
                                "folder; allowed: a path inside it")
        graph = load_graph(path, cfg.format, "fabric.file")
    fabric = dataclasses.replace(build_graph_fabric(graph, cfg.paths, "fabric.file"),
                                 family=cfg.kind)
    if cfg.kind == "graph" and fabric.gpus != cfg.gpus:
        raise ScenarioError("fabric.gpus", f"the graph has {fabric.gpus} hosts; allowed: "
                            f"gpus: {fabric.gpus}")
    return fabric


def build(scenario: Scenario) -> AnyFabric:
    """The scenario's fabric: every link, as host arrays."""
    if scenario.fabric.kind == "multiplane-clos":
        return build_fabric(scenario.fabric)
    return build_graph(scenario)


def summary(scenario: Scenario, fabric: AnyFabric) -> dict:
    """The report's `fabric` dict: `clos.fabric_summary` for the Clos; for the others the
    graph's counts plus the keys a report's fabric line prints."""
    cfg = scenario.fabric
    if isinstance(fabric, Fabric):
        return fabric_summary(cfg)
    counts = graph_summary(fabric)
    # a graph file's links carry their own capacities: its config's port_gbps means nothing
    port = float(cfg.port_gbps) if cfg.kind == "fat-tree" else None
    return {**counts, "kind": cfg.kind, "port_gbps": port,
            "nic_gbps": counts["nic_gbps_max"], "radix": counts["switch_radix_max"],
            "tiers": cfg.tiers if cfg.kind == "fat-tree" else "graph",
            "switches_t0": counts["switches"], "switches_t1": 0}
