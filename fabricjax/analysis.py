"""`analyze`: scenario in, one record per (policy, workload item or job) out.

This is the host-side orchestration of the design's data flow: build the fabric and the
workload (numpy), draw each policy's path slots (numpy), then one jitted solve per phase and
policy with one transfer in and one out (plus, where it runs, the jitted progressive
simulation of the phase). No numerical work happens here beyond turning the per-phase device
results into the collective's time and bandwidth. Large uniform all-to-all phases go to
`fabricjax.aggregate` (classes instead of flows); jobs sharing the fabric are stepped from
one phase change to the next in `sharing_rows` (a host loop over phase changes, each a
jitted solve of the concurrent phases' flows).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from fabricjax.errors import ScenarioError
from fabricjax.fabric import TIER_NAMES, Fabric, build_fabric, fabric_summary
from fabricjax.paths import PathSet, hashed_slots, spread_slots
from fabricjax.scenario import Scenario
from fabricjax.solver import STATUS_OK, PhaseResult, status_names
from fabricjax.workload import Collective, Flows, Phase, build_workload

ADAPT_CAP = 1 << 8     # an mrc / optimal iteration hit max_iters (beside the solver's flags)

# Stable stream ids so that adding a policy never changes another policy's random draws.
_POLICY_STREAM = {"ecmp": 1, "spray": 2, "mrc": 3, "optimal": 4}
TOP_LINKS = 5


@dataclasses.dataclass(frozen=True)
class PolicyRecord:
    """One row of the report: one policy on one workload item."""

    policy: str
    workload: str
    collective: str
    gpus: int
    size_bytes: float
    steps: int
    paths_per_flow: int
    p50_utilisation: float
    p99_utilisation: float
    p100_utilisation: float
    utilisation_by_tier: dict
    completion_s: float | None
    ideal_s: float
    slowdown: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    ideal_busbw_gbps: float
    min_rate_gbps: float
    status: str
    stalled_flows: int
    rate_rounds: int
    bottleneck_links: list
    iterations: int | None = None        # mrc: EV-swap iterations; optimal: solver iterations
    convergence: str | None = None       # mrc / optimal: how the iteration ended
    residual: float | None = None        # mrc: overload of the returned EVs; optimal: gap
    trace: list | None = None            # mrc with --trace: P100 after each iteration
    algorithm: str = ""                  # ring, tree, halving-doubling, hierarchical ring, ...
    job: bool = False                    # from `jobs` (shares the fabric; see Report.sharing)
    progressive_s: float | None = None   # completion under the progressive (flow-level) model
    fct_p50_s: float | None = None       # flow completion times (progressive), over the fabric
    fct_p99_s: float | None = None       # flows of every step
    fct_max_s: float | None = None
    events: int | None = None            # most progressive events in one phase
    aggregated_classes: int | None = None  # all-to-all solved as this many T0-pair classes
    utilisation_cdf: list | None = None  # busiest phase: utilisation at quantiles 0..1 (101)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Report:
    scenario: str
    seed: int
    fabric: dict
    records: list[PolicyRecord]
    solver: dict
    config: dict          # the whole validated scenario, so a report can be reproduced
    failures: object = None      # resilience.FailureStudy when the scenario has `failures`
    reliability: list | None = None  # resilience.ReliabilityRow per policy and job
    sharing: list | None = None      # SharingRow per policy and job, with two or more jobs
    sensitivity: list | None = None  # with --sensitivity: {policy, workload, links} per item


def offered_demand(flows: Flows, nic_gbps: float, num_gpus: int) -> np.ndarray:
    """Each GPU offers its full NIC rate, shared equally among the flows it sends."""
    out_degree = np.bincount(flows.src, minlength=num_gpus)
    return (nic_gbps / out_degree[flows.src]).astype(np.float32)


def policy_slots(policy: str, scenario: Scenario, fabric: Fabric, flows: Flows,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, K] of each flow's path slots under `policy`."""
    geom = fabric.geometry
    if policy == "ecmp":
        return hashed_slots(geom, flows.num_flows, scenario.ecmp.qps, rng)
    if policy == "spray":
        return spread_slots(geom, flows.num_flows, scenario.spray.evs, rng)
    raise ValueError(f"unknown policy {policy!r}")  # pragma: no cover - schema forbids


def _tier_bounds(fabric: Fabric) -> tuple[tuple[int, int], ...]:
    g = fabric.geometry
    return tuple((s, s + n) for s, n in zip(g.tier_starts, g.tier_sizes))


def slowest_only(scenario: Scenario, flows: Flows) -> bool:
    """Whether a phase's time needs only the slowest max-min rate (`solver.rates: auto`, all
    flows start together and every sending flow sends the same bytes): exact in one pass
    instead of the full rounds."""
    if scenario.solver.rates == "full" or flows.start is not None:
        return False
    sending = flows.size[flows.size > 0]
    return bool(sending.size == 0 or np.all(sending == sending[0]))


