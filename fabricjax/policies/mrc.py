"""`mrc`: MRC adaptive spraying, as a jitted fixed point over entropy values (EVs).

Contract: `mrc_fixed_point` takes each flow's initial EV set (`plane`, `spine` int32[F, K]: on a
Clos the spine, slot k on plane k % P; on a stored-path fabric a candidate path) and the
phase's routes (`solver.incidence`), and returns the EV set that MRC's congestion reaction
settles on, with its iteration count, a residual and a `Status`. The whole loop is one
`lax.while_loop` under `jit`; the random swaps come from a PRNG key, so a run is deterministic
given the seed. The `Mrc` policy starts from spraying's draw and runs it as its `react`.

The model of one iteration (what MRC does over a few round-trip times):
  1. spray: every flow sends equally over its live EVs. An EV whose path has a dead fabric
     link carries nothing: MRC retires an EV at the first lost packet and sprays on over the
     rest (spraying's own steady state); it is replaced by a live EV of the same plane only
     when its flow has no usable EV left on that plane (`_replaced`); an EV behind a dead NIC port is retired for good, since no
     spine of its plane can carry it (the GPU loses that plane, 1/P of its bandwidth);
  2. congestion signal: an EV is *marked* when the worst utilisation along the hops its choice
     controls (its switch-to-switch hops: on a Clos the T0 -> T1 uplink and T1 -> T0 downlink)
     exceeds its marking level, `threshold` x max(1, the switch-to-switch links' mean
     utilisation, the mean utilisation of the links its alternatives take at its switches)
     (ECN marking at a queue that builds when offered load exceeds capacity; on
     an oversubscribed or degraded fabric every path is offered more than it carries and
     queues, and the paths that queue more are marked, so the swaps even the load out in
     proportion to capacity: the calibration against htsim's REPS on a leaf-spine with half
     its uplinks at 25% took mrc's median FCT from +125% to within 2%). The NIC-port
     hops are shared by every EV of a plane, so no swap can relieve them; congestion there is
     left to the rates. The level the EV's alternatives offer (`_local_level`: the mean
     utilisation of the links out of or into the same switch) is the load a swap cannot
     avoid: a T0 that lost an uplink offers every other one 32/31 of its capacity, they
     queue alike and no swap relieves them;
  3. reaction: a marked EV moves to a uniformly random *other* path of the **same plane**
     with probability damping * (u - level) / u, where u is its path's worst utilisation.
     When that path is dead the next one in cyclic order is tried (RETARGET_DRAWS
     candidates in all); when every candidate is dead the EV stays and retries next iteration.
     The factor (u - level) / u is the share of the link's traffic in excess: ECN marks
     packets, not whole links, so in expectation about the excess moves and not everything
     (which would only move the hot spot). Staying in the plane keeps every flow's traffic
     exactly balanced across planes, as MRC's per-plane EV assignment does.
Stops when no EV is marked (`balanced`), when the fabric's overload (the share of fabric
load above the marking level x capacity, a smooth measure, unlike the jumpy P100) has not
improved by more than `tol` (relative) for `patience` iterations (`settled`), or at `max_iters`
(`iteration cap`). In the *settled* case the swapping goes on in a noisy
equilibrium, so its P100 fluctuates; what is returned is then the best EV set it reached
(fewest flows without a live EV, then lowest P100, then lowest overload), never worse than the
spraying it started from (dead EVs retired). A balanced stop returns the balanced EV set
itself, a true fixed point. The trace records every iteration's P100, so the spread of that
equilibrium stays visible.

Speed: an iteration touches only [F, K] arrays. On a Clos the routes give the two
fabric hops of an EV as a per-(flow, plane) base + spine, NIC-port loads are summed
per plane by a reshape and loads are four scatters (`ClosRoutes.slot_loads`); the swap coins
come from a counter-based hash (`hash_bits`) instead of threefry. The EV sets travel as uint8
(`choice_dtype`), no [F, K, H] hop or [F, K, D] candidate array is stored, and with every link
alive `lax.cond` takes passes without liveness gathers (which keep XLA:CPU from vectorising).
Measured on the 2-core CPU at 8,192 GPUs x 128 EVs: 48 ms per iteration, then 9 ms with the
hash and the scatters (idle cores); 37.2 ms before and 9.7 ms after the last changes with the
cores shared (load average 6.5); `bench/bench_scale.py` has the table.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Annotated, Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import Field

from fabricjax.config import FailuresConfig, Scenario, Strict
from fabricjax.core.registry import register
from fabricjax.core.roles import STATIC, TRACED
from fabricjax.core.status import Status
from fabricjax.policies.base import PLACEMENT_HELP, Display, Reaction, Spraying
from fabricjax.policies.spray import SPRAY
from fabricjax.solver.dynamic import bitmap_mix, reps_mix

# how the loop ended, as `core.status.Status` flags: balanced (nothing marked) is OK
MRC_BALANCED = int(Status.OK)
MRC_SETTLED = int(Status.SETTLED)
MRC_ITERATION_CAP = int(Status.ITERATION_CAP)


class MrcResult(NamedTuple):
    spine: jax.Array        # int32[F, K] spine of every EV in the best EV set reached
                            # (lowest P100, then overload); planes never change
    iterations: jax.Array   # int32 scalar
    status: jax.Array       # int32 scalar: Status.OK (balanced), SETTLED or ITERATION_CAP
    residual: jax.Array     # float scalar: overload of the returned EV set (see excess_trace)
    marked: jax.Array       # int32 scalar: EVs marked in the returned EV set
    trace: jax.Array        # float[max_iters + 1]: P100 over all links after each iteration
                            # (entry 0 = plain spraying); unused entries repeat the last
    excess_trace: jax.Array # float[max_iters + 1]: overload = sum over fabric links of
                            # max(load - threshold * capacity, 0) / their total load
    final_spine: jax.Array  # int32[F, K]: the EV set when the loop stopped (trace's last entry)
    speeds: jax.Array       # float32[R + 1, F] (R = `clock_rows`; [0, F] without the clock):
                            # row i < R each flow's speed in the EV set after i iterations
                            # (`flow_speed`); row R sums the speeds of the sets after R on
    final_speed: jax.Array  # float32[F]: each flow's speed in the returned EV set


def flow_speed(routes, plane, spine, live, util_ext):
    """float32[F]: how fast each flow's EV set lets it go, relative to its offered rate: 1 /
    max(1, the worst utilisation over every hop of its live EVs), 0 for a flow without a live
    EV. An equal split is paced by its most loaded EV, and every flow on an overloaded link is
    slowed by that link's overload; the clock (`engine.timing.clocked_durations`) uses the
    ratio of a set's speed to the returned set's, so the common bias of this estimate against
    the max-min rates cancels."""
    links = routes.slot_links(plane, spine.astype(jnp.int32))                     # [F, K, H]
    worst = jnp.max(util_ext[links], axis=-1)
    worst = jnp.max(jnp.where(live > 0, worst, 0.0), axis=1)
    return jnp.where(jnp.any(live > 0, axis=1), 1.0 / jnp.maximum(worst, 1.0), 0.0)


def _utilisation(load, capacity, alive):
    num_links = capacity.shape[0]
    real = load[:num_links]
    usable = alive & (capacity > 0)
    util = jnp.where(usable, real / jnp.where(usable, capacity, 1.0),
                     jnp.where(real > 0, jnp.inf, 0.0))
    return util, usable


# the clock's record keeps one row per iteration for this many iterations, and the sum of
# the rest in one more row: bounded memory ([R + 1, F] float32) whatever `max_iters` is
CLOCK_ROWS = 256

def _marking(load, util, usable, capacity, threshold, fabric_range):
    """(P100, marking level, overload) of one EV set's loads: the P100 over usable links;
    the marking level, `threshold` x the fabric's mean utilisation when that is above 1 (an
    oversubscribed or degraded fabric is offered more than it carries everywhere: every path
    queues, and ECN then marks the paths that queue more, so swaps even the load out in
    proportion to capacity instead of chasing a level no path can reach); and the overload,
    the fabric links' load above that level over their total load (what marks react to, which
    the stop rule watches)."""
    fabric_lo, fabric_hi = fabric_range
    p100 = jnp.max(jnp.where(usable, util, -jnp.inf))
    fabric_load = load[fabric_lo:fabric_hi]
    usable_cap = jnp.where(usable, capacity, 0.0)[fabric_lo:fabric_hi]
    level = threshold * jnp.maximum(
        jnp.sum(fabric_load) / jnp.maximum(jnp.sum(usable_cap), 1e-30), 1.0)
    overload = jnp.sum(jnp.maximum(fabric_load - level * usable_cap, 0.0)) / jnp.maximum(
        jnp.sum(fabric_load), 1e-30)
    return p100, level, overload


# an EV is marked against its alternatives' level only past it by this much: the float32
# mean of equal utilisations can round a last bit below them
LOCAL_SLACK = 1e-4


def _local_level(routes, plane, spine, level, threshold, util, usable):
    """float[F, K]: each EV's marking level, the fabric's (`_marking`) or `threshold` x the
    level its alternatives offer (`routes.alternatives_level`: at each controlled hop, the
    mean utilisation of the usable links out of or into the same switch), whichever is
    higher. A swap only reaches another path of the plane, so a load no path avoids (a T0
    that lost an uplink offers its 31 others 32/31 of their capacity whichever spine an EV
    takes) queues on every path alike and ECN marks none more than the others; marking it
    against the fabric's level instead made every EV there move, at random, for ever (P100
    1.078 against spraying's 32/31 after one cable down at 2,048 GPUs). The level is the
    switch's, not the mean over the flow's own EVs: with one EV a plane that mean is the EV's
    own utilisation, and no EV ever moved (mrc was spraying), nor did a flow's EVs that all
    sat on one hot spine."""
    util_ext = jnp.concatenate([util, jnp.zeros(1, util.dtype)])
    usable_ext = jnp.concatenate([usable, jnp.zeros(1, bool)])
    local = routes.alternatives_level(plane, spine, util_ext, usable_ext)
    return jnp.maximum(level, threshold * local * (1.0 + LOCAL_SLACK))


def _replaced(routes, plane, fabric_dead, usable_ev):
    """bool[F, K]: the EVs on a dead path that MRC replaces: those whose flow has no usable EV
    left on their plane. The others are retired where they are: the first lost packet retires
    an EV and the flow sprays on over the rest (spraying's own steady state), where replacing
    them at random piled EVs onto some spines."""
    has_live = routes.plane_mean(plane, jnp.ones(plane.shape, jnp.float32), usable_ev) > 0
    return fabric_dead & ~has_live


RETARGET_DRAWS = 2  # candidate spines tried per moving EV; the first live one is taken


def _all_alive(alive):
    """Whether every link is alive (mrc's loop then skips every liveness lookup)."""
    return jnp.all(alive)


def _fmix32(x):
    """MurmurHash3's 32-bit finaliser: a bijection of uint32 with full avalanche."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def hash_bits(index, seed_words, iteration):
    """uint32 random bits per entry of `index` (distinct uint32 counters) for one iteration:
    a counter-based hash of (counter, iteration, two key words). The loop's swaps need one
    draw per EV per iteration; threefry (`jax.random.bits`) took 7-8 ms for 1M draws on the
    2-core CPU, this 0.7 ms, and its output passes as uniform for a damping coin and a spine
    offset. Distinct counters give distinct bits within an iteration (a bijection)."""
    salt = _fmix32(iteration.astype(jnp.uint32) * jnp.uint32(0x9E3779B9) ^ seed_words[1])
    return _fmix32((index * jnp.uint32(0x9E3779B9)) ^ salt ^ seed_words[0])


def _moves(bits, controlled, marked, level, damping):
    """bool[F, K]: which EVs move this iteration, from the high 16 of their draw `bits`. A
    marked EV moves with probability damping x (u - level) / u, u its `controlled`
    utilisation (the share of its traffic in excess); a marked dead one (u infinite: its
    flow has no usable EV left on its plane, `_replaced`) moves at once."""
    dead = ~jnp.isfinite(controlled)
    share_over = jnp.where(dead, 1.0, (controlled - level) / jnp.maximum(controlled, 1e-30))
    p_move = jnp.where(marked, jnp.where(dead, 1.0, jnp.clip(damping * share_over, 0, 1)),
                       0.0)
    return (bits >> 16).astype(jnp.float32) < p_move * jnp.float32(65536.0)


class _Phase(NamedTuple):
    """What every iteration of the fixed point reads and never changes (traced arrays, the
    routes and static settings)."""

    routes: Any
    plane: jax.Array        # int32[F, K]
    demand: jax.Array       # float[F]
    capacity: jax.Array     # float[L]
    alive: jax.Array        # bool[L]
    alive_ext: jax.Array    # bool[L + 1]
    cross: jax.Array        # bool[F, K] or [F, 1]: the EV's choice matters
    host_live: jax.Array    # bool[F, K]: its NIC ports (both ends) are alive
    all_alive: jax.Array    # bool: every link alive (the no-failure baseline)
    threshold: Any
    damping: Any
    ev_index: jax.Array     # uint32[F, K]: each EV's counter for its random bits
    seed_words: jax.Array   # uint32[2]
    fabric_range: tuple
    clock_rows: int


class _Measured(NamedTuple):
    """An EV set's state: each EV's controlled utilisation and mark, the P100, the fabric
    overload, the flows without a live EV, each EV's marking level and (with the clock) each flow's
    speed."""

    controlled: jax.Array
    marked: jax.Array
    p100: jax.Array
    overload: jax.Array
    stranded: jax.Array
    level: jax.Array
    speed: jax.Array


class _Loop(NamedTuple):
    """The fixed point's carry: the EV set and its measure, the best overload so far and the
    iterations since it improved by tol, the iteration, the traces, the best EV set (fewest
    flows without a live EV, then lowest P100, then lowest overload) and, with the clock, the flows'
    speeds in every set."""

    spine: jax.Array
    controlled: jax.Array
    marked: jax.Array
    best: jax.Array
    since_best: jax.Array
    it: jax.Array
    trace: jax.Array
    excess: jax.Array
    best_spine: jax.Array
    best_stranded: jax.Array
    best_p100: jax.Array
    best_overload: jax.Array
    level: jax.Array
    speeds: jax.Array


def _measure(ph: _Phase, spine) -> _Measured:
    """Loads, utilisation, marks and the stop rule's figures of one EV set."""
    routes, plane = ph.routes, ph.plane
    num_links = ph.capacity.shape[0]
    # with every link alive no path needs its liveness looked up, and `lax.cond` takes passes
    # without those gathers: on a CPU a gather keeps XLA from vectorising the loop it sits in,
    # and they took half an iteration at 131,072 GPUs
    fabric_ok = jax.lax.cond(ph.all_alive, lambda s: jnp.ones(s.shape, bool),       # [F, K]
                             lambda s: routes.controlled_alive(plane, s, ph.alive_ext), spine)
    live = fabric_ok & ph.host_live
    count = jnp.sum(live, axis=1, keepdims=True, dtype=jnp.int32).astype(jnp.float32)
    # demand x (1 / count): XLA rewrote the former demand x live / count into this, and
    # spelling it out keeps every figure to the bit
    rate = jnp.where(live, ph.demand[:, None] * (1.0 / jnp.maximum(count, 1.0)), 0.0)
    load = routes.slot_loads(plane, spine, rate, num_links + 1)
    util, usable = _utilisation(load, ph.capacity, ph.alive)
    util_ext = jnp.concatenate([util, jnp.zeros(1)])
    fabric_dead = ~fabric_ok & ph.cross
    controlled = routes.controlled_max(plane, spine, util_ext)
    controlled = jnp.where(fabric_dead, jnp.inf, controlled)
    p100, level, overload = _marking(load, util, usable, ph.capacity, ph.threshold,
                                     ph.fabric_range)
    usable_ev = ph.cross & ph.host_live & ~fabric_dead
    level = _local_level(routes, plane, spine, level, ph.threshold, util, usable)
    replaced = _replaced(routes, plane, fabric_dead, usable_ev)
    marked = ((controlled > level) & ~fabric_dead | replaced) & ph.cross & ph.host_live
    # EVs on a dead fabric path that MRC has not replaced yet: a set with fewer is always
    # better (MRC retires them within microseconds), whatever its P100 (counted per flow
    # first, which XLA fuses, where one sum stored the [F, K] mask as int32)
    stranded = jnp.sum(~jnp.any(live, axis=1), dtype=jnp.int32)
    speed = (flow_speed(routes, plane, spine, live, util_ext) if ph.clock_rows
             else jnp.zeros(spine.shape[0], jnp.float32))
    return _Measured(controlled, marked, p100, overload, stranded, level, speed)


def _swap(ph: _Phase, spine, controlled, marked, level, it, *, lookup: bool):
    """The EV set after one reaction; `lookup`: some link is dead, so a candidate's path must
    be checked (else the first candidate is live)."""
    routes = ph.routes
    # one 32-bit draw per EV: the high half decides whether it moves, the low half where
    bits = hash_bits(ph.ev_index, ph.seed_words, it)
    move = _moves(bits, controlled, marked, level, ph.damping)
    # a random other path of the same plane (slot k stays on its plane): candidates are the
    # plane's other paths in cyclic order from a uniform random start; the first whose path is
    # alive is taken, else the EV stays and retries next iteration
    if lookup:
        target, found = routes.first_live_alternative(ph.plane, spine, bits, RETARGET_DRAWS,
                                                      ph.alive_ext)
        move = move & found
    else:
        target = routes.alternatives(ph.plane, spine, bits, 1)[..., 0]
    move = move & routes.can_move()
    return jnp.where(move, target, spine).astype(spine.dtype)


def _iterate(ph: _Phase, state: _Loop, tol) -> _Loop:
    """One iteration: swap the marked EVs, measure the new set, keep the best one."""
    new_spine = jax.lax.cond(ph.all_alive, functools.partial(_swap, ph, lookup=False),
                             functools.partial(_swap, ph, lookup=True),
                             state.spine, state.controlled, state.marked, state.level,
                             state.it)
    m = _measure(ph, new_spine)
    speeds = state.speeds
    if ph.clock_rows:      # the set after iteration it + 1: its own row, or the tail's sum
        speeds = speeds.at[jnp.minimum(state.it + 1, ph.clock_rows)].add(m.speed)
    improved = m.overload < state.best * (1.0 - tol)
    same_dead = m.stranded == state.best_stranded
    better = (m.stranded < state.best_stranded) | (same_dead & (m.p100 < state.best_p100)) | (
        same_dead & (m.p100 == state.best_p100) & (m.overload < state.best_overload))
    return _Loop(
        spine=new_spine, controlled=m.controlled, marked=m.marked,
        best=jnp.minimum(state.best, m.overload),
        since_best=jnp.where(improved, 0, state.since_best + 1), it=state.it + 1,
        trace=state.trace.at[state.it + 1].set(m.p100),
        excess=state.excess.at[state.it + 1].set(m.overload),
        # a copy only when it is better (a select would read and write both sets every time)
        best_spine=jax.lax.cond(better, lambda: new_spine, lambda: state.best_spine),
        best_stranded=jnp.where(better, m.stranded, state.best_stranded),
        best_p100=jnp.where(better, m.p100, state.best_p100),
        best_overload=jnp.where(better, m.overload, state.best_overload),
        level=m.level, speeds=speeds)


def mrc_fixed_point(routes, plane, spine, demand, capacity, alive, key, threshold, damping,
                    tol, *, max_iters: int, patience, fabric_range: tuple[int, int],
                    clock_rows: int = 0) -> MrcResult:
    """The fixed point of MRC's EV swapping (see the module docstring). Traceable; jit it.

    `routes`: the phase's `solver.incidence` routes (Clos or stored paths); `plane`, `spine`:
    each EV's plane and choice int32[F, K] (on a Clos the choice is the spine and slot k must
    sit on plane k % P, as `paths.spread_slots` and `hashed_slots` draw: the loop sums
    NIC-port loads per plane by a reshape). `fabric_range`: (start, stop) of the
    switch-to-switch links (tiers 1 and 2), whose overload the stop rule watches.
    `max_iters` is static (the trace's length); `patience` may be a traced integer (the
    policy passes it among its options, so a sweep over it, or a failure set's own, never
    recompiles). `clock_rows` (static) > 0 records every flow's speed in each EV set the loop
    passes through (`MrcResult.speeds`), for `engine.timing.clocked_durations`."""
    num_flows, num_slots = spine.shape
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    # an EV whose NIC port (either end) is dead is retired for good: no path of its plane can
    # carry it, so it is never marked and never moves
    # (invariant terms come last in each expression: XLA hoists a loop-invariant [F, K]
    # expression out of the loop as a stored array, which every iteration would then read)
    ph = _Phase(routes=routes, plane=plane, demand=demand, capacity=capacity, alive=alive,
                alive_ext=alive_ext, cross=routes.choice_matters(plane),
                host_live=routes.host_ok(plane, alive_ext), all_alive=_all_alive(alive),
                threshold=threshold, damping=damping,
                ev_index=jnp.arange(num_flows * num_slots,
                                    dtype=jnp.uint32).reshape(spine.shape),
                seed_words=jax.random.bits(key, (2,), jnp.uint32),
                fabric_range=fabric_range, clock_rows=clock_rows)
    # the EV sets travel in the routes' narrowest choice dtype (uint8 spines on a Clos of up to
    # 256 spines): every pass over them and the best set's copy move a quarter of the bytes
    spine = spine.astype(routes.choice_dtype())
    m0 = _measure(ph, spine)
    speeds0 = jnp.zeros((clock_rows + 1 if clock_rows else 0, num_flows), jnp.float32)
    if clock_rows:
        speeds0 = speeds0.at[0].set(m0.speed)
    init = _Loop(spine=spine, controlled=m0.controlled, marked=m0.marked, best=m0.overload,
                 since_best=jnp.int32(0), it=jnp.int32(0),
                 trace=jnp.full(max_iters + 1, m0.p100, jnp.float32),
                 excess=jnp.full(max_iters + 1, m0.overload, jnp.float32), best_spine=spine,
                 best_stranded=m0.stranded, best_p100=m0.p100, best_overload=m0.overload,
                 level=m0.level, speeds=speeds0)

    def cond(state):
        return jnp.any(state.marked) & (state.since_best < patience) & (state.it < max_iters)

    final = jax.lax.while_loop(cond, lambda state: _iterate(ph, state, tol), init)
    it = final.it
    steps = jnp.arange(max_iters + 1)
    trace = jnp.where(steps > it, final.trace[it], final.trace)  # the tail repeats the last
    excess = jnp.where(steps > it, final.excess[it], final.excess)
    # a balanced stop is a true fixed point (nothing would move again): return it; otherwise
    # the swapping would go on, and the best EV set it reached is returned
    balanced = ~jnp.any(final.marked)
    spine_out = jnp.where(balanced, final.spine, final.best_spine)
    m_out = _measure(ph, spine_out)
    status = jnp.where(balanced, MRC_BALANCED,
                       jnp.where(final.since_best >= patience, MRC_SETTLED, MRC_ITERATION_CAP))
    return MrcResult(spine=spine_out.astype(jnp.int32), iterations=it,
                     status=status.astype(jnp.int32), residual=m_out.overload,
                     marked=jnp.sum(m_out.marked).astype(jnp.int32), trace=trace,
                     excess_trace=excess, final_spine=final.spine.astype(jnp.int32),
                     speeds=final.speeds, final_speed=m_out.speed)


class MrcSettings(Strict):
    """MRC adaptive spraying: `evs` entropy values per flow (equal per plane, the same initial
    set as `spray` when the counts match); an EV whose path's worst controllable utilisation
    exceeds its marking level, `threshold` x max(1, the fabric links' mean utilisation, the
    mean utilisation of the links its alternatives take at its switches), is marked and
    moves to a random spine of its plane with probability damping * (u - level) / u. Stops
    when nothing is marked, when the fabric overload has not improved by `tol` (relative) for
    `patience` iterations, or at `max_iters`. A failure set
    starts from the no-failure equilibrium (a warm start) and stops after `failure_patience`
    iterations without improvement (5: measured within 1.3% of `patience` 20's mean P100 over
    failure sets, 3.5x faster). `placement` places the initial EVs as `spray.placement` does;
    a swap always draws a uniformly random path of the plane."""

    evs: int = Field(128, ge=1, le=4096, description=(
        "Entropy values (path slots) per flow, equal per plane: a multiple of fabric.planes."))
    placement: Literal["routed", "hashed"] = Field("routed", description=(
        "Where the initial EVs land (a swap always draws a uniformly random path of the "
        "plane). " + PLACEMENT_HELP))
    threshold: Annotated[float, TRACED] = Field(1.0, gt=0.0, le=100.0, description=(
        "Marking level, relative to max(1, the fabric links' mean utilisation, the mean "
        "utilisation of the usable links out of the EV's T0 and into its destination's T0 "
        "on its plane)."))
    damping: Annotated[float, TRACED] = Field(0.3, gt=0.0, le=1.0, description=(
        "A marked EV moves with probability damping * (u - level) / u."))
    max_iters: Annotated[int, STATIC] = Field(500, ge=1, le=100_000, description=(
        "Most iterations of the EV-swapping fixed point."))
    tol: Annotated[float, TRACED] = Field(0.01, ge=0.0, le=1.0, description=(
        "Relative improvement of the fabric overload that counts as progress."))
    patience: Annotated[int, TRACED] = Field(20, ge=1, le=100_000, description=(
        "Stop after this many iterations without progress."))
    failure_patience: int = Field(5, ge=1, le=100_000, description=(
        "`patience` of a failure set, which starts from the no-failure equilibrium."))
    clock: bool = Field(True, description=(
        "Charge each flow for the EV sets it lives through while MRC converges (one "
        "iteration per base RTT, from spraying's start) in the flow completion times and the "
        "progressive completion; false: every flow runs on the settled set from its first "
        "byte. The P100 is the settled set's either way."))


@dataclasses.dataclass(frozen=True)
class Mrc(Spraying):
    """MRC adaptive spraying: starts from spraying's EV draw (`mrc.evs` EVs placed by
    `mrc.placement` on a Clos, and hashed ones on stored-path fabrics; routed there, the
    `fabric.paths` candidate slots) and reacts with the fixed point."""

    settings_model = MrcSettings

    name: str = "mrc"
    stream: int = 3
    iterative: bool = True
    display: Display = Display(label="MRC adaptive spraying (EV swapping fixed point)",
                               residual="overload", colour="#2ca02c",       # green
                               line_style=(0, (5, 1)))
    memory_profile: str = "swap-loop"


    def described(self, scenario: Scenario) -> dict:
        # clocked: the progressive time and the FCTs charge the EV sets the loop passes
        # through; the static completion is the settled set's (the reports say which is which)
        section = self.section(scenario)
        return {"placement": section.placement, "clocked": section.clock}

    def init_stream(self) -> int:
        return SPRAY.stream      # the same initial draw as spraying: columns differ by adapting

    def clock_rows(self, scenario: Scenario) -> int:
        section = self.section(scenario)
        return min(section.max_iters, CLOCK_ROWS) if section.clock else 0

    def reaction_window_s(self, failures: FailuresConfig) -> float:
        return failures.mrc_reaction_us * 1e-6     # the first lost packet retires the EV

    def failure_options(self, scenario: Scenario) -> dict:
        # a failure set starts from the no-failure equilibrium: it settles in fewer iterations
        return {**self.options(scenario),
                "patience": np.int32(self.section(scenario).failure_patience)}

    def convergence(self, status: int, iterations: int = 0) -> str:
        if status & Status.ITERATION_CAP:
            return "iteration cap"
        if status & Status.SETTLED:
            return "converged (settled)"
        # balanced with no iteration: spraying's draw marked nothing, so nothing moved
        return "converged (balanced)" if iterations else "balanced at the start (nothing marked)"

    def ev_mix(self, scenario: Scenario):
        # at ACK time, htsim's bitmap walk or REPS (`dynamic.mrc_ev_rule`)
        return {"bitmap": bitmap_mix, "reps": reps_mix}[scenario.dynamic.mrc_ev_rule]

    def start_in_time(self, slots, split):
        # from spraying's EVs, equal over the live ones: its EV mix adapts in time, from the
        # start, instead of starting at the static level's fixed point
        return slots.choice, None

    def react(self, routes, phase, plane, choice, state, alive, capacity, key, options,
              settings, layout, clock_rows=0) -> Reaction:
        (max_iters,) = settings
        fabric_range = (layout[1][0], layout[2][1])   # switch-to-switch links
        mrc = mrc_fixed_point(routes, plane, choice, phase.demand, capacity, alive, key,
                              options["threshold"], options["damping"], options["tol"],
                              max_iters=max_iters, patience=options["patience"],
                              fabric_range=fabric_range, clock_rows=clock_rows)
        weights = routes.live_split(plane, mrc.spine, jnp.concatenate([alive, jnp.array([True])]))
        clock = (mrc.speeds, mrc.final_speed) if clock_rows else (None, None)
        return Reaction(choice=mrc.spine, weights=weights, iterations=mrc.iterations,
                        status=mrc.status, residual=mrc.residual, trace=mrc.trace,
                        speeds=clock[0], final_speed=clock[1])

    def restart(self, routes, phase, plane, choice, state, alive, capacity, key, options,
                settings, layout) -> Reaction:
        # the same EV sets as `react` (mrc_restart), without the trace
        (max_iters,) = settings
        mrc = mrc_restart(routes, plane, choice, phase.demand, capacity, alive, key,
                          options["threshold"], options["damping"], options["tol"],
                          max_iters=max_iters, patience=options["patience"],
                          fabric_range=(layout[1][0], layout[2][1]))
        return Reaction(choice=mrc.spine, weights=mrc.weights, iterations=mrc.iterations,
                        status=mrc.status, residual=mrc.residual)


MRC = register(Mrc())


# --------------------------------------------------------------------------- failure sets

class MrcRestart(NamedTuple):
    """What `mrc_restart` returns: the MrcResult fields a failure set reports, and the split."""

    spine: jax.Array        # int32[F, K]: as MrcResult.spine
    iterations: jax.Array   # int32 scalar
    status: jax.Array       # int32 scalar
    residual: jax.Array     # float scalar: overload of the returned EV set
    weights: jax.Array      # float[F, K]: `uniform_live_split` of the returned EV set


def mrc_restart(routes, plane, spine, demand, capacity, alive, key, threshold, damping, tol,
                *, max_iters: int, patience, fabric_range: tuple[int, int]) -> MrcRestart:
    """`mrc_fixed_point` for a failure set's warm start: the same iterations bit for bit (the
    same EV sets, iterations, status and residual; tests/test_mrc_restart.py checks it, so a
    change to the fixed point's rules shows there), for what a failure record reports, in
    about half the time at 8,192 GPUs x 128 EVs on the 2-core CPU. A hop's utilisation is
    gathered per hop (XLA's CPU gather over an [F, K, 2] index and the max over it took 7x as
    long as two [F, K] ones); a moving EV's candidates are checked against each slot's live
    spines as bit sets (`routes.choice_alive_lookup`, no gather) and the first live one is
    chosen by selects; an EV's fabric hops are alive after a move (it only moves onto a live
    path, and the mask is fixed), so their aliveness is carried; the residual is carried
    instead of measured again after the loop; no trace is kept; the EV sets travel in the
    routes' narrowest choice dtype; the loads no swap moves (a Clos's NIC ports,
    `routes.rate_loads`) are summed again only while some EV sits on a dead path (only then
    can a flow's live paths change), and added to the moved part (`routes.choice_loads`) on
    disjoint links, which keeps `slot_loads`'s bits; and the returned EV set's equal split
    over its live paths comes with it (`uniform_live_split`'s weights, the paths checked by
    `routes.slot_alive`)."""
    num_links = capacity.shape[0]
    num_flows, num_slots = spine.shape
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    cross = routes.choice_matters(plane)
    host_dead = ~routes.host_ok(plane, alive_ext)

    def per_hop(table, hops, combine):
        return functools.reduce(combine, [table[hops[..., h]] for h in range(hops.shape[-1])])

    def rate_part(fabric_ok):
        # the loads no swap moves (a Clos's NIC ports): they change only with a flow's live
        # paths, so the loop sums them again only then (`routes.rate_loads`)
        live = (~host_dead & fabric_ok).astype(jnp.float32)
        count = live.sum(axis=1, keepdims=True)
        rate = demand[:, None] * live / jnp.maximum(count, 1.0)
        return count, routes.rate_loads(plane, rate, num_links + 1)

    def measure(spine, fabric_ok, count, fixed_load):
        hops = routes.controlled_hops(plane, spine)
        live = (~host_dead & fabric_ok).astype(jnp.float32)
        rate = demand[:, None] * live / jnp.maximum(count, 1.0)
        # disjoint links from `fixed_load`'s (zeros there), so the sum is `slot_loads`'s bits
        load = routes.choice_loads(plane, spine, rate, num_links + 1) + fixed_load
        util, usable = _utilisation(load, capacity, alive)
        util_ext = jnp.concatenate([util, jnp.zeros(1)])
        fabric_dead = cross & ~fabric_ok
        controlled = jnp.where(fabric_dead, jnp.inf, per_hop(util_ext, hops, jnp.maximum))
        p100, level, overload = _marking(load, util, usable, capacity, threshold,
                                         fabric_range)
        usable_ev = cross & ~host_dead & ~fabric_dead
        level = _local_level(routes, plane, spine, level, threshold, util, usable)
        replaced = _replaced(routes, plane, fabric_dead, usable_ev)
        marked = cross & ~host_dead & ((controlled > level) & ~fabric_dead | replaced)
        dead_evs = jnp.sum(cross & ~host_dead & fabric_dead).astype(jnp.int32)
        stranded = jnp.sum(~jnp.any(~host_dead & fabric_ok, axis=1), dtype=jnp.int32)
        return controlled, marked, p100, overload, dead_evs, stranded, level

    ev_index = jnp.arange(num_flows * num_slots, dtype=jnp.uint32).reshape(spine.shape)
    seed_words = jax.random.bits(key, (2,), jnp.uint32)
    choice_alive = routes.choice_alive_lookup(plane, alive_ext)
    # the EV sets travel in the routes' narrowest choice dtype, as in the fixed point
    spine = spine.astype(routes.choice_dtype())
    fabric_ok0 = per_hop(alive_ext, routes.controlled_hops(plane, spine), jnp.logical_and)
    count0, fixed0 = rate_part(fabric_ok0)
    controlled0, marked0, p100_0, overload0, dead0, stranded0, level0 = measure(
        spine, fabric_ok0, count0, fixed0)
    init = (spine, fabric_ok0, controlled0, marked0, overload0, overload0, jnp.int32(0),
            jnp.int32(0), spine, stranded0, p100_0, overload0, level0, count0, fixed0, dead0)

    def cond(state):
        _, _, _, marked, _, _, since_best, it = state[:8]
        return jnp.any(marked) & (since_best < patience) & (it < max_iters)

    def body(state):
        (spine, fabric_ok, controlled, marked, _, best, since_best, it, best_spine,
         best_stranded, best_p100, best_overload, level, count, fixed_load, dead_evs) = state
        # materialised once: fused into its users, the hash was computed again for each
        bits = jax.lax.optimization_barrier(hash_bits(ev_index, seed_words, it))
        move = _moves(bits, controlled, marked, level, damping)
        candidates = routes.alternatives(plane, spine, bits, RETARGET_DRAWS)
        # the first live candidate, as argmax and take_along_axis pick it, by selects over
        # the candidates one at a time (a reduction over that short last axis was slow)
        target, found = candidates[..., 0], choice_alive(candidates[..., 0])
        for d in range(1, candidates.shape[-1]):              # RETARGET_DRAWS, static
            live = choice_alive(candidates[..., d])
            target = jnp.where(~found & live, candidates[..., d], target)
            found = found | live
        move = move & found & routes.can_move()
        new_spine = jnp.where(move, target, spine).astype(spine.dtype)
        # an EV only moves onto a live path, and the mask does not change within a set; a
        # flow's live paths change only when one of its EVs leaves a dead path, which needs
        # an EV on one (a marked EV: `dead_evs` counts them all)
        fabric_ok = fabric_ok | move
        count, fixed_load = jax.lax.cond(dead_evs > 0, rate_part,
                                         lambda _: (count, fixed_load), fabric_ok)
        controlled, marked, p100, overload, dead_evs, stranded, level = measure(
            new_spine, fabric_ok, count, fixed_load)
        improved = overload < best * (1.0 - tol)
        best = jnp.minimum(best, overload)
        since_best = jnp.where(improved, 0, since_best + 1)
        same_dead = stranded == best_stranded
        better = (stranded < best_stranded) | (same_dead & (p100 < best_p100)) | (
            same_dead & (p100 == best_p100) & (overload < best_overload))
        best_spine = jnp.where(better, new_spine, best_spine)
        best_stranded = jnp.where(better, stranded, best_stranded)
        best_p100 = jnp.where(better, p100, best_p100)
        best_overload = jnp.where(better, overload, best_overload)
        return (new_spine, fabric_ok, controlled, marked, overload, best, since_best, it + 1,
                best_spine, best_stranded, best_p100, best_overload, level, count, fixed_load,
                dead_evs)

    (last_spine, _, _, last_marked, last_overload, _, since_best, it, best_spine, _, _,
     best_overload, *_) = jax.lax.while_loop(cond, body, init)
    balanced = ~jnp.any(last_marked)
    status = jnp.where(balanced, MRC_BALANCED,
                       jnp.where(since_best >= patience, MRC_SETTLED, MRC_ITERATION_CAP))
    spine_out = jnp.where(balanced, last_spine, best_spine).astype(jnp.int32)
    live = routes.slot_alive(plane, spine_out, alive_ext).astype(jnp.float32)
    return MrcRestart(spine=spine_out, iterations=it, status=status.astype(jnp.int32),
                      residual=jnp.where(balanced, last_overload, best_overload),
                      weights=live / jnp.maximum(live.sum(axis=1, keepdims=True), 1.0))
