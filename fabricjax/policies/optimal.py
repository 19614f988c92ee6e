"""The `optimal` policy: the split of every flow over its candidate paths that minimises the
maximum link utilisation, the bound no load balancer can beat, with a certified gap.

Contract: `optimal_split(geom, src, dst, demand, capacity, alive)` returns per-flow weights on
the full (plane, spine) slot grid (`full_slot_grid`: slot k on plane k % P, spine k // P), the
maximum utilisation they reach (`upper`), a lower bound on the optimum from LP duality
(`lower`), the iterations used and a status code. Everything alive-dependent is computed on the
device in one jitted `lax.while_loop` (`solve_commodities`); the host only groups the flows.
On stored-path fabrics (fat trees, graph files) `solve_paths` solves the same problem over each
flow's candidate paths; both run the one mirror-prox loop `_mirror_prox`, and the `Optimal`
policy picks by the routes it is given.

Definition. A flow's candidate paths are the (plane, spine) paths of the two-tier Clos between
its GPUs whose links are all alive. Like MRC, which assigns entropy values equally per plane,
every flow sends exactly 1/P of its demand on each plane, and splits that share freely over
the live spines of the plane. Host links (GPU -> T0, T0 -> GPU) therefore carry fixed load;
only the fabric hops are free: the uplink (plane, source T0, spine) and the downlink (plane,
destination T0, spine). Flows with the same (source T0, destination T0) are interchangeable,
so the problem is solved on *commodities* c = distinct T0 pairs with source != destination,
with variables x[c, p, s] >= 0, sum over s = 1 for each (c, p) that has a live spine (x = 0 on
a spine whose uplink or downlink is dead). Same-T0 flows use only their host links. A flow
whose plane p has a dead NIC port (either end) or no live spine cannot send its plane-p share:
that share is not carried (its weights are 0), and the status says so (Status.LOST_PLANE).
Utilisation is load / capacity over alive links of positive capacity; the objective is
lambda = the maximum utilisation over all of them, host links included as constants:

    minimise lambda  s.t.  load_l(x) <= lambda * capacity_l  for every alive link l.

Method: entropic mirror-prox (Nemirovski, "Prox-method with rate of convergence O(1/t)",
SIAM J. Optim. 2004) on the saddle point min_x max_y sum_l y_l u_l(x), one link-price simplex
y per plane (planes share no link, so each plane is its own problem and every plane gets
balanced, not only the worst), with a per-plane step found by backtracking on mirror-prox's own
acceptance test, restarts from the averaged iterate whenever its gap has halved (the restart
rule that makes primal-dual methods converge linearly on LPs: Applegate et al., "Faster
first-order primal-dual methods for linear programming using restarts and sharpness", Math.
Program. 2023), and the best iterate kept. Exponentiated updates keep x on its simplices
without projections and never divide by zero on dead spines; the certificate comes for free
from the link prices. Per step: three load evaluations (segment sums over commodities into
[T, P, S]) and a few elementwise passes over [C, P, S]; no Python loop over anything.

Lower bound (weak LP duality): for any prices y >= 0 on the alive fabric links of a plane,
sum_l y_l load_l <= lambda * sum_l y_l cap_l, and sum_l y_l load_l >= sum_c D_c * (the shortest
live path of c under lengths y_l), so lambda >= that ratio. It is evaluated for the current
and the averaged prices, and for each one restricted to one T0's uplinks or downlinks (a
restriction is again a valid y, and failures usually bind at a single T0); `lower` is the best
such bound over planes and iterations, and at least the host-link constant.

Stored paths. A flow's candidates are its stored paths (`solver.incidence.StoredRoutes`); it
sends 1/P_f of its demand on each of the P_f planes it has candidates in, split freely over
that plane's live candidates; every alive link is priced (a graph's host may have several
links in a plane, so host links are not constants there), one price simplex per plane; the
per-T0 restrictions of the lower bound do not apply, so `lower` comes from the full prices.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Annotated, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pydantic import Field

from fabricjax.config import FabricKind, Scenario, Strict
from fabricjax.core.registry import register
from fabricjax.core.status import Status
from fabricjax.fabric.clos import ClosGeometry, clos_geometry
from fabricjax.policies.base import TRACED, Policy, Reaction, Slots, stored_spray_slots
from fabricjax.solver.incidence import ClosRoutes

OK, ITERATION_CAP, LOST_PLANE = int(Status.OK), int(Status.ITERATION_CAP), int(Status.LOST_PLANE)

# Entries this small are zero for the prices and splits (it keeps log() finite; float32's
# smallest normal is 1.2e-38).
_TINY = 1e-30
_LOG_TINY = float(np.log(_TINY))
# Relative float32 noise allowed in mirror-prox's step acceptance test: near the optimum both
# sides of the test are differences of nearly equal numbers, and without this slack rounding
# alone rejects every step and the step size collapses to zero.
_ROUNDING = 1e-5
_GROW, _SHRINK = 1.2, 0.5    # step size after an accepted / a rejected step
_MAX_STEP = 1e6              # largest step, relative to the first


class Commodities(NamedTuple):
    """Flows grouped by (source T0, destination T0), built on the host from src/dst alone.

    flow_commodity: int32[F], the commodity of each flow; C (one past the last) for a same-T0
    flow. src_t0, dst_t0: int32[C] the commodity's T0s. C = max(1, min(F, T*(T-1))) depends
    only on F and the geometry, so new flows of the same count never recompile; unused
    commodities are padding with no demand."""

    flow_commodity: np.ndarray
    src_t0: np.ndarray
    dst_t0: np.ndarray


class CommoditySolution(NamedTuple):
    """What `solve_commodities` returns (device arrays).

    split: float32[C, P, S] x, each (c, p) row sums to 1 over live spines (0 where none).
    flow_live: bool[F, P] whether flow f sends its plane-p share (a live path exists).
    upper, lower: float32 scalars, max utilisation reached and a lower bound on the optimum.
    iterations, status: int32 scalars (status: Status flags)."""

    split: jax.Array
    flow_live: jax.Array
    upper: jax.Array
    lower: jax.Array
    iterations: jax.Array
    status: jax.Array


class OptimalSplit(NamedTuple):
    """The optimal policy's answer (device arrays).

    weights: float32[F, P*S] over the full slot grid (`full_slot_grid`): slot k = (plane k % P,
    spine k // P) gets x[c(f), p, s] / P; a same-T0 flow gets 1/(P*S) on every slot of its live
    planes (all of them are the same two host links); 0 on slots of planes without a live path.
    upper: max utilisation of this split (over alive links). lower: a lower bound on the
    optimum (LP duality). gap = upper - lower. iterations: mirror-prox steps. status: Status flags.
    split: float32[C, P, S] the commodity split; flow_commodity: int32[F] (C for same-T0)."""

    weights: jax.Array
    upper: jax.Array
    lower: jax.Array
    gap: jax.Array
    iterations: jax.Array
    status: jax.Array
    split: jax.Array
    flow_commodity: np.ndarray


def commodities(geom: ClosGeometry, src: np.ndarray, dst: np.ndarray) -> Commodities:
    """Group cross-T0 flows by (source T0, destination T0) (host, numpy)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    t0s = geom.t0s
    num_commodities = max(1, min(src.shape[0], t0s * (t0s - 1)))
    src_t0, dst_t0 = geom.t0_of(src), geom.t0_of(dst)
    cross = src_t0 != dst_t0
    pairs, index = np.unique(src_t0[cross] * t0s + dst_t0[cross], return_inverse=True)
    flow_commodity = np.full(src.shape[0], num_commodities, dtype=np.int32)
    flow_commodity[cross] = index.reshape(-1)
    comm_src = np.zeros(num_commodities, dtype=np.int32)
    comm_dst = np.zeros(num_commodities, dtype=np.int32)
    comm_src[:pairs.shape[0]] = pairs // t0s
    comm_dst[:pairs.shape[0]] = pairs % t0s
    return Commodities(flow_commodity, comm_src, comm_dst)


def full_slot_grid(geom: ClosGeometry, num_flows: int) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, P*S]: every path of the fabric once, slot k on plane k % P and
    spine k // P (the layout of `OptimalSplit.weights`)."""
    k = np.arange(geom.planes * geom.spines, dtype=np.int32)
    plane = np.broadcast_to(k % geom.planes, (num_flows, k.shape[0]))
    spine = np.broadcast_to(k // geom.planes, (num_flows, k.shape[0]))
    return np.ascontiguousarray(plane), np.ascontiguousarray(spine)


class _Point(NamedTuple):
    """A point of the saddle problem, each distribution with its log (floored)."""

    x: jax.Array          # float[C, P, S] split of each (commodity, plane) over its choices
    log_x: jax.Array
    ys: tuple             # link prices, arrays [X, P, Y] (one simplex per plane across them)
    log_ys: tuple


class _State(NamedTuple):
    z: _Point
    step: jax.Array         # float[P] mirror-prox step per plane
    sums: tuple             # step-weighted sums of the extrapolated (x, ys) since the
    sum_step: jax.Array     # last restart, and of the steps (float[P])
    restart_gap: jax.Array  # float[P] gap of the averaged point at the last restart
    best_x: jax.Array       # float[C, P, S] per plane, the split with the lowest max utilisation
    best_upper: jax.Array   # float[P]
    best_lower: jax.Array   # float[P]
    iterations: jax.Array   # int32


class _Problem(NamedTuple):
    """One min-max-utilisation problem for `_mirror_prox` (traced arrays and functions).

    D: float[C, P] demand of each commodity on each plane, in units of the largest capacity.
    mask: bool[C, P, S] the live choices of each (commodity, plane). live_ys: tuple of bool
    [X, P, Y] the priced links, grouped as the price arrays are. utilisation(x) -> tuple of
    [X, P, Y] link utilisations; lengths(ys) -> float[C, P, S] each choice's price length;
    restricted(ys, active) -> float[P] extra duality bounds, or None. host: a constant lower
    bound on the optimum (links no choice moves). links_per_path: priced links a unit of flow
    crosses (scales the distance-generating function)."""

    D: jax.Array
    mask: jax.Array
    live_ys: tuple
    utilisation: Any
    lengths: Any
    restricted: Any
    host: jax.Array
    links_per_path: jax.Array


def _sum_planes(parts) -> jax.Array:
    """The sum over every price array of its entries per plane, float[P] (in order)."""
    return functools.reduce(jnp.add, [p.sum((0, 2)) for p in parts])


def _max_planes(parts) -> jax.Array:
    return functools.reduce(jnp.maximum, [p.max((0, 2)) for p in parts])


def _mirror_prox(problem: _Problem, max_iters, tol):
    """(best_x float[C, P, S], upper, lower, iterations, capped bool): the entropic
    mirror-prox loop of the module docstring, one `lax.while_loop`."""
    D, mask, live_ys = problem.D, problem.mask, problem.live_ys
    C, P, S = mask.shape
    f32 = jnp.float32
    has_choice = mask.any(-1)                                       # [C, P]
    active = has_choice & (D > 0)

    def ratio(num, den):
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)

    def lower_bound(ys, length):
        """Per-plane duality bounds from prices y (see the module docstring), float[P]."""
        shortest = jnp.min(jnp.where(mask, length, jnp.inf), -1)
        num = jnp.sum(jnp.where(active, D * shortest, 0.0), 0)
        best = ratio(num, _sum_planes(ys))
        if problem.restricted is not None:
            best = jnp.maximum(best, problem.restricted(ys, active))
        return best

    def normalise_x(logits):
        """Softmax over each (c, p)'s live choices: (x, log x), the log floored at _LOG_TINY
        (so a choice that fell out of use can come back in a few steps)."""
        logits = jnp.where(mask, logits, -jnp.inf)
        top = jnp.max(logits, -1, keepdims=True)
        shifted = logits - jnp.where(jnp.isfinite(top), top, 0.0)  # exp cannot overflow
        e = jnp.where(mask, jnp.exp(shifted), 0.0)
        z = jnp.maximum(e.sum(-1, keepdims=True), _TINY)
        return e / z, jnp.where(mask, jnp.maximum(shifted - jnp.log(z), _LOG_TINY), _LOG_TINY)

    def normalise_y(logits):
        """Softmax over each plane's priced links: (ys, log ys)."""
        logits = tuple(jnp.where(live, lg, -jnp.inf) for live, lg in zip(live_ys, logits))
        top = _max_planes(logits)
        top = jnp.where(jnp.isfinite(top), top, 0.0)[None, :, None]
        es = tuple(jnp.where(live, jnp.exp(lg - top), 0.0) for live, lg in zip(live_ys, logits))
        z = jnp.maximum(_sum_planes(es), _TINY)[None, :, None]
        log_z = top + jnp.log(z)
        return (tuple(e / z for e in es),
                tuple(jnp.where(live, jnp.maximum(lg - log_z, _LOG_TINY), _LOG_TINY)
                      for live, lg in zip(live_ys, logits)))

    def log(x):
        return jnp.maximum(jnp.log(jnp.maximum(x, _TINY)), _LOG_TINY)

    def bregman(a, log_a, b, log_b):
        """Entropy Bregman terms b * (r log r - r + 1) with r = a / b, i.e. a (d - 1) + b
        with d = log r, summed later; a series near d = 0, where that form cancels
        catastrophically in float32."""
        d = log_a - log_b
        series = b * d * d * (0.5 + d * (1.0 / 3.0 + d * 0.125))
        return jnp.where(jnp.abs(d) < 1e-2, series, a * (d - 1.0) + b)

    # Distance-generating function per plane: sum_c weight_p * D_cp * KL(x_cp) + KL(y_p),
    # with weight_p = (priced live links of p) / (links_per_path * total demand of p, in units
    # of the largest capacity): 1 / the plane's mean utilisation of its priced links when
    # capacities are equal, whatever the split. Chosen by measurement: on random failures from
    # 7 to 1,024 GPUs it took 5-10x fewer steps than scaling both parts to the log of their
    # sizes (Nemirovski's textbook choice, whose step count grew with the fabric), and fewer
    # than the capacity-weighted mean.
    num_live = _sum_planes(live_ys).astype(f32)
    weight = num_live / jnp.maximum(problem.links_per_path * D.sum(0), 1e-20)
    weight = jnp.where(weight > 0, weight, 1.0)      # [P]; a plane with no live priced link

    def divergence(a: _Point, b: _Point):
        """V_b(a) per plane, float[P]."""
        dx = jnp.sum(weight * D * jnp.where(mask, bregman(a.x, a.log_x, b.x, b.log_x),
                                            0.0).sum(-1), 0)
        dy = _sum_planes([jnp.where(live, bregman(ay, lay, by, lby), 0.0)
                          for live, ay, lay, by, lby in zip(live_ys, a.ys, a.log_ys, b.ys,
                                                             b.log_ys)])
        return dx + dy

    def prox(z: _Point, step, length, us) -> _Point:
        """Entropic prox step from z against the gradient (length for x, -u for y)."""
        g = step[None, :, None]
        x, log_x = normalise_x(z.log_x - g * length / weight[None, :, None])
        return _Point(x, log_x, *normalise_y(tuple(ly + g * u for ly, u in zip(z.log_ys, us))))

    def select(flag, a: _Point, b: _Point) -> _Point:
        """Per plane: a where flag[P], else b."""
        return jax.tree.map(lambda u, v: jnp.where(flag[None, :, None], u, v), a, b)

    start = _Point(*normalise_x(jnp.zeros((C, P, S), f32)),
                   *normalise_y(tuple(jnp.zeros(live.shape, f32) for live in live_ys)))
    upper0 = _max_planes(problem.utilisation(start.x))
    lower0 = lower_bound(start.ys, problem.lengths(start.ys))
    step0 = 1.0 / jnp.maximum(upper0, 1e-6)        # first exponents of order one
    no_sum = jax.tree.map(jnp.zeros_like, (start.x, start.ys))
    init = _State(z=start, step=step0, sums=no_sum, sum_step=jnp.zeros(P, f32),
                  restart_gap=upper0 - lower0, best_x=start.x, best_upper=upper0,
                  best_lower=lower0, iterations=jnp.int32(0))
    max_iters = jnp.asarray(max_iters, jnp.int32)
    tol = jnp.asarray(tol, f32)
    host = problem.host

    def bounds(state):
        return (jnp.maximum(host, state.best_upper.max()),
                jnp.maximum(host, state.best_lower.max()))

    def cond(state):
        upper, lower = bounds(state)
        return (state.iterations < max_iters) & (upper - lower > tol * upper)

    def body(state):
        z, step = state.z, state.step
        us = problem.utilisation(z.x)
        length = problem.lengths(z.ys)
        # mirror-prox: extrapolate to w with the gradient at z, then step from z with w's
        w = prox(z, step, length, us)
        uws = problem.utilisation(w.x)
        length_w = problem.lengths(w.ys)
        z_next = prox(z, step, length_w, uws)
        # accept when step * <F(w) - F(z), w - z+> <= V_z(w) + V_w(z+), which is all the
        # O(1/t) analysis needs; else halve the step and retry from z
        prod_x = D * ((length_w - length) * (w.x - z_next.x)).sum(-1)              # [C, P]
        prods = [(uw - u) * (wy - zy) for uw, u, wy, zy in zip(uws, us, w.ys, z_next.ys)]
        inner = functools.reduce(jnp.subtract, [prod_x.sum(0)] + [p.sum((0, 2)) for p in prods])
        noise = functools.reduce(jnp.add, [jnp.abs(prod_x).sum(0)] +
                                 [jnp.abs(p).sum((0, 2)) for p in prods])
        ok = step * inner <= divergence(w, z) + divergence(z_next, w) + _ROUNDING * step * noise
        taken = jnp.where(ok, step, 0.0)
        sums = jax.tree.map(lambda total, v: total + taken[None, :, None] * v, state.sums,
                            (w.x, w.ys))
        sum_step = state.sum_step + taken
        norm = jnp.maximum(sum_step, _TINY)[None, :, None]
        has_avg = sum_step > 0
        x_a, ys_a = jax.tree.map(
            lambda total, v: jnp.where(has_avg[None, :, None], total / norm, v), sums,
            (z.x, z.ys))
        uas = problem.utilisation(x_a)

        # certificates: best split among z, w and the average; best prices among w, average
        candidates = jnp.stack([_max_planes(us), _max_planes(uws), _max_planes(uas)])  # [3, P]
        pick = jnp.argmin(candidates, 0)
        cand_x = jnp.where((pick == 0)[None, :, None], z.x,
                           jnp.where((pick == 1)[None, :, None], w.x, x_a))
        cand_upper = jnp.min(candidates, 0)
        better = cand_upper < state.best_upper
        best_x = jnp.where(better[None, :, None], cand_x, state.best_x)
        best_upper = jnp.minimum(cand_upper, state.best_upper)
        lower_a = lower_bound(ys_a, problem.lengths(ys_a))
        lower_w = lower_bound(w.ys, length_w)
        best_lower = jnp.maximum(state.best_lower, jnp.maximum(lower_a, lower_w))

        # restart from the average once its gap has halved since the last restart (its logs
        # are only taken when some plane restarts: they are the loop's costliest elementwise op)
        gap_a = _max_planes(uas) - lower_a
        restart = has_avg & (gap_a <= 0.5 * state.restart_gap)
        average = jax.lax.cond(
            jnp.any(restart),
            lambda: _Point(x_a, log(x_a), ys_a, tuple(log(y) for y in ys_a)),
            lambda: z)
        z_new = select(restart, average, select(ok, z_next, z))
        return _State(
            z=z_new,
            # capped: a plane at an exact optimum accepts every step, and an unbounded step
            # would overflow to inf and turn 0 * inf into NaN
            step=jnp.where(ok, jnp.minimum(step * _GROW, _MAX_STEP * step0), step * _SHRINK),
            sums=jax.tree.map(lambda v: jnp.where(restart[None, :, None], 0.0, v), sums),
            sum_step=jnp.where(restart, 0.0, sum_step),
            restart_gap=jnp.where(restart, gap_a, state.restart_gap),
            best_x=best_x, best_upper=best_upper, best_lower=best_lower,
            iterations=state.iterations + 1)

    final = jax.lax.while_loop(cond, body, init)
    upper, lower = bounds(final)
    # both are float32 sums of the same terms; at a tight certificate rounding can put the
    # bound an ulp above the split's value, and lowering a lower bound keeps it valid
    lower = jnp.minimum(lower, upper)
    return final.best_x, upper, lower, final.iterations, upper - lower > tol * upper