def step_latency_s(scenario: Scenario, phase: Phase) -> float:
    """The fixed cost of one step of `phase`: a base plus a per-link latency over its
    longest path (solver.step_latency_us, solver.hop_latency_us), paid `latency_steps` times
    (a pipelined tree's chunks climb and descend its depth)."""
    cfg = scenario.solver
    return phase.latency_steps * (cfg.step_latency_us + cfg.hop_latency_us * phase.hops) * 1e-6


def phase_duration_s(scenario: Scenario, phase: Phase, fabric_time):
    """All `repeat` steps of a phase: each lasts as long as the slower of its fabric flows and
    its scale-up flows, plus the step latency (float or numpy array of fabric times)."""
    return phase.repeat * (np.maximum(fabric_time, phase.scaleup_time) +
                           step_latency_s(scenario, phase))


def null_result(fabric: Fabric) -> PhaseResult:
    """The PhaseResult of a phase with no fabric flow (all inside servers): nothing loaded."""
    k = min(TOP_LINKS, fabric.num_links)
    return PhaseResult(stats=np.zeros((1 + len(TIER_NAMES), 3), np.float32),
                       top_links=np.zeros(k, np.int32), top_util=np.full(k, -np.inf, np.float32),
                       total_load=np.float32(0), rates=np.zeros(0, np.float32),
                       phase_time=np.float32(0), ideal_time=np.float32(0),
                       stalled=np.int32(0), rounds=np.int32(0), status=np.int32(STATUS_OK))


def _phase_inputs(fabric: Fabric, flows: Flows, scenario: Scenario, alive: np.ndarray | None):
    g = fabric.geometry
    demand = offered_demand(flows, g.nic_gbps, g.gpus)
    if alive is None:
        alive = np.ones(fabric.num_links, dtype=bool)
    return (demand, flows.size.astype(np.float32), np.full_like(demand, g.nic_gbps),
            fabric.capacity, alive, np.float32(scenario.solver.eps),
            np.int32(scenario.solver.max_rounds))


def solve_phase(fabric: Fabric, paths: PathSet, flows: Flows, scenario: Scenario,
                alive: np.ndarray | None = None):
    """One phase over a materialised PathSet (uniform split): device in, jitted solve, out."""
    import jax

    from fabricjax.solver import solve_uniform_phase

    args = jax.device_put((paths.links, *_phase_inputs(fabric, flows, scenario, alive)))
    result = solve_uniform_phase(*args, tier_bounds=_tier_bounds(fabric),
                                 top_k=min(TOP_LINKS, fabric.num_links))
    return jax.device_get(result)


def solve_slots(fabric: Fabric, flows: Flows, plane: np.ndarray, spine: np.ndarray,
                scenario: Scenario, alive: np.ndarray | None = None):
    """One phase given slot choices; the Clos link ids are computed on the device (what
    `analyze` uses: [F, K] slots cross to the device instead of [F, K, H] link ids)."""
    import jax

    from fabricjax.paths import solve_clos_uniform_phase

    args = jax.device_put((flows.src, flows.dst, plane, spine,
                           *_phase_inputs(fabric, flows, scenario, alive)))
    result = solve_clos_uniform_phase(fabric.geometry, *args, tier_bounds=_tier_bounds(fabric),
                                      top_k=min(TOP_LINKS, fabric.num_links),
                                      slowest_only=slowest_only(scenario, flows))
    return jax.device_get(result)


def phase_key(seed: int, item: int, index: int, stream: int = 0):
    """The JAX PRNG key of one phase of one workload item (stream 0: mrc's baseline swaps)."""
    import jax

    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), item), index)
    return jax.random.fold_in(key, stream) if stream else key


@dataclasses.dataclass(frozen=True)
class PhaseOutcome:
    """One phase under one policy: the evaluation plus what the policy's iteration reports."""

    result: object                  # solver.PhaseResult of numpy arrays
    slots: int
    iterations: int | None = None
    convergence: str | None = None
    residual: float | None = None
    trace: np.ndarray | None = None
    capped: bool = False
    lost_plane: bool = False        # optimal: some flow has no live path on a plane
    plane: np.ndarray | None = None  # the slots the phase ran on (mrc: its returned EV set;
    spine: np.ndarray | None = None  # optimal: the full grid), what failures start from
    weights: np.ndarray | None = None  # optimal: its split over the full slot grid
    progressive: object = None      # progressive.Progressive of numpy arrays, when simulated
    aggregated: int | None = None   # classes, when the phase was solved aggregated


