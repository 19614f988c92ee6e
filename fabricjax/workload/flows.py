"""Flows, phases and collectives: the plain data a workload is made of (host numpy).

A `Collective` is a list of `Phase`s run one after another; each phase is a set of concurrent
`Flows` repeated `repeat` times (a ring all-reduce is one phase repeated 2(N-1) times, since
every step is the same permutation). `busbw_factor` converts algorithm bandwidth into
nccl-tests' bus bandwidth for that collective; `size` is the byte count nccl-tests reports.
A training step (or a Chakra trace) also carries its `StepPlan`: the process groups its flows
belong to (`Flows.group`) and the parallel dimension of every phase (`Phase.dimension`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

GBIT_PER_BYTE = 8e-9
JOB_STREAM = 1 << 20
# Flow-by-flow arrays beyond this many flows in one phase are refused (an all-to-all over
# 8,192 GPUs has 67M); int32 ids, float64 sizes: about 1 GiB of host memory at the limit.
MAX_PHASE_FLOWS = 2**26


@dataclasses.dataclass(frozen=True)
class Flows:
    """F concurrent flows. src, dst: int32[F] GPU ids. size: float64[F] bytes.
    start: float64[F] seconds after the phase starts (None: all at once). group: int32[F], the
    process group each flow belongs to (an index into the collective's `StepPlan.group_names`;
    None outside training steps and traces)."""

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    start: np.ndarray | None = None
    group: np.ndarray | None = None

    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])

    def take(self, mask: np.ndarray) -> "Flows":
        return Flows(self.src[mask], self.dst[mask], self.size[mask],
                     None if self.start is None else self.start[mask],
                     None if self.group is None else self.group[mask])


@dataclasses.dataclass(frozen=True)
class Phase:
    """`flows` (the fabric's) run at once, `repeat` times in a row. `scaleup_time`: seconds the
    phase's scale-up flows need (0 without any); `hops`: links on the phase's longest path
    (4 across the spines, 2 within a T0 or server, 0 for no flow), for the per-hop latency;
    `latency_steps`: how many step latencies one repeat pays; `dimension`: the parallel
    dimension (tp, pp, ep, dp) or trace label the phase belongs to ("" outside steps)."""

    flows: Flows
    repeat: int
    name: str
    scaleup_time: float = 0.0
    scaleup_flows: int = 0
    hops: int = 4
    latency_steps: int = 1   # step latencies one repeat pays (a pipelined tree: 2 x depth)
    dimension: str = ""


@dataclasses.dataclass(frozen=True)
class DimensionPlan:
    """One parallel dimension of a step: `name` (tp, pp, ep, dp, or a trace's label), what
    runs (`collectives`, in words), how many process groups of how many ranks (the largest),
    and `bytes_per_gpu`, the most bytes one GPU sends in it over the step (fabric and
    scale-up alike)."""

    name: str
    collectives: str
    groups: int
    group_size: int
    bytes_per_gpu: float


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """What a training step (or trace) adds to its phases: its dimensions in report order,
    every process group (`group_names[g]`, members `group_gpus[g]`: GPU ids in rank order),
    indexed by `Flows.group`; the compute of the step (`compute_s`, None when not given), the
    dimensions whose communication overlaps it (`overlapped`) and for how long at most
    (`overlap_window_s`), and the overlap rule in words."""

    dimensions: tuple[DimensionPlan, ...]
    group_names: tuple[str, ...]
    group_gpus: tuple[np.ndarray, ...]
    compute_s: float | None = None
    overlapped: tuple[str, ...] = ()
    overlap_window_s: float = 0.0
    overlap_rule: str = ""


@dataclasses.dataclass(frozen=True)
class Collective:
    """One workload item or job: `size` bytes (nccl-tests' meaning) over `gpus` GPUs."""

    name: str
    kind: str
    gpus: int
    size: float
    phases: tuple[Phase, ...]
    busbw_factor: float
    algorithm: str = ""
    job: bool = False              # a job (shares the fabric with the other jobs)
    gpu_ids: np.ndarray | None = None
    stream: int = 0                # random-stream id of its path draws: workload item i: i,
                                   # job i: JOB_STREAM + i (adding an item moves no job's draws)
    step: StepPlan | None = None   # training steps and traces: groups and dimensions

    @property
    def steps(self) -> int:
        return sum(p.repeat for p in self.phases)
