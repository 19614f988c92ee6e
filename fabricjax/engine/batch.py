"""Failure sets as masks over the one phase program: `lax.map` (vmapped groups on an
accelerator) over the sets of a chunk, `shard_map` over devices, chunks over the batch.

Contract: `solve_failure_sets` evaluates one policy on one phase under every failure set of a
`fabric.failures.FailureBatch`, from the baseline's own prepared phase (the same device
arrays, shape-bucket padding and arrival cohorts) and the split it ended on (its
`engine.phase.PhaseOutcome`): each set's id lists become an alive mask and capacities on the
device (`failure_mask`; the fabric is never rebuilt), `engine.phase.phase_core` runs the
policy's reaction and the evaluation exactly as for the baseline, and each set returns a
`SetOutcome` summary (P100 per tier, each arrival cohort's end, stalled flows, the flows that
lost bytes on a pre-failure path), not per-set flow arrays; `metrics.set_records` finishes its
times with the baseline's own function. One compiled program per (policy, phase shape);
chunks are padded to one shape, so no chunk recompiles. `prepare_failure_phase` and
`solve_set_range` split the same work so that a study can solve any range of sets (a chunk at
a time, streaming its records; the rest of a resumed study).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from fabricjax.config import Scenario
from fabricjax.core.devices import device_mesh, fetch, place, shard_devices
from fabricjax.core.executables import cached_jit
from fabricjax.engine.phase import PhaseOutcome, PreparedPhase, phase_core, phase_key_data
from fabricjax.engine.plan import sets_per_call, slowest_only, vmap_width
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.failures import FailureBatch
from fabricjax.policies import get
from fabricjax.policies.base import Policy
from fabricjax.solver.maxmin import TOP_LINKS

STALLED_SHOWN = 8          # stalled flows reported by index per set


def failure_mask(link_src, link_dst, capacity, dead_links, dead_nodes, degraded_links,
                 degraded_factor, *, num_nodes: int):
    """(alive bool[L], capacity float[L]) of one failure set: a link is dead when it is listed
    or either of its switches is; a degraded link keeps the smallest listed factor."""
    num_links = capacity.shape[0]
    link_dead = jnp.zeros(num_links + 1, bool).at[dead_links].set(True)[:num_links]
    node_dead = jnp.zeros(num_nodes + 1, bool).at[dead_nodes].set(True)
    alive = ~link_dead & ~node_dead[link_src] & ~node_dead[link_dst]
    scale = jnp.ones(num_links + 1, capacity.dtype).at[degraded_links].min(degraded_factor)
    return alive, capacity * scale[:num_links]


class SetOutcome(NamedTuple):
    """One phase under one policy and one failure set (a leading [B] axis when batched)."""

    stats: jax.Array          # float[1 + tiers, 1] utilisation P100 (alive links), all links
                              # then per tier: what failure records report
    top_links: jax.Array      # int32[top_k]
    top_util: jax.Array       # float[top_k]
    cohort_end: jax.Array     # float[C]: per arrival cohort, the latest end of a flow that
                              # still has a path (s, from the cohort's base; engine.timing)
    stalled: jax.Array        # int32: flows with bytes and no live path (rate 0)
    stalled_flows: jax.Array  # int32[STALLED_SHOWN]: their indices, -1 padded
    min_rate: jax.Array       # float: slowest non-stalled sending flow (Gbit/s)
    rounds: jax.Array         # int32 max-min rounds
    status: jax.Array         # int32 Status flags of the evaluation
    affected: jax.Array       # int32: flows with bytes on a pre-failure path that died
    iterations: jax.Array     # int32: the policy's iterations (0 for static policies)
    adapt_status: jax.Array   # int32: the policy's Status flags (ITERATION_CAP, LOST_PLANE)
    residual: jax.Array       # float: mrc overload / optimal gap (0 for the others)


def _one_set(policy: Policy, routes, phase, plane, choice, state, options, key_data, common,
             item, *, settings, layout, tier_bounds, top_k, num_cohorts, slowest_only,
             num_nodes) -> SetOutcome:
    alive, capacity = failure_mask(common["link_src"], common["link_dst"], common["capacity"],
                                   *item, num_nodes=num_nodes)
    sending = phase.size > 0
    reaction, result = phase_core(policy, routes, phase, plane, choice, state, alive, capacity,
                                  key_data, options, common["eps"], common["max_rounds"],
                                  common["cohort"], common["offset"], settings=settings,
                                  layout=layout, tier_bounds=tier_bounds, top_k=top_k,
                                  num_cohorts=num_cohorts, slowest_only=slowest_only,
                                  p100_only=True, restart=True)
    if policy.transient:
        # a flow whose pre-failure slots cross a dead link lost bytes there until it reacts
        alive_ext = jnp.concatenate([alive, jnp.array([True])])
        hit = jnp.any(~routes.slot_alive(plane, choice, alive_ext), axis=1)
        affected = jnp.sum(sending & hit).astype(jnp.int32)
    else:
        affected = jnp.int32(0)
    stalled_mask = sending & (result.rates <= 0)
    (stalled_flows,) = jnp.nonzero(stalled_mask, size=STALLED_SHOWN, fill_value=-1)
    min_rate = jnp.min(jnp.where(sending & ~stalled_mask, result.rates, jnp.inf))
    return SetOutcome(
        stats=result.stats, top_links=result.top_links, top_util=result.top_util,
        cohort_end=result.cohort_end, stalled=result.stalled,
        stalled_flows=stalled_flows.astype(jnp.int32),
        min_rate=jnp.where(jnp.isfinite(min_rate), min_rate, 0.0), rounds=result.rounds,
        status=result.status, affected=affected,
        iterations=jnp.asarray(reaction.iterations, jnp.int32),
        adapt_status=jnp.asarray(reaction.status, jnp.int32),
        residual=jnp.asarray(reaction.residual, jnp.float32))


@functools.partial(cached_jit, static_argnums=0,
                   static_argnames=("settings", "layout", "tier_bounds", "top_k",
                                    "num_cohorts", "slowest_only", "num_nodes", "vmap_width",
                                    "mesh"))
def solve_failure_chunk(policy: Policy, routes, phase, plane, choice, state, options, key_data,
                        common: dict, chunk, *, settings, layout, tier_bounds, top_k,
                        num_cohorts=1, slowest_only=False, num_nodes: int, vmap_width=1,
                        mesh=None) -> SetOutcome:
    """`policy`'s steady state and transient exposure for every failure set of `chunk`
    (dead_links, dead_nodes, degraded_links, degraded_factor, each with a leading [C] axis) in
    one call: `vmap_width` sets at a time are vmapped, the groups run one after another
    (`lax.map`), so memory stays bounded while a chunk amortises the dispatch.
    `common`: capacity, link_src, link_dst, eps, max_rounds and the flows' arrival cohorts
    (cohort, offset); the other arguments are the baseline's routes, flows, slots and policy
    options (PRNG keys as raw key data).

    `mesh` (a one-axis "sets" mesh, `core.devices.device_mesh`) shards the chunk's sets over
    its devices (`shard_map`; C must be a multiple of the mesh size): each device runs the
    same per-set program on its share, everything else is replicated, and no device talks to
    another, so a set's outcome does not depend on the device count."""
    def run(fixed, sets):
        one = functools.partial(_one_set, policy, *fixed, settings=settings,
                                layout=layout, tier_bounds=tier_bounds, top_k=top_k,
                                num_cohorts=num_cohorts, slowest_only=slowest_only,
                                num_nodes=num_nodes)
        if vmap_width <= 1:
            return jax.lax.map(one, sets)
        return jax.lax.map(one, sets, batch_size=vmap_width)

    fixed = (routes, phase, plane, choice, state, options, key_data, common)
    if mesh is None:
        return run(fixed, chunk)
    sharded = jax.shard_map(run, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("sets")),
                            out_specs=PartitionSpec("sets"), check_vma=False)
    return sharded(fixed, chunk)