def _capacity_units(capacity, alive):
    """(usable bool[L], cap_ref, inv_cap float32[L]): utilisation in units of the largest
    usable capacity, so float32 sees numbers near 1."""
    usable = alive & (capacity > 0)
    cap_ref = jnp.max(jnp.where(usable, capacity, 0.0)).astype(jnp.float32)
    cap_ref = jnp.where(cap_ref > 0, cap_ref, 1.0)
    inv_cap = jnp.where(usable, cap_ref / jnp.where(usable, capacity, 1.0),
                        0.0).astype(jnp.float32)
    return usable, cap_ref, inv_cap


def _status(capped, no_path) -> jax.Array:
    return (jnp.where(capped, ITERATION_CAP, OK) | jnp.where(no_path, LOST_PLANE, OK)
            ).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=0)
def solve_commodities(geom: ClosGeometry, src, dst, demand, flow_commodity, comm_src, comm_dst,
                      capacity, alive, max_iters, tol) -> CommoditySolution:
    """The min-max-utilisation commodity split of a Clos (see the module docstring), one
    jitted loop.

    src, dst: int32[F] GPUs; demand: float32[F] Gbit/s; flow_commodity, comm_src, comm_dst:
    from `commodities`; capacity: float32[L] Gbit/s and alive: bool[L] for the real links (no
    sentinel); max_iters: int32 and tol: float32 scalars (arrays: changing them never
    recompiles). Stops when upper - lower <= tol * upper or after max_iters steps."""
    T, P, S, N = geom.t0s, geom.planes, geom.spines, geom.gpus
    C = comm_src.shape[0]
    demand = demand.astype(jnp.float32)
    usable, cap_ref, inv_cap = _capacity_units(capacity, alive)

    tiers = geom.tier_starts
    fabric = P * T * S

    def by_t0(x):  # [P*T*S] fabric-tier slice in link order -> [T, P, S]
        return x.reshape(P, T, S).transpose(1, 0, 2)

    live_up = by_t0(usable[tiers[1]:tiers[1] + fabric])
    live_down = by_t0(usable[tiers[2]:tiers[2] + fabric])
    ic_up = by_t0(inv_cap[tiers[1]:tiers[1] + fabric])
    ic_down = by_t0(inv_cap[tiers[2]:tiers[2] + fabric])
    mask = live_up[comm_src] & live_down[comm_dst]                 # [C, P, S] live spines
    has_spine = mask.any(-1)                                        # [C, P]

    planes = jnp.arange(P)
    host_ok = (usable[geom.gpu_up(planes[None, :], src[:, None])]
               & usable[geom.gpu_down(planes[None, :], dst[:, None])])   # [F, P]
    cross = flow_commodity < C
    flow_live = host_ok & jnp.where(cross[:, None],
                                    has_spine[jnp.minimum(flow_commodity, C - 1)], True)
    share = jnp.where(flow_live, demand[:, None] / P, 0.0) / cap_ref        # [F, P]
    D = jax.ops.segment_sum(jnp.where(cross[:, None], share, 0.0), flow_commodity,
                            num_segments=C + 1)[:C]                         # [C, P]
    host_up = jax.ops.segment_sum(share, src, num_segments=N) * inv_cap[:P * N].reshape(P, N).T
    host_down = (jax.ops.segment_sum(share, dst, num_segments=N)
                 * inv_cap[tiers[3]:tiers[3] + P * N].reshape(P, N).T)
    host = jnp.maximum(jnp.max(host_up, initial=0.0), jnp.max(host_down, initial=0.0))
    no_path = jnp.any((demand[:, None] > 0) & ~flow_live)

    def utilisation(x):
        flow = D[:, :, None] * x
        u_up = jax.ops.segment_sum(flow, comm_src, num_segments=T) * ic_up
        u_down = jax.ops.segment_sum(flow, comm_dst, num_segments=T) * ic_down
        return u_up, u_down                                          # [T, P, S] each

    def lengths(ys):
        y_up, y_down = ys
        return (y_up * ic_up)[comm_src] + (y_down * ic_down)[comm_dst]   # [C, P, S]

    def restricted(ys, active):
        """Each price vector restricted to one T0's uplinks or downlinks (failures usually
        bind at a single T0), the best over T0s, float[P]."""
        best = jnp.zeros(P, jnp.float32)
        for y, ic, ends in ((ys[0], ic_up, comm_src), (ys[1], ic_down, comm_dst)):  # 2 tiers
            short = jnp.min(jnp.where(mask, (y * ic)[ends], jnp.inf), -1)
            local_num = jax.ops.segment_sum(jnp.where(active, D * short, 0.0), ends,
                                            num_segments=T)          # [T, P]
            den = y.sum(-1)
            best = jnp.maximum(best, jnp.max(jnp.where(den > 0, local_num / jnp.where(
                den > 0, den, 1.0), 0.0), 0))
        return best

    # each cross-T0 unit of flow crosses one uplink and one downlink
    problem = _Problem(D=D, mask=mask, live_ys=(live_up, live_down), utilisation=utilisation,
                       lengths=lengths, restricted=restricted, host=host,
                       links_per_path=jnp.float32(2.0))
    best_x, upper, lower, iterations, capped = _mirror_prox(problem, max_iters, tol)
    return CommoditySolution(split=best_x, flow_live=flow_live, upper=upper, lower=lower,
                             iterations=iterations, status=_status(capped, no_path))


