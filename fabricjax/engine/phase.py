"""THE phase program: policy -> incidence -> loads -> rates -> phase time, for every policy,
every fabric kind and every failure set.

Contract. `phase_core` is one traceable function: the policy reacts to the alive mask and
capacities (`policies.base.Policy.react`), the routes turn its slots into the solver's
incidence (`solver.incidence`), and `solver.maxmin.evaluate_split` gives loads, utilisation
statistics, max-min rates and the phase time. `run_phase` is its jit; the no-failure baseline
is the case where every link is alive, and `engine.batch` maps the same `phase_core` over
failure masks. `solve_policy_phase` is the host entry: it decides how the phase is solved
(`engine.plan`), draws the policy's slots (`init`), makes one transfer in, one jitted call
and one transfer out, and returns a `PhaseOutcome` of numpy arrays; `simulate_progressive`
runs the flow-level simulation on the split the phase ended with, through the same
incidence.

Random streams: a policy's slots come from numpy's default_rng([seed, stream, item, index])
(`Policy.init_stream`), so adding a policy or a workload item never moves another's draws;
the device key of a phase is `phase_key(seed, item, index)` for the baseline and
`phase_key(seed, item, index, policy.stream)` for failure sets.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.executables import cached_jit
from fabricjax.core.status import Status
from fabricjax.engine.plan import (padded_flows, progressive_give_up, slowest_only,
                                   use_aggregation)
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.paths import clos_path_links
from fabricjax.policies import get
from fabricjax.policies.base import PhaseArrays, Policy, Reaction, Slots
from fabricjax.solver.aggregate import flow_classes, offered_class_demand, solve_class_slots
from fabricjax.solver.gradients import PhaseSplit, split_of
from fabricjax.solver.incidence import ClosRoutes, StoredRoutes, stored_routes
from fabricjax.solver.maxmin import TOP_LINKS, PhaseResult, evaluate_split
from fabricjax.solver.progressive import Progressive, progressive_completion
from fabricjax.workload.flows import Flows


# --------------------------------------------------------------------------- host inputs

def offered_demand(flows: Flows, nic_gbps: float | np.ndarray, num_gpus: int) -> np.ndarray:
    """Each GPU offers its full NIC rate (a number, or float[N] per GPU), shared equally
    among the flows it sends: float32[F] Gbit/s."""
    out_degree = np.bincount(flows.src, minlength=num_gpus)
    nic = nic_gbps[flows.src] if np.ndim(nic_gbps) else nic_gbps
    return (nic / out_degree[flows.src]).astype(np.float32)


def _busiest_nic_s(gpu: np.ndarray, seconds: np.ndarray, begin: np.ndarray) -> float:
    """When the busiest NIC is done: each GPU's flows (`seconds` of line rate each, from
    `begin`) back to back through one NIC, work-conserving. A NIC finishes at max over its
    flows k of begin_k + (seconds of its flows beginning at or after begin_k)."""
    order = np.lexsort((-begin, gpu))          # per GPU, latest start first
    gpu, begin, seconds = gpu[order], begin[order], seconds[order]
    total = np.cumsum(seconds)
    first = np.flatnonzero(np.r_[True, gpu[1:] != gpu[:-1]])
    before = np.repeat(total[first] - seconds[first], np.diff(np.r_[first, gpu.size]))
    return float(np.max(begin + total - before))


def _nic_times(flows: Flows, nic_gbps: float | np.ndarray, side: str) -> float:
    sending = flows.size > 0
    if not np.any(sending):
        return 0.0
    gpu = (flows.src if side == "src" else flows.dst)[sending]
    nic = nic_gbps[gpu] if np.ndim(nic_gbps) else nic_gbps
    begin = (np.zeros(gpu.size) if flows.start is None
             else np.asarray(flows.start, float)[sending])
    return _busiest_nic_s(gpu, flows.size[sending] * 8e-9 / nic, begin)


def line_rate_time_s(flows: Flows, nic_gbps: float | np.ndarray) -> float:
    """A phase at line rate: every GPU sends its flows back to back at its full NIC rate
    (work-conserving: a flow that starts later waits for nothing but the GPU's own bytes) and
    nothing else contends -- no receiver NIC, no fabric link: the busiest sender's time.
    Receiver sharing (an incast, hot experts) and the fabric both count against it; see
    `endpoint_bound_time_s` for the first alone."""
    return _nic_times(flows, nic_gbps, "src")


def endpoint_bound_time_s(flows: Flows, nic_gbps: float | np.ndarray) -> float:
    """A phase on a perfect network: no fabric link limits it, only the NICs, each of which
    must send (and receive) its bytes at its line rate -- the busiest NIC's time, sending or
    receiving (an incast is bound by its receiver, a skewed all-to-all by its hot experts).
    A true lower bound on the static completion on any fabric (its rates through one NIC sum
    to at most the NIC rate), so completion / this bound -- the fabric's share -- is >= 1."""
    return max(_nic_times(flows, nic_gbps, "src"), _nic_times(flows, nic_gbps, "dst"))


def nic_rate(fabric: AnyFabric) -> float | np.ndarray:
    """The NIC rates the host arithmetic uses: one number on a Clos (every GPU alike), the
    per-GPU array on other fabrics."""
    return fabric.geometry.nic_gbps if fabric.kind == "clos" else fabric.gpu_nic_gbps


def with_start_times(result, flows: Flows, nic_gbps: float | np.ndarray):
    """Host-side times of a phase: the endpoint bound (`endpoint_bound_time_s`, the result's
    `ideal_time`) and, when flows start at
    different times, the end of the last one, max(start + size / rate) (the static model:
    rates as when all flows are present)."""
    result = result._replace(ideal_time=np.float32(endpoint_bound_time_s(flows, nic_gbps)))
    if flows.start is None:
        return result
    sending = (flows.size > 0) & (result.rates > 0)
    bits = flows.size * 8e-9
    ends = np.where(sending, flows.start + bits / np.where(sending, result.rates, 1.0), 0.0)
    return result._replace(phase_time=np.float32(ends.max(initial=0.0)))


def null_result(fabric: AnyFabric) -> PhaseResult:
    """The PhaseResult of a phase with no fabric flow (all inside servers): nothing loaded."""
    k = min(TOP_LINKS, fabric.num_links)
    return PhaseResult(stats=np.zeros((1 + len(fabric.tier_names), 3), np.float32),
                       top_links=np.zeros(k, np.int32), top_util=np.full(k, -np.inf, np.float32),
                       total_load=np.float32(0), rates=np.zeros(0, np.float32),
                       phase_time=np.float32(0), ideal_time=np.float32(0),
                       stalled=np.int32(0), rounds=np.int32(0), status=np.int32(0))


def phase_key(seed: int, item: int, index: int, stream: int = 0):
    """The JAX PRNG key of one phase of one workload item (stream 0: the baseline)."""
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), item), index)
    return jax.random.fold_in(key, stream) if stream else key