class ChunkInputs(NamedTuple):
    """What every chunk of one (policy, phase) shares, on the device: the routes, the flows
    (`PhaseArrays`), the baseline's slots and state, the policy's options, the PRNG key data
    and the fabric arrays (`common`)."""

    routes: object
    phase: object
    plane: jax.Array
    choice: jax.Array
    state: dict
    options: dict
    key_data: jax.Array
    common: dict


def failure_key(scenario: Scenario, policy: str, stream: tuple[int, int]) -> np.ndarray:
    """The raw PRNG key data every failure set of one phase uses (the same for every set:
    ECMP's re-hash is the switches' hash, fixed per flow, not per set)."""
    item, index = stream
    return phase_key_data(scenario.seed, item, index, get(policy).stream)


def chunk_inputs(policy: str, scenario: Scenario, fabric: AnyFabric, outcome: PhaseOutcome,
                 stream: tuple[int, int], mesh=None) -> ChunkInputs:
    """The shared inputs of `run_chunk`: the baseline's prepared phase (the same arrays, padding
    and arrival cohorts) with the split it ended on, placed on the device (replicated over
    `mesh`; on one device the prepared phase's own upload is reused)."""
    pol = get(policy)
    cfg = scenario.solver
    prepared, split = outcome.prepared, outcome.split
    plane = prepared.pad(split.plane, split.plane[0])
    choice = prepared.pad(split.choice, split.choice[0])
    common = dict(capacity=fabric.capacity, link_src=fabric.link_src, link_dst=fabric.link_dst,
                  eps=np.float32(cfg.eps), max_rounds=np.int32(cfg.max_rounds))
    # PRNG keys travel as raw key data: plain uint32 arrays can be placed as global arrays
    fixed = place((plane, choice, split.state or {}, pol.failure_options(scenario),
                   failure_key(scenario, policy, stream), common), mesh, replicated=True)
    if mesh is None:
        routes, arrays, cohort, offset = prepared.device
    else:
        arrays, stored, cohort, offset = place(
            (prepared.arrays, prepared.routes, prepared.cohorts.cohort, prepared.cohorts.offset),
            mesh, replicated=True)
        routes = prepared.device_routes(arrays, stored)
    common = dict(fixed[-1], cohort=cohort, offset=offset)
    return ChunkInputs(routes, arrays, *fixed[:-1], common)


