"""Workloads as phases of flows: what every GPU sends to whom, and how often.

A `Collective` is a list of `Phase`s run one after another; each phase is a set of concurrent
`Flows` repeated `repeat` times (a ring all-reduce is one phase repeated 2(N-1) times, since
every step is the same permutation). `busbw_factor` converts algorithm bandwidth into NCCL's
bus bandwidth for that collective.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fabricjax.scenario import AllReduceConfig, PermutationConfig, Scenario


@dataclasses.dataclass(frozen=True)
class Flows:
    """F concurrent flows. src, dst: int32[F] GPU ids. size: float64[F] bytes."""

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray

    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])


@dataclasses.dataclass(frozen=True)
class Phase:
    flows: Flows
    repeat: int
    name: str


@dataclasses.dataclass(frozen=True)
class Collective:
    """One workload item: `size` bytes per GPU over `gpus` GPUs, as phases."""

    name: str
    kind: str
    gpus: int
    size: float
    phases: tuple[Phase, ...]
    busbw_factor: float

    @property
    def steps(self) -> int:
        return sum(p.repeat for p in self.phases)


def job_gpus(item: PermutationConfig | AllReduceConfig, fabric_gpus: int) -> np.ndarray:
    if item.gpus == "all":
        return np.arange(fabric_gpus, dtype=np.int64)
    if isinstance(item.gpus, int):
        return np.arange(item.gpus, dtype=np.int64)
    return np.asarray(item.gpus, dtype=np.int64)


def _flows(src: np.ndarray, dst: np.ndarray, size: float) -> Flows:
    return Flows(
        src=src.astype(np.int32),
        dst=dst.astype(np.int32),
        size=np.full(src.shape[0], float(size), dtype=np.float64),
    )


def permutation(gpus: np.ndarray, size: float, *, shift: int | None, rng: np.random.Generator,
                name: str = "permutation") -> Collective:
    """Every GPU sends `size` bytes to one other GPU at once.

    With `shift` GPU gpus[i] sends to gpus[(i + shift) % n]; without, the destinations follow
    one random cycle through the job (a derangement: nobody sends to itself)."""
    n = gpus.shape[0]
    if shift is not None:
        src, dst = gpus, np.roll(gpus, -shift)
    else:
        cycle = rng.permutation(gpus)
        src, dst = cycle, np.roll(cycle, -1)
    phase = Phase(_flows(src, dst, size), repeat=1, name="permutation")
    # nccl-tests' sendrecv: busbw = algbw.
    return Collective(name, "permutation", n, float(size), (phase,), busbw_factor=1.0)


def ring_allreduce(gpus: np.ndarray, size: float, *, order: str, rng: np.random.Generator,
                   name: str = "all-reduce") -> Collective:
    """Ring all-reduce of `size` bytes: reduce-scatter then all-gather, 2(N-1) steps, each a
    permutation in which every GPU sends size/N bytes to its ring successor."""
    n = gpus.shape[0]
    ring = rng.permutation(gpus) if order == "random" else gpus
    step = Phase(_flows(ring, np.roll(ring, -1), size / n), repeat=2 * (n - 1), name="ring step")
    return Collective(name, "all-reduce", n, float(size), (step,),
                      busbw_factor=2.0 * (n - 1) / n)


def build_workload(scenario: Scenario, rng: np.random.Generator) -> list[Collective]:
    out = []
    for i, item in enumerate(scenario.workload):
        gpus = job_gpus(item, scenario.fabric.gpus)
        name = item.name or f"{item.collective}#{i}"
        if isinstance(item, PermutationConfig):
            out.append(permutation(gpus, item.size, shift=item.shift, rng=rng, name=name))
        else:
            out.append(ring_allreduce(gpus, item.size, order=item.order, rng=rng, name=name))
    return out
