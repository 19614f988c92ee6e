"""What failures cost each policy: batched failure sets in, distributions and transients out.

Contract: `failure_study` takes the scenario, its fabric and workload and the baseline (no
failure) outcomes of the analysis (the slots each policy ran on), evaluates every failure set
of `fabric.failures.sample_failures` under every policy through the one phase program
(`engine.batch.solve_set_range`), and returns one `results.FailureStudy`: a record per
(policy, workload item, failure set) and a `results.FailureSummary` per (policy, workload
item); with `on_records` it hands each chunk's records over as they are computed (a stream),
and with `done` it resumes from records an earlier run streamed. `reliability_whatif` turns
component failure rates into expected events, stall time and crash probability per policy.
Both work on every fabric kind. Nothing here loops over flows or links; the loops are over
policies, workload phases and chunks of failure sets.

The transient (docs/failures.md): a flow with bytes on a pre-failure path that died is
*affected*; its collective step stalls until the policy reacts (`Policy.reaction_window_s`:
routing reconvergence for ECMP and oblivious spraying, MRC's reaction time for MRC). A stall
at least as long as the transport timeout fails the job, which then restarts from a
checkpoint. A bound (optimal) has no transient. GPU-seconds lost = stall x the job's GPUs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from fabricjax.config import FailuresConfig, Scenario
from fabricjax.core.stream import StreamError
from fabricjax.engine.batch import (failure_mask, null_set_outcome, prepare_failure_phase,
                                    solve_set_range)
from fabricjax.engine.dynamic import (TimedFailure, prepare_with_dynamic,
                                     run_dynamic_phases)
from fabricjax.engine.phase import slot_links_host, solve_policy_phase
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.failures import FailureBatch, kind_counts, sample_failures
from fabricjax.metrics import (collective_references, dynamic_figures, failure_summary,
                               set_records)
from fabricjax.policies import get
from fabricjax.results import FailureStudy, ReliabilityRow
from fabricjax.workload.flows import Collective


def failure_study(scenario: Scenario, fabric: AnyFabric, collectives: list[Collective],
                  baseline: dict, *, samples: int | None = None,
                  progress: Callable[[str, int, int], None] | None = None,
                  done: list[dict] | None = None,
                  on_records: Callable[[list[dict]], None] | None = None) -> FailureStudy:
    """Every policy on every workload item under every failure set.

    baseline: {(policy, item): [PhaseOutcome per phase]} from the no-failure analysis.
    The sets of one (policy, item) are solved a chunk at a time, every phase of the chunk
    before the next chunk (the inputs of all its phases stay on the device meanwhile), so a
    chunk's records are final as soon as it is solved: `on_records(records)` gets them then,
    in the study's order (policy, item, set). `done`: the first records of that order from an
    earlier run of the same study (a stream read back); their sets are not solved again, and
    the summaries, computed from the records alone, come out the same."""
    batch = sample_failures(scenario, samples, fabric=fabric)
    B = batch.size
    done = list(done or [])
    blocks = [(policy, item) for policy in scenario.policies for item in range(len(collectives))]
    if len(done) > B * len(blocks):
        raise StreamError(f"the stream holds {len(done):,} failure-set records; this study has "
                          f"{B * len(blocks):,}")
    total = B * len(scenario.policies) * sum(len(c.phases) for c in collectives)
    finished = 0
    records, summaries = [], []
    for block, (policy, item) in enumerate(blocks):
        collective = collectives[item]
        window = get(policy).reaction_window_s(scenario.failures)
        ours = done[block * B:(block + 1) * B]
        for b, record in enumerate(ours):
            expected = (policy, collective.name, b)
            if (record.get("policy"), record.get("workload"), record.get("failure_set")) != \
                    expected:
                raise StreamError(f"record {block * B + b + 1} of the stream is not failure set "
                                  f"{b} of {policy} on {collective.name}")
        finished += len(ours) * len(collective.phases)
        outcomes = baseline[(policy, item)]
        endpoint, line_rate = collective_references(scenario, fabric, collective, outcomes)
        if len(ours) < B:
            prepared = [prepare_failure_phase(policy, scenario, fabric, outcomes[index], B,
                                              (collective.stream, index))
                        if phase.flows.num_flows else None    # inside servers: no failure
                        for index, phase in enumerate(collective.phases)]
            per_call = max((p.per_call for p in prepared if p is not None), default=B)
            for start in range(len(ours), B, per_call):
                stop = min(start + per_call, B)
                results = []
                for index, phase in enumerate(collective.phases):
                    label = f"{policy}: {collective.name} ({phase.name}), {B:,} failure sets"

                    def advance(n: int, label=label) -> None:
                        nonlocal finished
                        finished += n
                        if progress is not None:
                            progress(label, finished, total)

                    if progress is not None:
                        progress(label, finished, total)
                    if prepared[index] is None:
                        results.append(null_set_outcome(fabric, stop - start))
                        advance(stop - start)
                        continue
                    results.append(solve_set_range(prepared[index], scenario, fabric, batch,
                                                   start, stop, advance))
                new = set_records(policy, collective, results, outcomes, fabric, scenario, batch,
                                  line_rate, endpoint, window, first=start)
                if scenario.solver.model == "dynamic":
                    if progress is not None:
                        progress(f"{policy}: {collective.name}, failure sets {start + 1:,}-"
                                 f"{stop:,} in time", finished, total)
                    timed = dynamic_set_figures(policy, scenario, fabric, collective,
                                                outcomes, batch, range(start, stop),
                                                line_rate, endpoint)
                    for record, figure in zip(new, timed):
                        record["dynamic"] = figure
                if on_records is not None:
                    on_records(new)
                ours.extend(new)
            del prepared
        records.extend(ours)
        summaries.append(failure_summary(policy, collective.name, ours, window))
    cfg = scenario.failures
    return FailureStudy(samples=B,
                        seed=scenario.seed if cfg.seed is None else cfg.seed,
                        components_per_set=kind_counts(batch, fabric), records=records,
                        summaries=summaries)


def set_fabric(fabric: AnyFabric, batch: FailureBatch, b: int) -> tuple[np.ndarray, AnyFabric]:
    """(alive bool[L], the fabric with set b's degraded cables at their capacity): failure
    set b of `batch` on the host, from the mask the batched solve applies on the device."""
    alive, capacity = failure_mask(fabric.link_src, fabric.link_dst, fabric.capacity,
                                   batch.dead_links[b], batch.dead_nodes[b],
                                   batch.degraded_links[b], batch.degraded_factor[b],
                                   num_nodes=fabric.num_nodes)
    capacity = np.asarray(capacity, np.float32)
    return np.asarray(alive, bool), dataclasses.replace(fabric, capacity=capacity)


def dynamic_set_figures(policy: str, scenario: Scenario, fabric: AnyFabric,
                        collective: Collective, outcomes: list, batch: FailureBatch,
                        sets: range, line_rate: float, endpoint: float) -> list[dict | None]:
    """Failure sets `sets` of `batch` under the dynamic level (`solver.model: dynamic`):
    every phase solved static on the set's fabric (the policy's steady state after it reacts:
    ECMP re-hashed, spraying over its live EVs, mrc's fixed point), then in time on that split
    from the policy's initial slots, and the collective's figures per set
    (`metrics.dynamic_figures`, without the time series): its completion, FCT quantiles, bytes
    trimmed and sent again. With `failures.at_s` the item's first step with fabric flows
    starts healthy and the set strikes at_s into it (`engine.dynamic.TimedFailure`: the policy
    reacts in time, `Policy.reaction_window_s` later); its other steps run on the set's steady
    state. The sets' runs of one phase go to the device together, vmapped
    (`engine.dynamic.run_dynamic_phases`): one compiled program per phase shape and batch
    bucket serves every set."""
    cfg = scenario.failures
    window = get(policy).reaction_window_s(cfg) or 0.0
    plans, prepared = [], []
    for b in sets:
        alive, degraded = set_fabric(fabric, batch, b)
        strike = (None if cfg.at_s is None else
                  TimedFailure(at_s=cfg.at_s, alive=alive, capacity=degraded.capacity,
                               window_s=window))
        phases, solved = [], []     # solved: a PhaseOutcome, or (its run's index, static)

        def later(run, static):
            if run is None:
                return static
            prepared.append(run)
            return (len(prepared) - 1, static)

        for index, (phase, base) in enumerate(zip(collective.phases, outcomes)):
            if phase.flows.num_flows == 0 or base.split is None:
                phases.append(phase)
                solved.append(base)
                continue
            stream = (collective.stream, index)
            if strike is not None:
                phases.append(dataclasses.replace(phase, repeat=1))
                solved.append(later(prepare_with_dynamic(
                    policy, scenario, fabric, phase.flows, stream, base, failure=strike),
                    base))
                strike = None
                if phase.repeat == 1:
                    continue
                phase = dataclasses.replace(phase, repeat=phase.repeat - 1)
            static = solve_policy_phase(policy, scenario, degraded, phase.flows, stream,
                                        alive=alive)
            phases.append(phase)
            solved.append(later(prepare_with_dynamic(
                policy, scenario, degraded, phase.flows, stream, static, alive=alive,
                capacity=degraded.capacity), static))
        plans.append((degraded, phases, solved))
    ran = run_dynamic_phases(prepared)
    figures = []
    for degraded, phases, solved in plans:
        solved = [dataclasses.replace(item[1], dynamic=ran[item[0]])
                  if isinstance(item, tuple) else item for item in solved]
        figure = dynamic_figures(dataclasses.replace(collective, phases=tuple(phases)),
                                 solved, scenario, degraded, line_rate, endpoint,
                                 series=cfg.at_s is not None)
        if figure is not None:
            figure["crash"] = figure["stall_s"] >= cfg.transport_timeout_s
        figures.append(figure)
    return figures


# --------------------------------------------------------------------------- reliability

def used_links(fabric: AnyFabric, collective: Collective, outcomes: list) -> np.ndarray:
    """bool[L]: links that carry the job's traffic in the pre-failure slots of any phase."""
    used = np.zeros(fabric.num_links + 1, dtype=bool)
    for phase, outcome in zip(collective.phases, outcomes):
        flows = phase.flows
        sending = flows.size > 0
        if not np.any(sending):
            continue
        if outcome.split is None:  # aggregated (a Clos): every spine of every plane
            g = fabric.geometry
            planes = np.arange(g.planes)[:, None, None]
            spines = np.arange(g.spines)[None, None, :]
            src, dst = flows.src[sending], flows.dst[sending]
            cross = g.t0_of(src) != g.t0_of(dst)
            up_t0 = np.unique(g.t0_of(src[cross]))[None, :, None]
            down_t0 = np.unique(g.t0_of(dst[cross]))[None, :, None]
            for ids in (g.gpu_up(planes[:, :, 0], np.unique(src)[None, :]),
                        g.gpu_down(planes[:, :, 0], np.unique(dst)[None, :]),
                        g.t0_up(planes, up_t0, spines), g.t1_down(planes, down_t0, spines)):
                used[np.asarray(ids).reshape(-1)] = True
            continue
        links = slot_links_host(fabric, flows, outcome.split)
        used[links[sending].reshape(-1)] = True
    return used[:-1]


def reliability_whatif(scenario: Scenario, fabric: AnyFabric, collectives: list[Collective],
                       baseline: dict) -> list[ReliabilityRow]:
    """Expected failure events, stall time and crash probability per policy and job, from
    component failure rates (Poisson events) and the components each policy's paths use (a
    cable or NIC port is used when either of its directions carries traffic)."""
    rel = scenario.reliability
    cfg = scenario.failures or FailuresConfig()
    (host0, host1), (up0, up1) = fabric.layout_bounds[0], fabric.layout_bounds[1]
    fabric_cables, nic_total = up1 - up0, host1 - host0
    # switches as built (a Clos's T1 below full size takes a bundle of logical spines)
    switches_total = np.unique(fabric.physical_nodes[fabric.gpus:]).size
    fabric_rate = (rel.link_failures_per_hour * fabric_cables +
                   rel.switch_failures_per_hour * switches_total +
                   rel.nic_port_failures_per_hour * nic_total)
    rows = []
    for policy in scenario.policies:
        window = get(policy).reaction_window_s(cfg)
        if window is None:
            continue
        for item, collective in enumerate(collectives):
            used = used_links(fabric, collective, baseline[(policy, item)])
            either = used | used[fabric.reverse]          # a cable is used either way
            cable, port = either[up0:up1], either[host0:host1]
            node = np.zeros(fabric.num_nodes, dtype=bool)
            node[fabric.link_src[used]] = True
            node[fabric.link_dst[used]] = True
            cables, ports = int(cable.sum()), int(port.sum())
            switches = np.unique(fabric.physical_nodes[fabric.gpus:][node[fabric.gpus:]]).size
            events = (rel.link_failures_per_hour * cables +
                      rel.switch_failures_per_hour * switches +
                      rel.nic_port_failures_per_hour * ports)
            crash = window >= cfg.transport_timeout_s
            per_event = collective.gpus * (cfg.transport_timeout_s + cfg.restart_s if crash
                                           else window)
            crashes = events if crash else 0.0
            rows.append(ReliabilityRow(
                policy=policy, workload=collective.name, gpus=collective.gpus,
                cables_used=cables, switches_used=switches, nic_ports_used=ports,
                events_per_hour=events, fabric_events_per_hour=fabric_rate, window_s=window,
                stall_s_per_hour=0.0 if crash else events * window,
                crashes_per_hour=crashes,
                crash_probability=-math.expm1(-crashes * rel.hours),
                hours=rel.hours,
                gpu_seconds_lost_per_event=per_event,
                gpu_hours_lost_per_day=events * 24 * per_event / 3600,
                events_per_1000_steps=(events * rel.step_time_s / 3.6
                                       if rel.step_time_s is not None else None),
            ))
    return rows