def initial_slots(policy: str, scenario: Scenario, fabric: Fabric, flows: Flows,
                  stream: tuple[int, int]) -> tuple[np.ndarray, np.ndarray] | None:
    """(plane, spine) int32[F, K]: the slots `policy` starts a phase from (mrc: spraying's
    draw with mrc.evs, so the two columns differ by the adaptation alone); None for optimal.
    Drawn from the (seed, policy, item, phase) stream, so a job's flows get the same slots
    alone and sharing the fabric."""
    item, index = stream
    geom = fabric.geometry
    if policy == "optimal":
        return None
    source = "spray" if policy == "mrc" else policy
    rng = np.random.default_rng([scenario.seed, _POLICY_STREAM[source], item, index])
    if policy == "mrc":
        return spread_slots(geom, flows.num_flows, scenario.mrc.evs, rng)
    return policy_slots(policy, scenario, fabric, flows, rng)


def ideal_time_s(flows: Flows, nic_gbps: float) -> float:
    """A phase without contention in the fabric: each flow at the smaller of its sender's and
    its receiver's fair share of the NIC (an incast is bound by the receiver), from its start."""
    sending = flows.size > 0
    if not np.any(sending):
        return 0.0
    out_degree = np.bincount(flows.src[sending])
    in_degree = np.bincount(flows.dst[sending])
    src, dst = flows.src[sending], flows.dst[sending]
    rate = nic_gbps / np.maximum(out_degree[src], in_degree[dst])
    begin = 0.0 if flows.start is None else flows.start[sending]
    return float(np.max(begin + flows.size[sending] * 8e-9 / rate))


def _with_start_times(result, flows: Flows, nic_gbps: float):
    """Host-side times of a phase: the ideal (`ideal_time_s`) and, when flows start at
    different times, the end of the last one, max(start + size / rate) (the static model:
    rates as when all flows are present)."""
    result = result._replace(ideal_time=np.float32(ideal_time_s(flows, nic_gbps)))
    if flows.start is None:
        return result
    sending = (flows.size > 0) & (result.rates > 0)
    bits = flows.size * 8e-9
    ends = np.where(sending, flows.start + bits / np.where(sending, result.rates, 1.0), 0.0)
    return result._replace(phase_time=np.float32(ends.max(initial=0.0)))


def solve_policy_phase(policy: str, scenario: Scenario, fabric: Fabric, flows: Flows,
                       stream: tuple[int, int], *, trace: bool = False,
                       alive: np.ndarray | None = None,
                       slots: tuple[np.ndarray, np.ndarray] | None = None,
                       progressive: bool = False) -> PhaseOutcome:
    """Draw `policy`'s slots for one phase (or take `slots`) and solve it on the device.

    `progressive`: also run the flow-level simulation on the split the policy ended with."""
    import jax

    if flows.num_flows == 0:
        return PhaseOutcome(null_result(fabric), slots=0)
    seed = scenario.seed
    item, index = stream
    top_k = min(TOP_LINKS, fabric.num_links)
    bounds = _tier_bounds(fabric)
    geom = fabric.geometry
    # decided before any [F, K] slot array exists: aggregation is for what would not fit
    if slots is None and use_aggregation(scenario, fabric, flows, alive, policy):
        return _aggregated_phase(policy, scenario, fabric, flows, stream)
    if slots is None:
        slots = initial_slots(policy, scenario, fabric, flows, stream)
    if policy in ("ecmp", "spray"):
        plane, spine = slots
        outcome = PhaseOutcome(
            _with_start_times(solve_slots(fabric, flows, plane, spine, scenario, alive), flows,
                              geom.nic_gbps),
            slots=plane.shape[1], plane=plane, spine=spine)
    elif policy == "mrc":
        from fabricjax.mrc import MRC_ITERATION_CAP, MRC_STATUS_NAMES, solve_mrc_phase

        cfg = scenario.mrc
        plane, spine = slots
        inputs = _phase_inputs(fabric, flows, scenario, alive)
        demand, size32, flow_cap, capacity, alive_mask, eps, max_rounds = inputs
        key = phase_key(seed, item, index)
        args = jax.device_put((flows.src, flows.dst, plane, spine, demand, size32, flow_cap,
                               capacity, alive_mask, key, np.float32(cfg.threshold),
                               np.float32(cfg.damping), np.float32(cfg.tol), eps, max_rounds))
        mrc, result = jax.device_get(solve_mrc_phase(
            geom, *args, max_iters=cfg.max_iters, patience=cfg.patience, tier_bounds=bounds,
            top_k=top_k, slowest_only=slowest_only(scenario, flows)))
        iterations = int(mrc.iterations)
        outcome = PhaseOutcome(_with_start_times(result, flows, geom.nic_gbps), slots=cfg.evs,
                               iterations=iterations,
                               convergence=MRC_STATUS_NAMES[int(mrc.status)],
                               residual=float(mrc.residual),
                               trace=np.asarray(mrc.trace[: iterations + 1]) if trace else None,
                               capped=int(mrc.status) == MRC_ITERATION_CAP,
                               plane=plane, spine=np.asarray(mrc.spine))
    elif policy == "optimal":
        from fabricjax.optimal import (STATUS_ITERATION_LIMIT, STATUS_NO_PATH, full_slot_grid,
                                       optimal_split)
        from fabricjax.paths import solve_clos_weighted_phase

        cfg = scenario.optimal
        inputs = _phase_inputs(fabric, flows, scenario, alive)
        demand, _, _, capacity, alive_mask, _, _ = inputs
        opt = optimal_split(geom, flows.src, flows.dst, demand, capacity, alive_mask,
                            max_iters=cfg.max_iters, tol=cfg.tol)
        plane, spine = full_slot_grid(geom, flows.num_flows)
        args = jax.device_put((flows.src, flows.dst, plane, spine, opt.weights, *inputs))
        result = jax.device_get(solve_clos_weighted_phase(
            geom, *args, tier_bounds=bounds, top_k=top_k,
            slowest_only=slowest_only(scenario, flows)))
        status = int(opt.status)
        capped = bool(status & STATUS_ITERATION_LIMIT)
        convergence = "iteration cap" if capped else "converged (gap)"
        if status & STATUS_NO_PATH:
            convergence += "; a flow lost a plane (no live path)"
        outcome = PhaseOutcome(_with_start_times(result, flows, geom.nic_gbps),
                               slots=plane.shape[1],
                               iterations=int(opt.iterations), convergence=convergence,
                               residual=float(opt.gap), capped=capped,
                               lost_plane=bool(status & STATUS_NO_PATH),
                               plane=plane, spine=spine, weights=np.asarray(opt.weights))
    else:
        raise ValueError(f"unknown policy {policy!r}")  # pragma: no cover - schema forbids
    if progressive:
        outcome = dataclasses.replace(
            outcome, progressive=simulate_progressive(scenario, fabric, flows, outcome, alive))
    return outcome


