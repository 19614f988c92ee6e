"""Collectives as phases of flows: what every GPU sends to whom, and how often.

A `Collective` is a list of `Phase`s run one after another; each phase is a set of concurrent
`Flows` repeated `repeat` times (a ring all-reduce is one phase repeated 2(N-1) times, since
every step is the same permutation). `busbw_factor` converts algorithm bandwidth into
nccl-tests' bus bandwidth for that collective; `size` is the byte count nccl-tests reports
(see each builder).

Servers: when the fabric has a scale-up domain (`fabric.scaleup_gbps` > 0), a phase's flows
between two GPUs of one server leave the fabric: `Phase.flows` holds only the fabric flows
and `Phase.scaleup_time` the time the scale-up flows need (each GPU's scale-up port,
`scaleup_gbps` per direction, shared equally by its flows; a non-blocking switch, so the
slowest flow's fair share is exact for equal sizes).

Placement: `place_gpus` turns a count and a placement into GPU ids; `job` ranks follow
ascending GPU id (as schedulers and NCCL order hosts), and `order: random` shuffles them.
Workload items are placed independently (each is analysed alone); jobs are placed on
disjoint GPUs, explicit lists first, then the others in the order given.

Process groups: `GroupSteps` is one step of many groups' collectives at once (every data-
parallel ring's step, every expert group's all-to-all), before the scale-up split, tagged
with each flow's group; `group_ring`, `group_all_to_all` build them and `GroupSteps.phase`
turns them into a `Phase`. Training steps and Chakra traces are made of these.
"""


from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from fabricjax.config import FabricConfig, FabricKind, TrafficConfig, two_tier_ports
from fabricjax.core.errors import ScenarioError
from fabricjax.workload.flows import (GBIT_PER_BYTE, MAX_PHASE_FLOWS, Collective, Flows,
                                      Phase)
from fabricjax.workload.traffic import load_traffic


@dataclasses.dataclass(frozen=True)
class Servers:
    """What phases need to know about the fabric: T0s (in GPU order, or rails of width
    `rail_width`) and servers."""

    gpus_per_t0: int
    gpus_per_server: int
    scaleup_gbps: float
    rail_width: int = 1

    @classmethod
    def of(cls, fabric: FabricConfig) -> "Servers":
        """A Clos's T0s as built; a fat tree's edge switches (radix / 2 GPUs each); a graph
        file's leaves are not known here, so every pair of GPUs counts as crossing one."""
        if fabric.kind == FabricKind.CLOS:
            return cls(two_tier_ports(fabric)[0], fabric.gpus_per_server, fabric.scaleup_gbps,
                       fabric.gpus_per_server if fabric.rail_optimised else 1)
        leaf = fabric.radix // 2 if fabric.kind == FabricKind.FAT_TREE else 1
        return cls(leaf, fabric.gpus_per_server, fabric.scaleup_gbps)

    def t0_of(self, gpu: np.ndarray) -> np.ndarray:
        """As fabric.ClosGeometry.t0_of (int64 GPU ids)."""
        w, d = self.rail_width, self.gpus_per_t0
        return (gpu // (w * d)) * w + gpu % w if w > 1 else gpu // d


def _phase(src: np.ndarray, dst: np.ndarray, size: Any, repeat: int, name: str,
           servers: Servers, start: np.ndarray | None = None, group: np.ndarray | None = None,
           dimension: str = "") -> Phase:
    """A phase from flows (size: bytes, scalar or per flow), split between the scale-up
    domain and the fabric."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    size = np.broadcast_to(np.asarray(size, dtype=np.float64), src.shape).copy()
    flows = Flows(src.astype(np.int32), dst.astype(np.int32), size,
                  None if start is None else np.asarray(start, dtype=np.float64),
                  None if group is None else np.asarray(group, dtype=np.int32))
    scaleup_time, scaleup_flows = 0.0, 0
    if servers.scaleup_gbps > 0:
        inside = (src // servers.gpus_per_server) == (dst // servers.gpus_per_server)
        if np.any(inside):
            # a non-blocking switch: the busiest GPU port (bytes out or in) sets the time
            s, d, b = src[inside], dst[inside], size[inside]
            busiest = max(np.bincount(s, weights=b).max(), np.bincount(d, weights=b).max())
            begin = 0.0 if start is None else float(flows.start[inside].max())
            scaleup_time = begin + float(busiest) * GBIT_PER_BYTE / servers.scaleup_gbps
            scaleup_flows = int(inside.sum())
            flows = flows.take(~inside)
    cross = (servers.t0_of(flows.src.astype(np.int64)) !=
             servers.t0_of(flows.dst.astype(np.int64)))
    hops = 4 if np.any(cross) else (2 if flows.num_flows or scaleup_flows else 0)
    return Phase(flows, repeat, name, scaleup_time, scaleup_flows, hops,
                 dimension=dimension)


# --------------------------------------------------------------------------- process groups

@dataclasses.dataclass(frozen=True)
class GroupSteps:
    """One step of several process groups' collectives at once, `repeat` times in a row,
    before the scale-up split. src, dst: int64[F] GPU ids; size: float64[F] bytes;
    group: int64[F] the process group of each flow (an index of the step's group table)."""

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    group: np.ndarray
    repeat: int
    name: str
    dimension: str = ""

    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])

    def sent_per_gpu(self, num_gpus: int) -> np.ndarray:
        """float64[num_gpus]: bytes each GPU sends over all `repeat` steps."""
        return np.bincount(self.src, weights=self.size, minlength=num_gpus) * self.repeat

    def phase(self, servers: Servers) -> Phase:
        return _phase(self.src, self.dst, self.size, self.repeat, self.name, servers,
                      group=self.group, dimension=self.dimension)

    @staticmethod
    def union(parts: list["GroupSteps"], repeat: int, name: str,
              dimension: str = "") -> "GroupSteps":
        """The flows of `parts` at once, as one step repeated `repeat` times."""
        return GroupSteps(np.concatenate([p.src for p in parts]),
                          np.concatenate([p.dst for p in parts]),
                          np.concatenate([p.size for p in parts]),
                          np.concatenate([p.group for p in parts]), repeat, name, dimension)


