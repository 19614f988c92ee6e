"""Test-side entries into the engine's public pieces with arrays of a test's choosing (one
jitted function per Clos solve, given slots and arrays).

Nothing here is a second implementation: every evaluation goes through the routes' own
`evaluate` / `split_incidence` (the one slots -> links -> incidence -> evaluation sequence the
engine's `phase_core` runs), and mrc through its own fixed point; an adapter only chooses the
split (equal over the live slots, or given weights) a test wants to drive.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.core.status import Status
from fabricjax.engine.phase import offered_demand
from fabricjax.engine.timing import wire_bytes
from fabricjax.policies import get
from fabricjax.policies.mrc import MRC, mrc_fixed_point
from fabricjax.solver.aggregate import (aggregatable, flow_classes, offered_class_demand,
                                        solve_class_slots)
from fabricjax.solver.gradients import split_of
from fabricjax.solver.incidence import ClosRoutes
from fabricjax.solver.maxmin import TOP_LINKS, evaluate_split, uniform_live_split
from fabricjax.solver.progressive import progressive_completion

MRC_BALANCED, MRC_SETTLED, MRC_ITERATION_CAP = (int(Status.OK), int(Status.SETTLED),
                                                int(Status.ITERATION_CAP))
# how mrc's loop ended, in words, after some iterations (at 0 a balanced start reads apart)
MRC_STATUS_NAMES = {code: MRC.convergence(code, 1)
                    for code in (MRC_BALANCED, MRC_SETTLED, MRC_ITERATION_CAP)}
MRC_ENDINGS = set(MRC_STATUS_NAMES.values()) | {MRC.convergence(MRC_BALANCED, 0)}


def tier_bounds(fabric) -> tuple:
    return fabric.tier_bounds


def phase_inputs(fabric, flows, scenario, alive):
    """(demand, wire bytes, flow_cap, capacity, alive, eps, max_rounds) of a Clos phase, host
    arrays as the engine builds them."""
    g = fabric.geometry
    demand = offered_demand(flows, g.nic_gbps, g.gpus)
    if alive is None:
        alive = np.ones(fabric.num_links, dtype=bool)
    return (demand, wire_bytes(scenario, flows.size), np.full_like(demand, g.nic_gbps),
            fabric.capacity, alive, np.float32(scenario.solver.eps),
            np.int32(scenario.solver.max_rounds))


def _alive_ext(alive):
    return jnp.concatenate([alive, jnp.array([True])])


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("tier_bounds", "top_k", "slowest_only"))
def solve_clos_uniform_phase(geom, src, dst, plane, spine, demand, size_bytes, flow_cap,
                             capacity, alive, eps, max_rounds, *, tier_bounds, top_k,
                             slowest_only=False):
    """Equal split over the live (plane, spine) slots, evaluated."""
    routes = ClosRoutes(geom, src, dst)
    weights = uniform_live_split(routes.slot_links(plane, spine), _alive_ext(alive))
    return routes.evaluate(plane, spine, weights, demand, size_bytes, flow_cap, capacity, alive,
                           eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k,
                           slowest_only=slowest_only)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("tier_bounds", "top_k", "slowest_only"))
def solve_clos_weighted_phase(geom, src, dst, plane, spine, weights, demand, size_bytes,
                              flow_cap, capacity, alive, eps, max_rounds, *, tier_bounds, top_k,
                              slowest_only=False):
    """A given split weights[F, K] over Clos slots (caps scaled by the carried share)."""
    return ClosRoutes(geom, src, dst).evaluate(
        plane, spine, weights, demand, size_bytes, flow_cap * jnp.minimum(weights.sum(axis=1), 1.0),
        capacity, alive, eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k,
        slowest_only=slowest_only)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("max_iters", "patience", "tier_bounds", "top_k",
                                    "slowest_only"))
def solve_mrc_phase(geom, src, dst, plane, spine, demand, size_bytes, flow_cap, capacity, alive,
                    key, threshold, damping, tol, eps, max_rounds, *, max_iters, patience,
                    tier_bounds, top_k, slowest_only=False):
    """MRC's fixed point on a Clos, then the evaluation: (MrcResult, PhaseResult)."""
    routes = ClosRoutes(geom, src, dst)
    mrc = mrc_fixed_point(routes, plane, spine, demand, capacity, alive, key, threshold,
                          damping, tol, max_iters=max_iters, patience=patience,
                          fabric_range=(tier_bounds[1][0], tier_bounds[2][1]))
    weights = uniform_live_split(routes.slot_links(plane, mrc.spine), _alive_ext(alive))
    return mrc, routes.evaluate(plane, mrc.spine, weights, demand, size_bytes, flow_cap,
                                capacity, alive, eps=eps, max_rounds=max_rounds,
                                tier_bounds=tier_bounds, top_k=top_k, slowest_only=slowest_only)


def _capacity_ext(capacity, alive):
    return jnp.concatenate([jnp.where(alive, capacity, 0.0), jnp.array([jnp.inf])]
                           ).astype(jnp.float32)


@functools.partial(jax.jit, static_argnums=0)
def solve_clos_progressive_uniform(geom, src, dst, plane, spine, size_bytes, start_s, flow_cap,
                                   capacity, alive, eps, max_rounds, max_events, batch):
    routes = ClosRoutes(geom, src, dst)
    weights = uniform_live_split(routes.slot_links(plane, spine), _alive_ext(alive))
    ids, coef = routes.split_incidence(plane, spine, weights)
    return progressive_completion(ids, coef, size_bytes, start_s, flow_cap,
                                  _capacity_ext(capacity, alive), eps=eps,
                                  max_rounds=max_rounds, max_events=max_events, batch=batch)