def phase_arrays(fabric: AnyFabric, flows: Flows) -> PhaseArrays:
    """The phase's flows as host arrays for the device (offered demand, NIC cap)."""
    nic = fabric.gpu_nic_gbps
    demand = offered_demand(flows, nic_rate(fabric), fabric.gpus)
    return PhaseArrays(src=np.asarray(flows.src, np.int32), dst=np.asarray(flows.dst, np.int32),
                       demand=demand, size=flows.size.astype(np.float32),
                       flow_cap=nic[flows.src].astype(np.float32))


def host_routes(fabric: AnyFabric, flows: Flows, pool: str) -> StoredRoutes | None:
    """The phase's candidate paths on a stored-path fabric (numpy `StoredRoutes`), None on a
    Clos. `pool`: "equal-cost" (the shortest only, as ECMP hashes) or "candidates" (the
    fabric's K shortest; a fat tree's are equal-cost anyway)."""
    if fabric.kind == "clos":
        return None
    detour = 0 if pool == "equal-cost" or fabric.is_fat_tree else None
    cand, distinct = fabric.paths_for(flows.src, flows.dst, detour)
    return stored_routes(cand, distinct, fabric.tier, fabric.plane, fabric.planes)


def flow_hops(fabric: AnyFabric, flows: Flows) -> np.ndarray:
    """int64[F]: links on each flow's path (its shortest on a stored-path fabric; on a Clos 4
    across the spines, 2 within a T0)."""
    if fabric.kind == "clos":
        geom = fabric.geometry
        cross = geom.t0_of(flows.src.astype(np.int64)) != geom.t0_of(flows.dst.astype(np.int64))
        return np.where(cross, 4, 2).astype(np.int64)
    if flows.num_flows == 0:
        return np.zeros(0, np.int64)
    routes = host_routes(fabric, flows, "equal-cost")
    return np.sum(routes.cand[:, 0, :] != fabric.num_links, axis=-1).astype(np.int64)


