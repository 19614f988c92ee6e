"""THE phase program: policy -> incidence -> loads -> rates -> phase time, for every policy,
every fabric kind and every failure set.

Contract. `phase_core` is one traceable function: the policy reacts to the alive mask and
capacities (`policies.base.Policy.react`), and the routes evaluate its split
(`solver.incidence`'s `evaluate`: slots -> links -> incidence -> loads, utilisation
statistics, max-min rates and times). `run_phase` is its jit; the no-failure baseline is the
case where every link is alive, and `engine.batch` maps the same `phase_core` over failure
masks. A phase is laid out for the device once (`prepare_phase` -> `PreparedPhase`: slots,
padding, arrival cohorts) and the baseline, the failure sets and the progressive simulation
all start from it. `solve_policy_phase` is the host entry: it decides how the phase is solved
(`engine.plan`), prepares it, makes one jitted call and one transfer out, and returns a
`PhaseOutcome` of numpy arrays whose times are finished on the host (`engine.timing`).

Random streams: a policy's slots come from numpy's default_rng([seed, stream, item, index])
(`Policy.init_stream`), so adding a policy or a workload item never moves another's draws;
the device key of a phase is `phase_key(seed, item, index)` for the baseline and
`phase_key(seed, item, index, policy.stream)` for failure sets.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.executables import cached_jit
from fabricjax.core.status import Status
from fabricjax.engine.plan import (padded_flows, progressive_give_up, slowest_only,
                                   use_aggregation)
from fabricjax.engine.timing import (ArrivalCohorts, arrival_cohorts, base_rtt_s,
                                     clocked_durations, fabric_end_s, relative_starts,
                                     wire_bytes)
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.clos import ClosGeometry
from fabricjax.policies import get
from fabricjax.policies.base import PhaseArrays, Policy, Reaction, Slots
from fabricjax.solver.aggregate import (flow_class_index, flow_classes, offered_class_demand,
                                        solve_class_slots)
from fabricjax.solver.gradients import PhaseSplit, split_of
from fabricjax.solver.incidence import ClosRoutes, StoredRoutes, stored_routes
from fabricjax.solver.maxmin import TOP_LINKS, PhaseResult
from fabricjax.solver.progressive import Progressive, progressive_completion
from fabricjax.workload.flows import Flows


# --------------------------------------------------------------------------- host inputs

def offered_demand(flows: Flows, nic_gbps: float | np.ndarray, num_gpus: int) -> np.ndarray:
    """Each GPU offers its full NIC rate (a number, or float[N] per GPU), shared among the
    flows it sends in proportion to their bytes (equally when they are equal): float32[F]
    Gbit/s. A byte-skewed phase (hot experts of a MoE all-to-all) thus loads the links towards
    its hot spots as heavily as their bytes will, and its utilisation shows them."""
    size = np.asarray(flows.size, np.float64)
    sent = np.bincount(flows.src, weights=size, minlength=num_gpus)
    count = np.bincount(flows.src, minlength=num_gpus)
    nic = nic_gbps[flows.src] if np.ndim(nic_gbps) else nic_gbps
    total = sent[flows.src]
    # a GPU whose flows all carry no bytes shares equally (they are inert anyway)
    share = np.where(total > 0, size / np.where(total > 0, total, 1.0), 1.0 / count[flows.src])
    return (nic * share).astype(np.float32)


def null_result(fabric: AnyFabric) -> PhaseResult:
    """The PhaseResult of a phase with no fabric flow (all inside servers): nothing loaded."""
    k = min(TOP_LINKS, fabric.num_links)
    return PhaseResult(stats=np.zeros((1 + len(fabric.tier_names), 3), np.float32),
                       top_links=np.zeros(k, np.int32), top_util=np.full(k, -np.inf, np.float32),
                       total_load=np.float32(0), rates=np.zeros(0, np.float32),
                       phase_time=np.float32(0), cohort_end=np.full(1, -np.inf, np.float32),
                       stalled=np.int32(0), rounds=np.int32(0), status=np.int32(0))


def phase_key(seed: int, item: int, index: int, stream: int = 0):
    """The JAX PRNG key of one phase of one workload item (stream 0: the baseline)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), item), index)
    return jax.random.fold_in(key, stream) if stream else key