def run_chunk(policy: str, scenario: Scenario, fabric: AnyFabric, prepared: PreparedPhase,
              inputs: ChunkInputs, chunk, *, vmap_width: int = 1, mesh=None) -> SetOutcome:
    """`solve_failure_chunk` on one chunk of sets (the arrays of `FailureBatch.take`, on the
    device): device arrays with a leading [C] axis."""
    pol = get(policy)
    return solve_failure_chunk(
        pol, *inputs, chunk, settings=pol.settings(scenario), layout=fabric.layout_bounds,
        tier_bounds=fabric.tier_bounds, top_k=min(TOP_LINKS, fabric.num_links),
        num_cohorts=prepared.cohorts.count,
        slowest_only=slowest_only(scenario, prepared.flows), num_nodes=fabric.num_nodes,
        vmap_width=vmap_width, mesh=mesh)


class FailurePhase(NamedTuple):
    """One policy on one phase of a failure study, ready to solve any range of sets: the
    baseline's prepared phase, the shared inputs on the device(s), the mesh (None: one device), the vmapped width and the
    sets per device call."""

    policy: str
    prepared: PreparedPhase
    inputs: ChunkInputs
    mesh: object
    width: int
    per_call: int


def prepare_failure_phase(policy: str, scenario: Scenario, fabric: AnyFabric,
                          outcome: PhaseOutcome, sets: int, stream: tuple[int, int]
                          ) -> FailurePhase:
    """Decide the vmap width, devices and sets per call for a study of `sets` failure sets,
    and place the inputs every chunk shares, once: the baseline's own prepared phase."""
    prepared = outcome.prepared
    slots = outcome.split.plane.shape[1]
    width = vmap_width(policy, fabric.num_links, fabric.planes, prepared.count, slots, sets)
    num_devices = shard_devices(sets)
    mesh = device_mesh(num_devices) if num_devices > 1 else None
    inputs = chunk_inputs(policy, scenario, fabric, outcome, stream, mesh)
    per_call = sets_per_call(width, sets, scenario.failures.chunk, num_devices)
    return FailurePhase(policy, prepared, inputs, mesh, width, per_call)


def solve_set_range(prepared: FailurePhase, scenario: Scenario, fabric: AnyFabric,
                    batch: FailureBatch, start: int, stop: int,
                    progress: Callable[[int], None] | None = None) -> SetOutcome:
    """Sets start..stop-1 of `batch` in chunks of `prepared.per_call` (the last one padded):
    SetOutcome of numpy arrays with a leading [stop - start] axis. On a CPU the sets of a
    call run one after another, so a set's outcome does not depend on the chunk it shares and
    any split of the sets into ranges gives the same outcomes, bit for bit (on an accelerator
    the sets of a group are vmapped; that is not checked)."""
    per_call, mesh = prepared.per_call, prepared.mesh
    parts = []
    for first in range(start, stop, per_call):     # chunks of failure sets, not flows
        last = min(first + per_call, stop)
        out = run_chunk(prepared.policy, scenario, fabric, prepared.prepared, prepared.inputs,
                        place(batch.take(first, last, per_call), mesh),
                        vmap_width=prepared.width, mesh=mesh)
        out = fetch(out)
        parts.append(type(out)(*(np.asarray(x)[: last - first] for x in out)))
        if progress is not None:
            progress(last - first)
    return type(parts[0])(*(np.concatenate(xs) for xs in zip(*parts)))


def solve_failure_sets(policy: str, scenario: Scenario, fabric: AnyFabric,
                       outcome: PhaseOutcome, batch: FailureBatch, stream: tuple[int, int],
                       progress: Callable[[int], None] | None = None) -> SetOutcome:
    """Every failure set of `batch` under `policy` for one phase, from the slots its baseline
    `outcome` ran on: SetOutcome of numpy arrays with a leading [B] axis. With several devices
    (`core.devices.shard_devices`) each chunk is sharded over them, and in a distributed run
    results are gathered from every process."""
    prepared = prepare_failure_phase(policy, scenario, fabric, outcome, batch.size, stream)
    return solve_set_range(prepared, scenario, fabric, batch, 0, batch.size, progress)


def null_set_outcome(fabric: AnyFabric, sets: int) -> SetOutcome:
    """What every failure set does to a phase with no fabric flow: nothing."""
    k = min(TOP_LINKS, fabric.num_links)
    zeros = np.zeros(sets, np.int32)
    return SetOutcome(stats=np.zeros((sets, 1 + len(fabric.tier_names), 1), np.float32),
                      top_links=np.zeros((sets, k), np.int32),
                      top_util=np.full((sets, k), -np.inf, np.float32),
                      cohort_end=np.full((sets, 1), -np.inf, np.float32), stalled=zeros,
                      stalled_flows=np.full((sets, STALLED_SHOWN), -1, np.int32),
                      min_rate=np.full(sets, np.inf, np.float32), rounds=zeros, status=zeros,
                      affected=zeros, iterations=zeros, adapt_status=zeros,
                      residual=np.zeros(sets, np.float32))
