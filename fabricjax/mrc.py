"""MRC adaptive spraying as a jitted fixed point over entropy values (EVs).

Contract: `mrc_fixed_point` takes each flow's initial EV set (slot k on plane k % P, on spine
`spine[f, k]`) and returns the EV set that MRC's congestion reaction settles on, with its
iteration count, a residual and a status code. The whole loop is one `lax.while_loop` under
`jit`; the random swaps come from a JAX PRNG key, so a run is deterministic given the seed.

The model of one iteration (what MRC does over a few round-trip times):
  1. spray: every flow sends equally over its live EVs. An EV whose path has a dead fabric
     link carries nothing and is replaced at once by a live EV of the same plane (MRC retires an
     EV at the first lost packet); an EV behind a dead NIC port is retired for good, since no
     spine of its plane can carry it (the GPU loses that plane, 1/P of its bandwidth);
  2. congestion signal: an EV is *marked* when the worst utilisation along the hops its choice
     controls (T0 -> T1 uplink and T1 -> T0 downlink) exceeds `threshold` (ECN marking at a
     queue that builds when offered load exceeds capacity). The NIC-port hops are shared by
     every EV of a plane, so no swap can relieve them; congestion there is left to the rates;
  3. reaction: a marked EV moves to a uniformly random *other* spine of the **same plane**
     with probability damping * (u - threshold) / u, where u is its path's worst utilisation.
     When that spine's path is dead the next spine in cyclic order is tried (RETARGET_DRAWS
     candidates in all); when every candidate is dead the EV stays and retries next iteration.
     The factor (u - threshold) / u is the share of the link's traffic in excess: ECN marks
     packets, not whole links, so in expectation about the excess moves and not everything
     (which would only move the hot spot). Staying in the plane keeps every flow's traffic
     exactly balanced across planes, as MRC's per-plane EV assignment does.
Stops when no EV is marked (`balanced`), when the fabric's overload (the share of fabric
load above threshold x capacity, a smooth measure, unlike the jumpy P100) has not improved by
more than `tol` (relative) for `patience` iterations (`settled`), or at `max_iters`
(`iteration cap`). In the *settled* case the swapping goes on in a noisy
equilibrium, so its P100 fluctuates; what is returned is then the best EV set it reached
(fewest EVs left on dead paths, then lowest P100, then lowest overload), never worse than the
spraying it started from when nothing is dead. A balanced stop returns the balanced EV set
itself, a true fixed point. The trace records every iteration's P100, so the spread of that
equilibrium stays visible.

Speed (issue 7): an iteration touches only [F, K] arrays. The two fabric hops of an EV are
base + spine in the Clos layout (bases hoisted out of the loop), NIC-port loads are summed per
plane by a reshape, loads are four scatters, and the swap coins come from a counter-based hash
(`hash_bits`) instead of threefry. Measured on the 2-core CPU at 8,192 GPUs x 128 EVs: 48 ms
per iteration before, 9 ms after; `bench/bench_scale.py` has the table.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fabricjax.fabric import ClosGeometry
from fabricjax.paths import clos_incidence, clos_path_links, fabric_hops_alive
from fabricjax.solver import PhaseResult, evaluate_split, uniform_live_split

MRC_BALANCED = 0
MRC_SETTLED = 1
MRC_ITERATION_CAP = 2
MRC_STATUS_NAMES = {MRC_BALANCED: "converged (balanced)", MRC_SETTLED: "converged (settled)",
                    MRC_ITERATION_CAP: "iteration cap"}


class MrcResult(NamedTuple):
    spine: jax.Array        # int32[F, K] spine of every EV in the best EV set reached
                            # (lowest P100, then overload); planes never change
    iterations: jax.Array   # int32 scalar
    status: jax.Array       # int32 scalar, MRC_*
    residual: jax.Array     # float scalar: overload of the returned EV set (see excess_trace)
    marked: jax.Array       # int32 scalar: EVs marked in the returned EV set
    trace: jax.Array        # float[max_iters + 1]: P100 over all links after each iteration
                            # (entry 0 = plain spraying); unused entries repeat the last
    excess_trace: jax.Array # float[max_iters + 1]: overload = sum over fabric links of
                            # max(load - threshold * capacity, 0) / their total load
    final_spine: jax.Array  # int32[F, K]: the EV set when the loop stopped (trace's last entry)


def _utilisation(load, capacity, alive):
    num_links = capacity.shape[0]
    real = load[:num_links]
    usable = alive & (capacity > 0)
    util = jnp.where(usable, real / jnp.where(usable, capacity, 1.0),
                     jnp.where(real > 0, jnp.inf, 0.0))
    return util, usable


RETARGET_DRAWS = 2  # candidate spines tried per moving EV; the first live one is taken


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


def per_plane_sum(values, planes: int):
    """float[F, P]: the sum of values[F, K] over the slots of each plane (slot k on plane
    k % P), by a reshape instead of a scatter (K is padded up to a multiple of P)."""
    num_flows, num_slots = values.shape
    pad = -num_slots % planes
    if pad:
        values = jnp.pad(values, ((0, 0), (0, pad)))
    return values.reshape(num_flows, -1, planes).sum(axis=1)


def mrc_fixed_point(geom: ClosGeometry, src, dst, plane, spine, demand, capacity, alive, key,
                    threshold, damping, tol, *, max_iters: int, patience: int) -> MrcResult:
    """The fixed point of MRC's EV swapping (see the module docstring). Traceable; jit it.

    `plane` must hold slot k on plane k % P (what `paths.spread_slots` and `hashed_slots`
    draw): the loop uses that structure to sum NIC-port loads per plane without a scatter."""
    num_links = capacity.shape[0]
    num_flows, num_slots = spine.shape
    planes = geom.planes
    sentinel = num_links
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    tiers = geom.tier_starts
    fabric_lo, fabric_hi = tiers[1], tiers[3]         # t0->t1 and t1->t0 links
    src_t0 = geom.t0_of(src)[:, None]
    dst_t0 = geom.t0_of(dst)[:, None]
    cross = src_t0 != dst_t0                          # [F, 1]: EV choice matters
    spines = geom.spines
    # The two fabric hops of an EV are base + spine (fabric.py's layout); same-T0 flows point
    # both at the sentinel. Only the spine changes inside the loop, so the bases are hoisted.
    up_base = geom.t0_up(plane, src_t0, 0)
    down_base = geom.t1_down(plane, dst_t0, 0)

    def fabric_hops(spine):
        return (jnp.where(cross, up_base + spine, sentinel),
                jnp.where(cross, down_base + spine, sentinel))

    # NIC-port hops per (flow, plane): the same link for every EV of that plane
    plane_ids = jnp.arange(planes)[None, :]
    host_up = geom.gpu_up(plane_ids, src[:, None])
    host_down = geom.gpu_down(plane_ids, dst[:, None])
    host_ok = alive_ext[host_up] & alive_ext[host_down]                      # [F, P]
    # an EV whose NIC port (either end) is dead is retired for good: no spine of its plane
    # can carry it, so it is never marked and never moves
    host_dead = ~jnp.take(host_ok, jnp.arange(num_slots) % planes, axis=1)  # [F, K]

    def spine_alive(candidate):
        """Whether the fabric hops of (plane, candidate spine) are alive, for cross-T0 EVs."""
        if candidate.ndim == plane.ndim:
            return fabric_hops_alive(geom, plane, src_t0, dst_t0, candidate, alive_ext)
        return fabric_hops_alive(geom, plane[..., None], src_t0[..., None], dst_t0[..., None],
                                 candidate, alive_ext)

    def measure(spine):
        up, down = fabric_hops(spine)
        fabric_ok = alive_ext[up] & alive_ext[down]
        live = (~host_dead & fabric_ok).astype(jnp.float32)
        rate = demand[:, None] * live / jnp.maximum(live.sum(axis=1, keepdims=True), 1.0)
        plane_rate = per_plane_sum(rate, planes)
        # loads over the 2K fabric hops and 2P NIC-port hops of every flow (the entries of
        # paths.clos_incidence, without building the [F, K, 4] path links)
        # (four scatters: measured 2x faster than one over the concatenated entries)
        load = (jnp.zeros(num_links + 1, jnp.float32).at[up].add(rate).at[down].add(rate)
                .at[host_up].add(plane_rate).at[host_down].add(plane_rate))
        util, usable = _utilisation(load, capacity, alive)
        util_ext = jnp.concatenate([util, jnp.zeros(1)])
        fabric_dead = cross & ~fabric_ok
        controlled = jnp.maximum(util_ext[up], util_ext[down])
        controlled = jnp.where(fabric_dead, jnp.inf, controlled)
        p100 = jnp.max(jnp.where(usable, util, -jnp.inf))
        fabric_load = load[fabric_lo:fabric_hi]
        # excess over the marking level, so that the stop rule sees what marks react to
        fabric_cap = threshold * jnp.where(usable, capacity, 0.0)[fabric_lo:fabric_hi]
        overload = jnp.sum(jnp.maximum(fabric_load - fabric_cap, 0.0)) / jnp.maximum(
            jnp.sum(fabric_load), 1e-30)
        marked = cross & ~host_dead & ((controlled > threshold) | fabric_dead)
        # EVs on a dead fabric path that MRC has not replaced yet: a set with fewer is always
        # better (MRC retires them within microseconds), whatever its P100
        dead_evs = jnp.sum(cross & ~host_dead & fabric_dead).astype(jnp.int32)
        return controlled, marked, p100, overload, dead_evs

    ev_index = jnp.arange(num_flows * num_slots, dtype=jnp.uint32).reshape(spine.shape)
    seed_words = jax.random.bits(key, (2,), jnp.uint32)
    controlled0, marked0, p100_0, overload0, dead0 = measure(spine)
    trace0 = jnp.full(max_iters + 1, p100_0, jnp.float32)
    excess0 = jnp.full(max_iters + 1, overload0, jnp.float32)

    # state: spine, controlled, marked, best overload so far, iterations since it improved by
    # tol, iteration, traces, and the best EV set (fewest EVs on dead paths, then lowest P100,
    # then lowest overload)
    init = (spine, controlled0, marked0, overload0, jnp.int32(0), jnp.int32(0), trace0,
            excess0, spine, dead0, p100_0, overload0)

    def cond(state):
        _, _, marked, _, since_best, it = state[:6]
        return jnp.any(marked) & (since_best < patience) & (it < max_iters)

    def body(state):
        (spine, controlled, marked, best, since_best, it, trace, excess,
         best_spine, best_dead, best_p100, best_overload) = state
        # one 32-bit draw per EV: the high half decides whether it moves, the low half where
        bits = hash_bits(ev_index, seed_words, it)
        dead = ~jnp.isfinite(controlled)
        share_over = jnp.where(dead, 1.0,
                               (controlled - threshold) / jnp.maximum(controlled, 1e-30))
        # a congested EV moves with a probability that tracks the excess; a dead one (the first
        # lost packet retires it) is replaced at once
        p_move = jnp.where(marked, jnp.where(dead, 1.0, jnp.clip(damping * share_over, 0, 1)),
                           0.0)
        move = (bits >> 16).astype(jnp.float32) < p_move * jnp.float32(65536.0)
        # a random other spine of the same plane (slot k stays on plane k % P): candidates are
        # the other spines in cyclic order from a uniform random start; the first whose path is
        # alive is taken, else the EV stays and retries next iteration
        others = max(spines - 1, 1)
        start = (((bits & jnp.uint32(0xFFFF)) * jnp.uint32(others)) >> 16).astype(spine.dtype)
        offsets = (start[..., None] + jnp.arange(min(others, RETARGET_DRAWS), dtype=spine.dtype)
                   ) % others
        candidates = (spine[..., None] + 1 + offsets) % spines
        live = spine_alive(candidates)
        first = jnp.argmax(live, axis=-1)
        target = jnp.take_along_axis(candidates, first[..., None], axis=-1)[..., 0]
        move = move & jnp.any(live, axis=-1) & (spines > 1)
        new_spine = jnp.where(move, target, spine).astype(spine.dtype)
        controlled, marked, p100, overload, dead_evs = measure(new_spine)
        improved = overload < best * (1.0 - tol)
        best = jnp.minimum(best, overload)
        since_best = jnp.where(improved, 0, since_best + 1)
        trace = trace.at[it + 1].set(p100)
        excess = excess.at[it + 1].set(overload)
        same_dead = dead_evs == best_dead
        better = (dead_evs < best_dead) | (same_dead & (p100 < best_p100)) | (
            same_dead & (p100 == best_p100) & (overload < best_overload))
        best_spine = jnp.where(better, new_spine, best_spine)
        best_dead = jnp.where(better, dead_evs, best_dead)
        best_p100 = jnp.where(better, p100, best_p100)
        best_overload = jnp.where(better, overload, best_overload)
        return (new_spine, controlled, marked, best, since_best, it + 1, trace, excess,
                best_spine, best_dead, best_p100, best_overload)

    final = jax.lax.while_loop(cond, body, init)
    (last_spine, _, last_marked, _, since_best, it, trace, excess, best_spine, _, _,
     best_overload) = final
    steps = jnp.arange(max_iters + 1)
    trace = jnp.where(steps > it, trace[it], trace)  # unused tail repeats the final value
    excess = jnp.where(steps > it, excess[it], excess)
    # a balanced stop is a true fixed point (nothing would move again): return it; otherwise
    # the swapping would go on, and the best EV set it reached is returned
    balanced = ~jnp.any(last_marked)
    spine_out = jnp.where(balanced, last_spine, best_spine)
    _, marked_out, _, overload_out, _ = measure(spine_out)
    status = jnp.where(balanced, MRC_BALANCED,
                       jnp.where(since_best >= patience, MRC_SETTLED, MRC_ITERATION_CAP))
    return MrcResult(spine=spine_out, iterations=it, status=status.astype(jnp.int32),
                     residual=overload_out, marked=jnp.sum(marked_out).astype(jnp.int32),
                     trace=trace, excess_trace=excess, final_spine=last_spine)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("max_iters", "patience", "tier_bounds", "top_k",
                                    "slowest_only"))
def solve_mrc_phase(geom: ClosGeometry, src, dst, plane, spine, demand, size_bytes, flow_cap,
                    capacity, alive, key, threshold, damping, tol, eps, max_rounds, *,
                    max_iters: int, patience: int, tier_bounds, top_k, slowest_only=False
                    ) -> tuple[MrcResult, PhaseResult]:
    """MRC's fixed point, then the same evaluation as every policy (loads, rates, time)."""
    mrc = mrc_fixed_point(geom, src, dst, plane, spine, demand, capacity, alive, key,
                          threshold, damping, tol, max_iters=max_iters, patience=patience)
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, mrc.spine, xp=jnp)
    weights = uniform_live_split(links, jnp.concatenate([alive, jnp.array([True])]))
    ids, coef = clos_incidence(geom, src, dst, plane, links, weights)
    result = evaluate_split(ids, coef, demand, size_bytes, flow_cap, capacity, alive,
                            eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds,
                            top_k=top_k, slowest_only=slowest_only)
    return mrc, result