@cached_jit
def _phase_key_program(seed, item, index, stream):
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), item), index)
    folded = jax.random.key_data(jax.random.fold_in(key, stream))
    return jnp.where(stream != 0, folded, jax.random.key_data(key))


def phase_key_data(seed: int, item: int, index: int, stream: int = 0) -> np.ndarray:
    """`phase_key`'s raw key data (uint32), from one compiled program: the same bits, without
    the eager operations (each its own program to load in a fresh process)."""
    return np.asarray(_phase_key_program(*(np.int32(v) for v in (seed, item, index, stream))))


def phase_arrays(scenario: Scenario, fabric: AnyFabric, flows: Flows) -> PhaseArrays:
    """The phase's flows as host arrays for the device: offered demand, the bytes each flow
    puts on the wire (payload and headers, `engine.timing.wire_bytes`), the NIC cap."""
    nic = fabric.gpu_nic_gbps
    demand = offered_demand(flows, fabric.nic_rate(), fabric.gpus)
    return PhaseArrays(src=np.asarray(flows.src, np.int32), dst=np.asarray(flows.dst, np.int32),
                       demand=demand, size=wire_bytes(scenario, flows.size),
                       flow_cap=nic[flows.src].astype(np.float32))


def host_routes(fabric: AnyFabric, flows: Flows, pool: str) -> StoredRoutes | None:
    """The phase's candidate paths as numpy `StoredRoutes` (`fabric.candidate_paths` of the
    `pool`: "equal-cost" or "candidates"), or None where routes are arithmetic (a Clos)."""
    paths = fabric.candidate_paths(flows.src, flows.dst, pool)
    if paths is None:
        return None
    return stored_routes(*paths, fabric.tier, fabric.plane, fabric.planes, fabric.link_src,
                         fabric.link_dst)


def sending_hops(fabric: AnyFabric, flows: Flows) -> int:
    """Links on the longest path of the flows that send bytes (0 without any)."""
    sending = flows.size > 0
    if not np.any(sending):
        return 0
    return int(fabric.flow_hops(flows.src[sending], flows.dst[sending]).max())


def initial_slots(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                  stream: tuple[int, int], routes: StoredRoutes | None = None) -> Slots:
    """The slots `policy` starts a phase from, drawn from the (seed, policy, item, phase)
    stream, so a job's flows get the same slots alone and sharing the fabric."""
    item, index = stream
    if routes is None:
        routes = host_routes(fabric, flows, policy.pool(scenario))
    rng = np.random.default_rng([scenario.seed, policy.init_stream(), item, index])
    return policy.init(scenario, fabric, flows, routes, rng)


def concat_slots(parts: list[Slots]) -> Slots | None:
    """The slots of several phases' flows side by side (job mixes), or None when a policy's
    slots carry per-phase state (optimal's commodities): then it starts afresh on the union."""
    if not parts or any(p.state for p in parts):
        return None
    return Slots(np.concatenate([p.plane for p in parts]),
                 np.concatenate([p.choice for p in parts]))


def _grow(a: np.ndarray, extra: int, fill) -> np.ndarray:
    tail = np.broadcast_to(np.asarray(fill, a.dtype), (extra, *a.shape[1:]))
    return np.concatenate([a, tail])


def pad_phase(phase: PhaseArrays, slots: Slots, count: int) -> tuple[PhaseArrays, Slots]:
    """The phase and its slots padded to `count` flows with inert ones: GPU 0 to itself (one
    T0, so no spine choice matters and mrc never marks one), no demand, no bytes, no NIC cap,
    on flow 0's slots (each slot keeps its plane). `phase_core` gives them no weight, so they
    put nothing on a link and freeze at rate 0 without stalling; the host drops their rows."""
    extra = count - phase.src.shape[0]
    if extra <= 0:
        return phase, slots
    padded = PhaseArrays(*(_grow(a, extra, 0) for a in phase))
    return padded, Slots(_grow(slots.plane, extra, slots.plane[0]),
                         _grow(slots.choice, extra, slots.choice[0]), slots.state)


# --------------------------------------------------------------------------- one prepared phase

