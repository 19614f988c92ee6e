"""The per-iteration kernels of mrc's loop on a Clos (`solver.incidence.ClosRoutes`:
`fabric_hops`, `controlled_max`, `controlled_alive`, `host_ok`, `first_live_alternative`,
`choice_dtype`) against the obvious computations they replaced (the stacked [F, K, H] hops, a
gather and a reduction over them, the [F, K, D] candidates and an argmax), on small random
cases with dead links, with K a multiple of the planes or not, and with the narrow choice
dtypes; and mrc's fast path (every link alive: no liveness lookups) against its general one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fabricjax.config import ClosConfig
from fabricjax.fabric.clos import build_fabric
from fabricjax.fabric.paths import fabric_hops_alive, hashed_evs, spread_slots
from fabricjax.policies import mrc as mrc_module
from fabricjax.policies.mrc import RETARGET_DRAWS, mrc_fixed_point
from fabricjax.solver.incidence import ClosRoutes, RoutesMixin, link_groups

CONFIGS = (ClosConfig(gpus=14, planes=2, radix=8),
           ClosConfig(gpus=21, planes=3, radix=12, oversubscription=2),
           ClosConfig(gpus=600, planes=1, radix=600))    # 300 spines: int16 choices


def case(cfg: ClosConfig, seed: int, *, slots: int | None = None, dead: int = 3):
    fabric = build_fabric(cfg)
    g = fabric.geometry
    rng = np.random.default_rng(seed)
    flows = int(rng.integers(3, 40))
    src = rng.integers(0, g.gpus, flows)
    dst = (src + rng.integers(1, g.gpus, flows)) % g.gpus
    slots = slots or g.planes * int(rng.integers(1, 4))
    plane, spine = (spread_slots if seed % 2 else hashed_evs)(g, flows, slots, rng)
    alive = np.ones(fabric.num_links + 1, bool)
    alive[rng.choice(fabric.num_links, dead, replace=False)] = False
    table = rng.uniform(0, 3, fabric.num_links + 1).astype(np.float32)
    table[-1] = 0.0
    routes = ClosRoutes(g, jnp.asarray(src, jnp.int32), jnp.asarray(dst, jnp.int32))
    return fabric, routes, plane, spine, alive, table, rng


def obvious_hops(g, src, dst, plane, spine):
    """[F, K, 2] T0 -> T1 and T1 -> T0 link ids, the sentinel for same-T0 flows (numpy)."""
    src_t0, dst_t0 = g.t0_of(src)[:, None], g.t0_of(dst)[:, None]
    cross = src_t0 != dst_t0
    up = np.where(cross, g.t0_up(plane, src_t0, spine), g.sentinel)
    down = np.where(cross, g.t1_down(plane, dst_t0, spine), g.sentinel)
    return np.stack([up, down], axis=-1)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", range(4))
def test_hops_maxima_and_liveness_match_the_stacked_gather(cfg, seed):
    fabric, routes, plane, spine, alive, table, _ = case(cfg, seed)
    g = fabric.geometry
    narrow = spine.astype(routes.choice_dtype())
    assert np.array_equal(narrow.astype(np.int64), spine)      # the narrow dtype holds them
    hops = obvious_hops(g, np.asarray(routes.src), np.asarray(routes.dst), plane, spine)
    for choice in (spine, narrow):
        up, down = routes.fabric_hops(plane, jnp.asarray(choice))
        np.testing.assert_array_equal(np.stack([up, down], axis=-1), hops)
        np.testing.assert_array_equal(routes.controlled_max(plane, choice, table),
                                      table[hops].max(axis=-1))
        np.testing.assert_array_equal(routes.controlled_alive(plane, choice, alive),
                                      alive[hops].all(axis=-1))
    ports = (alive[g.gpu_up(plane, np.asarray(routes.src)[:, None])] &
             alive[g.gpu_down(plane, np.asarray(routes.dst)[:, None])])
    np.testing.assert_array_equal(routes.host_ok(plane, jnp.asarray(alive)), ports)


def test_choice_dtype_is_the_narrowest_that_holds_every_spine():
    dtypes = {cfg.radix: ClosRoutes(build_fabric(cfg).geometry, None, None).choice_dtype()
              for cfg in CONFIGS}
    assert dtypes == {8: jnp.uint8, 12: jnp.uint8, 600: jnp.int16}


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dead", (0, 4, 40))
def test_first_live_alternative_is_the_argmax_over_stacked_candidates(cfg, seed, dead):
    fabric, routes, plane, spine, alive, _, rng = case(cfg, seed, dead=dead)
    g = fabric.geometry
    bits = rng.integers(0, 2**32, spine.shape, dtype=np.uint64).astype(np.uint32)
    # the former computation: [F, K, D] candidates, their liveness, the first live one
    others = max(g.spines - 1, 1)
    start = (((bits.astype(np.uint64) & 0xFFFF) * others) >> 16).astype(np.int64)
    offsets = (start[..., None] + np.arange(min(others, RETARGET_DRAWS))) % others
    candidates = (spine[..., None] + 1 + offsets) % g.spines
    src_t0 = g.t0_of(np.asarray(routes.src))[:, None, None]
    dst_t0 = g.t0_of(np.asarray(routes.dst))[:, None, None]
    live = np.asarray(fabric_hops_alive(g, plane[..., None], src_t0, dst_t0, candidates, alive))
    expect = np.take_along_axis(candidates, live.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    np.testing.assert_array_equal(routes.alternatives(plane, spine, bits, RETARGET_DRAWS),
                                  candidates)
    for choice in (spine, spine.astype(routes.choice_dtype())):
        target, found = routes.first_live_alternative(plane, jnp.asarray(choice), bits,
                                                      RETARGET_DRAWS, jnp.asarray(alive))
        assert target.dtype == choice.dtype
        some = live.any(axis=-1)                  # else the target is meaningless
        np.testing.assert_array_equal(found, some)
        np.testing.assert_array_equal(np.asarray(target, np.int64)[some], expect[some])


def test_slots_not_a_multiple_of_the_planes_take_the_gather():
    """K % P != 0 (never drawn by the policies, allowed by the routes): same answers."""
    fabric, routes, plane, spine, alive, table, _ = case(CONFIGS[1], 5, slots=7)
    g = fabric.geometry
    hops = obvious_hops(g, np.asarray(routes.src), np.asarray(routes.dst), plane, spine)
    np.testing.assert_array_equal(routes.controlled_max(plane, spine, table),
                                  table[hops].max(axis=-1))


@pytest.mark.parametrize("seed", range(3))
def test_the_all_alive_path_equals_the_lookup_path(monkeypatch, seed):
    """With every link alive, mrc skips the liveness lookups (`lax.cond` on all(alive)); run
    the same loop with the lookups forced (a predicate that is never true) and compare."""
    cfg = CONFIGS[seed % 2]
    fabric, routes, plane, spine, _, _, rng = case(cfg, seed)
    demand = (rng.uniform(0.3, 1, spine.shape[0]) * fabric.geometry.nic_gbps).astype(np.float32)
    alive = np.ones(fabric.num_links, bool)
    layout = fabric.layout_bounds

    def run():
        return jax.device_get(mrc_fixed_point(
            routes, plane, spine, demand, fabric.capacity, alive, jax.random.key(seed),
            np.float32(0.8), np.float32(0.3), np.float32(0.01), max_iters=30,
            patience=np.int32(5), fabric_range=(layout[1][0], layout[2][1])))

    fast = run()
    monkeypatch.setattr(mrc_module, "_all_alive", lambda alive: jnp.all(alive) & False)
    slow = run()
    assert int(fast.iterations) > 0
    for name in fast._fields:
        np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name), err_msg=name)


def plain_spread_slots(geom, num_flows: int, num_slots: int, rng):
    """`fabric.paths.spread_slots` as first written (int64 temporaries, one `%`)."""
    P, S = geom.planes, geom.spines
    plane = np.broadcast_to(np.arange(num_slots) % P, (num_flows, num_slots))
    k = np.arange(num_slots)
    index_in_plane = k // P
    slots_in_plane = (num_slots - 1 - k % P) // P + 1
    jitter = rng.random((num_flows, num_slots), dtype=np.float32)
    lo = index_in_plane * S // slots_in_plane
    width = np.maximum((index_in_plane + 1) * S // slots_in_plane - lo, 1)
    stratum = lo + np.floor(jitter * width).astype(np.int64)
    rotation = rng.integers(0, S, size=(num_flows, P))
    spine = (np.minimum(stratum, S - 1) + rotation[:, k % P]) % S
    return plane.astype(np.int32), spine.astype(np.int32)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("slots", (1, 2, 3, 6, 7, 40, 301))
def test_spread_slots_draws_what_the_plain_formula_draws(cfg, slots):
    geom = build_fabric(cfg).geometry
    for seed in range(3):
        fast = spread_slots(geom, 23, slots, np.random.default_rng(seed))
        plain = plain_spread_slots(geom, 23, slots, np.random.default_rng(seed))
        for got, want in zip(fast, plain):
            assert got.dtype == want.dtype == np.int32
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("seed", range(3))
def test_the_alternatives_level_is_each_hops_switch_mean(cfg, seed):
    """`ClosRoutes.alternatives_level` (a reshape to [P, T0] tables) against the obvious
    loop, per slot the worst over its two fabric hops of the mean utilisation of the usable
    links leaving the uplink's T0 (or entering the downlink's T0), and against the generic
    link-group form that stored paths use (`link_groups`; the sentinel reads 0)."""
    fabric, routes, plane, spine, alive, table, _ = case(cfg, seed)
    g = fabric.geometry
    src, dst = fabric.link_src, fabric.link_dst
    tier, usable = fabric.tier, alive[:-1]

    def sibling_mean(link):
        if link == g.sentinel:
            return 0.0
        same = (tier == tier[link]) & usable
        same &= (src == src[link]) if tier[link] == 1 else (dst == dst[link])
        return float(table[:-1][same].mean()) if same.any() else 0.0

    hops = obvious_hops(g, np.asarray(routes.src), np.asarray(routes.dst), plane, spine)
    expect = np.vectorize(sibling_mean)(hops).max(axis=-1)
    got = np.asarray(routes.alternatives_level(plane, spine, jnp.asarray(table),
                                               jnp.asarray(alive)))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-6)
    groups, count = link_groups(tier, src, dst)

    class Grouped(ClosRoutes):
        link_group, num_link_groups = jnp.asarray(groups), count
        alternatives_level = RoutesMixin.alternatives_level

    generic = Grouped(g, routes.src, routes.dst)
    np.testing.assert_allclose(np.asarray(generic.alternatives_level(
        plane, spine, jnp.asarray(table), jnp.asarray(alive))), expect, rtol=1e-5, atol=1e-6)
