"""Large uniform phases (all-to-all) solved per (source T0, destination T0) class, not per flow.

Contract: when every flow of a phase sends the same bytes at the same offered demand
(`aggregatable`) and no link has failed, ECMP and spraying are solved from C classes, the
distinct (source T0, destination T0) pairs, with a [C, P, S] array of path slots per (class,
plane, spine) instead of [F, K] slots; the result is a `solver.PhaseResult` whose `rates` are
per class. An all-to-all over N GPUs has N(N-1) flows but at most T^2 classes (16.7M flows,
4,096 classes at 4,096 GPUs of radix 128), and `all_to_all_classes` counts them without
listing the flows. A policy that can be aggregated says how its slots fall per class
(`class_slots`: ecmp and spray); failures (dead links) are not covered.

Exactness, against the flow-by-flow solve (`engine.phase.solve_slots`, `rates: auto`):
- NIC-port links are exact: with every slot alive a flow puts K_p / K of its rate on its
  source's up port and its destination's down port of plane p, whatever the spines.
- spray, each plane's EV count K_p a multiple of the spine count S: `paths.spread_slots` then
  puts exactly K_p / S EVs of every flow on every spine, so every load, the utilisation
  statistics, the slowest rate and the phase time are exact (to float32).
- spray, K_p not a multiple of S: every spine gets K_p / S EVs of a flow *in expectation* (the
  random rotation makes each spine equally likely), and the fabric loads are those
  expectations. Since the maximum is convex, the expected P100 of real draws is at least the
  aggregated P100 (Jensen). The gap shrinks like 1 / sqrt(flows per fabric link); measured at
  128 GPUs, 2 planes, 8 spines, 960 flows per T0 uplink (tests/test_aggregate.py): with 4 EVs
  per plane, fabric-tier P100 +9% and P100 and phase time +4%; with 6 EVs, +5% and +0.2%.
- ecmp: each queue pair hashes uniformly and independently onto a spine of its plane, so the
  QP counts of a class on (plane, spine) are Multinomial(n_c * qps, 1/S), independent across
  (class, plane); sampling those counts gives exactly the distribution of the flow-by-flow
  loads and slowest rate (exact in distribution, not draw for draw). `count_class_slots` turns
  one flow-by-flow draw into its counts, for which the solve is exact.
- `rates[c]` is the smallest fair share (capacity / weight through the link) over the links
  that class c's flows cross and the flow cap (for the NIC ports: over every sending GPU of
  the class's T0s). Only its minimum, the slowest rate, is the exact max-min rate (the first
  level of progressive filling, `solver.slowest_rate`); with equal sizes that alone fixes the
  phase time. The other entries are lower bounds on their flows' max-min rates.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.core.status import Status
from fabricjax.fabric.clos import ClosGeometry
from fabricjax.solver.maxmin import (GBIT_PER_BYTE, TOP_LINKS, PhaseResult, link_statistics,
                                     sorted_utilisation, utilisation_cdf)


class PhaseClasses(NamedTuple):
    """The classes of one phase (host numpy; C classes, N GPUs of the fabric).

    src_t0, dst_t0: int32[C] T0 indices (within a plane), sorted by (src_t0, dst_t0); a class
    with src_t0 == dst_t0 holds the same-T0 flows, which touch NIC-port links only.
    flows: int64[C] flows per class (n_c). out_count, in_count: int64[N] flows each GPU sends
    and receives (same-T0 flows included)."""

    src_t0: np.ndarray
    dst_t0: np.ndarray
    flows: np.ndarray
    out_count: np.ndarray
    in_count: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(self.src_t0.shape[0])

    @property
    def num_flows(self) -> int:
        return int(self.flows.sum())

    @property
    def cross(self) -> np.ndarray:
        """bool[C]: the class's flows cross the spines (different T0s)."""
        return self.src_t0 != self.dst_t0


class AggregatedPhase(NamedTuple):
    """What `solve_aggregated_*` return (host numpy arrays).

    result: `solver.PhaseResult` with the flow-by-flow meanings, except `rates`: float32[C], one
    rate per class (see the module docstring: only its minimum is the exact max-min rate),
    `rounds` = 1 and `stalled` counting flows. load: float32[L] offered load per link (Gbit/s).
    classes: the `PhaseClasses` solved."""

    result: PhaseResult
    load: np.ndarray
    classes: PhaseClasses

    @property
    def num_classes(self) -> int:
        return self.classes.num_classes


# --------------------------------------------------------------------------- host: classes