@dataclasses.dataclass(frozen=True, eq=False)
class PreparedPhase:
    """One phase of one workload item under one policy, ready for the device, shared by the
    no-failure baseline, every failure set and the progressive simulation (host numpy; the
    device copy is made once, `device`).

    flows: the phase's real flows (F). count: the flows on the device (a Clos pads to its
    shape bucket with inert flows, `pad_phase`; a stored-path fabric keeps F). arrays: the
    padded `PhaseArrays`. routes: the stored candidate paths (None on a Clos, whose routes are
    arithmetic). slots: the policy's initial slots, padded. cohorts: the flows' arrival
    cohorts (`engine.timing.arrival_cohorts`), padded. hops: links on the longest sending path.
    pool: the candidate pool the choices index on a stored-path fabric. geometry: the Clos's
    (None on a stored-path fabric)."""

    policy: Policy
    flows: Flows
    count: int
    arrays: PhaseArrays
    routes: StoredRoutes | None
    slots: Slots
    cohorts: ArrivalCohorts
    hops: int
    pool: str
    geometry: ClosGeometry | None

    @functools.cached_property
    def device(self) -> tuple:
        """(routes, arrays, cohort, offset) on the default device, uploaded once."""
        arrays, routes, cohort, offset = jax.device_put(
            (self.arrays, self.routes, self.cohorts.cohort, self.cohorts.offset))
        return self.device_routes(arrays, routes), arrays, cohort, offset

    def device_routes(self, arrays: PhaseArrays, routes: StoredRoutes | None):
        """The routes object of the device program, from (placed) arrays and stored routes."""
        if routes is None:
            return ClosRoutes(self.geometry, arrays.src, arrays.dst)
        return routes

    def pad(self, a: np.ndarray, fill) -> np.ndarray:
        """A per-flow host array [F, ...] padded to `count` rows with `fill`."""
        return _grow(np.asarray(a), self.count - a.shape[0], fill) if self.count > a.shape[0] \
            else np.asarray(a)


def prepare_phase(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                  stream: tuple[int, int], slots: Slots | None = None) -> PreparedPhase:
    """Draw `policy`'s slots for one phase (or take `slots`) and lay the phase out for the
    device: padding (a Clos, unless the slots carry per-phase state), arrival cohorts, hops."""
    pool = policy.pool(scenario)
    routes = host_routes(fabric, flows, pool)
    if slots is None:
        slots = initial_slots(policy, scenario, fabric, flows, stream, routes)
    arrays = phase_arrays(scenario, fabric, flows)
    count = flows.num_flows
    if routes is None and not slots.state:      # a Clos: pad to the shape bucket
        count = max(count, padded_flows(scenario, flows.num_flows))
        arrays, slots = pad_phase(arrays, slots, count)
    return PreparedPhase(policy=policy, flows=flows, count=count, arrays=arrays, routes=routes,
                         slots=slots, cohorts=arrival_cohorts(flows, count),
                         hops=sending_hops(fabric, flows),
                         pool=pool,
                         geometry=fabric.geometry if fabric.kind.arithmetic_routes else None)


# --------------------------------------------------------------------------- the program

def phase_core(policy: Policy, routes, phase: PhaseArrays, plane, choice, state: dict, alive,
               capacity, key_data, options: dict, eps, max_rounds, cohort, offset, *,
               settings: tuple, layout, tier_bounds, top_k: int, num_cohorts: int = 1,
               slowest_only: bool = False, p100_only: bool = False, clock_rows: int = 0,
               restart: bool = False
               ) -> tuple[Reaction, PhaseResult]:
    """The phase program (traceable): the policy's reaction, then its split evaluated through
    the routes (`routes.evaluate`: slots -> links -> incidence -> loads, rates, times).
    alive bool[L] and capacity float32[L] cover the real links; key_data: raw PRNG key data
    (uint32, so sets and devices can carry it as plain arrays); cohort, offset: the flows'
    arrival cohorts (`engine.timing`); the keyword arguments are static: `layout` the
    fabric's four structural link ranges (the policy's), `tier_bounds` the statistics'
    tiers, `clock_rows` the rows of an adapting policy's speed record (`Policy.clock_rows`;
    0 for failure sets, whose flow times are not reported); `restart` (a failure set, from
    the baseline's slots): `Policy.restart` reacts, without a speed record."""
    key = jax.random.wrap_key_data(key_data)
    if restart:
        reaction = policy.restart(routes, phase, plane, choice, state, alive, capacity, key,
                                  options, settings, layout)
    else:
        # asked for only when wanted: a policy written to the older `react` signature (a
        # plugin, the docs' toy) has no `clock_rows` and keeps working
        clock = {"clock_rows": clock_rows} if clock_rows else {}
        reaction = policy.react(routes, phase, plane, choice, state, alive, capacity, key,
                                options, settings, layout, **clock)
    # padding flows (`pad_phase`: no demand; every real flow offers some) carry no weight
    reaction = reaction._replace(weights=jnp.where(phase.demand[:, None] > 0,
                                                   reaction.weights, 0.0))
    flow_cap = phase.flow_cap if reaction.carried is None else phase.flow_cap * reaction.carried
    result = routes.evaluate(plane, reaction.choice, reaction.weights, phase.demand, phase.size,
                             flow_cap, capacity, alive,
                             resend_tolerance=reaction.resend_tolerance, eps=eps,
                             max_rounds=max_rounds,
                             tier_bounds=tier_bounds, top_k=top_k, slowest_only=slowest_only,
                             p100_only=p100_only, cohort=cohort, offset=offset,
                             num_cohorts=num_cohorts)
    return reaction, result