def device_routes(fabric: AnyFabric, phase: PhaseArrays, host: StoredRoutes | None):
    """The routes the device program takes: arithmetic on a Clos, the stored paths else."""
    if host is None:
        return ClosRoutes(fabric.geometry, phase.src, phase.dst)
    return host


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


def pad_phase(phase: PhaseArrays, slots: Slots, count: int) -> tuple[PhaseArrays, Slots]:
    """The phase and its slots padded to `count` flows with inert ones: GPU 0 to itself (one
    T0, so no spine choice matters and mrc never marks one), no demand, no bytes, no NIC cap,
    on flow 0's slots (each slot keeps its plane). `phase_core` gives them no weight, so they
    put nothing on a link and freeze at rate 0 without stalling; the host drops their rows."""
    extra = count - phase.src.shape[0]
    if extra <= 0:
        return phase, slots

    def grow(a: np.ndarray, fill) -> np.ndarray:
        tail = np.broadcast_to(np.asarray(fill, a.dtype), (extra, *a.shape[1:]))
        return np.concatenate([a, tail])

    padded = PhaseArrays(src=grow(phase.src, 0), dst=grow(phase.dst, 0),
                         demand=grow(phase.demand, 0), size=grow(phase.size, 0),
                         flow_cap=grow(phase.flow_cap, 0))
    return padded, Slots(grow(slots.plane, slots.plane[0]), grow(slots.choice, slots.choice[0]),
                         slots.state)


# --------------------------------------------------------------------------- the program

def phase_core(policy: Policy, routes, phase: PhaseArrays, plane, choice, state: dict, alive,
               capacity, key_data, options: dict, eps, max_rounds, *, settings: tuple,
               layout, tier_bounds, top_k: int, slowest_only: bool = False,
               p100_only: bool = False) -> tuple[Reaction, PhaseResult]:
    """The phase program (traceable): the policy's reaction, its incidence, the evaluation.
    alive bool[L] and capacity float32[L] cover the real links; key_data: raw PRNG key data
    (uint32, so sets and devices can carry it as plain arrays); the keyword arguments are
    static: `layout` the fabric's four structural link ranges (the policy's), `tier_bounds`
    the statistics' tiers."""
    key = jax.random.wrap_key_data(key_data)
    reaction = policy.react(routes, phase, plane, choice, state, alive, capacity, key, options,
                            settings, layout)
    # padding flows (`pad_phase`: no demand; every real flow offers some) carry no weight
    reaction = reaction._replace(weights=jnp.where(phase.demand[:, None] > 0,
                                                   reaction.weights, 0.0))
    links = routes.slot_links(plane, reaction.choice)
    ids, coef = routes.incidence(plane, reaction.choice, links, reaction.weights)
    flow_cap = phase.flow_cap if reaction.carried is None else phase.flow_cap * reaction.carried
    result = evaluate_split(ids, coef, phase.demand, phase.size, flow_cap, capacity, alive,
                            eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds,
                            top_k=top_k, slowest_only=slowest_only, p100_only=p100_only)
    return reaction, result


