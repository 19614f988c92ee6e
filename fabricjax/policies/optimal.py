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
from typing import Annotated, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from pydantic import Field

from fabricjax.config import FabricKind, Scenario, Strict
from fabricjax.core.registry import register
from fabricjax.core.roles import TRACED
from fabricjax.core.status import Status
from fabricjax.fabric.build import paths_per_pair
from fabricjax.fabric.clos import ClosGeometry, clos_geometry
from fabricjax.policies.base import Display, Policy, Reaction, Slots, stored_spray_slots
from fabricjax.solver.incidence import ClosRoutes
from fabricjax.solver.mirror_prox import SaddleProblem, capacity_units, mirror_prox

OK, ITERATION_CAP, LOST_PLANE = int(Status.OK), int(Status.ITERATION_CAP), int(Status.LOST_PLANE)

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
    usable, cap_ref, inv_cap = capacity_units(capacity, alive)

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
    problem = SaddleProblem(D=D, mask=mask, live_ys=(live_up, live_down), utilisation=utilisation,
                       lengths=lengths, restricted=restricted, host=host,
                       links_per_path=jnp.float32(2.0))
    best_x, upper, lower, iterations, capped = mirror_prox(problem, max_iters, tol)
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
    usable, cap_ref, inv_cap = capacity_units(capacity, alive)
    usable_ext = jnp.concatenate([usable, jnp.array([True])])
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

    problem = SaddleProblem(D=share, mask=mask, live_ys=(live_y,), utilisation=utilisation,
                       lengths=lengths, restricted=None, host=jnp.float32(0.0),
                       links_per_path=jnp.maximum(mean_hops, 1.0))
    best_x, upper, lower, iterations, capped = mirror_prox(problem, max_iters, tol)
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
    gap_certified: bool = True
    display: Display = Display(label="the min-max utilisation bound", residual="gap",
                               colour="#404040",   # dark grey: a bound, not a load balancer
                               line_style="-.")
    memory_profile: str = "commodity-loop"

    def slots_per_flow(self, scenario: Scenario) -> int:
        if scenario.fabric.kind == FabricKind.CLOS:
            geom = clos_geometry(scenario.fabric)
            return geom.planes * geom.spines
        return paths_per_pair(scenario)

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
              settings, layout, clock_rows=0) -> Reaction:
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