@functools.partial(jax.jit, static_argnums=0)
def expand_weights(geom: ClosGeometry, split, flow_commodity, flow_live) -> jax.Array:
    """Per-flow weights float32[F, P*S] on the full slot grid from the commodity split."""
    P, S = geom.planes, geom.spines
    C = split.shape[0]
    cross = flow_commodity < C
    per_flow = split[jnp.minimum(flow_commodity, C - 1)]                 # [F, P, S]
    per_flow = jnp.where(cross[:, None, None], per_flow, 1.0 / S)
    per_flow = jnp.where(flow_live[:, :, None], per_flow / P, 0.0)
    return per_flow.transpose(0, 2, 1).reshape(per_flow.shape[0], S * P)   # k = s * P + p


def optimal_split(geom: ClosGeometry, src, dst, demand, capacity, alive, *,
                  max_iters: int = 5000, tol: float = 1e-4) -> OptimalSplit:
    """The min-max-utilisation split of every flow (module docstring), with its certificate.

    src, dst: int[F] GPU ids; demand: float[F] Gbit/s; capacity: float[L] Gbit/s and alive:
    bool[L] for the fabric's L real links. Groups the flows on the host, then one jitted solve
    and one jitted expansion to the slot grid; returns device arrays."""
    src = np.asarray(src)
    dst = np.asarray(dst)
    demand = np.asarray(demand, dtype=np.float32)
    capacity = np.asarray(capacity, dtype=np.float32)
    alive = np.asarray(alive, dtype=bool)
    num_flows = src.shape[0]
    if src.shape != (num_flows,) or dst.shape != src.shape or demand.shape != src.shape:
        raise ValueError(f"src, dst and demand must be [F] arrays of one length; got shapes "
                         f"{src.shape}, {dst.shape}, {demand.shape}")
    if capacity.shape != (geom.num_links,) or alive.shape != capacity.shape:
        raise ValueError(f"capacity and alive must have shape ({geom.num_links},) (one entry "
                         f"per link, no sentinel); got {capacity.shape} and {alive.shape}")
    if num_flows and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= geom.gpus):
        raise ValueError(f"src and dst must be GPU ids in [0, {geom.gpus})")
    if not np.all(np.isfinite(demand)) or np.any(demand < 0):
        raise ValueError("demand must be finite and >= 0")
    if max_iters < 0 or not tol >= 0:
        raise ValueError(f"need max_iters >= 0 and tol >= 0; got {max_iters}, {tol}")
    groups = commodities(geom, src, dst)
    args = jax.device_put((src.astype(np.int32), dst.astype(np.int32), demand,
                           groups.flow_commodity, groups.src_t0, groups.dst_t0, capacity, alive,
                           np.int32(max_iters), np.float32(tol)))
    solution = solve_commodities(geom, *args)
    weights = expand_weights(geom, solution.split, args[3], solution.flow_live)
    return OptimalSplit(weights=weights, upper=solution.upper, lower=solution.lower,
                        gap=solution.upper - solution.lower, iterations=solution.iterations,
                        status=solution.status, split=solution.split,
                        flow_commodity=groups.flow_commodity)