run_phase = cached_jit(phase_core, static_argnums=0,
                       static_argnames=("settings", "layout", "tier_bounds", "top_k",
                                        "slowest_only",
                                        "p100_only"))


@dataclasses.dataclass(frozen=True)
class PhaseOutcome:
    """One phase under one policy: the evaluation plus what the policy's iteration reports
    (host numpy)."""

    result: object                  # solver.maxmin.PhaseResult of numpy arrays
    slots: int
    iterations: int | None = None
    convergence: str | None = None
    residual: float | None = None
    trace: np.ndarray | None = None
    capped: bool = False
    lost_plane: bool = False        # some flow has no live path on a plane (optimal)
    plane: np.ndarray | None = None  # the slots the phase ran on (mrc: its returned EV set;
    choice: np.ndarray | None = None  # optimal: every candidate), what failures start from
    state: dict | None = None       # the policy's per-phase state (optimal's commodities)
    weights: np.ndarray | None = None  # the split over the slots
    carried: np.ndarray | None = None  # the share of each flow carried (None: all of it)
    progressive: object = None      # solver.progressive.Progressive of numpy arrays
    aggregated: int | None = None   # classes, when the phase was solved aggregated
    pool: str = "candidates"        # stored paths: the candidate pool the choices index

    @property
    def spine(self) -> np.ndarray | None:
        """`choice` by its Clos name: the spine of every slot."""
        return self.choice


# the static split over given slots: equal over the live ones, no reaction (the base policy)
GIVEN_SLOTS = Policy(name="given slots")


def solve_slots(fabric: AnyFabric, flows: Flows, plane: np.ndarray, choice: np.ndarray,
                scenario: Scenario, alive: np.ndarray | None = None):
    """One phase split equally over the given slots (no reaction: what oblivious spraying
    does), through the phase program. PhaseResult of numpy arrays."""
    outcome = solve_policy_phase(GIVEN_SLOTS, scenario, fabric, flows, (0, 0), alive=alive,
                                 slots=Slots(np.asarray(plane, np.int32),
                                             np.asarray(choice, np.int32)))
    return outcome.result


