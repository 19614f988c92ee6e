"""Multi-plane two-tier Clos fabrics as flat, directed link arrays.

Contract: `build_fabric(cfg)` returns a `Fabric` whose links are laid out *tier-major* so that
each tier is one contiguous index range (per-tier statistics are slices, not masks), and whose
`ClosGeometry` lets path code compute any path's link ids arithmetically. Index ``L`` (one past
the last link) is the sentinel: infinite capacity, always alive, target of path padding.

Layout, with N GPUs, P planes, T T0s per plane, S spines (T1s) per plane:

    tier 0  gpu -> t0   id = p*N + g                         (P*N links)
    tier 1  t0 -> t1    id = P*N + (p*T + t)*S + s           (P*T*S links)
    tier 2  t1 -> t0    id = P*N + P*T*S + (p*T + t)*S + s   (P*T*S links)
    tier 3  t0 -> gpu   id = P*N + 2*P*T*S + p*N + g         (P*N links)

Node ids: GPUs 0..N-1, then T0 (p, t) at N + p*T + t, then T1 (p, s) at N + P*T + p*S + s.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from fabricjax.config import ClosConfig, FabricKind, t0_count, two_tier_ports
from fabricjax.fabric.spec import bundled_switches, check_fabric

TIER_NAMES = ("gpu-t0", "t0-t1", "t1-t0", "t0-gpu")
NUM_TIERS = len(TIER_NAMES)


@dataclasses.dataclass(frozen=True)
class ClosGeometry:
    """Static integers of a two-tier multi-plane Clos (hashable: safe as a jit static arg).

    gpus N; planes P; gpus_per_t0 D (T0 down ports used by GPUs); t0s T per plane;
    spines S per plane (= T0 up ports); port_gbps: every link's capacity in Gbit/s."""

    gpus: int
    planes: int
    gpus_per_t0: int
    t0s: int
    spines: int
    port_gbps: float
    radix: int
    rail_width: int = 1     # > 1: rail-optimised, GPU i of every server on rail T0 i

    @property
    def tier_sizes(self) -> tuple[int, int, int, int]:
        host = self.planes * self.gpus
        fabric = self.planes * self.t0s * self.spines
        return (host, fabric, fabric, host)

    @property
    def tier_starts(self) -> tuple[int, int, int, int]:
        sizes = self.tier_sizes
        return tuple(int(x) for x in np.concatenate([[0], np.cumsum(sizes)[:-1]]))

    @property
    def num_links(self) -> int:
        return int(sum(self.tier_sizes))

    @property
    def sentinel(self) -> int:
        return self.num_links

    @property
    def nic_gbps(self) -> float:
        return self.planes * self.port_gbps

    @property
    def t1_switches(self) -> int:
        """Physical T1 switches per plane, as built (`spec.bundled_switches`): below full size
        fewer than `spines`, each taking a bundle of `spine_bundle` uplinks of every T0."""
        return bundled_switches(self.t0s, self.spines, self.radix)

    @property
    def spine_bundle(self) -> int:
        """Logical spines (T0 uplink positions) per physical T1: physical T1 j of a plane is
        the logical spines j*b .. j*b + b - 1, so a T1 failure takes all b of them."""
        return self.spines // self.t1_switches

    @property
    def num_nodes(self) -> int:
        return self.gpus + self.planes * (self.t0s + self.spines)

    def t0_of(self, gpu):
        """The T0 (within a plane) of GPU ids (numpy or jax integers). In GPU order T0 t
        serves GPUs tD .. tD+D-1; rail-optimised with servers of w GPUs, each group of D
        servers gets w T0s and local rank r of every server in it goes to the group's r-th."""
        if self.rail_width == 1:
            return gpu // self.gpus_per_t0
        w = self.rail_width
        return (gpu // (w * self.gpus_per_t0)) * w + gpu % w

    # link ids, valid for numpy and jax.numpy integer arrays alike
    def gpu_up(self, plane, gpu):
        return plane * self.gpus + gpu

    def t0_up(self, plane, t0, spine):
        return self.tier_starts[1] + (plane * self.t0s + t0) * self.spines + spine

    def t1_down(self, plane, t0, spine):
        return self.tier_starts[2] + (plane * self.t0s + t0) * self.spines + spine

    def gpu_down(self, plane, gpu):
        return self.tier_starts[3] + plane * self.gpus + gpu

    def path_links(self, src: Any, dst: Any, plane: Any, spine: Any, xp: Any = np) -> Any:
        """Link ids [..., 4] of the path (plane, spine) from GPU src to GPU dst: GPU -> T0 ->
        T1(spine) -> T0 -> GPU, or GPU -> T0 -> GPU with the sentinel after it when both
        share a T0. numpy or jax.numpy (`xp`), so the device recomputes a path when a policy
        moves a slot to another spine; inputs broadcast against each other."""
        src_t0 = self.t0_of(src)
        dst_t0 = self.t0_of(dst)
        local = src_t0 == dst_t0
        first = self.gpu_up(plane, src)
        last = self.gpu_down(plane, dst)
        up = self.t0_up(plane, src_t0, spine)
        down = self.t1_down(plane, dst_t0, spine)
        hop1 = xp.where(local, last, up)
        hop2 = xp.where(local, self.sentinel, down)
        hop3 = xp.where(local, self.sentinel, last)
        first, hop1, hop2, hop3 = xp.broadcast_arrays(first, hop1, hop2, hop3)
        return xp.stack([first, hop1, hop2, hop3], axis=-1).astype(xp.int32)


@dataclasses.dataclass(frozen=True)
class Fabric:
    """Directed links of a two-tier multi-plane Clos (host numpy arrays, L links).

    link_src, link_dst: int32[L] node ids.  capacity: float32[L] Gbit/s.
    tier: int8[L] index into TIER_NAMES.  plane: int16[L].  geometry: static ClosGeometry.

    Every fabric kind (this one and `fabric.graph.GraphFabric`) offers the same read-only
    view that the engine, the failure sets and the reports use: `kind`, `gpus`, `planes`,
    `num_links`, `num_nodes`, `sentinel`, `tier_names` and `tier_bounds` (the statistics'
    tiers, each one contiguous range of link ids), `layout_bounds` (host -> switch, switch
    up, switch down, switch -> host), `gpu_nic_gbps`, `reverse`, `link_name`; routes differ
    (arithmetic here, stored paths there)."""

    link_src: np.ndarray
    link_dst: np.ndarray
    capacity: np.ndarray
    tier: np.ndarray
    plane: np.ndarray
    geometry: ClosGeometry

    kind = FabricKind.CLOS
    tier_names = TIER_NAMES

    # ------------------------------------------------------------------ routes on the host
    def nic_rate(self) -> float:
        """The NIC rate the host arithmetic uses: one number, every GPU alike (Gbit/s)."""
        return self.geometry.nic_gbps

    def candidate_paths(self, src: np.ndarray, dst: np.ndarray, pool: str) -> None:
        """None: a Clos's paths follow from the geometry (no per-flow path arrays)."""
        return None

    def flow_hops(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """int64[F]: links on each flow's path, 4 across the spines, 2 within a T0."""
        geom = self.geometry
        cross = geom.t0_of(np.asarray(src, np.int64)) != geom.t0_of(np.asarray(dst, np.int64))
        return np.where(cross, 4, 2).astype(np.int64)

    def slot_links(self, src: np.ndarray, dst: np.ndarray, plane: np.ndarray,
                   choice: np.ndarray, pool: str) -> np.ndarray:
        """int32[F, K, 4]: the link ids of every slot (plane, spine) of the flows."""
        return self.geometry.path_links(np.asarray(src)[:, None], np.asarray(dst)[:, None],
                                        plane, choice)

    @property
    def num_links(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def gpus(self) -> int:
        return self.geometry.gpus

    @property
    def planes(self) -> int:
        return self.geometry.planes

    @property
    def num_nodes(self) -> int:
        return self.geometry.num_nodes

    @property
    def sentinel(self) -> int:
        return self.geometry.sentinel

    @property
    def tier_bounds(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of each of the four tiers (static: per-tier statistics are slices)."""
        g = self.geometry
        return tuple((s, s + n) for s, n in zip(g.tier_starts, g.tier_sizes))

    @property
    def layout_bounds(self) -> tuple[tuple[int, int], ...]:
        """The four structural ranges: host -> switch, switch up, switch down, switch -> host
        (on a Clos the statistics' tiers themselves)."""
        return self.tier_bounds

    @functools.cached_property
    def gpu_nic_gbps(self) -> np.ndarray:
        """float64[N]: every GPU's NIC rate (planes x port), Gbit/s."""
        return np.full(self.geometry.gpus, self.geometry.nic_gbps, np.float64)

    @functools.cached_property
    def physical_nodes(self) -> np.ndarray:
        """int64[nodes]: each node's physical switch, as the id of its first node: a logical
        spine maps to the first of its T1's bundle (j*b), every other node to itself."""
        g = self.geometry
        ids = np.arange(self.num_nodes, dtype=np.int64)
        first_t1 = g.gpus + g.planes * g.t0s
        local = ids[first_t1:] - first_t1
        ids[first_t1:] = first_t1 + local - local % g.spine_bundle
        return ids

    @functools.cached_property
    def reverse(self) -> np.ndarray:
        """int64[L]: the id of each link's opposite direction (the other half of its cable):
        GPU -> T0 pairs with T0 -> GPU, T0 -> T1 with T1 -> T0, at the same offset."""
        starts = self.geometry.tier_starts
        ids = np.arange(self.num_links, dtype=np.int64)
        tier_of = np.searchsorted(np.asarray(starts), ids, side="right") - 1
        partner = np.array([3, 2, 1, 0])[tier_of]          # the tier of the other direction
        return np.asarray(starts)[partner] + (ids - np.asarray(starts)[tier_of])

    def link_name(self, link: int) -> str:
        """A readable name such as ``plane3/t0-17/up5`` for link id `link`; a T1's downlink
        names the physical T1 (``plane3/t1-2/down17``) and, where a bundle of b cables joins
        it to the T0, the cable (``#0`` .. ``#b-1``)."""
        g = self.geometry
        link = int(link)
        if link == g.sentinel:
            return "sentinel"
        tier = int(np.searchsorted(np.asarray(g.tier_starts), link, side="right") - 1)
        local = link - g.tier_starts[tier]
        if tier in (0, 3):
            plane, gpu = divmod(local, g.gpus)
            return f"plane{plane}/gpu{gpu}/{'up' if tier == 0 else 'down'}"
        plane_t0, spine = divmod(local, g.spines)
        plane, t0 = divmod(plane_t0, g.t0s)
        if tier == 1:
            return f"plane{plane}/t0-{t0}/up{spine}"
        # the physical T1 and, in a bundle, which of its cables to that T0
        switch, cable = divmod(spine, g.spine_bundle)
        return (f"plane{plane}/t1-{switch}/down{t0}" +
                (f"#{cable}" if g.spine_bundle > 1 else ""))


def clos_geometry(cfg: ClosConfig) -> ClosGeometry:
    check_fabric(cfg)
    down, up = two_tier_ports(cfg)
    rail = cfg.gpus_per_server if cfg.rail_optimised else 1
    return ClosGeometry(
        gpus=cfg.gpus,
        planes=cfg.planes,
        gpus_per_t0=down,
        t0s=t0_count(cfg.gpus, down, rail),
        spines=up,
        port_gbps=float(cfg.port_gbps),
        radix=cfg.radix,
        rail_width=rail,
    )


def build_fabric(cfg: ClosConfig) -> Fabric:
    """Every link of a two-tier multi-plane Clos, vectorised (no loops over links)."""
    g = clos_geometry(cfg)
    N, P, T, S = g.gpus, g.planes, g.t0s, g.spines
    gpu = np.tile(np.arange(N, dtype=np.int64), P)
    gplane = np.repeat(np.arange(P, dtype=np.int64), N)
    gpu_t0_node = N + gplane * T + g.t0_of(gpu)
    pt, spine = np.divmod(np.arange(P * T * S, dtype=np.int64), S)
    fplane, t0 = np.divmod(pt, T)
    t0_node = N + fplane * T + t0
    t1_node = N + P * T + fplane * S + spine
    link_src = np.concatenate([gpu, t0_node, t1_node, gpu_t0_node])
    link_dst = np.concatenate([gpu_t0_node, t1_node, t0_node, gpu])
    tier = np.concatenate([np.full(n, i, dtype=np.int8) for i, n in enumerate(g.tier_sizes)])
    plane = np.concatenate([gplane, fplane, fplane, gplane]).astype(np.int16)
    capacity = np.full(g.num_links, g.port_gbps, dtype=np.float32)
    return Fabric(
        link_src=link_src.astype(np.int32),
        link_dst=link_dst.astype(np.int32),
        capacity=capacity,
        tier=tier,
        plane=plane,
        geometry=g,
    )


def fabric_summary(cfg: ClosConfig) -> dict:
    """What `fabricjax topo` prints: counts and bandwidths from the geometry alone."""
    g = clos_geometry(cfg)
    host_links, fabric_links, _, _ = g.tier_sizes
    cross_t0_paths = g.planes * g.spines
    # A balanced cut: half the GPUs on each side. What crosses it one way is the smaller of
    # their injection and the T0 uplinks serving them (S uplinks per D GPUs); when every GPU
    # sits under one T0 nothing needs a spine and only injection counts.
    built_spines = bundled_switches(g.t0s, g.spines, g.radix)
    half = g.gpus // 2
    per_gpu_uplink = g.spines / g.gpus_per_t0 if g.t0s >= 2 else 1.0
    injection = g.planes * g.port_gbps * half
    bisection = injection * min(1.0, per_gpu_uplink)
    return {
        "gpus": g.gpus,
        "planes": g.planes,
        "port_gbps": g.port_gbps,
        "nic_gbps": g.nic_gbps,
        "radix": g.radix,
        "tiers": 2,
        "rail_optimised": g.rail_width > 1,
        "t0_down_ports": g.gpus_per_t0,
        "t0_up_ports": g.spines,
        "oversubscription": cfg.oversubscription,
        "t0_per_plane": g.t0s,
        # switches as built: below full size the spines are as many as their ports need
        # (`fabric.spec.bundled_switches`), each T0 reaching each by a bundle of cables; the
        # analysis models one logical spine per T0 uplink (the same capacity per T0)
        "t1_per_plane": built_spines,
        "t1_per_plane_analysed": g.spines,
        "cables_per_t0_t1_pair": g.spines // built_spines,
        "switches_t0": g.planes * g.t0s,
        "switches_t1": g.planes * built_spines,
        "switches": g.planes * (g.t0s + built_spines),
        "links_directed": g.num_links,
        "links_by_tier": dict(zip(TIER_NAMES, g.tier_sizes)),
        "cables": g.num_links // 2,
        "host_cables": host_links,
        "fabric_cables": fabric_links,
        "paths_same_t0": g.planes,
        "paths_cross_t0": cross_t0_paths,
        "bisection_gbps": float(bisection),
        "full_bisection": bool(g.t0s < 2 or g.spines >= g.gpus_per_t0),
        "max_gpus_two_tiers": g.radix * g.gpus_per_t0,
    }
