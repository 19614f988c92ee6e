"""`analyze` for fabrics that are not the two-tier multi-plane Clos: three-tier fat trees
(`fabric.kind: fat-tree`) and any graph from a file (`fabric.kind: graph`).

Contract: the fabric becomes a `graph_fabric.GraphFabric` (stored link ids), every flow gets
up to `fabric.paths` candidate paths (the K shortest between its GPUs, shortest first), and
each phase is solved by the same jitted core as the Clos (`solver.solve_uniform_phase`:
loads, statistics, max-min rates, phase time). Policies:

- `spray`: each flow split equally over its K path slots: the K shortest paths of a graph
  (Yen's algorithm), or the equal-cost shortest paths of a fat tree (a flow with d < K
  distinct paths repeats them cyclically, so the first K mod d get one slot more);
- `ecmp`: each of a flow's queue pairs (`ecmp.qps` per plane of a fat tree, per flow on a
  graph) hashed uniformly onto one of its equal-cost shortest paths, of any plane (ECMP never
  takes a longer path; unlike the Clos, QPs are not pinned one per plane).

mrc and optimal, failure sets, jobs sharing the fabric and the reliability what-if rely on
the Clos's (plane, spine) structure and are refused here with a message naming the field.
Records are the same `PolicyRecord`s; their per-tier statistics read host->switch,
switch->switch up, down, switch->host for the Clos's gpu-t0, t0-t1, t1-t0, t0-gpu.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from fabricjax.errors import ScenarioError
from fabricjax.scenario import Scenario

SUPPORTED_POLICIES = ("ecmp", "spray")


def build_graph(scenario: Scenario):
    """The GraphFabric of a fat-tree or graph scenario (a graph file is read from inside the
    scenario's folder, like a traffic file)."""
    from fabricjax.graph_fabric import build_graph_fabric, fat_tree_graph, load_graph

    cfg = scenario.fabric
    if cfg.kind == "fat-tree":
        graph = fat_tree_graph(cfg.gpus, cfg.radix, float(cfg.port_gbps), tiers=cfg.tiers,
                               planes=cfg.planes)
    else:
        folder = (scenario._base_dir or Path(".")).resolve()
        path = (folder / cfg.file).resolve()
        if folder not in path.parents:
            raise ScenarioError("fabric.file", f"{cfg.file!r} is outside the scenario's "
                                "folder; allowed: a path inside it")
        graph = load_graph(path, cfg.format, "fabric.file")
    fabric = build_graph_fabric(graph, cfg.paths, "fabric.file")
    if cfg.kind == "graph" and fabric.gpus != cfg.gpus:
        raise ScenarioError("fabric.gpus", f"the graph has {fabric.gpus} hosts; allowed: "
                            f"gpus: {fabric.gpus}")
    return fabric


def graph_fabric_summary(scenario: Scenario, fabric) -> dict:
    """The report's `fabric` dict (the keys `report.fabric_line` prints, plus the graph's)."""
    from fabricjax.graph_fabric import graph_summary

    cfg = scenario.fabric
    summary = graph_summary(fabric)
    return {**summary, "kind": cfg.kind, "port_gbps": float(cfg.port_gbps),
            "nic_gbps": summary["nic_gbps_max"], "radix": summary["switch_radix_max"],
            "tiers": cfg.tiers if cfg.kind == "fat-tree" else "graph",
            "switches_t0": summary["switches"], "switches_t1": 0}


def _solve(policy: str, scenario: Scenario, fabric, flows, stream: tuple[int, int]):
    import jax

    from fabricjax.analysis import TOP_LINKS, PhaseOutcome, _POLICY_STREAM, _with_start_times
    from fabricjax.analysis import null_result
    from fabricjax.graph_fabric import candidate_paths
    from fabricjax.solver import solve_uniform_phase

    if flows.num_flows == 0:
        return PhaseOutcome(null_result(fabric), slots=0)
    rng = np.random.default_rng([scenario.seed, _POLICY_STREAM[policy], *stream])
    if policy == "spray":
        # a fat tree's spraying stays on its equal-cost paths; a graph's takes the K shortest
        detour = 0 if scenario.fabric.kind == "fat-tree" else None
        links, _ = candidate_paths(fabric, flows.src, flows.dst, max_extra_hops=detour)
    else:   # ecmp: qps hashes over the equal-cost shortest paths
        paths, distinct = candidate_paths(fabric, flows.src, flows.dst, max_extra_hops=0)
        # ecmp.qps per plane, as on the Clos; a graph file's planes are not known: per flow
        qps = scenario.ecmp.qps * (scenario.fabric.planes if scenario.fabric.kind ==
                                   "fat-tree" else 1)
        pick = (rng.random((flows.num_flows, qps)) *
                np.maximum(distinct, 1)[:, None]).astype(np.int64)
        links = paths[np.arange(flows.num_flows)[:, None], pick]
    out_degree = np.bincount(flows.src, minlength=fabric.gpus)
    demand = (fabric.nic_gbps[flows.src] / out_degree[flows.src]).astype(np.float32)
    cfg = scenario.solver
    args = jax.device_put((links.astype(np.int32), demand, flows.size.astype(np.float32),
                           fabric.nic_gbps[flows.src].astype(np.float32), fabric.capacity,
                           np.ones(fabric.num_links, bool), np.float32(cfg.eps),
                           np.int32(cfg.max_rounds)))
    result = jax.device_get(solve_uniform_phase(*args, tier_bounds=fabric.tier_bounds,
                                                top_k=min(TOP_LINKS, fabric.num_links)))
    nic = float(fabric.nic_gbps.max())
    return PhaseOutcome(_with_start_times(result, flows, nic), slots=links.shape[1])


def analyze_graph(scenario: Scenario, *, trace: bool = False,
                  progress: Callable[[str, int, int], None] | None = None,
                  sensitivity: bool = False):
    """`analysis.analyze` for kind fat-tree or graph: one record per policy and item."""
    from fabricjax.analysis import Report, _collective_record
    from fabricjax.workload import build_workload

    if sensitivity:
        raise ScenarioError("--sensitivity", f"not modelled on kind {scenario.fabric.kind} "
                            "yet; allowed: kind multiplane-clos")
    fabric = build_graph(scenario)
    collectives = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    total = len(scenario.policies) * sum(len(c.phases) for c in collectives)
    done, records = 0, []
    for policy in scenario.policies:
        for collective in collectives:
            outcomes = []
            for index, phase in enumerate(collective.phases):
                if progress is not None:
                    progress(f"{policy}: {collective.name} ({phase.name})", done, total)
                outcomes.append(_solve(policy, scenario, fabric, phase.flows,
                                       (collective.stream, index)))
                done += 1
            records.append(_collective_record(policy, collective, outcomes, fabric, scenario))
    if progress is not None:
        progress("done", 1, 1)
    return Report(scenario=scenario.name, seed=scenario.seed,
                  fabric=graph_fabric_summary(scenario, fabric), records=records,
                  solver=scenario.solver.model_dump(),
                  config=scenario.model_dump(exclude={"failures": {"chunk"}}))