def group_ring(groups: np.ndarray, buffer: float, repeat: int, name: str, dimension: str,
               first_group: int = 0) -> GroupSteps:
    """Every group's ring step at once: in each row of groups int[G, n] (GPU ids in rank
    order) rank i sends buffer / n bytes to rank i + 1. A ring all-reduce of `buffer` is this
    step 2(n - 1) times, an all-gather or reduce-scatter n - 1 times (NCCL's ring). Groups are
    numbered from `first_group`."""
    groups = np.asarray(groups, dtype=np.int64)
    count, n = groups.shape
    src = groups.reshape(-1)
    dst = np.roll(groups, -1, axis=1).reshape(-1)
    group = np.repeat(np.arange(first_group, first_group + count, dtype=np.int64), n)
    return GroupSteps(src, dst, np.full(src.shape, buffer / n), group, repeat, name, dimension)


def group_all_to_all(groups: np.ndarray, buffer: float, repeat: int, name: str,
                     dimension: str, first_group: int = 0) -> GroupSteps:
    """Every group's all-to-all at once: in each row of groups int[G, n] every rank sends
    buffer / n bytes to every other rank (n (n - 1) flows per group)."""
    groups = np.asarray(groups, dtype=np.int64)
    count, n = groups.shape
    i = np.repeat(np.arange(n), n - 1)
    j = (i + np.tile(np.arange(1, n), n)) % n
    src = groups[:, i].reshape(-1)
    dst = groups[:, j].reshape(-1)
    group = np.repeat(np.arange(first_group, first_group + count, dtype=np.int64), n * (n - 1))
    return GroupSteps(src, dst, np.full(src.shape, buffer / n), group, repeat, name, dimension)


# --------------------------------------------------------------------------- placement

