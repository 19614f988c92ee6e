"""mrc's failure-set restart (`policies.mrc.mrc_restart`, `Mrc.restart`) against the loop it
replaces there (`mrc_fixed_point`, `Mrc.react`): on small random Clos and fat-tree fabrics
with random failure sets, warm-started from the no-failure equilibrium as failure studies
are, the same EV sets, iterations, status and residual bit for bit, and the same phase
results; and `ClosRoutes.choice_alive_lookup` / `host_ok` against the gathers they avoid."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabricjax.config import ClosConfig
from fabricjax.engine.batch import chunk_inputs, failure_mask
from fabricjax.engine.phase import phase_core, solve_policy_phase
from fabricjax.engine.plan import slowest_only
from fabricjax.fabric.build import build
from fabricjax.fabric.clos import build_fabric
from fabricjax.fabric.failures import sample_failures
from fabricjax.policies import get
from fabricjax.policies.mrc import mrc_fixed_point, mrc_restart
from fabricjax.scenario import parse_scenario
from fabricjax.solver.incidence import ClosRoutes
from fabricjax.solver.maxmin import TOP_LINKS
from fabricjax.workload.build import build_workload

# (fabric, evs): W = 1, 2 (40 spines: a padded last word) and 3 words of spine bits, 2 to 8
# planes, 64 to 256 GPUs, and a stored-path fat tree (the generic lookup)
FABRICS = [
    ({"gpus": 64, "planes": 4, "radix": 16}, 16),
    ({"gpus": 160, "planes": 2, "radix": 80}, 32),
    ({"gpus": 256, "planes": 8, "radix": 32}, 32),
    ({"gpus": 192, "planes": 2, "radix": 192}, 8),
    ({"kind": "fat-tree", "tiers": 3, "gpus": 128, "radix": 8, "planes": 1}, 8),
]


def scenario(fabric: dict, evs: int, seed: int, samples: int, patience: int):
    return parse_scenario({
        "name": "restart", "seed": seed, "fabric": fabric,
        "workload": [{"collective": "permutation", "size": "64MiB"}],
        "policies": ["mrc"],
        # a low marking level keeps EVs marked, so every set iterates and swaps
        "mrc": {"evs": evs, "failure_patience": patience, "threshold": 0.5, "damping": 0.6},
        "failures": {"samples": samples, "links": {"random": 3},
                     "switches": {"random": 1}, "nic_ports": {"random": 1},
                     "degraded": {"random": 2, "factor": 0.5}},
    })


# failure sets a world draws: enough that some set's settled EV set is not its warm start (a
# dead EV is retired in place, so a set whose swaps do not beat it returns the start)
SETS = 12


@functools.lru_cache(maxsize=None)
def world(case: int, seed: int, patience: int):
    fabric_cfg, evs = FABRICS[case]
    scen = scenario(fabric_cfg, evs, seed, SETS, patience)
    fabric = build(scen)      # the fat tree as its stored paths, the rest as Clos
    flows = build_workload(scen, np.random.default_rng([scen.seed, 0]))[0].phases[0].flows
    base = solve_policy_phase("mrc", scen, fabric, flows, (0, 0))
    return scen, fabric, base, sample_failures(scen)


def _phase(restart: bool):
    return jax.jit(functools.partial(phase_core, restart=restart), static_argnums=0,
                   static_argnames=("settings", "layout", "tier_bounds", "top_k",
                                    "num_cohorts", "slowest_only", "p100_only"))


PHASE = {flag: _phase(flag) for flag in (False, True)}


# every fabric compiles its own programs (8 s of CPU each): the quick run keeps one word of
# spines, three words and the fat tree; `make test-slow` runs the rest
QUICK_CASES = (0, 3, 4)


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=() if case in QUICK_CASES else pytest.mark.slow)
    for case in range(len(FABRICS))])
@pytest.mark.parametrize("seed,patience", [(1, 5), pytest.param(2, 2, marks=pytest.mark.slow)])
def test_restart_gives_the_phase_program_bit_for_bit(case, seed, patience):
    """A failure set through `Mrc.restart` and through `Mrc.react` (the loop a baseline runs):
    the same slots, weights, iterations, status, residual and phase results, bytes equal."""
    scen, fabric, base, batch = world(case, seed, patience)
    pol = get("mrc")
    routes, phase, plane, choice, state, options, key_data, common = chunk_inputs(
        "mrc", scen, fabric, base, (0, 0))
    kwargs = dict(settings=pol.settings(scen), layout=fabric.layout_bounds,
                  tier_bounds=fabric.tier_bounds, top_k=min(TOP_LINKS, fabric.num_links),
                  num_cohorts=base.prepared.cohorts.count,
                  slowest_only=slowest_only(scen, base.prepared.flows), p100_only=True)
    iterated = moved = 0
    for b in range(batch.size):
        alive, capacity = failure_mask(fabric.link_src, fabric.link_dst, fabric.capacity,
                                       batch.dead_links[b], batch.dead_nodes[b],
                                       batch.degraded_links[b], batch.degraded_factor[b],
                                       num_nodes=fabric.num_nodes)
        outs = [PHASE[flag](pol, routes, phase, plane, choice, state, alive, capacity,
                            key_data, options, common["eps"], common["max_rounds"],
                            common["cohort"], common["offset"], **kwargs)
                for flag in (False, True)]
        (ref_reaction, ref_result), (reaction, result) = jax.device_get(outs)
        for name in ("choice", "weights", "iterations", "status", "residual"):
            x, y = getattr(ref_reaction, name), getattr(reaction, name)
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), (b, name)
        for name, x, y in zip(ref_result._fields, ref_result, result):
            if x is not None:
                assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), (b, name)
        iterated += int(reaction.iterations) > 0
        moved += int(np.sum(np.asarray(reaction.choice) != np.asarray(choice)))
    # the comparison covered sets that iterated and EVs that moved (it could fail)
    assert iterated > 0 and moved > 0


_fixed_point = jax.jit(mrc_fixed_point, static_argnames=("max_iters", "fabric_range"))
_restart = jax.jit(mrc_restart, static_argnames=("max_iters", "fabric_range"))


# seeds 0, 2 and 3 draw the same fabric (FABRICS[3]), seed 1 another (FABRICS[1]): the quick
# path runs one seed of each
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow)
                                          for s in (2, 3))])
def test_restart_matches_fixed_point_on_random_masks(seed):
    """The loops alone, on random dead links (fabric and NIC ports), capacities and options,
    and a cap of iterations small enough to be hit: every MrcResult field a failure set
    reports is equal."""
    rng = np.random.default_rng(seed)
    scen, fabric, base, _ = world(int(rng.integers(0, 4)), 1, 5)
    routes, phase, plane, choice, *_ = chunk_inputs("mrc", scen, fabric, base, (0, 0))
    fabric_range = (fabric.layout_bounds[1][0], fabric.layout_bounds[2][1])
    for trial in range(4):
        alive = rng.random(fabric.num_links) > rng.choice([0.0, 0.01, 0.05])
        capacity = (fabric.capacity * rng.choice([0.5, 1.0], fabric.num_links)
                    ).astype(np.float32)
        key = jax.random.key(int(rng.integers(0, 2**31)))
        args = (routes, plane, choice, phase.demand, capacity, alive, key,
                np.float32(rng.choice([0.3, 0.8, 1.0])), np.float32(rng.choice([0.3, 1.0])),
                np.float32(rng.choice([0.0, 0.01])))
        settings = dict(max_iters=int(rng.choice([3, 40])),
                        patience=np.int32(rng.integers(1, 6)), fabric_range=fabric_range)
        ref = jax.device_get(_fixed_point(*args, **settings))
        got = jax.device_get(_restart(*args, **settings))
        for name in ("spine", "iterations", "status", "residual"):
            assert np.asarray(getattr(ref, name)).tobytes() == \
                np.asarray(getattr(got, name)).tobytes(), (seed, trial, name)


@pytest.mark.parametrize("case", range(4))
def test_choice_alive_lookup_is_the_gather(case):
    """Bit sets of live spines: the same answer as gathering both fabric hops, for choices
    with and without trailing axes, on random masks (W = 1 to 3 words of spines); and
    `slot_alive` as the gather of a path's four hops."""
    rng = np.random.default_rng(case)
    fabric = build_fabric(ClosConfig(**FABRICS[case][0]))
    g = fabric.geometry
    flows, slots = 50, 4 * g.planes
    src = rng.integers(0, g.gpus, flows).astype(np.int32)
    dst = rng.integers(0, g.gpus, flows).astype(np.int32)
    dst[:10] = src[:10] ^ 1                                  # some flows stay in their T0
    routes = ClosRoutes(g, jnp.asarray(src), jnp.asarray(dst))
    plane = np.broadcast_to(np.arange(slots, dtype=np.int32) % g.planes, (flows, slots))
    for dead in (0.0, 0.1, 0.5):
        alive_ext = np.append(rng.random(g.num_links) >= dead, True)
        lookup = routes.choice_alive_lookup(plane, alive_ext)
        for shape in ((flows, slots), (flows, slots, 3)):
            choice = rng.integers(0, g.spines, shape).astype(np.int32)
            np.testing.assert_array_equal(lookup(choice),
                                          routes.choice_alive(plane, choice, alive_ext))
        # a slot's whole path (NIC ports too; a same-T0 flow has no fabric hop), on any
        # planes (ECMP's QPs are not on plane k % P)
        choice = rng.integers(0, g.spines, (flows, slots)).astype(np.int32)
        for planes in (plane, rng.integers(0, g.planes, (flows, slots)).astype(np.int32)):
            links = routes.slot_links(planes, choice)
            np.testing.assert_array_equal(routes.slot_alive(planes, choice, alive_ext),
                                          np.all(alive_ext[np.asarray(links)], axis=-1))


@pytest.mark.parametrize("slots", [8, 12, 6])
def test_host_ok_per_slot(slots):
    """`host_ok`: slot k reads plane k % P's NIC ports, whether P divides K (a broadcast) or
    not (the take), against a loop."""
    rng = np.random.default_rng(slots)
    fabric = build_fabric(ClosConfig(gpus=64, planes=4, radix=16))
    g = fabric.geometry
    src, dst = rng.integers(0, 64, 20), rng.integers(0, 64, 20)
    routes = ClosRoutes(g, jnp.asarray(src, jnp.int32), jnp.asarray(dst, jnp.int32))
    alive_ext = np.append(rng.random(g.num_links) > 0.2, True)
    plane = np.broadcast_to(np.arange(slots) % g.planes, (20, slots))
    got = np.asarray(routes.host_ok(plane, alive_ext))
    for f in range(20):
        for k in range(slots):
            p = k % g.planes
            assert got[f, k] == (alive_ext[g.gpu_up(p, src[f])] and
                                 alive_ext[g.gpu_down(p, dst[f])])