def aggregatable(flows_src: np.ndarray, flows_dst: np.ndarray, size: np.ndarray,
                 demand: np.ndarray | None = None) -> bool:
    """Whether per-class aggregation gives this phase's time exactly: at least one flow, every
    flow sends the same bytes and is offered the same demand. `demand` None means
    `engine.phase.offered_demand` (NIC rate shared equally by a GPU's flows), for which the second
    condition is: every sending GPU sends the same number of flows."""
    src = np.asarray(flows_src)
    size = np.asarray(size)
    if src.shape[0] == 0 or src.shape != np.shape(flows_dst) or size.shape != src.shape:
        return False
    if not np.all(size == size[0]):
        return False
    if demand is None:
        out_degree = np.bincount(src)
        senders = out_degree[out_degree > 0]
        return bool(np.all(senders == senders[0]))
    demand = np.asarray(demand)
    return bool(demand.shape == src.shape and np.all(demand == demand[0]))


def flow_classes(geom: ClosGeometry, src: np.ndarray, dst: np.ndarray) -> PhaseClasses:
    """The classes of explicit flows (GPU ids int[F]): a bincount over (src T0, dst T0)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    T = geom.t0s
    per_pair = np.bincount(geom.t0_of(src) * T + geom.t0_of(dst), minlength=T * T)
    return _classes_from_pairs(per_pair, np.bincount(src, minlength=geom.gpus),
                               np.bincount(dst, minlength=geom.gpus), T)


def all_to_all_classes(geom: ClosGeometry, gpus: np.ndarray) -> PhaseClasses:
    """The classes of an all-to-all among `gpus` (distinct GPU ids), arithmetically: with m_t
    job GPUs under T0 t, class (t, u) holds m_t * m_u flows, (t, t) m_t * (m_t - 1). Never
    builds the N(N-1) flows."""
    gpus = np.asarray(gpus, dtype=np.int64)
    if np.unique(gpus).shape[0] != gpus.shape[0] or gpus.shape[0] < 2:
        raise ValueError("all_to_all_classes needs at least two distinct GPU ids")
    if gpus.min() < 0 or gpus.max() >= geom.gpus:
        raise ValueError(f"GPU ids must lie in [0, {geom.gpus})")
    T = geom.t0s
    per_t0 = np.bincount(geom.t0_of(gpus), minlength=T)
    per_pair = np.outer(per_t0, per_t0) - np.diag(per_t0)
    degree = np.zeros(geom.gpus, dtype=np.int64)
    degree[gpus] = gpus.shape[0] - 1
    return _classes_from_pairs(per_pair.reshape(-1), degree, degree.copy(), T)


def _classes_from_pairs(per_pair: np.ndarray, out_count: np.ndarray, in_count: np.ndarray,
                        t0s: int) -> PhaseClasses:
    keys = np.flatnonzero(per_pair)
    src_t0, dst_t0 = np.divmod(keys, t0s)
    return PhaseClasses(src_t0=src_t0.astype(np.int32), dst_t0=dst_t0.astype(np.int32),
                        flows=per_pair[keys].astype(np.int64),
                        out_count=out_count.astype(np.int64), in_count=in_count.astype(np.int64))


def flow_class_index(geom: ClosGeometry, classes: PhaseClasses, src: np.ndarray,
                     dst: np.ndarray) -> np.ndarray:
    """int64[F]: the class of each flow (flows that `classes` was built from)."""
    T = geom.t0s
    keys = classes.src_t0.astype(np.int64) * T + classes.dst_t0
    return np.searchsorted(keys, geom.t0_of(np.asarray(src, np.int64)) * T +
                           geom.t0_of(np.asarray(dst, np.int64)))


def plane_slot_counts(num_slots: int, planes: int) -> np.ndarray:
    """float32[P]: K_p, the slots on plane p when slot k sits on plane k % P."""
    return np.bincount(np.arange(num_slots) % planes, minlength=planes).astype(np.float32)


def spray_class_slots(geom: ClosGeometry, classes: PhaseClasses, evs: int) -> np.ndarray:
    """float32[C, P, 1]: each class's EVs per spine of each plane, n_c * K_p / S (the same on
    every spine: exact when S divides K_p, the expectation otherwise). Local classes get 0."""
    per_spine = plane_slot_counts(evs, geom.planes) / np.float32(geom.spines)
    n = np.where(classes.cross, classes.flows, 0).astype(np.float32)
    return (n[:, None] * per_spine[None, :])[:, :, None].astype(np.float32)


def hashed_class_slots(geom: ClosGeometry, classes: PhaseClasses, per_plane: np.ndarray,
                       rng: np.random.Generator) -> np.ndarray:
    """int64[C, P, S]: slots of each class on (plane, spine), Multinomial(n_c * K_p, 1/S) per
    (class, plane), independently: the law of hashing every slot (an ECMP queue pair, a hashed
    EV) uniformly and independently (`paths.hashed_evs`). `per_plane`: K_p, int[P]. Local
    classes get 0."""
    n = np.where(classes.cross, classes.flows, 0)
    trials = n[:, None] * np.asarray(per_plane, np.int64)[None, :]
    return rng.multinomial(trials, np.full(geom.spines, 1.0 / geom.spines))


def count_class_slots(geom: ClosGeometry, classes: PhaseClasses, src: np.ndarray,
                      dst: np.ndarray, plane: np.ndarray, spine: np.ndarray) -> np.ndarray:
    """int64[C, P, S]: a flow-by-flow slot draw ((plane, spine) int[F, K]) counted per (class,
    plane, spine), cross-T0 flows only. Solving these counts reproduces that draw's loads."""
    P, S = geom.planes, geom.spines
    cls = flow_class_index(geom, classes, src, dst)
    cross = classes.cross[cls]
    key = (cls[:, None] * P + plane) * S + spine
    counts = np.bincount(key[cross].reshape(-1), minlength=classes.num_classes * P * S)
    return counts.reshape(classes.num_classes, P, S)