# Flow-by-flow (flow, slot) entries beyond which `solver.aggregate: auto` solves an
# aggregatable phase by classes: 2^25 entries is twice the 131k-GPU ring step (131,072 flows
# x 128 EVs), which flow by flow still fits a laptop; a 4,096-GPU all-to-all has 2^31.
AGGREGATE_ABOVE = 2**25


def aggregation_wanted(scenario: Scenario, fabric: Fabric, flows: Flows, policy: str) -> bool:
    """Whether `solver.aggregate` asks for classes for this phase and policy (before checking
    that the phase allows it)."""
    mode = scenario.solver.aggregate
    if mode == "never":
        return False
    from fabricjax.memory import slots_per_flow

    return mode == "always" or flows.num_flows * slots_per_flow(policy, scenario) > AGGREGATE_ABOVE


def use_aggregation(scenario: Scenario, fabric: Fabric, flows: Flows,
                    alive: np.ndarray | None, policy: str) -> bool:
    """Solve this ecmp / spray phase by (source T0, destination T0) classes: wanted, every
    link alive, all flows starting together with equal bytes and equal offered demand."""
    from fabricjax.aggregate import aggregatable

    if policy not in ("ecmp", "spray") or not aggregation_wanted(scenario, fabric, flows, policy):
        return False
    if (alive is not None and not np.all(alive)) or flows.start is not None:
        return False
    return aggregatable(flows.src, flows.dst, flows.size)


def _aggregated_phase(policy: str, scenario: Scenario, fabric: Fabric, flows: Flows,
                      stream: tuple[int, int]) -> PhaseOutcome:
    """A phase solved as (source T0, destination T0) classes (fabricjax.aggregate): spray's
    expected split, or ECMP's per-class QP counts drawn from the multinomial."""
    from fabricjax.aggregate import solve_aggregated_phase

    item, index = stream
    rng = np.random.default_rng([scenario.seed, _POLICY_STREAM[policy], item, index])
    out = solve_aggregated_phase(fabric.geometry, policy, flows.src, flows.dst, None,
                                 flows.size, fabric.capacity, evs=scenario.spray.evs,
                                 qps=scenario.ecmp.qps, rng=rng,
                                 top_k=min(TOP_LINKS, fabric.num_links))
    geom = fabric.geometry
    slots = scenario.spray.evs if policy == "spray" else scenario.ecmp.qps * geom.planes
    result = out.result._replace(ideal_time=np.float32(ideal_time_s(flows, geom.nic_gbps)))
    return PhaseOutcome(result, slots=slots, aggregated=out.num_classes)