def place_gpus(item: Any, fabric_gpus: int, free: np.ndarray,
               rng: np.random.Generator) -> np.ndarray:
    """GPU ids (ascending) of a workload item or job among the `free` ones (bool[N])."""
    if isinstance(item.gpus, list):
        return np.sort(np.asarray(item.gpus, dtype=np.int64))
    ids = np.flatnonzero(free)
    count = ids.shape[0] if item.gpus == "all" else int(item.gpus)
    placement = item.placement or "contiguous"
    if placement == "contiguous":
        return ids[:count]
    if placement == "strided":
        return ids[(np.arange(count) * ids.shape[0]) // count]
    return np.sort(rng.choice(ids, size=count, replace=False))


def job_gpus(item: Any, fabric_gpus: int, seed: int = 0, index: int = 0) -> np.ndarray:
    """A workload item's GPUs when placed alone (random placement from its own stream, so
    it never shifts the collectives' draws)."""
    rng = np.random.default_rng([seed, 5, index])
    return place_gpus(item, fabric_gpus, np.ones(fabric_gpus, dtype=bool), rng)


# --------------------------------------------------------------------------- collectives

def _ranks(gpus: np.ndarray, order: str, rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(gpus) if order == "random" else gpus


def permutation(gpus: np.ndarray, size: float, *, shift: int | None, rng: np.random.Generator,
                name: str = "permutation", servers: Servers | None = None) -> Collective:
    """Every GPU sends `size` bytes to one other GPU at once.

    With `shift` GPU gpus[i] sends to gpus[(i + shift) % n]; without, the destinations follow
    one random cycle through the job (a derangement: nobody sends to itself)."""
    servers = servers or Servers(1 << 62, 1 << 62, 0.0)
    n = gpus.shape[0]
    if shift is not None:
        src, dst = gpus, np.roll(gpus, -shift)
    else:
        cycle = rng.permutation(gpus)
        src, dst = cycle, np.roll(cycle, -1)
    phase = _phase(src, dst, size, 1, "permutation", servers)
    # nccl-tests' sendrecv: busbw = algbw.
    return Collective(name, "permutation", n, float(size), (phase,), busbw_factor=1.0,
                      gpu_ids=gpus)


def _ring_phase(ring: np.ndarray, size: float, repeat: int, name: str,
                servers: Servers) -> Phase:
    return _phase(ring, np.roll(ring, -1), size, repeat, name, servers)


def _server_grid(gpus: np.ndarray, servers: Servers, field: str) -> np.ndarray:
    """int[M, g]: the job's GPUs by server (rows) and local rank (columns)."""
    server = gpus // servers.gpus_per_server
    ids, counts = np.unique(server, return_counts=True)
    if np.any(counts != counts[0]):
        raise ScenarioError(field, f"hierarchical needs the same number of the job's GPUs in "
                            f"every server (got {counts.min()} to {counts.max()} of "
                            f"fabric.gpus_per_server {servers.gpus_per_server}); allowed: "
                            "placement contiguous with whole servers, or hierarchical: false")
    order = np.argsort(server, kind="stable")
    return gpus[order].reshape(ids.shape[0], counts[0])


def _hierarchical_phases(kind: str, grid: np.ndarray, size: float,
                         servers: Servers) -> list[Phase]:
    """Intra-server rings (scale-up) and one ring per local rank across servers (fabric)."""
    m, g = grid.shape
    n = m * g
    intra = np.roll(grid, -1, axis=1)           # next GPU in the server's ring
    inter = np.roll(grid, -1, axis=0)           # same local rank, next server
    phases = []

    def intra_phase(label: str) -> Phase | None:
        return _phase(grid.reshape(-1), intra.reshape(-1), size / g, g - 1,
                      f"{label} in servers", servers) if g > 1 else None

    def inter_phase(label: str, repeat: int) -> Phase | None:
        return _phase(grid.reshape(-1), inter.reshape(-1), size / n, repeat,
                      f"{label} across servers", servers) if m > 1 else None

    if kind == "all-reduce":
        phases = [intra_phase("reduce-scatter"), inter_phase("all-reduce", 2 * (m - 1)),
                  intra_phase("all-gather")]
    elif kind == "all-gather":
        phases = [inter_phase("all-gather", m - 1), intra_phase("all-gather")]
    else:
        phases = [intra_phase("reduce-scatter"), inter_phase("reduce-scatter", m - 1)]
    return [p for p in phases if p is not None]


def ring_collective(kind: str, gpus: np.ndarray, size: float, *, order: str,
                    hierarchical: bool, rng: np.random.Generator, name: str,
                    servers: Servers, field: str = "") -> Collective:
    """Ring all-reduce (2(N-1) steps of size/N: reduce-scatter then all-gather), all-gather
    and reduce-scatter (N-1 steps of size/N each), flat or hierarchical."""
    n = gpus.shape[0]
    factor = {"all-reduce": 2.0 * (n - 1) / n}.get(kind, (n - 1) / n)
    if hierarchical:
        grid = _server_grid(gpus, servers, field)
        if order == "random":
            grid = grid[rng.permutation(grid.shape[0])]
        phases = _hierarchical_phases(kind, grid, size, servers)
        algorithm = "hierarchical ring"
    else:
        ring = _ranks(gpus, order, rng)
        repeat = 2 * (n - 1) if kind == "all-reduce" else n - 1
        phases = [_ring_phase(ring, size / n, repeat, "ring step", servers)]
        algorithm = "ring"
    return Collective(name, kind, n, float(size), tuple(phases), busbw_factor=factor,
                      algorithm=algorithm, gpu_ids=gpus)


def halving_doubling(gpus: np.ndarray, size: float, *, order: str, rng: np.random.Generator,
                     name: str, servers: Servers) -> Collective:
    """Recursive halving reduce-scatter (step k: rank r exchanges size/2^(k+1) with
    r XOR N/2^(k+1)), then recursive doubling all-gather (the same steps in reverse):
    2 log2 N phases, 2(N-1)/N x size sent per GPU in all. N is a power of two."""
    n = gpus.shape[0]
    ranks = _ranks(gpus, order, rng)
    r = np.arange(n)
    levels = n.bit_length() - 1
    halving = [_phase(ranks, ranks[r ^ (n >> (k + 1))], size / 2 ** (k + 1), 1,
                      f"halving step {k + 1}", servers) for k in range(levels)]
    doubling = [dataclasses.replace(p, name=f"doubling step {levels - k}")
                for k, p in enumerate(reversed(halving))]
    return Collective(name, "all-reduce", n, float(size), tuple(halving + doubling),
                      busbw_factor=2.0 * (n - 1) / n, algorithm="halving-doubling",
                      gpu_ids=gpus)


def binary_tree_parents(n: int) -> np.ndarray:
    """int[N]: each rank's parent in NCCL's binary tree over ranks 0..N-1 (-1 for the root 0).

    A rank's parent flips its lowest set bit and sets the next one up (falling back to only
    flipping it when that leaves the ranks), so rank 0's child is the highest power of two
    below N and every level halves the stride."""
    r = np.arange(n)
    bit = r & -r
    up = (r ^ bit) | (bit << 1)
    up = np.where(up >= n, r ^ bit, up)
    return np.where(r == 0, -1, up)


def tree_depth(parents: np.ndarray) -> int:
    """Edges on the longest root-to-leaf path of a tree given as parent indices (-1: root)."""
    depth = np.zeros(parents.shape[0], dtype=np.int64)
    node = parents.copy()
    while np.any(node >= 0):   # one pass per tree level: log2 N passes, not per rank
        depth += node >= 0
        node = np.where(node >= 0, parents[np.maximum(node, 0)], -1)
    return int(depth.max())


def double_tree_parents(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The two trees of NCCL's double binary tree: the second is the first mirrored (N even)
    or shifted by one (N odd), so most ranks are a leaf in one tree and inside the other."""
    first = binary_tree_parents(n)
    r = np.arange(n)
    if n % 2 == 0:
        mirrored = first[n - 1 - r]
        second = np.where(mirrored < 0, -1, n - 1 - mirrored)
    else:
        shifted = first[(r - 1) % n]
        second = np.where(shifted < 0, -1, (shifted + 1) % n)
    return first, second


def double_tree(gpus: np.ndarray, size: float, *, order: str, rng: np.random.Generator,
                name: str, servers: Servers) -> Collective:
    """NCCL's double-binary-tree all-reduce at flow level: each tree reduces and broadcasts
    half the data, pipelined in chunks, so every tree edge carries size/2 up and size/2 down
    at once. One phase; 2(N-1) x size bytes in all, as for the ring."""
    n = gpus.shape[0]
    ranks = _ranks(gpus, order, rng)
    src, dst = [], []
    for parents in double_tree_parents(n):  # two trees
        child = np.flatnonzero(parents >= 0)
        src += [ranks[child], ranks[parents[child]]]
        dst += [ranks[parents[child]], ranks[child]]
    phase = _phase(np.concatenate(src), np.concatenate(dst), size / 2, 1, "double tree",
                   servers)
    # a chunk climbs the deeper tree and comes back down before the pipeline drains
    phase = dataclasses.replace(phase, latency_steps=2 * max(
        tree_depth(parents) for parents in double_tree_parents(n)))
    return Collective(name, "all-reduce", n, float(size), (phase,),
                      busbw_factor=2.0 * (n - 1) / n, algorithm="tree", gpu_ids=gpus)


def _check_flow_count(count: int, field: str) -> None:
    if count > MAX_PHASE_FLOWS:
        raise ScenarioError(field, f"{count:,} flows in one phase exceed the "
                            f"{MAX_PHASE_FLOWS:,} fabricjax builds; allowed: fewer GPUs")


def all_to_all(gpus: np.ndarray, size: float, *, skew: float, rng: np.random.Generator,
               name: str, servers: Servers, field: str = "") -> Collective:
    """Every GPU sends to every other: uniform (size/N to each, nccl-tests' alltoall), or with
    `skew` > 0 size x p_d to destination d, p over a seeded random ranking of the GPUs falling
    as rank^-skew (hot experts); a GPU's own share stays local. One phase of N(N-1) flows."""
    n = gpus.shape[0]
    _check_flow_count(n * (n - 1), f"{field}.gpus")
    r = np.arange(n, dtype=np.int64)
    src = np.repeat(r, n - 1)
    offset = np.tile(np.arange(1, n, dtype=np.int64), n)
    dst = (src + offset) % n
    if skew > 0:
        popularity = np.empty(n)
        popularity[rng.permutation(n)] = (np.arange(n) + 1.0) ** -skew
        popularity /= popularity.sum()
        sizes = size * popularity[dst]
    else:
        sizes = np.float64(size / n)
    phase = _phase(gpus[src], gpus[dst], sizes, 1, "all-to-all", servers)
    return Collective(name, "all-to-all", n, float(size), (phase,),
                      busbw_factor=(n - 1) / n,
                      algorithm=f"skew {skew:g}" if skew > 0 else "uniform", gpu_ids=gpus)


def incast(gpus: np.ndarray, size: float, *, name: str, servers: Servers) -> Collective:
    """n-to-1: ranks 1..N-1 each send `size` bytes to rank 0. algbw is per sender (size /
    time); busbw = algbw x (N-1), the receiver's throughput."""
    n = gpus.shape[0]
    phase = _phase(gpus[1:], np.full(n - 1, gpus[0]), size, 1, "incast", servers)
    return Collective(name, "incast", n, float(size), (phase,), busbw_factor=float(n - 1),
                      gpu_ids=gpus)


def send_recv(gpus: np.ndarray, size: float, *, direction: str, name: str,
              servers: Servers) -> Collective:
    """Pairs (rank i, rank i + N/2) send `size` bytes, one way or both (a pipeline-parallel
    boundary between the job's two halves); busbw = algbw."""
    half = gpus.shape[0] // 2
    a, b = gpus[:half], gpus[half:]
    src, dst = (np.concatenate([a, b]), np.concatenate([b, a])) if direction == "both" else (a, b)
    phase = _phase(src, dst, size, 1, "send-recv", servers)
    return Collective(name, "send-recv", gpus.shape[0], float(size), (phase,),
                      busbw_factor=1.0, algorithm=direction, gpu_ids=gpus)


def load_item_traffic(item: TrafficConfig, base_dir: Path | None, ranks: int, field: str):
    """The traffic matrix a workload item names (`workload.traffic.TrafficMatrix`).

    A scenario may be someone else's file: it may point only inside its own folder, so it
    cannot make the tool read (and quote in an error) a file elsewhere on the machine."""
    folder = (base_dir or Path(".")).resolve()
    path = (folder / item.file).resolve()
    if folder not in path.parents:
        raise ScenarioError(f"{field}.file", f"{item.file!r} is outside the scenario's folder; "
                            "allowed: a path inside it (relative to the scenario file)")
    return load_traffic(path, item.format, ranks, f"{field}.file")


def traffic(gpus: np.ndarray, item: TrafficConfig, base_dir: Path | None, *, name: str,
            servers: Servers, field: str) -> Collective:
    """A traffic matrix from a file (ids are the job's ranks). One phase whose flows start at
    their `start` times; `size` = the most bytes any GPU sends, busbw = algbw."""
    matrix = load_item_traffic(item, base_dir, gpus.shape[0], field)
    _check_flow_count(matrix.num_flows, f"{field}.file")
    start = matrix.start if np.any(matrix.start > 0) else None
    phase = _phase(gpus[matrix.src], gpus[matrix.dst], matrix.size, 1, "traffic", servers,
                   start=start)
    sent = np.bincount(matrix.src, weights=matrix.size, minlength=gpus.shape[0])
    return Collective(name, "traffic", gpus.shape[0], float(sent.max()), (phase,),
                      busbw_factor=1.0, algorithm=Path(item.file).name, gpu_ids=gpus)
