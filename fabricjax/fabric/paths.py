"""Candidate path slots per flow, enumerated from the Clos structure (no graph search; host
numpy, and `clos_path_links` also works on jax.numpy arrays through `xp`).

Contract: a `PathSet` gives every flow K path slots as link ids, `links`: int32[F, K, H] with
H = 4 hops, padded with the fabric's sentinel link. On a two-tier Clos a path is fixed by
(plane, spine): GPU -> T0 -> T1(spine) -> T0 -> GPU, or GPU -> T0 -> GPU when both GPUs share a
T0 (then the spine is irrelevant and the last two hops are the sentinel).

Slot k of a flow always belongs to plane ``k % P``, so planes get equal slot counts (MRC assigns
entropy values equally per plane). Within a plane, `spread_slots` places a flow's slots on
distinct spines drawn at random (stratified: one random spine per equal stripe of the spine
list, then a random rotation), and `hashed_slots` hashes each slot independently and uniformly,
as a switch's ECMP hash does. `placed_slots` picks between the two by a spraying policy's
`placement`: "routed" (the sender names the spine, as MRC's SRv6 source routes do: distinct,
even) or "hashed" (every switch hashes the EV onto an uplink: with replacement, as in UEC
fabrics and htsim).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fabricjax.fabric.clos import ClosGeometry

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
    """Link ids [..., 4] of the path (plane, spine) from GPU src to GPU dst
    (`ClosGeometry.path_links`; numpy or jax.numpy through `xp`)."""
    return geom.path_links(src, dst, plane, spine, xp=xp)


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
    # lo + floor(jitter x width) (the product in float64, exact), capped at S - 1, plus the
    # plane's rotation, mod S; in place and in int32 (16.7M slots at 131,072 GPUs: 0.7 s in
    # int64 temporaries)
    stratum = np.multiply(jitter, width, dtype=np.float64)
    np.floor(stratum, out=stratum)
    np.add(stratum, lo, out=stratum)
    np.minimum(stratum, S - 1, out=stratum)
    spine = stratum.astype(np.int32)
    del stratum
    rotation = rng.integers(0, S, size=(num_flows, P))
    if num_slots % P == 0:      # slot k = j P + p: add the rotation of plane p by a reshape
        spine.reshape(num_flows, -1, P)[...] += rotation[:, None, :].astype(np.int32)
    else:
        spine += rotation[:, k % P].astype(np.int32)
    spine[spine >= S] -= S      # both terms lie in [0, S): the sum mod S
    return plane.astype(np.int32), spine


def hashed_slots(geom: ClosGeometry, num_flows: int, qps_per_plane: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, qps*P]: each queue pair hashed uniformly onto a spine of its
    plane, independently (two QPs of one flow may collide, as real hashes do)."""
    return hashed_evs(geom, num_flows, qps_per_plane * geom.planes, rng)


def hashed_evs(geom: ClosGeometry, num_flows: int, num_slots: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(plane, spine) int32[F, K]: slot k on plane k % P, its spine hashed uniformly and
    independently (with replacement: a flow's EVs may share a spine)."""
    plane = np.broadcast_to(slot_planes(num_slots, geom.planes), (num_flows, num_slots))
    spine = rng.integers(0, geom.spines, size=(num_flows, num_slots))
    return plane.astype(np.int32), spine.astype(np.int32)


PLACEMENTS = ("routed", "hashed")


def placed_slots(geom: ClosGeometry, num_flows: int, num_slots: int, placement: str,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A spraying policy's EVs on the Clos: `spread_slots` when "routed", `hashed_evs` when
    "hashed"."""
    if placement == "hashed":
        return hashed_evs(geom, num_flows, num_slots, rng)
    return spread_slots(geom, num_flows, num_slots, rng)


def path_set(geom: ClosGeometry, src: np.ndarray, dst: np.ndarray, plane: np.ndarray,
             spine: np.ndarray) -> PathSet:
    links = clos_path_links(geom, src[:, None], dst[:, None], plane, spine)
    return PathSet(links=np.ascontiguousarray(links, dtype=np.int32),
                   plane=np.ascontiguousarray(plane), spine=np.ascontiguousarray(spine))