run_phase = cached_jit(phase_core, static_argnums=0,
                       static_argnames=("settings", "layout", "tier_bounds", "top_k",
                                        "num_cohorts", "slowest_only", "p100_only",
                                        "clock_rows"))


@dataclasses.dataclass(frozen=True)
class Split:
    """The split a phase ended on, per flow (host numpy, F real flows, K slots): what the
    failure sets, the progressive simulation and the studies start from.

    plane, choice: int32[F, K] the slots (mrc: its returned EV set; optimal: every candidate).
    weights: float32[F, K] the share of each flow on each slot. carried: float32[F] the share
    of each flow's demand the split carries (1: all of it). state: the policy's per-phase
    state (optimal's commodities). pool: on a stored-path fabric, the candidate pool the
    choices index."""

    plane: np.ndarray
    choice: np.ndarray
    weights: np.ndarray
    carried: np.ndarray
    state: dict
    pool: str
    resend_tolerance: float | None = None   # a resending sprayer's (Reaction.resend_tolerance)


@dataclasses.dataclass(frozen=True)
class Adaptation:
    """How an iterative policy's iteration ended on one phase: iterations, how it ended in
    words, its residual (mrc: overload; optimal: gap), whether it hit its cap, whether a flow
    lost every live path of a plane (optimal), and the P100 after each iteration when asked
    (`trace`, else None). With the clock (`Policy.clock_rows`), `window_speeds`
    float32[m, F]: how fast each real flow moves in the states the policy passes through
    before it settles, relative to the settled split, and `window_lengths_s` float64[m] how
    long each lasts (a reaction window, the base RTT of the phase's longest path, per
    iteration): what `engine.timing.clocked_durations` charges."""

    iterations: int
    convergence: str
    residual: float
    capped: bool
    lost_plane: bool
    trace: np.ndarray | None = None
    window_speeds: np.ndarray | None = None
    window_lengths_s: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class PhaseOutcome:
    """One phase under one policy (host numpy).

    result: the evaluation (`solver.maxmin.PhaseResult`; `rates` per real flow). slots: path
    slots per flow. fabric_end_s: float64 seconds from the phase's first start to its last
    fabric flow's end, on the wire (`engine.timing.fabric_end_s`). hops: links on the longest
    sending path. prepared: the phase laid out for the device (None for a phase without fabric
    flows or solved as classes). split: the per-flow split it ended on (None when solved as
    classes). adaptation: an iterative policy's ending (None for the others). progressive: the
    flow-level simulation on the settled split (None when it did not run). classes: the
    (T0, T0) classes it was solved as (None: flow by flow). first_step: float32[F] the
    progressive durations of the phase's first step under the clock of a policy that adapts
    over time (`first_step_durations`; None otherwise). dynamic: the phase under the dynamic
    level (`engine.dynamic.DynamicOutcome`; None when `solver.model` is static)."""

    result: PhaseResult
    slots: int
    fabric_end_s: float
    hops: int
    prepared: PreparedPhase | None = None
    split: Split | None = None
    adaptation: Adaptation | None = None
    progressive: Progressive | None = None
    classes: int | None = None
    first_step: np.ndarray | None = None
    dynamic: object | None = None


# the static split over given slots: equal over the live ones, no reaction (the base policy)
GIVEN_SLOTS = Policy(name="given slots")