def solve_policy_phase(policy: str | Policy, scenario: Scenario, fabric: AnyFabric,
                       flows: Flows, stream: tuple[int, int], *, trace: bool = False,
                       alive: np.ndarray | None = None, slots: Slots | None = None,
                       progressive: bool = False) -> PhaseOutcome:
    """Draw `policy`'s slots for one phase (or take `slots`) and solve it on the device.

    `alive`: bool[L] (None: every link alive, the baseline); the policy reacts to it as it
    does in a failure set. `progressive`: also run the flow-level simulation on the split
    the policy ended with."""
    policy = get(policy) if isinstance(policy, str) else policy
    if flows.num_flows == 0:
        return PhaseOutcome(null_result(fabric), slots=0)
    item, index = stream
    # decided before any [F, K] slot array exists: aggregation is for what would not fit
    if slots is None and use_aggregation(scenario, fabric, flows, alive, policy.name):
        return aggregated_phase(policy, scenario, fabric, flows, stream)
    routes_host = host_routes(fabric, flows, policy.pool(scenario))
    if slots is None:
        slots = initial_slots(policy, scenario, fabric, flows, stream, routes_host)
    alive_mask = np.ones(fabric.num_links, bool) if alive is None else np.asarray(alive, bool)
    phase, device_slots = phase_arrays(fabric, flows), slots
    if routes_host is None and not slots.state:   # a Clos: pad to the shape bucket
        phase, device_slots = pad_phase(phase, slots, padded_flows(scenario, flows.num_flows))
    cfg = scenario.solver
    args = jax.device_put((phase, device_slots.plane, device_slots.choice, slots.state,
                           alive_mask,
                           fabric.capacity,
                           jax.random.key_data(phase_key(scenario.seed, item, index)),
                           policy.options(scenario), np.float32(cfg.eps),
                           np.int32(cfg.max_rounds)))
    routes = device_routes(fabric, args[0], routes_host)
    reaction, result = jax.device_get(run_phase(
        policy, routes, *args, settings=policy.settings(scenario),
        layout=fabric.layout_bounds, tier_bounds=fabric.tier_bounds,
        top_k=min(TOP_LINKS, fabric.num_links),
        slowest_only=slowest_only(scenario, flows)))
    real = flows.num_flows                  # the padding's rows go
    reaction = reaction._replace(
        choice=reaction.choice[:real], weights=reaction.weights[:real],
        carried=None if reaction.carried is None else reaction.carried[:real])
    result = result._replace(rates=result.rates[:real])
    status = int(reaction.status)
    iterations = int(reaction.iterations) if policy.iterative else None
    outcome = PhaseOutcome(
        with_start_times(result, flows, nic_rate(fabric)), slots=slots.count,
        iterations=iterations,
        convergence=policy.convergence(status, int(reaction.iterations)),
        residual=float(reaction.residual) if policy.iterative else None,
        trace=(np.asarray(reaction.trace[: iterations + 1])
               if trace and reaction.trace is not None else None),
        capped=bool(status & Status.ITERATION_CAP),
        lost_plane=bool(status & Status.LOST_PLANE),
        plane=slots.plane, choice=np.asarray(reaction.choice), state=slots.state,
        weights=np.asarray(reaction.weights),
        carried=None if reaction.carried is None else np.asarray(reaction.carried),
        pool=policy.pool(scenario))
    if progressive:
        outcome = dataclasses.replace(
            outcome, progressive=simulate_progressive(scenario, fabric, flows, outcome, alive))
    return outcome


def aggregated_phase(policy: Policy, scenario: Scenario, fabric: AnyFabric, flows: Flows,
                     stream: tuple[int, int]) -> PhaseOutcome:
    """A phase solved as (source T0, destination T0) classes (solver.aggregate): the slots
    `policy.class_slots` puts on each class (spray's expected split, ECMP's multinomial QP
    counts)."""
    item, index = stream
    rng = np.random.default_rng([scenario.seed, policy.stream, item, index])
    geom = fabric.geometry
    classes = flow_classes(geom, flows.src, flows.dst)
    class_slots, plane_slots = policy.class_slots(geom, classes, scenario, rng)
    out = solve_class_slots(geom, classes, class_slots, plane_slots,
                            offered_class_demand(geom, classes), float(flows.size[0]),
                            fabric.capacity, top_k=min(TOP_LINKS, fabric.num_links))
    result = out.result._replace(
        ideal_time=np.float32(endpoint_bound_time_s(flows, geom.nic_gbps)))
    return PhaseOutcome(result, slots=policy.slots_per_flow(scenario),
                        aggregated=out.num_classes)


# --------------------------------------------------------------------------- on a fixed split

def _split_inputs(fabric: AnyFabric, flows: Flows, outcome: PhaseOutcome,
                  alive: np.ndarray | None, padded: int | None = None):
    """(routes, phase, plane, choice, weights, carried, alive) on the device for a phase's
    final split (the outcome's slots and weights); `padded`: pad a Clos phase to that many
    flows (`pad_phase`; the padding has no weight)."""
    if outcome.plane is None or outcome.weights is None:
        raise ValueError("this needs the per-flow slots of the phase; it was solved as "
                         "classes (set solver.aggregate: never)")
    pool_routes = host_routes(fabric, flows, outcome.pool)
    alive_mask = np.ones(fabric.num_links, bool) if alive is None else np.asarray(alive, bool)
    carried = (np.ones(flows.num_flows, np.float32) if outcome.carried is None
               else outcome.carried)
    phase = phase_arrays(fabric, flows)
    slots, weights = Slots(outcome.plane, outcome.choice), outcome.weights
    if pool_routes is None and padded is not None and padded > flows.num_flows:
        extra = padded - flows.num_flows
        phase, slots = pad_phase(phase, slots, padded)
        weights = np.concatenate([weights, np.zeros((extra, weights.shape[1]), weights.dtype)])
        carried = np.concatenate([carried, np.ones(extra, carried.dtype)])
    args = jax.device_put((phase, slots.plane, slots.choice, weights, carried, alive_mask))
    return (device_routes(fabric, args[0], pool_routes), *args)


