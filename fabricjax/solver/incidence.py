"""Incidence: how a flow's path slots become the link ids and weights the solver sums over.

Contract. A policy gives every flow K path *slots*: `plane` int32[F, K] and `choice`
int32[F, K]. What `choice` means is the only thing that differs between fabric kinds, and it
is hidden behind a `Routes` object (a pytree: it passes through `jax.jit`):

* `ClosRoutes`: the two-tier multi-plane Clos. `choice` is the spine; a path's four link ids
  are computed arithmetically from (source GPU, plane, spine, destination GPU) (fabric.clos's
  layout), so nothing [F, K, H]-sized is stored, and the NIC-port hops are summed per plane
  (`clos_incidence`: 2K + 2P entries per flow instead of 4K).
* `StoredRoutes`: any other fabric (fat trees, graph files). Every flow carries C candidate
  paths as stored link ids `cand` int32[F, C, H] (sentinel-padded), and `choice` is a
  candidate index. The path-link incidence is also offered as a `jax.experimental.sparse`
  BCOO matrix (`incidence_matrix`); the hot loop sums loads with `segment_sum` over the
  stored ids, which measured faster on the CPU (bench/bench_incidence.py).

Both give the same methods, so a policy, the phase program and every study run unchanged on
every fabric: `evaluate` (a split over the slots evaluated: loads, rates, times),
`split_incidence` (its (ids, coef)), `slot_links` (link ids [F, K, H]), `incidence` (the
solver's (ids, coef)), `slot_loads` (loads from per-slot rates), `controlled_hops` (the
switch-to-switch hops a load balancer's choice moves), `host_ok` (a slot's NIC ports
alive), `choice_matters`, `alternatives` (other choices of the same plane, for mrc's
swaps), `rehash` (a live choice for a dead one, for ECMP after reconvergence),
`slot_alive` (a slot's whole path alive), `choice_alive_lookup` (`choice_alive` for one
mask, asked again and again), `live_split` (the equal split over live slots) and, for mrc's
loop, `controlled_max`, `controlled_alive`, `first_live_alternative` and `choice_dtype`,
which `ClosRoutes` computes without [F, K, H]-sized arrays, and `choice_loads` +
`rate_loads` (`slot_loads` in two parts: what the choices move and what depends on the
rates alone, which a failure set's restart sums again only when a flow's live paths
change). Index L (`sentinel`) pads everything: infinite capacity, always alive.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.fabric.clos import ClosGeometry
from fabricjax.fabric.paths import clos_path_links, fabric_hops_alive
from fabricjax.solver.maxmin import (PhaseResult, Resend, equal_live_split, evaluate_split,
                                     delivered_split, max_min_rates, resending_shares,
                                     uniform_live_split)

if TYPE_CHECKING:    # jax.experimental.sparse pulls in scipy: loaded by the one function
    from jax.experimental import sparse

REHASH_DRAWS = 16      # ECMP re-hash: candidate choices tried; the first live one is taken


def clos_incidence(geom: ClosGeometry, src, dst, plane, links, weights):
    """The flow-link incidence of Clos paths without repeats: (ids int32[F, E, 1],
    coef float[F, E]) with E = 2K + 2P, coef = the share of the flow's rate on that link.

    On a Clos path the NIC-port hops (GPU -> T0 and T0 -> GPU of a plane) are the same link
    for every slot of that plane, so [F, K, 4] entries repeat each of them K/P times. Here the
    fabric hops stay per slot (hops 1 and 2; for same-T0 flows hop 1 is the T0 -> GPU link
    and hop 2 the sentinel) and the NIC-port hops are summed per plane: 2K + 2P entries
    instead of 4K (272 instead of 512 at K = 128, P = 8). The solver functions accept this
    as links with one hop and per-entry weights; loads and max-min rates are unchanged."""
    num_flows, num_slots = weights.shape
    planes = jnp.arange(geom.planes)
    plane_w = jnp.zeros((num_flows, geom.planes), weights.dtype).at[
        jnp.arange(num_flows)[:, None], plane].add(weights)
    cross = (geom.t0_of(src) != geom.t0_of(dst))[:, None]
    host_up = geom.gpu_up(planes[None, :], src[:, None])
    host_down = geom.gpu_down(planes[None, :], dst[:, None])
    ids = jnp.concatenate([host_up, links[:, :, 1], links[:, :, 2], host_down], axis=1)
    coef = jnp.concatenate([plane_w, weights, weights, jnp.where(cross, plane_w, 0.0)], axis=1)
    return ids.astype(jnp.int32)[:, :, None], coef


def per_plane_sum(values, planes: int):
    """float[F, P]: the sum of values[F, K] over the slots of each plane (slot k on plane
    k % P), by a reshape instead of a scatter (K is padded up to a multiple of P)."""
    num_flows, num_slots = values.shape
    pad = -num_slots % planes
    if pad:
        values = jnp.pad(values, ((0, 0), (0, pad)))
    return values.reshape(num_flows, -1, planes).sum(axis=1)


class RoutesMixin:
    """What every routes object derives from its `slot_links` and `incidence`: the one
    slots -> links -> incidence -> evaluation sequence of the engine."""

    def split_incidence(self, plane, choice, weights):
        """(ids, coef) for the solver of a split `weights` [F, K] over the slots."""
        return self.incidence(plane, choice, self.slot_links(plane, choice), weights)

    def evaluate(self, plane, choice, weights, demand, size_bytes, flow_cap, capacity, alive,
                 resend_tolerance=None, **settings) -> PhaseResult:
        """`solver.maxmin.evaluate_split` of a split over the slots (settings: its keyword
        arguments); with `resend_tolerance` (a traced scalar) the rates are a resending
        sprayer's (`solver.maxmin.resending_rates`)."""
        if resend_tolerance is None:
            ids, coef = self.split_incidence(plane, choice, weights)
            return evaluate_split(ids, coef, demand, size_bytes, flow_cap, capacity, alive,
                                  **settings)
        links = self.slot_links(plane, choice)
        ids, coef = self.incidence(plane, choice, links, weights)
        return evaluate_split(ids, coef, demand, size_bytes, flow_cap, capacity, alive,
                              resend=Resend(links, plane, weights, resend_tolerance),
                              planes=self.planes, **settings)

    def split_rates(self, plane, choice, weights, flow_cap, capacity_ext, resend_tolerance,
                    *, eps, max_rounds):
        """A resending sprayer's rates on this split as a function of an active mask bool[F]
        (what the progressive simulation re-solves at every event): the max-min rates
        (`MaxMin`) on `solver.maxmin.delivered_split` of the trimmed shares the phase settles
        at with every flow sending, held for the phase so that each event is one solve."""
        links = self.slot_links(plane, choice)
        q, _ = resending_shares(links, plane, weights, flow_cap, capacity_ext,
                                resend_tolerance, planes=self.planes, eps=eps,
                                max_rounds=max_rounds)
        delivered = delivered_split(links, plane, weights, q, self.planes)

        def rates(active):
            # inactive flows get no weight, so the solver sees no path and freezes them at 0
            on = active[:, None].astype(delivered.dtype)
            return max_min_rates(links, delivered * on, flow_cap, capacity_ext, eps=eps,
                                 max_rounds=max_rounds)
        return rates

    def choice_alive_lookup(self, plane, alive_ext):
        """A function of `choice` equal to `choice_alive(plane, choice, alive_ext)`, for one
        mask looked up again and again (mrc's iterations on one failure set)."""
        return lambda choice: self.choice_alive(plane, choice, alive_ext)

    def slot_alive(self, plane, choice, alive_ext):
        """bool[F, K]: every hop of every slot's path alive (`uniform_live_split`'s test),
        hop by hop (XLA's CPU reduction over a short last axis was slow)."""
        links = self.slot_links(plane, choice)
        return functools.reduce(jnp.logical_and,
                                [alive_ext[links[..., h]] for h in range(links.shape[-1])])

    def live_split(self, plane, choice, alive_ext):
        """Weights float[F, K]: equal over the slots whose every hop is alive
        (`solver.maxmin.uniform_live_split` of `slot_links`)."""
        return uniform_live_split(self.slot_links(plane, choice), alive_ext)

    # mrc's loop asks these per iteration; the defaults go through `controlled_hops` and
    # `alternatives`, and `ClosRoutes` overrides them so that nothing [F, K, H]-sized is made
    def plane_mean(self, plane, values, mask):
        """float[F, K]: the mean of values[F, K] over each flow's slots of the same plane
        where `mask`, broadcast back to every slot of that plane (0 where none)."""
        num_flows, num_slots = values.shape
        planes = self.planes
        segment = (jnp.arange(num_flows)[:, None] * planes + plane).reshape(-1)
        total, count = (jax.ops.segment_sum(jnp.where(mask, x, 0.0).reshape(-1), segment,
                                            num_segments=num_flows * planes)
                        for x in (values, jnp.ones_like(values)))
        mean = (total / jnp.maximum(count, 1.0)).reshape(num_flows, planes)
        return jnp.take_along_axis(mean, plane, axis=1)

    def alternatives_level(self, plane, choice, util_ext, usable_ext):
        """float[F, K]: the utilisation a slot's other choices offer at its controlled hops:
        per hop, the mean utilisation of the usable links that leave the same switch upward
        (an up hop) or enter the same switch downward (a down hop), its worst over the slot's
        controlled hops. What a swap cannot get below: a switch that lost one of its 32
        uplinks offers each of the other 31 32/31 of its capacity whichever one an EV takes.
        By the links' groups (`link_group`, one segment sum over the links)."""
        groups = self.num_link_groups
        usable = usable_ext.astype(util_ext.dtype)
        total = jax.ops.segment_sum(jnp.where(usable_ext, util_ext, 0.0), self.link_group,
                                    num_segments=groups)
        count = jax.ops.segment_sum(usable, self.link_group, num_segments=groups)
        mean = (total / jnp.maximum(count, 1.0))[self.link_group]
        return self.controlled_max(plane, choice, mean)

    def choice_dtype(self):
        """The narrowest integer dtype that holds every choice (what mrc's loop carries)."""
        return jnp.int32

    def choice_loads(self, plane, choice, rate, num_segments: int):
        """float[L+1]: the part of `slot_loads` on the links a choice moves; with
        `rate_loads` (disjoint links, zeros elsewhere) it sums to `slot_loads` to the bit.
        Here nothing is told apart: all of it."""
        return self.slot_loads(plane, choice, rate, num_segments)

    def rate_loads(self, plane, rate, num_segments: int):
        """float[L+1]: the part of `slot_loads` that depends on the rates alone (no choice
        moves it); here none."""
        return jnp.zeros(num_segments, jnp.float32)

    def controlled_max(self, plane, choice, table_ext):
        """float[F, K]: the largest `table_ext[hop]` over every slot's controlled hops."""
        return jnp.max(table_ext[self.controlled_hops(plane, choice)], axis=-1)

    def controlled_alive(self, plane, choice, alive_ext):
        """bool[F, K]: every controlled hop of every slot is alive."""
        return jnp.all(alive_ext[self.controlled_hops(plane, choice)], axis=-1)

    def first_live_alternative(self, plane, choice, bits, draws: int, alive_ext):
        """(target, found) [F, K]: the first of the `draws` `alternatives` whose path is alive
        (`choice_alive`), and whether there is one (target is then meaningless)."""
        candidates = self.alternatives(plane, choice, bits, draws)
        live = self.choice_alive(plane, candidates, alive_ext)
        first = jnp.argmax(live, axis=-1)
        target = jnp.take_along_axis(candidates, first[..., None], axis=-1)[..., 0]
        return target.astype(choice.dtype), jnp.any(live, axis=-1)


