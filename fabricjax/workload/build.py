"""A scenario's workload items and jobs, built into collectives (placement included).

Contract: `build_workload(scenario, rng)` returns one `flows.Collective` per workload item
(each placed alone) then per job (placed on disjoint GPUs, explicit lists first), with the
random-stream id its path draws use; `traffic_flow_counts` reads every traffic file and
Chakra trace once at load time (a bad one is reported before anything runs); `export_matrix`
gives one phase as a traffic matrix for `fabricjax export`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from fabricjax.config import (AllGatherConfig, AllReduceConfig, AllToAllConfig, ChakraConfig,
                              IncastConfig, PermutationConfig, ReduceScatterConfig, Scenario,
                              SendRecvConfig, TrafficConfig, TrainingConfig, job_size)
from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.workload.chakra import Trace, chakra_step, load_trace, max_phase_flows
from fabricjax.workload.collectives import (Servers, all_to_all, double_tree, halving_doubling,
                                            incast, job_gpus, load_item_traffic, permutation,
                                            place_gpus, ring_collective, send_recv, traffic)
from fabricjax.workload.flows import JOB_STREAM, Collective
from fabricjax.workload.traffic import TrafficMatrix
from fabricjax.workload.training import training_step

COMM_GROUP_FILE = "comm_group.json"   # ASTRA-sim's communicator groups beside the traces


def _inside(base_dir: Path | None, relative: str, field: str, what: str) -> Path:
    """`relative` resolved against the scenario's folder; a ScenarioError when it leaves it
    (a scenario may be someone else's file: it must not make the tool read elsewhere)."""
    folder = (base_dir or Path(".")).resolve()
    path = (folder / relative).resolve()
    if path != folder and folder not in path.parents:
        raise ScenarioError(field, f"{short_repr(relative)} is outside the scenario's folder; "
                            f"allowed: a {what} inside it (relative to the scenario file)")
    return path


def load_item_trace(item: ChakraConfig, base_dir: Path | None, ranks: int,
                    field: str) -> Trace:
    """The checked Chakra trace a workload item names (`workload.chakra.load_trace`)."""
    folder = _inside(base_dir, item.folder, f"{field}.folder", "folder")
    if item.comm_groups is not None:
        groups = _inside(base_dir, str(Path(item.folder) / item.comm_groups),
                         f"{field}.comm_groups", "file")
        if not groups.is_file():
            raise ScenarioError(f"{field}.comm_groups", f"{short_repr(item.comm_groups)} is "
                                f"not a file in {folder.name}/")
    else:
        groups = folder / COMM_GROUP_FILE
        groups = groups if groups.is_file() else None
    return load_trace(folder, groups, ranks, field)


def traffic_flow_counts(scenario: Scenario) -> dict:
    """{(section, index): flows} of every traffic-file item (its flows) and Chakra trace (the
    most flows of one of its phases), reading each once (at load time, so a bad one is
    reported before anything is built or computed: a ScenarioError naming the field, file and
    line or node)."""
    counts = {}
    for section, i, item in scenario.items:
        size = job_size(item, scenario.fabric.gpus)
        if isinstance(item, TrafficConfig):
            matrix = load_item_traffic(item, scenario.base_dir, size, f"{section}[{i}]")
            counts[(section, i)] = matrix.num_flows
        elif isinstance(item, ChakraConfig):
            trace = load_item_trace(item, scenario.base_dir, size, f"{section}[{i}]")
            counts[(section, i)] = max_phase_flows(trace)
    return counts


def build_collective(item: Any, gpus: np.ndarray, *, name: str, rng: np.random.Generator,
                     servers: Servers, field: str, base_dir: Path | None = None
                     ) -> Collective:
    """The phases of one workload item or job on its GPUs (ranks in ascending GPU id)."""
    if isinstance(item, PermutationConfig):
        return permutation(gpus, item.size, shift=item.shift, rng=rng, name=name,
                           servers=servers)
    if isinstance(item, AllReduceConfig) and item.algorithm == "halving-doubling":
        return halving_doubling(gpus, item.size, order=item.order, rng=rng, name=name,
                                servers=servers)
    if isinstance(item, AllReduceConfig) and item.algorithm == "tree":
        return double_tree(gpus, item.size, order=item.order, rng=rng, name=name,
                           servers=servers)
    if isinstance(item, (AllReduceConfig, AllGatherConfig, ReduceScatterConfig)):
        return ring_collective(item.collective, gpus, item.size, order=item.order,
                               hierarchical=item.hierarchical, rng=rng, name=name,
                               servers=servers, field=f"{field}.hierarchical")
    if isinstance(item, AllToAllConfig):
        return all_to_all(gpus, item.size, skew=item.skew, rng=rng, name=name,
                          servers=servers, field=field)
    if isinstance(item, IncastConfig):
        return incast(gpus, item.size, name=name, servers=servers)
    if isinstance(item, SendRecvConfig):
        return send_recv(gpus, item.size, direction=item.direction, name=name,
                         servers=servers)
    if isinstance(item, TrafficConfig):
        return traffic(gpus, item, base_dir, name=name, servers=servers, field=field)
    if isinstance(item, TrainingConfig):
        return training_step(item, gpus, name=name, servers=servers)
    if isinstance(item, ChakraConfig):
        trace = load_item_trace(item, base_dir, gpus.shape[0], field)
        return chakra_step(trace, gpus, name=name, servers=servers)
    raise ValueError(f"unknown collective {item!r}")  # pragma: no cover - schema forbids


def build_workload(scenario: Scenario, rng: np.random.Generator) -> list[Collective]:
    """Every workload item (each placed alone) then every job (placed on disjoint GPUs)."""
    n = scenario.fabric.gpus
    servers = Servers.of(scenario.fabric)
    out = []
    for i, item in enumerate(scenario.workload):
        gpus = job_gpus(item, n, scenario.seed, i)
        name = item.name or f"{item.collective}#{i}"
        collective = build_collective(item, gpus, name=name, rng=rng, servers=servers,
                                      field=f"workload[{i}]", base_dir=scenario.base_dir)
        out.append(dataclasses.replace(collective, stream=i))
    if scenario.jobs:
        free = np.ones(n, dtype=bool)
        placed: dict[int, np.ndarray] = {}
        place_rng = np.random.default_rng([scenario.seed, 6])
        # explicit lists first, so a count never takes a GPU a list names
        for i in sorted(range(len(scenario.jobs)),
                        key=lambda i: not isinstance(scenario.jobs[i].gpus, list)):
            gpus = place_gpus(scenario.jobs[i], n, free, place_rng)
            free[gpus] = False
            placed[i] = gpus
        for i, job in enumerate(scenario.jobs):
            name = job.name or f"job{i}-{job.collective}"
            job_rng = np.random.default_rng([scenario.seed, 7, i])   # its own stream
            collective = build_collective(job, placed[i], name=name, rng=job_rng,
                                          servers=servers, field=f"jobs[{i}]",
                                          base_dir=scenario.base_dir)
            out.append(dataclasses.replace(collective, job=True, stream=JOB_STREAM + i))
    seen: set[str] = set()
    for c, (section, i, _) in zip(out, scenario.items):
        if c.name in seen:
            raise ScenarioError(f"{section}[{i}].name", f"{c.name!r} names an earlier item "
                                "too; allowed: a name no other workload item or job has")
        seen.add(c.name)
    return out


def export_matrix(scenario: Scenario, item: str | None, phase: int | None):
    """One phase of a workload item or job as a traffic matrix (`workload.traffic.
    TrafficMatrix` over fabric GPU ids), every flow included (scale-up ones too), for
    `fabricjax export`. `item`: its name (default: the only one); `phase`: its index (required
    when the collective has several different phases; a ring's one step repeats)."""
    flat = scenario.model_copy(update={"fabric": scenario.fabric.model_copy(
        update={"scaleup_gbps": 0.0})})
    flat.located(scenario.base_dir, scenario.traffic_flows)
    collectives = build_workload(flat, np.random.default_rng([scenario.seed, 0]))
    names = [c.name for c in collectives]
    if item is None and len(collectives) > 1:
        raise ScenarioError("--item", f"the scenario has {len(names)} items; allowed: "
                            f"{', '.join(names)}")
    if item is not None and item not in names:
        raise ScenarioError("--item", f"no workload item or job is named {item!r}; allowed: "
                            f"{', '.join(names)}")
    collective = collectives[names.index(item) if item is not None else 0]
    count = len(collective.phases)
    if phase is None and count > 1:
        raise ScenarioError("--phase", f"{collective.name} has {count} different phases ("
                            f"{', '.join(p.name for p in collective.phases)}); allowed: "
                            f"--phase 0..{count - 1}")
    index = phase or 0
    if not 0 <= index < count:
        raise ScenarioError("--phase", f"{collective.name} has {count} phase(s); allowed: "
                            f"0..{count - 1}")
    flows = collective.phases[index].flows
    start = flows.start if flows.start is not None else np.zeros(flows.num_flows)
    return TrafficMatrix(src=flows.src.astype(np.int64), dst=flows.dst.astype(np.int64),
                         size=flows.size.astype(np.float64), start=start.astype(np.float64),
                         source=collective.name)