def solve_slots(fabric: AnyFabric, flows: Flows, plane: np.ndarray, choice: np.ndarray,
                scenario: Scenario, alive: np.ndarray | None = None) -> PhaseResult:
    """One phase split equally over the given slots (no reaction: what oblivious spraying
    does), through the phase program: its PhaseResult (numpy)."""
    return solve_policy_phase(GIVEN_SLOTS, scenario, fabric, flows, (0, 0), alive=alive,
                              slots=Slots(np.asarray(plane, np.int32),
                                          np.asarray(choice, np.int32))).result


def window_speeds(speeds: np.ndarray, final_speed: np.ndarray, iterations: int,
                  window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(speeds float32[m, F], lengths float64[m]) of the states an adapting policy passed
    through, from its record (`Reaction.speeds`: rows 0..R-1 the sets after 0..R-1
    iterations, row R the sum of the sets after R..iterations): the sets after 0 ..
    iterations-1 iterations, one reaction window (`window_s`) each, the ones from R on as one
    state of their mean speed, all relative to the returned set's (`final_speed`; a flow
    stalled there keeps 1)."""
    rows = speeds.shape[0] - 1
    kept = min(iterations, rows)
    parts = [speeds[:kept]]
    lengths = [np.full(kept, window_s)]
    if iterations > rows:           # the sets after rows .. iterations, summed in row `rows`
        parts.append(speeds[rows:] / (iterations + 1 - rows))
        lengths.append(np.array([(iterations - rows) * window_s]))
    relative = np.concatenate(parts) / np.where(final_speed > 0, final_speed, 1.0)
    relative = np.where(final_speed > 0, relative, 1.0)
    return relative.astype(np.float32), np.concatenate(lengths)


def solve_prepared(prepared: PreparedPhase, scenario: Scenario, fabric: AnyFabric,
                   stream: tuple[int, int], *, alive: np.ndarray | None = None,
                   trace: bool = False, clock: bool = False) -> PhaseOutcome:
    """The phase program on a prepared phase: one transfer in (the phase's arrays once, then
    the mask and options), one jitted call, one transfer out. `alive`: bool[L] (None: every
    link alive, the baseline); the policy reacts to it as it does in a failure set. `clock`:
    keep an adapting policy's speed record (`Adaptation.window_speeds`) for the flow times."""
    policy, flows = prepared.policy, prepared.flows
    item, index = stream
    routes, arrays, cohort, offset = prepared.device
    alive_mask = np.ones(fabric.num_links, bool) if alive is None else np.asarray(alive, bool)
    cfg = scenario.solver
    clock_rows = policy.clock_rows(scenario) if clock else 0
    args = jax.device_put((prepared.slots.plane, prepared.slots.choice, prepared.slots.state,
                           alive_mask, fabric.capacity,
                           phase_key_data(scenario.seed, item, index),
                           policy.options(scenario), np.float32(cfg.eps),
                           np.int32(cfg.max_rounds)))
    reaction, result = jax.device_get(run_phase(
        policy, routes, arrays, *args, cohort, offset, settings=policy.settings(scenario),
        layout=fabric.layout_bounds, tier_bounds=fabric.tier_bounds,
        top_k=min(TOP_LINKS, fabric.num_links), num_cohorts=prepared.cohorts.count,
        slowest_only=slowest_only(scenario, flows), clock_rows=clock_rows))
    real = flows.num_flows                  # the padding's rows go
    result = result._replace(rates=result.rates[:real])
    status = int(reaction.status)
    adaptation = None
    if policy.iterative:
        iterations = int(reaction.iterations)
        speeds = lengths = None
        if reaction.speeds is not None:
            speeds, lengths = window_speeds(
                np.asarray(reaction.speeds)[:, :real], np.asarray(reaction.final_speed)[:real],
                iterations, float(base_rtt_s(scenario, prepared.hops)))
        adaptation = Adaptation(
            iterations=iterations, convergence=policy.convergence(status, iterations),
            residual=float(reaction.residual), capped=bool(status & Status.ITERATION_CAP),
            lost_plane=bool(status & Status.LOST_PLANE),
            trace=(np.asarray(reaction.trace[: iterations + 1])
                   if trace and reaction.trace is not None else None),
            window_speeds=speeds, window_lengths_s=lengths)
    carried = (np.ones(real, np.float32) if reaction.carried is None
               else np.asarray(reaction.carried[:real]))
    split = Split(plane=prepared.slots.plane[:real], choice=np.asarray(reaction.choice[:real]),
                  weights=np.asarray(reaction.weights[:real]), carried=carried,
                  state=prepared.slots.state, pool=prepared.pool,
                  resend_tolerance=(None if reaction.resend_tolerance is None
                                    else float(reaction.resend_tolerance)))
    return PhaseOutcome(result=result, slots=prepared.slots.count,
                        fabric_end_s=fabric_end_s(prepared.cohorts, result.cohort_end),
                        hops=prepared.hops, prepared=prepared, split=split, adaptation=adaptation)


