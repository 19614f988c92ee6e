"""MRC adaptive spraying as a jitted fixed point over entropy values (EVs).

Contract: `mrc_fixed_point` takes each flow's initial EV set (slot k on plane k % P, on spine
`spine[f, k]`) and returns the EV set that MRC's congestion reaction settles on, with its
iteration count, a residual and a status code. The whole loop is one `lax.while_loop` under
`jit`; the random swaps come from a JAX PRNG key, so a run is deterministic given the seed.

The model of one iteration (what MRC does over a few round-trip times):
  1. spray: every flow sends equally over its live EVs (an EV whose path has a dead link is
     retired: it carries nothing and is replaced, as MRC does at the first lost packet);
  2. congestion signal: an EV is *marked* when the worst utilisation along the hops its choice
     controls (T0 -> T1 uplink and T1 -> T0 downlink) exceeds `threshold` (ECN marking at a
     queue that builds when offered load exceeds capacity). The NIC-port hops are shared by
     every EV of a plane, so no swap can relieve them; congestion there is left to the rates;
  3. reaction: a marked EV moves to a uniformly random *other* spine of the **same plane**
     with probability damping * (u - threshold) / u, where u is its path's worst utilisation.
     The factor (u - threshold) / u is the share of the link's traffic in excess: ECN marks
     packets, not whole links, so in expectation about the excess moves and not everything
     (which would only move the hot spot). Staying in the plane keeps every flow's traffic
     exactly balanced across planes, as MRC's per-plane EV assignment does.
Stops when no EV is marked (`balanced`), when the fabric's overload (the share of fabric
load above capacity, a smooth measure, unlike the jumpy P100) has not improved by more than
`tol` (relative) for `patience` iterations (`settled`), or at `max_iters` (`iteration cap`). What is returned is the final EV set, not the best one seen.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fabricjax.fabric import ClosGeometry
from fabricjax.paths import clos_path_links
from fabricjax.solver import PhaseResult, evaluate_split, link_load, uniform_live_split

MRC_BALANCED = 0
MRC_SETTLED = 1
MRC_ITERATION_CAP = 2
MRC_STATUS_NAMES = {MRC_BALANCED: "converged (balanced)", MRC_SETTLED: "converged (settled)",
                    MRC_ITERATION_CAP: "iteration cap"}


class MrcResult(NamedTuple):
    spine: jax.Array        # int32[F, K] final spine of every EV (planes never change)
    iterations: jax.Array   # int32 scalar
    status: jax.Array       # int32 scalar, MRC_*
    residual: jax.Array     # float scalar: final overload (see excess_trace); 0 when balanced
    marked: jax.Array       # int32 scalar: EVs still marked at the end
    trace: jax.Array        # float[max_iters + 1]: P100 over all links after each iteration
                            # (entry 0 = plain spraying); unused entries repeat the last
    excess_trace: jax.Array # float[max_iters + 1]: overload = sum over fabric links of
                            # max(load - capacity, 0) / their total load, after each iteration


def _utilisation(load, capacity, alive):
    num_links = capacity.shape[0]
    real = load[:num_links]
    usable = alive & (capacity > 0)
    util = jnp.where(usable, real / jnp.where(usable, capacity, 1.0),
                     jnp.where(real > 0, jnp.inf, 0.0))
    return util, usable


def mrc_fixed_point(geom: ClosGeometry, src, dst, plane, spine, demand, capacity, alive, key,
                    threshold, damping, tol, *, max_iters: int, patience: int) -> MrcResult:
    """The fixed point of MRC's EV swapping (see the module docstring). Traceable; jit it."""
    num_links = capacity.shape[0]
    alive_ext = jnp.concatenate([alive, jnp.array([True])])
    tiers = geom.tier_starts
    fabric_lo, fabric_hi = tiers[1], tiers[3]         # t0->t1 and t1->t0 links
    cross = (geom.t0_of(src) != geom.t0_of(dst))[:, None]  # [F, 1]: EV choice matters
    spines = geom.spines

    def measure(spine):
        links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine, xp=jnp)
        weights = uniform_live_split(links, alive_ext)
        load = link_load(links, weights, demand, num_links + 1)
        util, usable = _utilisation(load, capacity, alive)
        util_ext = jnp.concatenate([util, jnp.zeros(1)])
        path_dead = ~jnp.all(alive_ext[links], axis=-1)
        controlled = jnp.maximum(util_ext[links[..., 1]], util_ext[links[..., 2]])
        controlled = jnp.where(path_dead, jnp.inf, controlled)
        p100 = jnp.max(jnp.where(usable, util, -jnp.inf))
        fabric_load = load[fabric_lo:fabric_hi]
        fabric_cap = jnp.where(usable, capacity, 0.0)[fabric_lo:fabric_hi]
        overload = jnp.sum(jnp.maximum(fabric_load - fabric_cap, 0.0)) / jnp.maximum(
            jnp.sum(fabric_load), 1e-30)
        marked = cross & ((controlled > threshold) | path_dead)
        return controlled, marked, p100, overload

    controlled0, marked0, p100_0, fabric0 = measure(spine)
    trace0 = jnp.full(max_iters + 1, p100_0, jnp.float32)
    excess0 = jnp.full(max_iters + 1, fabric0, jnp.float32)

    # state: spine, controlled, marked, overload, best overload, iterations since it improved,
    # iteration, traces
    init = (spine, controlled0, marked0, fabric0, fabric0, jnp.int32(0), jnp.int32(0), trace0,
            excess0)

    def cond(state):
        _, _, marked, _, _, since_best, it, _, _ = state
        return jnp.any(marked) & (since_best < patience) & (it < max_iters)

    def body(state):
        spine, controlled, marked, _, best, since_best, it, trace, excess = state
        k_move, k_target = jax.random.split(jax.random.fold_in(key, it))
        share_over = jnp.where(jnp.isfinite(controlled),
                               (controlled - threshold) / jnp.maximum(controlled, 1e-30), 1.0)
        p_move = jnp.where(marked, jnp.clip(damping * share_over, 0.0, 1.0), 0.0)
        move = jax.random.uniform(k_move, spine.shape) < p_move
        # another spine of the same plane, uniformly (plane fixed: slot k stays on k % P)
        hop = jax.random.randint(k_target, spine.shape, 1, max(spines, 2))
        new_spine = jnp.where(move & (spines > 1), (spine + hop) % spines, spine)
        controlled, marked, p100, overload = measure(new_spine)
        improved = overload < best * (1.0 - tol)
        best = jnp.minimum(best, overload)
        since_best = jnp.where(improved, 0, since_best + 1)
        trace = trace.at[it + 1].set(p100)
        excess = excess.at[it + 1].set(overload)
        return (new_spine, controlled, marked, overload, best, since_best, it + 1, trace,
                excess)

    spine, controlled, marked, overload, _, since_best, it, trace, excess = jax.lax.while_loop(
        cond, body, init)
    steps = jnp.arange(max_iters + 1)
    trace = jnp.where(steps > it, trace[it], trace)  # unused tail repeats the final value
    excess = jnp.where(steps > it, excess[it], excess)
    n_marked = jnp.sum(marked).astype(jnp.int32)
    status = jnp.where(n_marked == 0, MRC_BALANCED,
                       jnp.where(since_best >= patience, MRC_SETTLED, MRC_ITERATION_CAP))
    return MrcResult(spine=spine, iterations=it, status=status.astype(jnp.int32),
                     residual=overload, marked=n_marked, trace=trace, excess_trace=excess)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("max_iters", "patience", "tier_bounds", "top_k"))
def solve_mrc_phase(geom: ClosGeometry, src, dst, plane, spine, demand, size_bytes, flow_cap,
                    capacity, alive, key, threshold, damping, tol, eps, max_rounds, *,
                    max_iters: int, patience: int, tier_bounds, top_k
                    ) -> tuple[MrcResult, PhaseResult]:
    """MRC's fixed point, then the same evaluation as every policy (loads, rates, time)."""
    mrc = mrc_fixed_point(geom, src, dst, plane, spine, demand, capacity, alive, key,
                          threshold, damping, tol, max_iters=max_iters, patience=patience)
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, mrc.spine, xp=jnp)
    weights = uniform_live_split(links, jnp.concatenate([alive, jnp.array([True])]))
    result = evaluate_split(links, weights, demand, size_bytes, flow_cap, capacity, alive,
                            eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds,
                            top_k=top_k)
    return mrc, result
