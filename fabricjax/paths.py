"""Candidate path slots per flow, enumerated from the Clos structure (no graph search).

Contract: a `PathSet` gives every flow K path slots as link ids, `links`: int32[F, K, H] with
H = 4 hops, padded with the fabric's sentinel link. On a two-tier Clos a path is fixed by
(plane, spine): GPU -> T0 -> T1(spine) -> T0 -> GPU, or GPU -> T0 -> GPU when both GPUs share a
T0 (then the spine is irrelevant and the last two hops are the sentinel).

Slot k of a flow always belongs to plane ``k % P``, so planes get equal slot counts (MRC assigns
entropy values equally per plane). Within a plane, `spread_slots` places a flow's slots on
distinct spines drawn at random (stratified: one random spine per equal stripe of the spine
list, then a random rotation), and `hashed_slots` hashes each slot independently and uniformly,
as a switch's ECMP hash does.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fabricjax.fabric import ClosGeometry
from fabricjax.solver import PhaseResult, evaluate_split, uniform_live_split

HOPS = 4


@dataclasses.dataclass(frozen=True)
class PathSet:
    """links: int32[F, K, H] link ids (sentinel-padded); plane, spine: int32[F, K]."""

    links: np.ndarray
    plane: np.ndarray
    spine: np.ndarray

    @property
    def slots(self) -> int:
        return int(self.links.shape[1])


def clos_path_links(geom: ClosGeometry, src: Any, dst: Any, plane: Any, spine: Any,
                    xp: Any = np) -> Any:
    """Link ids [..., 4] of the path (plane, spine) from GPU src to GPU dst.

    Works with numpy or jax.numpy (`xp`) so the device can recompute paths when a policy moves
    a slot to another spine. Inputs broadcast against each other."""
    src_t0 = geom.t0_of(src)
    dst_t0 = geom.t0_of(dst)
    local = src_t0 == dst_t0
    first = geom.gpu_up(plane, src)
    last = geom.gpu_down(plane, dst)
    up = geom.t0_up(plane, src_t0, spine)
    down = geom.t1_down(plane, dst_t0, spine)
    sentinel = geom.sentinel
    hop1 = xp.where(local, last, up)
    hop2 = xp.where(local, sentinel, down)
    hop3 = xp.where(local, sentinel, last)
    first, hop1, hop2, hop3 = xp.broadcast_arrays(first, hop1, hop2, hop3)
    return xp.stack([first, hop1, hop2, hop3], axis=-1).astype(xp.int32)


def fabric_hops_alive(geom: ClosGeometry, plane, src_t0, dst_t0, spine, alive_ext):
    """Whether the two fabric hops of (plane, spine) between T0s are alive (broadcasting;
    `alive_ext` is bool[L+1] with the sentinel). Meaningful for cross-T0 pairs only."""
    return (alive_ext[geom.t0_up(plane, src_t0, spine)] &
            alive_ext[geom.t1_down(plane, dst_t0, spine)])


def slot_planes(num_slots: int, planes: int) -> np.ndarray:
    """Plane of each slot: slot k on plane k % P (equal per plane)."""
    return np.arange(num_slots, dtype=np.int32) % planes


def spread_slots(geom: ClosGeometry, num_flows: int, num_slots: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, K]: equal per plane, distinct random spines within a plane
    while a plane has no more slots than spines (then every spine is used about equally)."""
    P, S = geom.planes, geom.spines
    plane = np.broadcast_to(slot_planes(num_slots, P), (num_flows, num_slots))
    k = np.arange(num_slots)
    index_in_plane = k // P                                    # j-th slot of its plane
    slots_in_plane = (num_slots - 1 - k % P) // P + 1          # K_p for the slot's plane
    jitter = rng.random((num_flows, num_slots), dtype=np.float32)
    # integer stripe bounds, so neighbouring stripes never share a spine when S % K_p != 0
    lo = index_in_plane * S // slots_in_plane
    width = np.maximum((index_in_plane + 1) * S // slots_in_plane - lo, 1)
    stratum = lo + np.floor(jitter * width).astype(np.int64)
    rotation = rng.integers(0, S, size=(num_flows, P))
    spine = (np.minimum(stratum, S - 1) + rotation[:, k % P]) % S
    return plane.astype(np.int32), spine.astype(np.int32)


def hashed_slots(geom: ClosGeometry, num_flows: int, qps_per_plane: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, qps*P]: each queue pair hashed uniformly onto a spine of its
    plane, independently (two QPs of one flow may collide, as real hashes do)."""
    num_slots = qps_per_plane * geom.planes
    plane = np.broadcast_to(slot_planes(num_slots, geom.planes), (num_flows, num_slots))
    spine = rng.integers(0, geom.spines, size=(num_flows, num_slots))
    return plane.astype(np.int32), spine.astype(np.int32)


def path_set(geom: ClosGeometry, src: np.ndarray, dst: np.ndarray, plane: np.ndarray,
             spine: np.ndarray) -> PathSet:
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine)
    return PathSet(links=np.ascontiguousarray(links, dtype=np.int32),
                   plane=np.ascontiguousarray(plane), spine=np.ascontiguousarray(spine))


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


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("tier_bounds", "top_k", "slowest_only"))
def solve_clos_uniform_phase(geom: ClosGeometry, src, dst, plane, spine, demand, size_bytes,
                             flow_cap, capacity, alive, eps, max_rounds, *, tier_bounds,
                             top_k, slowest_only=False) -> PhaseResult:
    """`solver.uniform_phase` with the [F, K, H] link ids derived on the device from the
    [F, K] slot choices (the same ids `path_set` stores; a quarter of the transfer).
    `slowest_only`: see `solver.evaluate_split`."""
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine, xp=jnp)
    weights = uniform_live_split(links, jnp.concatenate([alive, jnp.array([True])]))
    ids, coef = clos_incidence(geom, src, dst, plane, links, weights)
    return evaluate_split(ids, coef, demand, size_bytes, flow_cap, capacity, alive, eps=eps,
                          max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k,
                          slowest_only=slowest_only)


@functools.partial(jax.jit, static_argnums=0,
                   static_argnames=("tier_bounds", "top_k", "slowest_only"))
def solve_clos_weighted_phase(geom: ClosGeometry, src, dst, plane, spine, weights, demand,
                              size_bytes, flow_cap, capacity, alive, eps, max_rounds, *,
                              tier_bounds, top_k, slowest_only=False) -> PhaseResult:
    """`solver.evaluate_split` for a given split weights[F, K] over Clos slots (e.g. the
    optimal policy's), links derived on the device. A flow whose weights sum to less than 1
    (it lost a plane) carries only that share, so its rate cap shrinks to match."""
    flow_cap = flow_cap * jnp.minimum(weights.sum(axis=1), 1.0)
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine, xp=jnp)
    ids, coef = clos_incidence(geom, src, dst, plane, links, weights)
    return evaluate_split(ids, coef, demand, size_bytes, flow_cap, capacity, alive, eps=eps,
                          max_rounds=max_rounds, tier_bounds=tier_bounds, top_k=top_k,
                          slowest_only=slowest_only)