@cached_jit
def _progressive_program(routes, phase: PhaseArrays, plane, choice, weights, carried, start,
                         alive, capacity, eps, max_rounds, max_events, batch,
                         give_up_after) -> Progressive:
    links = routes.slot_links(plane, choice)
    ids, coef = routes.incidence(plane, choice, links, weights)
    capacity_ext = jnp.concatenate([jnp.where(alive, capacity, 0.0), jnp.array([jnp.inf])]
                                   ).astype(jnp.float32)
    return progressive_completion(ids, coef, phase.size, start, phase.flow_cap * carried,
                                  capacity_ext, eps=eps, max_rounds=max_rounds,
                                  max_events=max_events, batch=batch,
                                  give_up_after=give_up_after)


def simulate_progressive(scenario: Scenario, fabric: AnyFabric, flows: Flows,
                         outcome: PhaseOutcome, alive: np.ndarray | None = None) -> Progressive:
    """The progressive (flow-level) simulation of one phase on the split `outcome` ran:
    solver.progressive.Progressive of numpy arrays."""
    cfg = scenario.solver
    padded = padded_flows(scenario, flows.num_flows)
    routes, phase, plane, choice, weights, carried, alive_dev = _split_inputs(
        fabric, flows, outcome, alive, padded)
    start = np.zeros(phase.src.shape[0], np.float32)   # the padding (no bytes) ends at 0
    if flows.start is not None:
        start[:flows.num_flows] = flows.start
    args = jax.device_put((start, fabric.capacity, np.float32(cfg.eps),
                           np.int32(cfg.max_rounds), np.int32(cfg.max_events),
                           np.float32(cfg.event_batch), np.int32(progressive_give_up(scenario))))
    out = jax.device_get(_progressive_program(routes, phase, plane, choice, weights, carried,
                                              args[0], alive_dev, *args[1:]))
    return out._replace(finish=out.finish[:flows.num_flows])


@cached_jit
def _split_program(routes, phase: PhaseArrays, plane, choice, weights, carried, alive,
                   tie_rtol) -> PhaseSplit:
    links = routes.slot_links(plane, choice)
    ids, coef = routes.incidence(plane, choice, links, weights)
    return split_of(ids, coef, alive.shape[0], phase.demand, phase.size,
                    phase.flow_cap * carried, alive, tie_rtol)


def phase_split(fabric: AnyFabric, flows: Flows, outcome: PhaseOutcome, *,
                alive: np.ndarray | None = None, tie_rtol: float) -> PhaseSplit:
    """The capacity-independent part of a phase under the split it ran on (the input of
    `solver.gradients.sensitivity`), through the same incidence as the phase program."""
    routes, phase, plane, choice, weights, carried, alive_dev = _split_inputs(
        fabric, flows, outcome, alive)
    return _split_program(routes, phase, plane, choice, weights, carried, alive_dev,
                          np.float32(tie_rtol))


def slot_links_host(fabric: AnyFabric, flows: Flows, outcome: PhaseOutcome) -> np.ndarray:
    """int[F, K, H]: the link ids of every slot a phase ran on (host numpy), e.g. to see which
    components a policy's paths use."""
    if fabric.kind == "clos":
        return clos_path_links(fabric.geometry, flows.src[:, None], flows.dst[:, None],
                               outcome.plane, outcome.choice)
    routes = host_routes(fabric, flows, outcome.pool)
    return routes.cand[np.arange(flows.num_flows)[:, None], outcome.choice]