def solve_policy_phase(policy: str | Policy, scenario: Scenario, fabric: AnyFabric,
                       flows: Flows, stream: tuple[int, int], *, trace: bool = False,
                       alive: np.ndarray | None = None, slots: Slots | None = None,
                       progressive: bool = False) -> PhaseOutcome:
    """The host entry of one phase: draw `policy`'s slots (or take `slots`), solve it on the
    device (as classes where a phase would not fit flow by flow), and, with `progressive`,
    run the flow-level simulation on the split the policy ended with."""
    policy = get(policy) if isinstance(policy, str) else policy
    if flows.num_flows == 0:
        return PhaseOutcome(null_result(fabric), slots=0, fabric_end_s=0.0, hops=0)
    # decided before any [F, K] slot array exists: aggregation is for what would not fit
    if slots is None and use_aggregation(scenario, fabric, flows, alive, policy.name):
        return aggregated_phase(policy, scenario, fabric, flows, stream)
    prepared = prepare_phase(policy, scenario, fabric, flows, stream, slots)
    outcome = solve_prepared(prepared, scenario, fabric, stream, alive=alive, trace=trace,
                             clock=progressive)
    if progressive:
        outcome = dataclasses.replace(
            outcome, progressive=simulate_progressive(scenario, fabric, outcome, alive))
        outcome = dataclasses.replace(outcome, first_step=first_step_durations(outcome))
    return outcome


def aggregated_phase(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                     stream: tuple[int, int]) -> PhaseOutcome:
    """A phase solved as (source T0, destination T0) classes (solver.aggregate): the slots
    `policy.class_slots` puts on each class (spray's expected split, ECMP's multinomial QP
    counts). The result reads as a flow-by-flow one: every flow gets its class's rate."""
    item, index = stream
    rng = np.random.default_rng([scenario.seed, policy.stream, item, index])
    geom = fabric.geometry
    classes = flow_classes(geom, flows.src, flows.dst)
    class_slots, plane_slots = policy.class_slots(geom, classes, scenario, rng)
    out = solve_class_slots(geom, classes, class_slots, plane_slots,
                            offered_class_demand(geom, classes),
                            float(wire_bytes(scenario, flows.size[:1])[0]),
                            fabric.capacity, top_k=min(TOP_LINKS, fabric.num_links))
    rates = np.asarray(out.result.rates)[flow_class_index(geom, classes, flows.src, flows.dst)]
    result = out.result._replace(rates=rates.astype(np.float32))
    return PhaseOutcome(result, slots=policy.slots_per_flow(scenario),
                        fabric_end_s=fabric_end_s(arrival_cohorts(flows), result.cohort_end),
                        hops=sending_hops(fabric, flows),
                        classes=out.num_classes)


# --------------------------------------------------------------------------- on a fixed split

def _split_inputs(outcome: PhaseOutcome, fabric: AnyFabric, alive: np.ndarray | None):
    """(routes, arrays, plane, choice, weights, carried, alive) on the device for the split a
    phase ended on, padded as the phase was (the padding has no weight)."""
    if outcome.split is None or outcome.prepared is None:
        raise ValueError("this needs the per-flow slots of the phase; it was solved as "
                         "classes (set solver.aggregate: never)")
    prepared, split = outcome.prepared, outcome.split
    routes, arrays, _, _ = prepared.device
    alive_mask = np.ones(fabric.num_links, bool) if alive is None else np.asarray(alive, bool)
    host = (prepared.pad(split.plane, split.plane[0]), prepared.pad(split.choice, split.choice[0]),
            prepared.pad(split.weights, 0.0), prepared.pad(split.carried, 1.0), alive_mask)
    return (routes, arrays, *jax.device_put(host))