@functools.partial(jax.jit, static_argnums=0)
def solve_clos_progressive_weighted(geom, src, dst, plane, spine, weights, size_bytes, start_s,
                                    flow_cap, capacity, alive, eps, max_rounds, max_events,
                                    batch):
    ids, coef = ClosRoutes(geom, src, dst).split_incidence(plane, spine, weights)
    return progressive_completion(ids, coef, size_bytes, start_s,
                                  flow_cap * jnp.minimum(weights.sum(axis=1), 1.0),
                                  _capacity_ext(capacity, alive), eps=eps,
                                  max_rounds=max_rounds, max_events=max_events, batch=batch)


@functools.partial(jax.jit, static_argnums=0)
def clos_phase_split(geom, src, dst, plane, spine, weights, demand, size_bytes, flow_cap, alive,
                     tie_rtol):
    """The PhaseSplit of flows over Clos slots (weights None: equal over live slots)."""
    routes = ClosRoutes(geom, src, dst)
    if weights is None:
        weights = uniform_live_split(routes.slot_links(plane, spine), _alive_ext(alive))
    else:
        flow_cap = flow_cap * jnp.minimum(weights.sum(axis=1), 1.0)
    ids, coef = routes.split_incidence(plane, spine, weights)
    return split_of(ids, coef, geom.num_links, demand, size_bytes, flow_cap, alive, tie_rtol)


def rehash_dead_slots(geom, src, dst, plane, spine, alive_ext, key):
    """ECMP's re-hash of QPs on dead paths (`ClosRoutes.rehash`)."""
    return ClosRoutes(geom, jnp.asarray(src), jnp.asarray(dst)).rehash(
        jnp.asarray(plane), jnp.asarray(spine), jnp.asarray(alive_ext), key)


def clos_mrc_fixed_point(geom, src, dst, plane, spine, demand, capacity, alive, key, threshold,
                         damping, tol, *, max_iters, patience):
    """`policies.mrc.mrc_fixed_point` on a Clos given as its geometry and flow endpoints."""
    starts = geom.tier_starts
    return mrc_fixed_point(ClosRoutes(geom, src, dst), plane, spine, demand, capacity, alive,
                           key, threshold, damping, tol, max_iters=max_iters,
                           patience=patience, fabric_range=(starts[1], starts[3]))


def uniform_phase(links, demand, size_bytes, flow_cap, capacity, alive, eps, max_rounds, *,
                  tier_bounds, top_k):
    """Stored link ids [F, K, H] split equally over each flow's live slots, evaluated (the
    solver's own `evaluate_split`, as a stored-path fabric's routes call it)."""
    weights = uniform_live_split(links, _alive_ext(alive))
    return evaluate_split(links, weights, demand, size_bytes, flow_cap, capacity, alive,
                          eps=eps, max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k)


solve_uniform_phase = jax.jit(uniform_phase, static_argnames=("tier_bounds", "top_k"))


def solve_phase(fabric, paths, flows, scenario, alive=None):
    """One phase over a materialised PathSet (stored link ids [F, K, H], uniform split):
    device in, jitted solve, out."""
    args = jax.device_put((paths.links, *phase_inputs(fabric, flows, scenario, alive)))
    result = solve_uniform_phase(*args, tier_bounds=fabric.tier_bounds,
                                 top_k=min(TOP_LINKS, fabric.num_links))
    return jax.device_get(result)


def solve_aggregated_classes(geom, policy, classes, demand, size_bytes, capacity, *, evs=None,
                             qps=None, rng=None, flow_cap=None, top_k=TOP_LINKS,
                             placement="routed"):
    """A phase of (T0, T0) `classes` under `policy` (its `class_slots`): spray with `evs`
    placed `placement`, ecmp with `qps` per plane drawn from `rng`; `demand` None: the
    offered demand."""
    pol = get(policy)
    if not pol.aggregatable:
        raise ValueError(f"{policy} cannot be solved as classes")
    if (policy == "spray" and not evs) or (policy == "ecmp" and (not qps or rng is None)):
        raise ValueError("spray needs evs >= 1; ecmp needs qps >= 1 and an rng")
    # what `Policy.section(scenario)` reads: each policy's settings by name
    sections = {"spray": SimpleNamespace(evs=evs, placement=placement),
                "ecmp": SimpleNamespace(qps=qps)}
    options = SimpleNamespace(section=sections.get)
    class_slots, plane_slots = pol.class_slots(geom, classes, options, rng)
    if demand is None:
        demand = offered_class_demand(geom, classes)
    return solve_class_slots(geom, classes, class_slots, plane_slots, demand, size_bytes,
                             capacity, flow_cap=flow_cap, top_k=top_k)


def solve_aggregated_phase(geom, policy, src, dst, demand, size_bytes, capacity, **options):
    """`solve_aggregated_classes` for explicit flows; ValueError unless aggregatable."""
    if not aggregatable(src, dst, size_bytes, demand):
        raise ValueError("flows are not aggregatable: sizes or offered demands differ")
    classes = flow_classes(geom, src, dst)
    demand0 = None if demand is None else float(np.asarray(demand)[0])
    return solve_aggregated_classes(geom, policy, classes, demand0,
                                    float(np.asarray(size_bytes)[0]), capacity, **options)