@jax.tree_util.register_pytree_node_class
class ClosRoutes(RoutesMixin):
    """Paths of a two-tier multi-plane Clos between `src` and `dst` (int32[F] GPU ids): slot
    (plane, spine) is GPU -> T0 -> T1(spine) -> T0 -> GPU on that plane, or GPU -> T0 -> GPU
    when both GPUs share a T0 (then the spine does not matter). Slot k is on plane k % P."""

    def __init__(self, geom: ClosGeometry, src, dst):
        self.geom = geom
        self.src = src
        self.dst = dst

    def tree_flatten(self):
        return (self.src, self.dst), self.geom

    @classmethod
    def tree_unflatten(cls, geom, children):
        return cls(geom, *children)

    @property
    def num_links(self) -> int:
        return self.geom.num_links

    @property
    def planes(self) -> int:
        return self.geom.planes

    def slot_links(self, plane, choice):
        """int32[F, K, 4] link ids of every slot (the sentinel pads same-T0 paths)."""
        return clos_path_links(self.geom, self.src[:, None], self.dst[:, None], plane, choice,
                               xp=jnp)

    def incidence(self, plane, choice, links, weights):
        """(ids, coef) for the solver: `clos_incidence` of the slots' `links`."""
        return clos_incidence(self.geom, self.src, self.dst, plane, links, weights)

    def _t0s(self):
        return self.geom.t0_of(self.src)[:, None], self.geom.t0_of(self.dst)[:, None]

    def choice_matters(self, plane):
        """bool[F, 1] (broadcasts to [F, K]): whether a slot's spine changes its path (the
        flow leaves its T0)."""
        src_t0, dst_t0 = self._t0s()
        return src_t0 != dst_t0

    def choice_dtype(self):
        """uint8 while the spines fit (256 at radix 512), else int16 or int32: mrc's loop
        carries its EV set in it, a quarter of the bytes at the sizes that matter."""
        spines = self.geom.spines
        if spines <= 256:
            return jnp.uint8
        return jnp.int16 if spines <= 2**15 else jnp.int32

    def fabric_hops(self, plane, choice):
        """(up, down) int32[F, K]: the T0 -> T1 and T1 -> T0 link of every slot (the sentinel
        for a same-T0 flow), from per-(flow, plane) bases [F, P] plus the spine. `choice` may
        be any integer dtype (`choice_dtype`); slot k is on plane k % P."""
        src_t0, dst_t0 = self._t0s()
        cross = src_t0 != dst_t0
        planes = jnp.arange(self.geom.planes)[None, :]
        num_slots = choice.shape[1]
        spine = choice.astype(jnp.int32)
        up_base = self._per_slot(self.geom.t0_up(planes, src_t0, 0), num_slots)
        down_base = self._per_slot(self.geom.t1_down(planes, dst_t0, 0), num_slots)
        sentinel = self.geom.sentinel
        return (jnp.where(cross, up_base + spine, sentinel),
                jnp.where(cross, down_base + spine, sentinel))

    def controlled_hops(self, plane, choice):
        """int32[F, K, 2]: the T0 -> T1 and T1 -> T0 hops of every slot (the sentinel for a
        same-T0 flow)."""
        return jnp.stack(self.fabric_hops(plane, choice), axis=-1)

    def controlled_max(self, plane, choice, table_ext):
        """float[F, K]: the larger of `table_ext` at a slot's two fabric hops: two gathers
        and a maximum that XLA fuses into one pass (`jnp.max` over the stacked hops stored an
        [F, K, 2] array and reduced it: 40% of an mrc iteration at 131,072 GPUs)."""
        up, down = self.fabric_hops(plane, choice)
        return jnp.maximum(table_ext[up], table_ext[down])

    def controlled_alive(self, plane, choice, alive_ext):
        up, down = self.fabric_hops(plane, choice)
        return alive_ext[up] & alive_ext[down]

    def live_split(self, plane, choice, alive_ext):
        """`RoutesMixin.live_split` without the [F, K, 4] link ids: a path is alive when its
        NIC ports (`host_ok`) and fabric hops (`controlled_alive`, the sentinel for a same-T0
        flow) are; with every link alive `lax.cond` skips the fabric hops' gathers."""
        fabric_ok = jax.lax.cond(jnp.all(alive_ext), lambda: jnp.ones(choice.shape, bool),
                                 lambda: self.controlled_alive(plane, choice, alive_ext))
        return equal_live_split(fabric_ok & self.host_ok(plane, alive_ext))

    def host_ok(self, plane, alive_ext):
        """bool[F, K]: both NIC ports of every slot's plane are alive (a slot behind a dead
        port is retired: no spine of its plane can carry it)."""
        planes = jnp.arange(self.geom.planes)[None, :]
        ok = (alive_ext[self.geom.gpu_up(planes, self.src[:, None])] &
              alive_ext[self.geom.gpu_down(planes, self.dst[:, None])])            # [F, P]
        return self._per_slot(ok, plane.shape[1])

    def _per_slot(self, per_plane, num_slots: int):
        """[F, K, ...] from [F, P, ...]: slot k takes plane k % P's entry (a broadcast when
        P divides K: XLA's CPU gather took 5-6 ms for a [8192, 128] take)."""
        num_flows, planes = per_plane.shape[:2]
        if num_slots % planes:
            return jnp.take(per_plane, jnp.arange(num_slots) % planes, axis=1)
        rest = per_plane.shape[2:]
        return jnp.broadcast_to(per_plane[:, None], (num_flows, num_slots // planes, planes) +
                                rest).reshape((num_flows, num_slots) + rest)

    def alternatives_level(self, plane, choice, util_ext, usable_ext):
        """`RoutesMixin.alternatives_level` by a reshape: a T0's uplinks of a plane and the
        downlinks into it are each `spines` consecutive links, so their means are [P, T0]
        tables, gathered per (flow, plane) and broadcast to the slots (a same-T0 flow: 0)."""
        g = self.geom
        shape = (g.planes, g.t0s, g.spines)

        def group_mean(tier):
            start = g.tier_starts[tier]
            stop = start + g.planes * g.t0s * g.spines
            ok = usable_ext[start:stop].reshape(shape)
            total = jnp.sum(jnp.where(ok, util_ext[start:stop].reshape(shape), 0.0), axis=-1)
            return total / jnp.maximum(jnp.sum(ok, axis=-1, dtype=util_ext.dtype), 1.0)

        src_t0, dst_t0 = self._t0s()
        planes = jnp.arange(g.planes)[None, :]
        per_plane = jnp.maximum(group_mean(1)[planes, src_t0], group_mean(2)[planes, dst_t0])
        per_plane = jnp.where(src_t0 != dst_t0, per_plane, 0.0)                     # [F, P]
        return self._per_slot(per_plane, choice.shape[1])

    def plane_mean(self, plane, values, mask):
        """`RoutesMixin.plane_mean` by a reshape (slot k on plane k % P), no scatter."""
        num_slots = values.shape[1]
        total = per_plane_sum(jnp.where(mask, values, 0.0), self.geom.planes)
        count = per_plane_sum(mask.astype(values.dtype), self.geom.planes)
        return self._per_slot(total / jnp.maximum(count, 1.0), num_slots)

    def slot_loads(self, plane, choice, rate, num_segments: int):
        """float[L+1]: loads of rate[F, K] (Gbit/s per slot) over the 2K fabric hops and 2P
        NIC-port hops of every flow: four scatters (measured 2x faster than one over the
        concatenated entries), NIC ports summed per plane by a reshape: `choice_loads`'s two,
        then `rate_loads`'s two, in that order."""
        host_up, host_down, plane_rate = self._host_rates(rate)
        return (self.choice_loads(plane, choice, rate, num_segments)
                .at[host_up].add(plane_rate).at[host_down].add(plane_rate))

    def _host_rates(self, rate):
        plane_rate = per_plane_sum(rate, self.geom.planes)
        planes = jnp.arange(self.geom.planes)[None, :]
        return (self.geom.gpu_up(planes, self.src[:, None]),
                self.geom.gpu_down(planes, self.dst[:, None]), plane_rate)

    def choice_loads(self, plane, choice, rate, num_segments: int):
        """The fabric hops' part of `slot_loads` (tiers 1 and 2; the sentinel takes a same-T0
        flow's): the same two scatters in the same order, so each link's sum is the same."""
        up, down = self.fabric_hops(plane, choice)
        return jnp.zeros(num_segments, jnp.float32).at[up].add(rate).at[down].add(rate)

    def rate_loads(self, plane, rate, num_segments: int):
        """The NIC ports' part of `slot_loads` (tiers 0 and 3): a port carries every slot of
        its plane whatever the spine."""
        host_up, host_down, plane_rate = self._host_rates(rate)
        return (jnp.zeros(num_segments, jnp.float32).at[host_up].add(plane_rate)
                .at[host_down].add(plane_rate))

    def choice_alive(self, plane, choice, alive_ext):
        """bool[F, K, ...]: whether the fabric hops of (plane, choice) are alive, for choices
        with extra trailing axes (candidates); meaningful where `choice_matters`."""
        src_t0, dst_t0 = self._t0s()
        extra = choice.ndim - plane.ndim
        expand = (slice(None), slice(None)) + (None,) * extra
        return fabric_hops_alive(self.geom, plane[expand], src_t0[expand], dst_t0[expand],
                                 choice, alive_ext)

    def slot_alive(self, plane, choice, alive_ext):
        """bool[F, K]: every hop of every slot's path alive: its NIC ports and, leaving its
        T0, its two fabric hops (four [F, K] gathers, no [F, K, 4] path array)."""
        g = self.geom
        host = (alive_ext[g.gpu_up(plane, self.src[:, None])] &
                alive_ext[g.gpu_down(plane, self.dst[:, None])])
        return host & (~self.choice_matters(plane) |
                       self.choice_alive(plane, choice, alive_ext))

    def choice_alive_lookup(self, plane, alive_ext):
        """`choice_alive` for one mask, looked up again and again without a gather: each
        slot's live spines as a bit set (uint32[F, K, W], W = ceil(S / 32), both fabric hops
        alive), so a lookup is a select and a shift (XLA's CPU gathers cost 1-2 ms per
        million, elementwise work a tenth of that)."""
        g = self.geom
        words = -(-g.spines // 32)
        shift = jnp.arange(32, dtype=jnp.uint32)

        def packed(start):              # uint32[P * T, W]: tier `start`'s alive as bit sets
            ok = alive_ext[start:start + g.planes * g.t0s * g.spines].reshape(-1, g.spines)
            ok = jnp.pad(ok, ((0, 0), (0, words * 32 - g.spines)))
            return jnp.sum(ok.reshape(-1, words, 32).astype(jnp.uint32) << shift, axis=-1,
                           dtype=jnp.uint32)

        # per (flow, plane), then per slot: slot k is on plane k % P (as `host_ok` reads it)
        src_t0, dst_t0 = self._t0s()
        planes = jnp.arange(g.planes)[None, :]
        table = (packed(g.tier_starts[1])[planes * g.t0s + src_t0] &
                 packed(g.tier_starts[2])[planes * g.t0s + dst_t0])         # [F, P, W]
        table = self._per_slot(table, plane.shape[1])                       # [F, K, W]

        def lookup(choice):
            extra = choice.ndim - plane.ndim
            rows = table.reshape(table.shape[:2] + (1,) * extra + (words,))
            word = rows[..., 0]
            for w in range(1, words):      # W words, static (2 at 64 spines)
                word = jnp.where(choice >> 5 == w, rows[..., w], word)
            return ((word >> (choice & 31).astype(jnp.uint32)) & 1) == 1

        return lookup

    def alternatives(self, plane, choice, bits, draws: int):
        """int[F, K, D]: D other spines of the same plane in cyclic order from a uniform
        random start (the low 16 bits of `bits` uint32[F, K] pick the start)."""
        return jnp.stack([self._alternative(choice, bits, d)
                          for d in range(min(max(self.geom.spines - 1, 1), draws))], axis=-1)

    def _alternative(self, choice, bits, draw: int):
        """The `draw`-th alternative spine [F, K] (int32 arithmetic, `choice`'s dtype out)."""
        spines = self.geom.spines
        others = max(spines - 1, 1)
        start = (((bits & jnp.uint32(0xFFFF)) * jnp.uint32(others)) >> 16).astype(jnp.int32)
        offset = (start + draw) % others
        return ((choice.astype(jnp.int32) + 1 + offset) % spines).astype(choice.dtype)

    def first_live_alternative(self, plane, choice, bits, draws: int, alive_ext):
        """`RoutesMixin.first_live_alternative` one draw at a time (a static unroll over the
        few draws), so that XLA fuses the candidates, their liveness and the pick into the
        pass that makes them instead of storing [F, K, D] arrays (the candidates' liveness
        took 20% of an mrc iteration at 131,072 GPUs)."""
        src_t0, dst_t0 = self._t0s()
        planes = jnp.arange(self.geom.planes)[None, :]
        num_slots = choice.shape[1]
        up_base = self._per_slot(self.geom.t0_up(planes, src_t0, 0), num_slots)
        down_base = self._per_slot(self.geom.t1_down(planes, dst_t0, 0), num_slots)
        target, found = choice, jnp.zeros(choice.shape, bool)
        for draw in reversed(range(min(max(self.geom.spines - 1, 1), draws))):
            candidate = self._alternative(choice, bits, draw)
            spine = candidate.astype(jnp.int32)
            live = alive_ext[up_base + spine] & alive_ext[down_base + spine]
            target = jnp.where(live, candidate, target)   # the earliest live draw wins
            found = found | live
        return target, found

    def can_move(self):
        """Whether any slot has another choice (a plane with one spine has none)."""
        return self.geom.spines > 1

    def rehash(self, plane, choice, alive_ext, key):
        """ECMP after reconvergence with resilient hashing: a queue pair whose (cross-T0) path
        has a dead fabric link moves to a live spine of its plane, uniform over the live ones
        (the first live one of REHASH_DRAWS hashed candidates); the others keep their spine.
        A QP behind a dead NIC port stays (no spine can carry it); its flow's other planes
        carry its bytes."""
        cross = self.choice_matters(plane)
        ok = self.choice_alive(plane, choice, alive_ext)
        candidates = jax.random.randint(key, choice.shape + (REHASH_DRAWS,), 0,
                                        self.geom.spines)
        live = self.choice_alive(plane, candidates, alive_ext)
        target = jnp.take_along_axis(candidates, jnp.argmax(live, axis=-1)[..., None], axis=-1)
        move = cross & ~ok & jnp.any(live, axis=-1)
        return jnp.where(move, target[..., 0], choice).astype(choice.dtype)


@jax.tree_util.register_pytree_node_class
class StoredRoutes(RoutesMixin):
    """Paths of any fabric as stored link ids: flow f's candidate c is `cand[f, c]`, int32[H]
    link ids padded with the sentinel L after its last link; `choice` indexes candidates.

    cand: int32[F, C, H]. cand_switch: int32[F, C, H], the same with every host link (tiers 0
    and 3) replaced by the sentinel (the hops a choice controls). plane: int32[F, C], each
    candidate's plane. distinct: int32[F], candidates 0..d-1 are distinct (the rest repeat
    them cyclically). by_plane: int32[F, C], the distinct candidates grouped by plane (padding
    repeats the last); rank: int32[F, C], a candidate's position in its plane's group;
    group_start, group_count: int32[F, P], where each plane's group starts in `by_plane` and
    how many distinct candidates it has. link_group: int32[L + 1], each link's group of
    siblings for `alternatives_level` (an up link's switch it leaves, a down link's switch it
    enters; host links one group, the sentinel one of its own). Static: num_links L, planes
    P, num_link_groups."""

    def __init__(self, num_links: int, planes: int, num_link_groups: int, cand, cand_switch,
                 plane, distinct, by_plane, rank, group_start, group_count, link_group):
        self._num_links = num_links
        self._planes = planes
        self.num_link_groups = num_link_groups
        self.link_group = link_group
        self.cand = cand
        self.cand_switch = cand_switch
        self.plane = plane
        self.distinct = distinct
        self.by_plane = by_plane
        self.rank = rank
        self.group_start = group_start
        self.group_count = group_count

    def tree_flatten(self):
        return ((self.cand, self.cand_switch, self.plane, self.distinct, self.by_plane,
                 self.rank, self.group_start, self.group_count, self.link_group),
                (self._num_links, self._planes, self.num_link_groups))

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*aux, *children)

    @property
    def num_links(self) -> int:
        return self._num_links

    @property
    def planes(self) -> int:
        return self._planes

    @property
    def num_candidates(self) -> int:
        return int(self.cand.shape[1])

    def _take(self, table, choice):
        """table[f, choice[f, ...]] for a per-candidate table [F, C, ...]."""
        flows = jnp.arange(choice.shape[0]).reshape((-1,) + (1,) * (choice.ndim - 1))
        return table[flows, choice]

    def slot_links(self, plane, choice):
        return self._take(self.cand, choice)

    def incidence(self, plane, choice, links, weights):
        return links, weights

    def choice_matters(self, plane):
        """bool[F, K]: the slot's plane offers the flow more than one distinct path."""
        return self._take(self.group_count, plane) > 1

    def controlled_hops(self, plane, choice):
        return self._take(self.cand_switch, choice)

    def host_ok(self, plane, alive_ext):
        """bool[F, K]: some candidate of the slot's plane has both host links alive."""
        first = alive_ext[self.cand[:, :, 0]]
        last_hop = jnp.sum(self.cand != self._num_links, axis=-1) - 1
        last = alive_ext[jnp.take_along_axis(self.cand, jnp.maximum(last_hop, 0)[..., None],
                                             axis=-1)[..., 0]]
        ok = first & last & (jnp.arange(self.cand.shape[1])[None, :] < self.distinct[:, None])
        per_plane = jax.ops.segment_max(
            ok.reshape(-1).astype(jnp.int32),
            (jnp.arange(ok.shape[0])[:, None] * self._planes + self.plane).reshape(-1),
            num_segments=ok.shape[0] * self._planes) > 0
        return self._take(per_plane.reshape(ok.shape[0], self._planes), plane)

    def slot_loads(self, plane, choice, rate, num_segments: int):
        links = self.slot_links(plane, choice)
        contrib = jnp.broadcast_to(rate[:, :, None], links.shape).reshape(-1)
        return jax.ops.segment_sum(contrib, links.reshape(-1), num_segments=num_segments)

    def choice_alive(self, plane, choice, alive_ext):
        return jnp.all(alive_ext[self._take(self.cand, choice)], axis=-1)

    def alternatives(self, plane, choice, bits, draws: int):
        """int[F, K, D]: D other distinct candidates of the slot's plane, in the group's
        cyclic order from a uniform random start (`bits`' low 16 bits)."""
        count = self._take(self.group_count, plane)
        others = jnp.maximum(count - 1, 1).astype(jnp.uint32)
        start = ((bits & jnp.uint32(0xFFFF)) * others) >> 16
        offsets = (start[..., None] + jnp.arange(draws, dtype=jnp.uint32)) % others[..., None]
        position = (self._take(self.rank, choice).astype(jnp.uint32)[..., None] + 1 + offsets
                    ) % jnp.maximum(count, 1).astype(jnp.uint32)[..., None]
        slot_index = self._take(self.group_start, plane)[..., None] + position.astype(jnp.int32)
        flows = jnp.arange(choice.shape[0])[:, None, None]
        return self.by_plane[flows, slot_index].astype(choice.dtype)

    def can_move(self):
        return True

    def rehash(self, plane, choice, alive_ext, key):
        """ECMP after reconvergence: a queue pair on a dead path moves to a live distinct
        candidate of the flow (uniform over the live ones, first of REHASH_DRAWS draws);
        ECMP on a stored-path fabric is not pinned to a plane."""
        ok = self.choice_alive(plane, choice, alive_ext)
        draw = jax.random.randint(key, choice.shape + (REHASH_DRAWS,), 0, 1 << 30)
        candidates = (draw % jnp.maximum(self.distinct, 1)[:, None, None]).astype(choice.dtype)
        live = self.choice_alive(plane, candidates, alive_ext)
        target = jnp.take_along_axis(candidates, jnp.argmax(live, axis=-1)[..., None], axis=-1)
        move = ~ok & jnp.any(live, axis=-1)
        return jnp.where(move, target[..., 0], choice).astype(choice.dtype)


def link_groups(link_tier: np.ndarray, link_src: np.ndarray,
                link_dst: np.ndarray) -> tuple[np.ndarray, int]:
    """(int32[L + 1] group of every link and the sentinel, the number of groups): an up
    link (tier 1) is grouped with the others that leave its switch, a down link (tier 2) with
    the others that enter its switch; host links share a group (no controlled hop reads it),
    and the sentinel has one of its own, never usable, so its mean is 0 (a padded hop adds
    nothing to a slot's worst)."""
    tier = np.asarray(link_tier)
    nodes = int(max(np.max(link_src, initial=0), np.max(link_dst, initial=0))) + 1
    group = np.where(tier == 1, link_src, np.where(tier == 2, nodes + np.asarray(link_dst),
                                                   2 * nodes))
    return np.concatenate([group, [2 * nodes + 1]]).astype(np.int32), 2 * nodes + 2


def stored_routes(cand: np.ndarray, distinct: np.ndarray, link_tier: np.ndarray,
                  link_plane: np.ndarray, planes: int, link_src: np.ndarray,
                  link_dst: np.ndarray) -> StoredRoutes:
    """A StoredRoutes from host candidate paths (`fabric.graph.candidate_paths`): cand
    int32[F, C, H], distinct int32[F]; the fabric's link tiers and planes (int[L]) give each
    candidate's controlled hops and plane, its links' ends (node ids, int[L]) their sibling
    groups (`link_groups`). Host numpy in, host numpy out (one transfer)."""
    cand = np.asarray(cand, np.int32)
    num_flows, num_cand, _ = cand.shape
    num_links = int(link_tier.shape[0])
    tier_ext = np.concatenate([np.asarray(link_tier), [0]])
    switch_hop = (tier_ext[cand] == 1) | (tier_ext[cand] == 2)
    cand_switch = np.where(switch_hop, cand, num_links).astype(np.int32)
    plane_ext = np.concatenate([np.asarray(link_plane, np.int64), [0]])
    plane = plane_ext[cand[:, :, 0]].astype(np.int32)
    distinct = np.asarray(distinct, np.int32)
    real = np.arange(num_cand)[None, :] < distinct[:, None]
    # distinct candidates grouped by plane (stable: Yen's order inside a plane); padding and
    # repeats sort last
    key = np.where(real, plane, planes)
    by_plane = np.argsort(key, axis=1, kind="stable").astype(np.int32)
    counts = np.stack([np.sum(real & (plane == p), axis=1) for p in range(planes)], axis=1)
    starts = np.concatenate([np.zeros((num_flows, 1), np.int64),
                             np.cumsum(counts, axis=1)[:, :-1]], axis=1)
    sorted_key = np.take_along_axis(key, by_plane, axis=1)
    group_of_sorted = np.take_along_axis(starts, np.minimum(sorted_key, planes - 1), axis=1)
    rank = np.zeros((num_flows, num_cand), np.int64)
    np.put_along_axis(rank, by_plane, np.arange(num_cand)[None, :] - group_of_sorted, axis=1)
    rank = np.where(real, rank, 0).astype(np.int32)
    group, num_groups = link_groups(link_tier, link_src, link_dst)
    return StoredRoutes(num_links, planes, num_groups, cand, cand_switch, plane, distinct,
                        by_plane, rank, starts.astype(np.int32), counts.astype(np.int32), group)


def incidence_matrix(links: Any, weights: Any, num_links: int) -> sparse.BCOO:
    """The flow-link incidence as a `jax.experimental.sparse` BCOO matrix [F, L+1]: entry
    (f, l) = the share of flow f's rate on link l (sum over its slots through l), from link
    ids int32[F, K, H] (or the [F, E, 1] of `clos_incidence`) and weights float[F, K].
    Loads are then `demand @ A` (a sparse product); duplicates are summed."""
    from jax.experimental import sparse

    links = jnp.asarray(links)
    weights = jnp.asarray(weights)
    num_flows = links.shape[0]
    rows = jnp.broadcast_to(jnp.arange(num_flows)[:, None, None], links.shape).reshape(-1)
    data = jnp.broadcast_to(weights[:, :, None], links.shape).reshape(-1)
    indices = jnp.stack([rows, links.reshape(-1)], axis=1)
    return sparse.BCOO((data, indices), shape=(num_flows, num_links + 1))
