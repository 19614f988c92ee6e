"""Jobs sharing the fabric: every job's completion alone and together (static model).

Contract: `sharing_rows(policy, scenario, fabric, jobs)` returns one `results.SharingRow`
per job. All jobs start at time 0 and run their phases in order; while the set of current
phases stays the same their flows are solved together through the one phase program
(`engine.phase.solve_policy_phase` on the union, each job's flows keeping their slots), and
each job steps at its own slowest flow. The host loop runs over phase changes, not over
steps, flows or links.
"""

from __future__ import annotations

import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.status import Status, status_text
from fabricjax.engine.phase import (concat_slots, initial_slots, sending_hops,
                                    solve_policy_phase)
from fabricjax.engine.timing import phase_duration_s, wire_factor
from fabricjax.fabric.build import AnyFabric
from fabricjax.policies import get
from fabricjax.results import SharingRow
from fabricjax.workload.flows import Collective, Flows

OK, ITERATION_CAP = int(Status.OK), int(Status.ITERATION_CAP)
SHARING_STREAM = 1 << 21


def _concat_flows(parts: list[Flows]) -> Flows:
    starts = [p.start for p in parts]
    start = None
    if any(x is not None for x in starts):
        start = np.concatenate([x if x is not None else np.zeros(p.num_flows)
                                for x, p in zip(starts, parts)])
    return Flows(np.concatenate([p.src for p in parts]), np.concatenate([p.dst for p in parts]),
                 np.concatenate([p.size for p in parts]), start)


def _run_jobs(policy: str, exact: Scenario, fabric: AnyFabric, jobs: list[Collective]
              ) -> tuple[list[float | None], int, int]:
    """(finish time per job or None if it stalls, mixes solved, solver status flags) of
    `jobs` started together at 0; see `sharing_rows`."""
    pol = get(policy)
    count = len(jobs)
    phase_index = [0] * count
    steps_left = [float(c.phases[0].repeat) for c in jobs]
    finish: list[float | None] = [None] * count
    done = [False] * count
    now, mixes, status = 0.0, 0, OK
    while not all(done):
        active = [j for j in range(count) if not done[j]]
        parts, slot_parts, owners = [], [], []
        for j in active:
            phase = jobs[j].phases[phase_index[j]]
            if phase.flows.num_flows:
                parts.append(phase.flows)
                slot_parts.append(initial_slots(pol, exact, fabric, phase.flows,
                                                (jobs[j].stream, phase_index[j])))
                owners.append(np.full(phase.flows.num_flows, j))
        fabric_time = {j: 0.0 for j in active}
        if parts:
            flows = _concat_flows(parts)
            slots = concat_slots(slot_parts)
            mixes += 1
            # mrc's swap coins: one key per mix (the draws differ from alone, as they would)
            outcome = solve_policy_phase(policy, exact, fabric, flows, (SHARING_STREAM, mixes),
                                         slots=slots)
            capped = outcome.adaptation is not None and outcome.adaptation.capped
            status |= int(outcome.result.status) | (ITERATION_CAP if capped else OK)
            rates = np.asarray(outcome.result.rates, np.float64)
            owner = np.concatenate(owners)
            begin = np.zeros(flows.num_flows) if flows.start is None else flows.start
            sending = flows.size > 0
            moving = sending & (rates > 0)
            bits = flows.size * wire_factor(exact) * 8e-9      # on the wire, as the device's
            ends = np.where(moving, begin + bits / np.where(moving, rates, 1.0), 0.0)
            ends = np.where(sending & ~moving, np.inf, ends)
            for j in active:
                fabric_time[j] = float(ends[owner == j].max(initial=0.0))
        step = {}
        for j in active:
            phase = jobs[j].phases[phase_index[j]]
            step[j] = float(phase_duration_s(exact, phase, fabric_time[j],
                                             sending_hops(fabric, phase.flows))) / phase.repeat
        remaining = {j: steps_left[j] * step[j] for j in active}
        dt = min(remaining.values())
        if not np.isfinite(dt):      # every unfinished job is stalled
            break
        now += dt
        for j in active:
            if remaining[j] <= dt * (1 + 1e-9):
                phase_index[j] += 1
                if phase_index[j] == len(jobs[j].phases):
                    done[j], finish[j] = True, now
                else:
                    steps_left[j] = float(jobs[j].phases[phase_index[j]].repeat)
            elif np.isfinite(step[j]):
                steps_left[j] -= dt / step[j]
    return finish, mixes, status



def sharing_rows(policy: str, scenario: Scenario, fabric: AnyFabric,
                 jobs: list[Collective]) -> list[SharingRow]:
    """Every job's completion alone and while all jobs share the fabric (static model).

    All jobs start at time 0 and run their phases in order. While the set of current phases
    (one per unfinished job) stays the same, their flows are solved together (max-min rates
    over the union, every flow's own rate, eps 0, never as classes) and each job's step lasts
    as long as its own slowest flow (or its scale-up flows) plus the step latency; the next
    event is the first job to end its phase. So the host loop runs over phase changes (at most
    the total number of phases), not over steps, flows or links. "Alone" is the same loop with
    that job only, and a job's flows keep their path slots (same random stream) in both, so
    together / alone measures sharing, not a different model or hash draw."""
    exact = scenario.model_copy(update={"solver": scenario.solver.model_copy(
        update={"eps": 0.0, "rates": "full", "aggregate": "never"})})
    together, mixes, status = _run_jobs(policy, exact, fabric, jobs)
    rows = []
    for j, collective in enumerate(jobs):
        (alone,), _, alone_status = _run_jobs(policy, exact, fabric, [collective])
        text = status_text(status | alone_status)
        t = together[j]
        rows.append(SharingRow(policy, collective.name, collective.gpus, alone, t,
                               t / alone if alone and t is not None else None, mixes, text))
    return rows