# --------------------------------------------------------------------------- device

@functools.partial(jax.jit, static_argnums=0, static_argnames=("top_k",))
def solve_class_phase(geom: ClosGeometry, src_t0, dst_t0, class_flows, class_slots,
                      plane_slots, out_count, in_count, demand, size_bytes, flow_cap, capacity,
                      *, top_k: int) -> tuple[PhaseResult, jax.Array]:
    """(PhaseResult, load float32[L]) of a phase given per-class slot counts; no failures.

    src_t0, dst_t0: int32[C]. class_flows: float32[C] flows per class (n_c). class_slots:
    float32[C, P, S'] slots of each class's flows on (plane, spine), summed over its flows,
    S' = S, or S' = 1 for a count that is the same on every spine (0 for local classes).
    plane_slots: float32[P] a flow's slots per plane K_p (one slot carries 1 / sum(K_p) of a
    flow's rate). out_count, in_count: float32[N] flows each GPU sends / receives. demand,
    size_bytes, flow_cap: float32 scalars shared by every flow (Gbit/s, bytes, Gbit/s).
    capacity: float32[L] Gbit/s.

    A link's growth (total weight through it, as in `solver.slowest_rate`) is summed from the
    C x P x S' class entries in two segment sums over T0s; load = growth * demand."""
    P, N, T, S = geom.planes, geom.gpus, geom.t0s, geom.spines
    f32 = jnp.float32
    slot_weight = 1.0 / jnp.sum(plane_slots)
    plane_share = plane_slots * slot_weight                      # [P] rate share per plane
    cross = src_t0 != dst_t0
    slots = jnp.where(cross[:, None, None], class_slots, f32(0.0))
    shape = (P, T, S)

    def fabric_growth(t0):   # [C, P, S'] summed per T0 -> [P, T, S] (tier layout)
        per_t0 = jax.ops.segment_sum(slots, t0, num_segments=T) * slot_weight
        return jnp.broadcast_to(per_t0.transpose(1, 0, 2), shape).reshape(-1)

    growth = jnp.concatenate([
        (plane_share[:, None] * out_count[None, :]).reshape(-1),
        fabric_growth(src_t0), fabric_growth(dst_t0),
        (plane_share[:, None] * in_count[None, :]).reshape(-1)])
    load = growth * demand
    safe_cap = jnp.where(capacity > 0, capacity, f32(1.0))
    utilisation = jnp.where(capacity > 0, load / safe_cap,
                            jnp.where(load > 0, jnp.inf, f32(0.0)))
    usable = capacity > 0
    bounds = tuple((s, s + n) for s, n in zip(geom.tier_starts, geom.tier_sizes))
    ordered = sorted_utilisation(utilisation, usable, bounds)
    stats = link_statistics(utilisation, usable, bounds, ordered=ordered)
    top_util, top_links = jax.lax.top_k(jnp.where(usable, utilisation, -jnp.inf), top_k)

    # fair share of every link at the first filling level; inf where nothing crosses
    used = growth > 0
    share = jnp.where(used, capacity / jnp.where(used, growth, f32(1.0)), jnp.inf)
    host, fabric = P * N, P * T * S
    gpu_t0 = geom.t0_of(jnp.arange(N))

    def nic_share_per_t0(part):   # [P * N] -> [T]: the tightest NIC port under each T0
        return jax.ops.segment_min(part.reshape(P, N).min(axis=0), gpu_t0, num_segments=T)

    def fabric_share_per_class(part, t0):   # [P * T * S] -> [C, P, S'] at the class's T0
        per_t0 = part.reshape(shape).transpose(1, 0, 2)
        if class_slots.shape[2] == 1:   # a count on every spine: the class crosses them all
            per_t0 = per_t0.min(axis=2, keepdims=True)
        return per_t0[t0]

    fabric_min = jnp.min(jnp.where(
        slots > 0,
        jnp.minimum(fabric_share_per_class(share[host:host + fabric], src_t0),
                    fabric_share_per_class(share[host + fabric:host + 2 * fabric], dst_t0)),
        jnp.inf), axis=(1, 2))
    rates = jnp.minimum(
        jnp.minimum(nic_share_per_t0(share[:host])[src_t0],
                    nic_share_per_t0(share[host + 2 * fabric:])[dst_t0]),
        jnp.minimum(fabric_min, flow_cap))
    rates = jnp.where(jnp.isfinite(rates), rates, f32(0.0)).astype(f32)

    sending = size_bytes > 0
    bits = size_bytes * GBIT_PER_BYTE
    moving = rates > 0
    slowest_moving = jnp.min(jnp.where(moving, rates, jnp.inf))
    phase_time = jnp.where(sending & jnp.isfinite(slowest_moving),
                           bits / jnp.where(jnp.isfinite(slowest_moving), slowest_moving, 1.0),
                           f32(0.0))
    stalled_flows = jnp.where(sending, jnp.sum(jnp.where(moving, f32(0.0), class_flows)),
                              f32(0.0))
    stalled = jnp.minimum(stalled_flows, f32(2**31 - 128)).astype(jnp.int32)
    status = jnp.where(stalled > 0, int(Status.STALLED), int(Status.OK)).astype(jnp.int32)
    result = PhaseResult(
        stats=stats, top_links=top_links.astype(jnp.int32), top_util=top_util,
        total_load=jnp.sum(load), rates=rates, phase_time=phase_time.astype(f32),
        cohort_end=jnp.where(phase_time > 0, phase_time, -jnp.inf).astype(f32)[None],
        stalled=stalled, rounds=jnp.int32(1),
        status=status, cdf=utilisation_cdf(utilisation, usable, ordered))
    return result, load