# `solver.progressive: auto` simulates phases up to this many (flow, path) pairs and flows:
# every event is a full max-min solve, and a phase can take up to `max_events` of them (the
# 131k-GPU ring step under ECMP, 131k flows x 8 QPs, took 6 minutes; measured).
PROGRESSIVE_AUTO_LIMIT = 2**22
PROGRESSIVE_AUTO_FLOWS = 2**15


def simulate_phase(scenario: Scenario, flows: Flows, policy: str) -> bool:
    """Whether this phase gets the progressive simulation (`solver.progressive`)."""
    from fabricjax.memory import slots_per_flow

    mode = scenario.solver.progressive
    if mode == "auto":
        return (flows.num_flows <= PROGRESSIVE_AUTO_FLOWS and
                flows.num_flows * slots_per_flow(policy, scenario) <= PROGRESSIVE_AUTO_LIMIT)
    return bool(mode)


def simulate_progressive(scenario: Scenario, fabric: Fabric, flows: Flows,
                         outcome: PhaseOutcome, alive: np.ndarray | None = None):
    """The progressive (flow-level) simulation of one phase on the split `outcome` ran:
    progressive.Progressive of numpy arrays."""
    import jax

    from fabricjax.progressive import (solve_clos_progressive_uniform,
                                       solve_clos_progressive_weighted)

    cfg = scenario.solver
    inputs = _phase_inputs(fabric, flows, scenario, alive)
    demand, size32, flow_cap, capacity, alive_mask, eps, max_rounds = inputs
    start = (np.zeros(flows.num_flows, np.float32) if flows.start is None
             else flows.start.astype(np.float32))
    tail = (size32, start, flow_cap, capacity, alive_mask, eps, max_rounds,
            np.int32(cfg.max_events), np.float32(cfg.event_batch))
    if outcome.weights is not None:
        args = jax.device_put((flows.src, flows.dst, outcome.plane, outcome.spine,
                               outcome.weights, *tail))
        run = solve_clos_progressive_weighted(fabric.geometry, *args)
    else:
        args = jax.device_put((flows.src, flows.dst, outcome.plane, outcome.spine, *tail))
        run = solve_clos_progressive_uniform(fabric.geometry, *args)
    return jax.device_get(run)