# --------------------------------------------------------------------------- stored paths

class PathSolution(NamedTuple):
    """What `solve_paths` returns (device arrays): weights float32[F, C] over each flow's
    candidate slots (0 on repeats and dead candidates; a flow's weights sum to the share of
    planes it can still reach), upper, lower, iterations, status as `CommoditySolution`."""

    weights: jax.Array
    upper: jax.Array
    lower: jax.Array
    iterations: jax.Array
    status: jax.Array


def solve_paths(routes, demand, capacity, alive, link_plane, max_iters, tol) -> PathSolution:
    """The min-max-utilisation split of every flow over its stored candidate paths
    (`solver.incidence.StoredRoutes`; module docstring, "Stored paths"). Traceable; the
    commodities are the flows themselves. link_plane: int32[L] each link's plane."""
    P = routes.planes
    num_links = capacity.shape[0]
    F, K, _ = routes.cand.shape
    demand = demand.astype(jnp.float32)
    usable, cap_ref, inv_cap = _capacity_units(capacity, alive)
    usable_ext = jnp.concatenate([usable, jnp.array([True])])
    inv_ext = jnp.concatenate([inv_cap, jnp.zeros(1, jnp.float32)])
    distinct = jnp.arange(K)[None, :] < routes.distinct[:, None]                # [F, K]
    in_plane = routes.plane[:, None, :] == jnp.arange(P)[None, :, None]          # [F, P, K]
    has_cand = (in_plane & distinct[:, None, :]).any(-1)                         # [F, P]
    path_ok = jnp.all(usable_ext[routes.cand], axis=-1) & distinct               # [F, K]
    mask = in_plane & path_ok[:, None, :]                                        # [F, P, K]
    flow_live = mask.any(-1)
    planes_used = jnp.maximum(has_cand.sum(-1, keepdims=True), 1)
    share = jnp.where(flow_live, demand[:, None] / planes_used, 0.0) / cap_ref  # [F, P]
    no_path = jnp.any((demand[:, None] > 0) & has_cand & ~flow_live)
    live_y = ((link_plane[None, :] == jnp.arange(P)[:, None]) & usable[None, :])[None]
    plane_of = jnp.arange(P)[None, :, None] == link_plane[None, None, :]        # [1, P, L]
    hops = jnp.sum(routes.cand != num_links, axis=-1).astype(jnp.float32)       # [F, K]
    mean_hops = jnp.sum(jnp.where(path_ok, hops, 0.0)) / jnp.maximum(path_ok.sum(), 1)

    def utilisation(x):
        per_slot = jnp.sum(share[:, :, None] * x, axis=1)                        # [F, K]
        load = jax.ops.segment_sum(
            jnp.broadcast_to(per_slot[:, :, None], routes.cand.shape).reshape(-1),
            routes.cand.reshape(-1), num_segments=num_links + 1)[:num_links]
        return (jnp.where(plane_of, (load * inv_cap)[None, None, :], 0.0),)

    def lengths(ys):
        per_link = jnp.sum(ys[0][0], axis=0) * inv_cap                           # [L]
        length = jnp.sum(jnp.concatenate([per_link, jnp.zeros(1)])[routes.cand], axis=-1)
        return jnp.broadcast_to(length[:, None, :], mask.shape)

    problem = _Problem(D=share, mask=mask, live_ys=(live_y,), utilisation=utilisation,
                       lengths=lengths, restricted=None, host=jnp.float32(0.0),
                       links_per_path=jnp.maximum(mean_hops, 1.0))
    best_x, upper, lower, iterations, capped = _mirror_prox(problem, max_iters, tol)
    fraction = jnp.where(flow_live, 1.0 / planes_used, 0.0)                     # [F, P]
    weights = jnp.sum(best_x * fraction[:, :, None], axis=1)
    return PathSolution(weights=weights, upper=upper, lower=lower, iterations=iterations,
                        status=_status(capped, no_path))