@cached_jit
def _progressive_program(routes, phase: PhaseArrays, plane, choice, weights, carried, start,
                         alive, capacity, eps, max_rounds, max_events, batch,
                         give_up_after, resend_tolerance) -> Progressive:
    ids, coef = routes.split_incidence(plane, choice, weights)
    capacity_ext = jnp.concatenate([jnp.where(alive, capacity, 0.0), jnp.array([jnp.inf])]
                                   ).astype(jnp.float32)
    flow_cap = phase.flow_cap * carried
    # a resending sprayer's rates at every event (None: the fixed split's, one program less)
    rates = (None if resend_tolerance is None else
             routes.split_rates(plane, choice, weights, flow_cap, capacity_ext,
                                resend_tolerance, eps=eps, max_rounds=max_rounds))
    return progressive_completion(ids, coef, phase.size, start, flow_cap,
                                  capacity_ext, eps=eps, max_rounds=max_rounds,
                                  max_events=max_events, batch=batch,
                                  give_up_after=give_up_after, rates=rates)


def simulate_progressive(scenario: Scenario, fabric: AnyFabric, outcome: PhaseOutcome,
                         alive: np.ndarray | None = None) -> Progressive:
    """The progressive (flow-level) simulation of one phase on the split `outcome` ran:
    solver.progressive.Progressive of numpy arrays over the real flows. Start times go to the
    device relative to the phase's first start; durations come back per flow."""
    cfg = scenario.solver
    routes, arrays, plane, choice, weights, carried, alive_dev = _split_inputs(
        outcome, fabric, alive)
    prepared = outcome.prepared
    flows = prepared.flows
    cohorts = prepared.cohorts          # the padding (no bytes, cohort 0) ends at once
    start = (cohorts.base[cohorts.cohort] + cohorts.offset).astype(np.float32)
    args = jax.device_put((start, fabric.capacity, np.float32(cfg.eps),
                           np.int32(cfg.max_rounds), np.int32(cfg.max_events),
                           np.float32(cfg.event_batch), np.int32(progressive_give_up(scenario))))
    tolerance = outcome.split.resend_tolerance
    out = jax.device_get(_progressive_program(
        routes, arrays, plane, choice, weights, carried, args[0], alive_dev, *args[1:],
        None if tolerance is None else np.float32(tolerance)))
    real = flows.num_flows
    return out._replace(finish=out.finish[:real], duration=out.duration[:real])


def first_step_durations(outcome: PhaseOutcome) -> np.ndarray | None:
    """float32[F]: the durations of the phase's first step when its policy adapts over time
    (`Adaptation.window_speeds`): its progressive durations charged for the states the
    policy passed through before it settled (`engine.timing.clocked_durations`). None when
    there is nothing to charge. Only the first of a phase's `repeat` steps pays: the same
    connections carry the later steps, and MRC keeps its EVs from one step to the next."""
    adaptation, run = outcome.adaptation, outcome.progressive
    if run is None or adaptation is None or adaptation.window_speeds is None:
        return None
    return clocked_durations(run.duration, relative_starts(outcome.prepared.flows),
                             adaptation.window_speeds, adaptation.window_lengths_s
                             ).astype(np.float32)


@cached_jit
def _split_program(routes, phase: PhaseArrays, plane, choice, weights, carried, alive,
                   tie_rtol) -> PhaseSplit:
    ids, coef = routes.split_incidence(plane, choice, weights)
    return split_of(ids, coef, alive.shape[0], phase.demand, phase.size,
                    phase.flow_cap * carried, alive, tie_rtol)


def phase_split(fabric: AnyFabric, outcome: PhaseOutcome, *,
                alive: np.ndarray | None = None, tie_rtol: float) -> PhaseSplit:
    """The capacity-independent part of a phase under the split it ran on (the input of
    `solver.gradients.sensitivity`), through the same incidence as the phase program."""
    routes, arrays, plane, choice, weights, carried, alive_dev = _split_inputs(
        outcome, fabric, alive)
    return _split_program(routes, arrays, plane, choice, weights, carried, alive_dev,
                          np.float32(tie_rtol))


def slot_links_host(fabric: AnyFabric, flows: Flows, split: Split) -> np.ndarray:
    """int[F, K, H]: the link ids of every slot a phase ran on (host numpy), e.g. to see which
    components a policy's paths use."""
    return fabric.slot_links(flows.src, flows.dst, split.plane, split.choice, split.pool)