def _quantile_dict(row: np.ndarray) -> dict:
    return {"p50": float(row[0]), "p99": float(row[1]), "p100": float(row[2])}


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray,
                        qs: tuple[float, ...]) -> list[float]:
    """Inverted-CDF quantiles of `values` where each value counts `weights` times."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order], dtype=np.float64)
    picks = np.searchsorted(cum, np.asarray(qs) * cum[-1], side="left")
    return [float(values[order][min(i, values.size - 1)]) for i in picks]


def progressive_figures(collective: Collective, outcomes: list[PhaseOutcome],
                        scenario: Scenario) -> dict:
    """The collective under the progressive model: its time (None when a flow stalls), the
    flow completion time P50/P99/max over its fabric flows (each step's flows counted once per
    repeat), the largest event count, and the status flags of the simulations."""
    from fabricjax.progressive import STATUS_EVENT_LIMIT

    if any(o.progressive is None for o in outcomes if o.slots):
        return {}
    total, events, status, fcts, weights = 0.0, 0, 0, [], []
    stalled = False
    for phase, outcome in zip(collective.phases, outcomes):
        run = outcome.progressive
        fabric_end = 0.0
        if run is not None:
            finish = np.asarray(run.finish, dtype=np.float64)
            start = (np.zeros_like(finish) if phase.flows.start is None
                     else phase.flows.start)
            sending = phase.flows.size > 0
            stalled |= bool(np.any(~np.isfinite(finish[sending])))
            fabric_end = float(np.max(finish[sending], initial=0.0))
            fcts.append((finish - start)[sending])
            weights.append(np.full(int(sending.sum()), phase.repeat, np.float64))
            events = max(events, int(run.events))
            status |= int(run.status) & STATUS_EVENT_LIMIT
        total += float(phase_duration_s(scenario, phase, fabric_end))
    out = {"progressive_s": None if stalled else total, "events": events,
           "event_limit": bool(status & STATUS_EVENT_LIMIT)}
    if fcts and not stalled:
        values, w = np.concatenate(fcts), np.concatenate(weights)
        if values.size:
            p50, p99 = _weighted_quantiles(values, w, (0.5, 0.99))
            out.update(fct_p50_s=p50, fct_p99_s=p99, fct_max_s=float(values.max()))
    return out


def _collective_record(policy: str, collective: Collective, outcomes: list[PhaseOutcome],
                       fabric: Fabric, scenario: Scenario) -> PolicyRecord:
    phase_results = [o.result for o in outcomes]
    worst = max(range(len(phase_results)), key=lambda i: float(phase_results[i].stats[0, 2]))
    busiest = phase_results[worst]
    status = STATUS_OK
    stalled = 0
    completion = 0.0
    ideal = 0.0
    rounds = 0
    min_rate = np.inf
    for phase, outcome in zip(collective.phases, outcomes):
        res = outcome.result
        status |= int(res.status)
        stalled += int(res.stalled)
        rounds = max(rounds, int(res.rounds))
        completion += float(phase_duration_s(scenario, phase, float(res.phase_time)))
        ideal += float(phase_duration_s(scenario, phase, float(res.ideal_time)))
        rates = np.asarray(res.rates)
        if outcome.aggregated is None:
            rates = rates[phase.flows.size > 0]
        if rates.size:
            min_rate = min(min_rate, float(np.min(rates)))
    finished = stalled == 0
    bits = collective.size * 8e-9
    algbw = bits / completion if finished and completion > 0 else None
    by_tier = {name: _quantile_dict(busiest.stats[i + 1]) for i, name in enumerate(TIER_NAMES)}
    bottlenecks = [
        {"link": fabric.link_name(int(l)), "utilisation": float(u)}
        for l, u in zip(busiest.top_links, busiest.top_util) if np.isfinite(u)
    ]
    adaptive = [o for o in outcomes if o.iterations is not None]
    if any(o.capped for o in outcomes):
        status |= ADAPT_CAP
    prog = progressive_figures(collective, outcomes, scenario) if finished else {}
    status_text = "+".join(status_names(status & ~ADAPT_CAP) +
                           (["iteration_cap"] if status & ADAPT_CAP else []) +
                           (["lost_plane"] if any(o.lost_plane for o in outcomes) else []) +
                           (["event_limit"] if prog.get("event_limit") else []))
    status_text = status_text.replace("ok+", "")
    # the busiest phase's iteration when it had one (a phase inside servers has none)
    shown = outcomes[worst] if outcomes[worst].iterations is not None else (
        adaptive[0] if adaptive else None)
    aggregated = [o.aggregated for o in outcomes if o.aggregated is not None]
    return PolicyRecord(
        policy=policy,
        workload=collective.name,
        collective=collective.kind,
        gpus=collective.gpus,
        size_bytes=collective.size,
        steps=collective.steps,
        paths_per_flow=max(o.slots for o in outcomes),
        p50_utilisation=float(busiest.stats[0, 0]),
        p99_utilisation=float(busiest.stats[0, 1]),
        p100_utilisation=float(busiest.stats[0, 2]),
        utilisation_by_tier=by_tier,
        completion_s=completion if finished else None,
        ideal_s=ideal,
        slowdown=completion / ideal if finished and ideal > 0 else None,
        algbw_gbps=algbw,
        busbw_gbps=algbw * collective.busbw_factor if algbw is not None else None,
        ideal_busbw_gbps=bits / ideal * collective.busbw_factor if ideal > 0 else 0.0,
        min_rate_gbps=float(min_rate) if np.isfinite(min_rate) else 0.0,
        status=status_text,
        stalled_flows=stalled,
        rate_rounds=rounds,
        bottleneck_links=bottlenecks,
        iterations=max(o.iterations for o in adaptive) if adaptive else None,
        convergence=shown.convergence if shown else None,
        residual=max(o.residual for o in adaptive) if adaptive else None,
        trace=[float(v) for v in shown.trace] if shown and shown.trace is not None else None,
        algorithm=collective.algorithm,
        job=collective.job,
        progressive_s=prog.get("progressive_s"),
        fct_p50_s=prog.get("fct_p50_s"),
        fct_p99_s=prog.get("fct_p99_s"),
        fct_max_s=prog.get("fct_max_s"),
        events=prog.get("events"),
        aggregated_classes=sum(aggregated) if aggregated else None,
        utilisation_cdf=([float(v) for v in busiest.cdf] if busiest.cdf is not None
                         else None),
    )


# The optimal bound keeps about a dozen float32 [commodities, P, S] arrays and weights over
# the full [F, P * S] slot grid; past this many slot entries it would not fit a laptop.
OPTIMAL_MAX_SLOT_ENTRIES = 2**26


def check_resources(scenario: Scenario, collectives: list[Collective], fabric: Fabric) -> None:
    """Refuse, before the solvers allocate, what would not fit (a ScenarioError names the
    fix). Runs after the (small) host-side fabric and workload arrays are built."""
    from fabricjax.memory import slots_per_flow

    g = fabric.geometry
    for collective in collectives:
        for phase in collective.phases:
            flows = phase.flows
            big = [p for p in ("mrc", "optimal") if p in scenario.policies and
                   flows.num_flows * slots_per_flow(p, scenario) > AGGREGATE_ABOVE]
            if "mrc" in big:
                raise ScenarioError(
                    "policies", f"'mrc' keeps every flow's EV set: {collective.name} has "
                    f"{flows.num_flows:,} flows x {scenario.mrc.evs} EVs; classes "
                    "(solver.aggregate) cover ecmp and spray only; allowed: --policy ecmp "
                    "--policy spray, fewer GPUs or fewer mrc.evs")
            if scenario.failures is not None and any(
                    use_aggregation(scenario, fabric, flows, None, p)
                    for p in scenario.policies):
                raise ScenarioError(
                    "failures", f"failure sets are solved flow by flow, but {collective.name}'s "
                    f"{flows.num_flows:,} flows only fit as classes; allowed: fewer GPUs, "
                    "solver.aggregate: never (if it fits), or no failures section")
    jobs = [c for c in collectives if c.job]
    if len(jobs) > 1:
        from fabricjax.memory import slots_per_flow

        flows = sum(max(p.flows.num_flows for p in c.phases) for c in jobs)
        for policy in scenario.policies:
            pairs = flows * slots_per_flow(policy, scenario)
            if pairs > AGGREGATE_ABOVE:
                raise ScenarioError(
                    "jobs", f"jobs sharing the fabric are solved flow by flow: up to "
                    f"{flows:,} concurrent flows x {slots_per_flow(policy, scenario)} paths "
                    f"under '{policy}' exceed {AGGREGATE_ABOVE:,} flow-path pairs; allowed: "
                    "fewer or smaller jobs, fewer EVs, or one job per scenario")
    if "optimal" not in scenario.policies:
        return
    for collective in collectives:
        for phase in collective.phases:
            entries = phase.flows.num_flows * g.planes * g.spines
            if entries > OPTIMAL_MAX_SLOT_ENTRIES:
                gib = entries * 4 * 16 / 2**30
                raise ScenarioError(
                    "policies",
                    f"'optimal' needs about {gib:.0f} GiB for {collective.name} "
                    f"({phase.flows.num_flows:,} flows x {g.planes * g.spines:,} paths); "
                    f"allowed up to {OPTIMAL_MAX_SLOT_ENTRIES:,} flow-path pairs: drop 'optimal' "
                    "from policies (or pass --policy for the others)")


@dataclasses.dataclass(frozen=True)
class SharingRow:
    """One job under one policy: its completion alone on the fabric and sharing it with the
    scenario's other jobs (None when a flow stalls), together / alone, and the flags of the
    solves (round_limit, iteration_cap) that the figures rest on."""

    policy: str
    job: str
    gpus: int
    alone_s: float | None
    together_s: float | None
    slowdown: float | None
    mixes: int              # distinct sets of concurrent phases solved together
    status: str = "ok"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _concat_flows(parts: list[Flows]) -> Flows:
    starts = [p.start for p in parts]
    start = None
    if any(x is not None for x in starts):
        start = np.concatenate([x if x is not None else np.zeros(p.num_flows)
                                for x, p in zip(starts, parts)])
    return Flows(np.concatenate([p.src for p in parts]), np.concatenate([p.dst for p in parts]),
                 np.concatenate([p.size for p in parts]), start)


def _run_jobs(policy: str, exact: Scenario, fabric: Fabric, jobs: list[Collective]
              ) -> tuple[list[float | None], int, int]:
    """(finish time per job or None if it stalls, mixes solved, solver status flags) of
    `jobs` started together at 0; see `sharing_rows`."""
    count = len(jobs)
    phase_index = [0] * count
    steps_left = [float(c.phases[0].repeat) for c in jobs]
    finish: list[float | None] = [None] * count
    done = [False] * count
    now, mixes, status = 0.0, 0, STATUS_OK
    while not all(done):
        active = [j for j in range(count) if not done[j]]
        parts, slot_parts, owners = [], [], []
        for j in active:
            phase = jobs[j].phases[phase_index[j]]
            if phase.flows.num_flows:
                parts.append(phase.flows)
                slot_parts.append(initial_slots(policy, exact, fabric, phase.flows,
                                                (jobs[j].stream, phase_index[j])))
                owners.append(np.full(phase.flows.num_flows, j))
        fabric_time = {j: 0.0 for j in active}
        if parts:
            flows = _concat_flows(parts)
            slots = None if slot_parts[0] is None else tuple(
                np.concatenate([sp[i] for sp in slot_parts]) for i in (0, 1))
            mixes += 1
            # mrc's swap coins: one key per mix (the draws differ from alone, as they would)
            outcome = solve_policy_phase(policy, exact, fabric, flows, (SHARING_STREAM, mixes),
                                         slots=slots)
            status |= int(outcome.result.status) | (ADAPT_CAP if outcome.capped else 0)
            rates = np.asarray(outcome.result.rates, np.float64)
            owner = np.concatenate(owners)
            begin = np.zeros(flows.num_flows) if flows.start is None else flows.start
            sending = flows.size > 0
            moving = sending & (rates > 0)
            ends = np.where(moving, begin + flows.size * 8e-9 / np.where(moving, rates, 1.0),
                            0.0)
            ends = np.where(sending & ~moving, np.inf, ends)
            for j in active:
                fabric_time[j] = float(ends[owner == j].max(initial=0.0))
        step = {}
        for j in active:
            phase = jobs[j].phases[phase_index[j]]
            step[j] = float(phase_duration_s(exact, phase, fabric_time[j])) / phase.repeat
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


SHARING_STREAM = 1 << 21


def sharing_rows(policy: str, scenario: Scenario, fabric: Fabric,
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
        code = status | alone_status
        text = "+".join(status_names(code & ~ADAPT_CAP) +
                        (["iteration_cap"] if code & ADAPT_CAP else [])).replace("ok+", "")
        t = together[j]
        rows.append(SharingRow(policy, collective.name, collective.gpus, alone, t,
                               t / alone if alone and t is not None else None, mixes, text))
    return rows


def link_upgrades(scenario: Scenario, fabric: Fabric, collectives: list[Collective],
                  baseline: dict, top_k: int = 5) -> list[dict]:
    """Per policy and workload item: the links whose capacity would most shorten it (the
    gradient of its time, then of its P100, with respect to each link's capacity; see
    fabricjax.sensitivity). Items solved as classes are skipped (no per-flow split)."""
    from fabricjax.sensitivity import collective_sensitivity

    rows = []
    for policy in scenario.policies:
        for item, collective in enumerate(collectives):
            outcomes = baseline[(policy, item)]
            if any(o.aggregated is not None for o in outcomes):
                continue
            links = collective_sensitivity(scenario, fabric, collective, outcomes, policy,
                                           top_k=top_k)
            rows.append({"policy": policy, "workload": collective.name, "links": links})
    return rows


def analyze(scenario: Scenario, *, trace: bool = False,
            progress: Callable[[str, int, int], None] | None = None,
            sensitivity: bool = False) -> Report:
    """Evaluate every policy on every workload item of the scenario, then (when the scenario
    has `failures`) under every failure set, and the reliability what-if.

    `trace`: keep mrc's P100 after every iteration in its records."""
    if scenario.fabric.kind != "multiplane-clos":
        from fabricjax.graph_analysis import analyze_graph

        return analyze_graph(scenario, trace=trace, progress=progress, sensitivity=sensitivity)
    fabric = build_fabric(scenario.fabric)
    collectives = build_workload(scenario, np.random.default_rng([scenario.seed, 0]))
    check_resources(scenario, collectives, fabric)
    total = len(scenario.policies) * sum(len(c.phases) for c in collectives)
    done = 0
    records = []
    baseline = {}
    for policy in scenario.policies:
        for item, collective in enumerate(collectives):
            outcomes = []
            for index, phase in enumerate(collective.phases):
                if progress is not None:
                    progress(f"{policy}: {collective.name} ({phase.name})", done, total)
                outcomes.append(solve_policy_phase(
                    policy, scenario, fabric, phase.flows, (collective.stream, index),
                    trace=trace,
                    progressive=simulate_phase(scenario, phase.flows, policy)))
                done += 1
            baseline[(policy, item)] = outcomes
            records.append(_collective_record(policy, collective, outcomes, fabric, scenario))
    sharing = None
    jobs = [c for c in collectives if c.job]
    if len(jobs) > 1:
        sharing = []
        for policy in scenario.policies:
            if progress is not None:
                progress(f"{policy}: {len(jobs)} jobs sharing the fabric", done, total)
            sharing += sharing_rows(policy, scenario, fabric, jobs)
    upgrades = None
    if sensitivity:
        if progress is not None:
            progress("link sensitivity", done, total)
        upgrades = link_upgrades(scenario, fabric, collectives, baseline)
    study = reliability = None
    if scenario.failures is not None or scenario.reliability is not None:
        from fabricjax.resilience import failure_study, reliability_whatif

        if scenario.failures is not None:
            study = failure_study(scenario, fabric, collectives, baseline, progress=progress)
        if scenario.reliability is not None:
            reliability = reliability_whatif(scenario, fabric, collectives, baseline)
    if progress is not None:
        progress("done", 1, 1)
    return Report(
        scenario=scenario.name,
        seed=scenario.seed,
        fabric=fabric_summary(scenario.fabric),
        records=records,
        solver=scenario.solver.model_dump(),
        # failures.chunk only says how many sets share a device call; it never changes a
        # result, so it is left out for the JSON to be byte-identical across chunkings
        config=scenario.model_dump(exclude={"failures": {"chunk"}}),
        failures=study,
        reliability=reliability,
        sharing=sharing,
        sensitivity=upgrades,
    )