# --------------------------------------------------------------------------- the policy

class OptimalSettings(Strict):
    """The min-max-utilisation bound: iterate until the duality gap is below `tol` times the
    bound, or `max_iters`."""

    max_iters: Annotated[int, TRACED] = Field(3000, ge=1, le=1_000_000, description=(
        "Most mirror-prox iterations."))
    tol: Annotated[float, TRACED] = Field(1e-3, gt=0.0, le=1.0, description=(
        "Stop when the certified duality gap is below tol times the bound."))


@dataclasses.dataclass(frozen=True)
class Optimal(Policy):
    """The min-max-utilisation bound: no load balancer that keeps each flow's planes equal (as
    MRC does) can beat it. It has no transport (no transient after a failure)."""

    settings_model = OptimalSettings

    name: str = "optimal"
    stream: int = 4
    transient: bool = False
    iterative: bool = True
    residual_name: str = "gap"
    gap_certified: bool = True
    label: str = "the min-max utilisation bound"
    colour: str = "#404040"      # dark grey: a bound, not a load balancer
    line_style: object = "-."
    memory_profile: str = "commodity-loop"

    def slots_per_flow(self, scenario: Scenario) -> int:
        if scenario.fabric.kind == FabricKind.CLOS:
            geom = clos_geometry(scenario.fabric)
            return geom.planes * geom.spines
        return scenario.fabric.paths

    def convergence(self, status: int, iterations: int = 0) -> str:
        if status & Status.ITERATION_CAP:
            text = "iteration cap"
        else:   # at 0 iterations the first certificate already closed the gap
            text = "converged (gap)" if iterations else "solved at the first check (gap)"
        if status & Status.LOST_PLANE:
            text += "; a flow lost a plane (no live path)"
        return text

    def init(self, scenario, fabric, flows, routes, rng) -> Slots:
        if routes is None:
            geom = fabric.geometry
            groups = commodities(geom, flows.src, flows.dst)
            plane, spine = full_slot_grid(geom, flows.num_flows)
            return Slots(plane, spine, {"flow_commodity": groups.flow_commodity,
                                        "comm_src": groups.src_t0, "comm_dst": groups.dst_t0})
        return Slots(*stored_spray_slots(routes),
                     {"link_plane": fabric.plane.astype(np.int32)})

    def react(self, routes, phase, plane, choice, state, alive, capacity, key, options,
              settings, layout) -> Reaction:
        if isinstance(routes, ClosRoutes):
            geom = routes.geom
            sol = solve_commodities(geom, phase.src, phase.dst, phase.demand,
                                    state["flow_commodity"], state["comm_src"],
                                    state["comm_dst"], capacity, alive, options["max_iters"],
                                    options["tol"])
            weights = expand_weights(geom, sol.split, state["flow_commodity"], sol.flow_live)
        else:
            sol = solve_paths(routes, phase.demand, capacity, alive, state["link_plane"],
                              options["max_iters"], options["tol"])
            weights = sol.weights
        return Reaction(choice=choice, weights=weights,
                        carried=jnp.minimum(weights.sum(axis=1), 1.0),
                        iterations=sol.iterations, status=sol.status,
                        residual=sol.upper - sol.lower)


OPTIMAL = register(Optimal())
