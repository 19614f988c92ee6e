"""`analyze`: scenario in, one record per (policy, workload item) out.

This is the host-side orchestration of the design's data flow: build the fabric and the
workload (numpy), draw each policy's path slots (numpy), then one jitted solve per phase and
policy with one transfer in and one out. No numerical work happens here beyond turning the
per-phase device results into the collective's time and bandwidth.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from fabricjax.errors import ScenarioError
from fabricjax.fabric import TIER_NAMES, Fabric, build_fabric, fabric_summary
from fabricjax.paths import PathSet, hashed_slots, spread_slots
from fabricjax.scenario import Scenario
from fabricjax.solver import STATUS_OK, status_names
from fabricjax.workload import Collective, Flows, build_workload

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
    """Whether a phase's time needs only the slowest max-min rate (`solver.rates: auto` and
    every sending flow sends the same bytes): exact in one pass instead of the full rounds."""
    if scenario.solver.rates == "full":
        return False
    sending = flows.size[flows.size > 0]
    return bool(sending.size == 0 or np.all(sending == sending[0]))


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
    plane: np.ndarray | None = None  # ecmp / spray / mrc: the slots the phase ran on
    spine: np.ndarray | None = None  # (mrc: its returned EV set), what failures start from


def solve_policy_phase(policy: str, scenario: Scenario, fabric: Fabric, flows: Flows,
                       stream: tuple[int, int], *, trace: bool = False,
                       alive: np.ndarray | None = None) -> PhaseOutcome:
    """Draw `policy`'s slots for one phase and solve it on the device (one jitted call)."""
    import jax

    seed = scenario.seed
    item, index = stream
    top_k = min(TOP_LINKS, fabric.num_links)
    bounds = _tier_bounds(fabric)
    geom = fabric.geometry
    if policy in ("ecmp", "spray"):
        rng = np.random.default_rng([seed, _POLICY_STREAM[policy], item, index])
        plane, spine = policy_slots(policy, scenario, fabric, flows, rng)
        return PhaseOutcome(solve_slots(fabric, flows, plane, spine, scenario, alive),
                            slots=plane.shape[1], plane=plane, spine=spine)
    inputs = _phase_inputs(fabric, flows, scenario, alive)
    demand, size32, flow_cap, capacity, alive_mask, eps, max_rounds = inputs
    if policy == "mrc":
        from fabricjax.mrc import MRC_ITERATION_CAP, MRC_STATUS_NAMES, solve_mrc_phase

        cfg = scenario.mrc
        # MRC starts from spraying's EV set (same draw when the EV counts match), so the
        # difference between the two columns is the adaptation alone.
        rng = np.random.default_rng([seed, _POLICY_STREAM["spray"], item, index])
        plane, spine = spread_slots(geom, flows.num_flows, cfg.evs, rng)
        key = phase_key(seed, item, index)
        args = jax.device_put((flows.src, flows.dst, plane, spine, demand, size32, flow_cap,
                               capacity, alive_mask, key, np.float32(cfg.threshold),
                               np.float32(cfg.damping), np.float32(cfg.tol), eps, max_rounds))
        mrc, result = jax.device_get(solve_mrc_phase(
            geom, *args, max_iters=cfg.max_iters, patience=cfg.patience, tier_bounds=bounds,
            top_k=top_k, slowest_only=slowest_only(scenario, flows)))
        iterations = int(mrc.iterations)
        return PhaseOutcome(result, slots=cfg.evs, iterations=iterations,
                            convergence=MRC_STATUS_NAMES[int(mrc.status)],
                            residual=float(mrc.residual),
                            trace=np.asarray(mrc.trace[: iterations + 1]) if trace else None,
                            capped=int(mrc.status) == MRC_ITERATION_CAP,
                            plane=plane, spine=np.asarray(mrc.spine))
    if policy == "optimal":
        from fabricjax.optimal import (STATUS_ITERATION_LIMIT, STATUS_NO_PATH, full_slot_grid,
                                       optimal_split)
        from fabricjax.paths import solve_clos_weighted_phase

        cfg = scenario.optimal
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
        return PhaseOutcome(result, slots=plane.shape[1], iterations=int(opt.iterations),
                            convergence=convergence, residual=float(opt.gap), capped=capped,
                            lost_plane=bool(status & STATUS_NO_PATH))
    raise ValueError(f"unknown policy {policy!r}")  # pragma: no cover - schema forbids


def _quantile_dict(row: np.ndarray) -> dict:
    return {"p50": float(row[0]), "p99": float(row[1]), "p100": float(row[2])}


def _collective_record(policy: str, collective: Collective, outcomes: list[PhaseOutcome],
                       fabric: Fabric, scenario: Scenario) -> PolicyRecord:
    latency = scenario.solver.step_latency_us * 1e-6
    phase_results = [o.result for o in outcomes]
    worst = max(range(len(phase_results)), key=lambda i: float(phase_results[i].stats[0, 2]))
    busiest = phase_results[worst]
    status = STATUS_OK
    stalled = 0
    completion = 0.0
    ideal = 0.0
    rounds = 0
    min_rate = np.inf
    for phase, res in zip(collective.phases, phase_results):
        status |= int(res.status)
        stalled += int(res.stalled)
        rounds = max(rounds, int(res.rounds))
        completion += phase.repeat * (float(res.phase_time) + latency)
        ideal += phase.repeat * (float(res.ideal_time) + latency)
        sending = phase.flows.size > 0
        if np.any(sending):
            min_rate = min(min_rate, float(np.min(res.rates[sending])))
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
    status_text = "+".join(status_names(status & ~ADAPT_CAP) +
                           (["iteration_cap"] if status & ADAPT_CAP else []) +
                           (["lost_plane"] if any(o.lost_plane for o in outcomes) else []))
    status_text = status_text.replace("ok+", "")
    traces = [o.trace for o in outcomes if o.trace is not None]
    return PolicyRecord(
        policy=policy,
        workload=collective.name,
        collective=collective.kind,
        gpus=collective.gpus,
        size_bytes=collective.size,
        steps=collective.steps,
        paths_per_flow=outcomes[0].slots,
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
        convergence=adaptive[worst].convergence if adaptive else None,
        residual=max(o.residual for o in adaptive) if adaptive else None,
        trace=[float(v) for v in traces[worst]] if traces else None,
    )


# The optimal bound keeps about a dozen float32 [commodities, P, S] arrays and weights over
# the full [F, P * S] slot grid; past this many slot entries it would not fit a laptop.
OPTIMAL_MAX_SLOT_ENTRIES = 2**26


def check_resources(scenario: Scenario, collectives: list[Collective], fabric: Fabric) -> None:
    """Refuse, before the solvers allocate, what would not fit (a ScenarioError names the
    fix). Runs after the (small) host-side fabric and workload arrays are built."""
    if "optimal" not in scenario.policies:
        return
    g = fabric.geometry
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


def analyze(scenario: Scenario, *, trace: bool = False,
            progress: Callable[[str, int, int], None] | None = None) -> Report:
    """Evaluate every policy on every workload item of the scenario, then (when the scenario
    has `failures`) under every failure set, and the reliability what-if.

    `trace`: keep mrc's P100 after every iteration in its records."""
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
                outcomes.append(solve_policy_phase(policy, scenario, fabric, phase.flows,
                                                   (item, index), trace=trace))
                done += 1
            baseline[(policy, item)] = outcomes
            records.append(_collective_record(policy, collective, outcomes, fabric, scenario))
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
    )