# --------------------------------------------------------------------------- entry points

def solve_class_slots(geom: ClosGeometry, classes: PhaseClasses, class_slots: np.ndarray,
                      plane_slots: np.ndarray, demand: float, size_bytes: float,
                      capacity: np.ndarray, *, flow_cap: float | None = None,
                      top_k: int = TOP_LINKS) -> AggregatedPhase:
    """Solve given slot counts per (class, plane, spine) ([C, P, S] or [C, P, 1]; e.g. from
    `count_class_slots`, `hashed_class_slots`, `spray_class_slots`) and a flow's slots per plane
    `plane_slots` [P]. One transfer in, one jitted call, one transfer out."""
    if classes.num_classes == 0:
        raise ValueError("a phase without flows has no classes to solve")
    class_slots = np.asarray(class_slots)
    if class_slots.shape[:2] != (classes.num_classes, geom.planes) or \
            class_slots.shape[2] not in (1, geom.spines):
        raise ValueError(f"class_slots must be [C, P, S] or [C, P, 1]; got {class_slots.shape}")
    flow_cap = geom.nic_gbps if flow_cap is None else flow_cap
    args = jax.device_put((
        classes.src_t0, classes.dst_t0, classes.flows.astype(np.float32),
        class_slots.astype(np.float32), np.asarray(plane_slots, np.float32),
        classes.out_count.astype(np.float32), classes.in_count.astype(np.float32),
        np.float32(demand), np.float32(size_bytes), np.float32(flow_cap),
        np.asarray(capacity, np.float32)))
    result, load = jax.device_get(solve_class_phase(
        geom, *args, top_k=min(top_k, geom.num_links)))
    return AggregatedPhase(result=result, load=load, classes=classes)


def offered_class_demand(geom: ClosGeometry, classes: PhaseClasses) -> float:
    """The demand of every flow under `engine.phase.offered_demand` (NIC rate / out-degree); raises
    when sending GPUs send different numbers of flows (demand would differ per flow)."""
    senders = classes.out_count[classes.out_count > 0]
    if senders.size == 0 or np.any(senders != senders[0]):
        raise ValueError("aggregation needs every sending GPU to send the same number of flows")
    return geom.nic_gbps / float(senders[0])
