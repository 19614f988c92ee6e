"""Scenario files: YAML in, a validated `Scenario` out, or one `ScenarioError` naming the field.

The loader reads with `yaml.safe_load` only (no tags that build objects), validates with
pydantic models that forbid unknown fields, then checks what a schema cannot: that the fabric
is buildable and that the workload's GPUs exist. Every field has a default a user would expect,
so ``fabric: {gpus: 1024}`` plus one workload line is a complete scenario.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pydantic
import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from fabricjax.errors import ScenarioError, one_line, short_repr
from fabricjax.units import parse_rate_gbps, parse_size

POLICIES = ("ecmp", "spray", "mrc", "optimal")
# Bounds that keep every derived number finite in float32 (times, rates, loads).
MIN_RATE_GBPS, MAX_RATE_GBPS = 1e-3, 1e5
MAX_SIZE_BYTES = 2.0**60
MAX_LINK_ID = 2**31 - 2   # link ids and the sentinel (one past the last link) are int32
COLLECTIVES = ("permutation", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "incast", "send-recv", "traffic")
PLACEMENTS = ("contiguous", "random", "strided", "explicit")


class _Strict(BaseModel):
    # strict: YAML's `yes`/`true` must not pass as the integer 1 (`planes: yes`).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class FabricConfig(_Strict):
    """A two-tier multi-plane Clos: every GPU has one port per plane to a T0 of that plane,
    every T0 has one link to every T1 (spine) of its plane."""

    kind: Literal["multiplane-clos", "fat-tree", "graph"] = "multiplane-clos"
    gpus: int = Field(1024, ge=2)
    planes: int = Field(8, ge=1, le=64)
    port_gbps: float = 100.0
    radix: int = Field(64, ge=2, le=4096)
    oversubscription: float = Field(1.0, ge=1.0)
    tiers: Literal[2, 3] = 2   # 3: fat-tree only
    # kind graph: a networkx-readable file (GraphML, or an edge list "u v capacity_gbps"),
    # relative to the scenario; kind fat-tree and graph: up to `paths` shortest paths per pair
    file: str | None = Field(None, min_length=1, max_length=4096)
    format: Literal["auto", "graphml", "edgelist"] = "auto"
    paths: int = Field(8, ge=1, le=1024)
    # servers: GPUs g*k .. g*k+g-1 share server k. With scaleup_gbps > 0 (per GPU and
    # direction, e.g. 3600 for NVLink 4's 450 GB/s), traffic between GPUs of one server rides
    # that scale-up domain and never touches the fabric; 0: no scale-up domain.
    gpus_per_server: int = Field(8, ge=1, le=1024)
    scaleup_gbps: float = Field(0.0, ge=0.0, le=MAX_RATE_GBPS)
    # rail-optimised T0s: GPU i of every server is cabled to rail switch i (a T0 serves one
    # local rank of D servers) instead of a T0 serving D consecutive GPUs
    rail_optimised: bool = False

    @field_validator("port_gbps", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> float:
        rate = parse_rate_gbps(value)
        if not MIN_RATE_GBPS <= rate <= MAX_RATE_GBPS:
            raise ValueError(f"allowed: {MIN_RATE_GBPS:g} .. {MAX_RATE_GBPS:g} Gbit/s "
                             f"(got {rate:g})")
        return rate


class _WorkloadBase(_Strict):
    """What every workload item and job has: a name, its GPUs and their placement.

    `gpus`: 'all', a count, or an explicit list of GPU ids. `placement` picks a count's GPUs:
    contiguous (the lowest free ids: whole servers and T0s), random (seeded), strided (spread
    evenly over the fabric), explicit (the list). A job's ranks follow ascending GPU id."""

    name: str | None = None
    gpus: Literal["all"] | int | list[int] = "all"
    placement: Literal["contiguous", "random", "strided", "explicit"] | None = None

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpus(cls, value: Any) -> Any:
        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)
        if value == "all" and isinstance(value, str):
            return value
        if is_int(value) and value >= 2:
            return value
        if isinstance(value, list) and all(is_int(v) for v in value):
            return value
        raise ValueError(f"allowed: 'all', a GPU count >= 2, or a list of GPU ids "
                         f"(got {_short(value)})")



class _SizedBase(_WorkloadBase):
    size: float = 2**30

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> float:
        size = parse_size(value)
        if not 1 <= size <= MAX_SIZE_BYTES:
            raise ValueError(f"allowed: 1 byte .. 1 EiB (2^60 bytes) (got {size:g} bytes)")
        return size


class PermutationConfig(_SizedBase):
    """Every GPU sends `size` bytes to one other GPU, all at once (one phase).

    `shift: k` sends GPU i to GPU i+k (mod N) in job order; without it the destinations are a
    random derangement (one random cycle), seeded."""

    collective: Literal["permutation"]
    shift: int | None = None


class _RankedBase(_SizedBase):
    """`order: random` shuffles the ranks (a ring or tree over a scheduler's scattered GPUs);
    `hierarchical: true` runs the collective inside servers over the scale-up domain and
    between servers over the fabric, one ring per local rank (rail), as NCCL does."""

    order: Literal["linear", "random"] = "linear"
    hierarchical: bool = False


class AllReduceConfig(_RankedBase):
    """NCCL-style all-reduce of `size` bytes. `ring`: 2(N-1) steps, each GPU sends size/N to
    its ring neighbour; `halving-doubling`: recursive halving reduce-scatter then recursive
    doubling all-gather, 2 log2 N steps (N a power of two); `tree`: NCCL's double binary tree,
    pipelined (every tree edge busy at once, each tree carrying half the data)."""

    collective: Literal["all-reduce"]
    algorithm: Literal["ring", "halving-doubling", "tree"] = "ring"


class AllGatherConfig(_RankedBase):
    """Ring all-gather: `size` is the gathered buffer (nccl-tests), each GPU contributes
    size/N; N-1 steps."""

    collective: Literal["all-gather"]
    algorithm: Literal["ring"] = "ring"


class ReduceScatterConfig(_RankedBase):
    """Ring reduce-scatter: `size` is each GPU's input buffer (nccl-tests); N-1 steps of
    size/N."""

    collective: Literal["reduce-scatter"]
    algorithm: Literal["ring"] = "ring"


class AllToAllConfig(_SizedBase):
    """Every GPU sends `size` bytes in all, spread over the job's GPUs (nccl-tests alltoall:
    size/N to each). `skew` > 0 models mixture-of-experts routing: destination popularity
    falls as rank^-skew (Zipf) over a seeded random ranking of the job's GPUs."""

    collective: Literal["all-to-all"]
    skew: float = Field(0.0, ge=0.0, le=10.0)


class IncastConfig(_SizedBase):
    """n-to-1: every GPU of the job but the first (rank 0) sends `size` bytes to rank 0."""

    collective: Literal["incast"]


class SendRecvConfig(_SizedBase):
    """Pairs (rank 2i, rank 2i+1) exchange `size` bytes, in both directions (`both`, as a
    pipeline-parallel boundary does with activations and gradients) or 2i -> 2i+1 only."""

    collective: Literal["send-recv"]
    direction: Literal["both", "forward"] = "both"


class TrafficConfig(_WorkloadBase):
    """A traffic matrix from a file, relative to the scenario's folder: CSV (src, dst, bytes
    [, start seconds]), .npz (src, dst, size [, start]) or htsim's connection matrix. Ids in
    the file are the job's ranks (with gpus: all, the fabric's GPU ids)."""

    collective: Literal["traffic"]
    file: str = Field(min_length=1, max_length=4096)
    format: Literal["auto", "csv", "npz", "htsim"] = "auto"


WorkloadConfig = Annotated[
    Union[PermutationConfig, AllReduceConfig, AllGatherConfig, ReduceScatterConfig,
          AllToAllConfig, IncastConfig, SendRecvConfig, TrafficConfig],
    Field(discriminator="collective"),
]


class EcmpConfig(_Strict):
    """Per-flow ECMP: `qps` queue pairs per plane (per NIC port), each hashed onto one spine."""

    qps: int = Field(1, ge=1, le=1024)


class SprayConfig(_Strict):
    """Oblivious spraying over `evs` entropy values (path slots), equal per plane."""

    evs: int = Field(128, ge=1, le=4096)


class MrcConfig(_Strict):
    """MRC adaptive spraying: `evs` entropy values per flow (equal per plane, the same initial
    set as `spray` when the counts match); an EV whose path's worst controllable utilisation
    exceeds `threshold` is marked and moves to a random spine of its plane with probability
    damping * (u - threshold) / u. Stops when nothing is marked, when the fabric overload has not
    improved by `tol` (relative) for `patience` iterations, or at `max_iters`."""

    evs: int = Field(128, ge=1, le=4096)
    threshold: float = Field(1.0, gt=0.0, le=100.0)
    damping: float = Field(0.3, gt=0.0, le=1.0)
    max_iters: int = Field(500, ge=1, le=100_000)
    tol: float = Field(0.01, ge=0.0, le=1.0)
    patience: int = Field(20, ge=1, le=100_000)


class OptimalConfig(_Strict):
    """The min-max-utilisation bound: iterate until the duality gap is below `tol` times the
    bound, or `max_iters`."""

    max_iters: int = Field(3000, ge=1, le=1_000_000)
    tol: float = Field(1e-3, gt=0.0, le=1.0)


class SolverConfig(_Strict):
    """Max-min rate solver and time model.

    `eps`: progressive filling freezes every link within (1+eps) of the lowest fill level in one
    round (0 = exact). `max_rounds` bounds the rounds; hitting it is reported as a status.
    Every collective step costs `step_latency_us` plus `hop_latency_us` per link of its
    longest path (4 across the spines, 2 within a T0 or a server). `rates`: `auto` takes a
    phase's time from the slowest max-min rate alone (exact, one pass) when all its flows send
    the same bytes, and runs the full rounds otherwise; `full` always runs them (every flow's
    own rate, `eps` and `max_rounds` apply).

    `progressive`: also simulate each phase flow by flow (finished flows release their
    bandwidth and rates are re-solved) for the progressive completion time and the flow
    completion times; at most `max_events` re-solves per phase, completions within a factor
    (1 + `event_batch`) of the next one share an event. `auto`: for phases of up to 32,768
    flows and 2^22 (flow, path) pairs, where it costs seconds, not minutes.
    `aggregate`: solve uniform phases (all-to-all) as (source T0, destination T0) classes —
    `auto` when flow by flow would not fit (more than 2^25 flow-path pairs)."""

    eps: float = Field(0.01, ge=0.0, le=0.5)
    max_rounds: int = Field(2000, ge=1, le=1_000_000)
    step_latency_us: float = Field(0.0, ge=0.0, le=1e6)
    hop_latency_us: float = Field(0.0, ge=0.0, le=1e6)
    rates: Literal["auto", "full"] = "auto"
    progressive: Literal["auto"] | bool = "auto"
    max_events: int = Field(256, ge=1, le=1_000_000)
    event_batch: float = Field(0.01, ge=0.0, le=1.0)
    aggregate: Literal["auto", "always", "never"] = "auto"


class FailureKindConfig(_Strict):
    """One kind of failed component. A failure set holds every component in `names`, plus
    `random` components drawn uniformly without replacement, plus each remaining component
    independently with `probability`; the random parts are drawn anew for every set.

    Shorthand: ``links: 4`` means ``{random: 4}``; ``links: [plane0/t0-3/up5]`` means
    ``{names: [...]}``."""

    names: list[str] = []
    random: int = Field(0, ge=0, le=1_000_000)
    probability: float = Field(0.0, ge=0.0, le=1.0)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"random": value}
        if isinstance(value, list):
            return {"names": value}
        return value

    @field_validator("names", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        # planes may be written as bare numbers: [3] is plane3
        if isinstance(value, list):
            return [f"plane{v}" if isinstance(v, int) and not isinstance(v, bool) else v
                    for v in value]
        return value

    @property
    def drawn(self) -> bool:
        return self.random > 0 or self.probability > 0


class SwitchFailureConfig(FailureKindConfig):
    """Whole switches (every link of the switch): `tier` restricts the random draws."""

    tier: Literal["t0", "t1", "any"] = "any"


class DegradedConfig(FailureKindConfig):
    """Cables still up at a fraction `factor` of their capacity (both directions), e.g. 0.75
    for a 4-lane transceiver with one lane down. Fabric (T0-T1) cables are drawn at random."""

    factor: float = Field(0.5, gt=0.0, lt=1.0)


class FailuresConfig(_Strict):
    """Failure sets, and how each policy reacts (see README, "Failures").

    links: T0-T1 cables (both directions; names may also be host cables); switches: T0 or T1
    switches; nic_ports: one GPU's port on one plane (both directions); planes: whole planes;
    degraded: cables at reduced capacity. `samples` sets are drawn (default 100 when anything
    is random, else 1), seeded by `seed` (default: the scenario's)."""

    samples: int | None = Field(None, ge=1, le=1_000_000)
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    links: FailureKindConfig = FailureKindConfig()
    switches: SwitchFailureConfig = SwitchFailureConfig()
    nic_ports: FailureKindConfig = FailureKindConfig()
    planes: FailureKindConfig = FailureKindConfig()
    degraded: DegradedConfig = DegradedConfig()
    # routing (BGP) reconvergence: ECMP flows hashed onto a dead path, and oblivious spraying's
    # EVs on one, are black-holed this long
    reconvergence_s: float = Field(5.0, ge=0.0, le=1e6)
    # RDMA transport timeout; a stall at least this long fails the job (NCCL_IB_TIMEOUT=20 and
    # 7 retries: 7 x 4.096 us x 2^20 = 30 s)
    transport_timeout_s: float = Field(30.0, gt=0.0, le=1e6)
    # MRC retires an EV at its first lost packet: tens of microseconds
    mrc_reaction_us: float = Field(50.0, ge=0.0, le=1e12)
    # a crashed job restarts from its last checkpoint: restart plus recomputed work
    restart_s: float = Field(600.0, ge=0.0, le=1e7)
    # failure sets per device call (default: 16 on a CPU, sized to the memory of an
    # accelerator). It never changes a result: the JSON is byte-identical for every chunk.
    chunk: int | None = Field(None, ge=1, le=1_000_000)

    @property
    def kinds(self) -> dict[str, FailureKindConfig]:
        return {"links": self.links, "switches": self.switches, "nic_ports": self.nic_ports,
                "planes": self.planes, "degraded": self.degraded}

    @property
    def num_samples(self) -> int:
        if self.samples is not None:
            return self.samples
        return 100 if any(kind.drawn for kind in self.kinds.values()) else 1


class ReliabilityConfig(_Strict):
    """Component failure rates (events per component per hour) for the reliability what-if:
    expected failure events that hit each job, stall time and crash probability per policy.
    `step_time_s`: one training step (for events per 1,000 steps); `hours`: the horizon of the
    crash probability."""

    link_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0)
    switch_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0)
    nic_port_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0)
    step_time_s: float | None = Field(None, gt=0.0, le=1e6)
    hours: float = Field(24.0, gt=0.0, le=1e6)


class BomConfig(_Strict):
    """Bill-of-materials assumptions (`fabricjax topo`, sweeps): see fabricjax.bom for the
    sources. switch_watts_51t: W of a 51.2 Tbit/s switch without optics (others scale with
    radix x port rate); switch_watts: one flat figure per switch instead; optic_watts: W per
    pluggable module by its speed in Gbit/s (merged into the defaults); module_gbps and
    module_lanes: a module's capacity and lanes (800G OSFP, 8 x 100G breakout); host_links:
    optics or copper between NICs and T0s; copper_watts_per_end: W per copper cable end."""

    switch_watts_51t: float = Field(2000.0, ge=0.0, le=1e6)
    switch_watts: float | None = Field(None, ge=0.0, le=1e6)
    optic_watts: dict[float, float] = {}
    module_gbps: float = Field(800.0, ge=1.0, le=1e5)
    module_lanes: int = Field(8, ge=1, le=64)
    host_links: Literal["optics", "copper"] = "optics"
    copper_watts_per_end: float = Field(0.0, ge=0.0, le=1e4)

    @field_validator("optic_watts")
    @classmethod
    def _watts(cls, value: dict) -> dict:
        bad = [k for k, v in value.items() if not (k > 0 and 0 <= v <= 1e4)]
        if bad:
            raise ValueError(f"allowed: module speed (Gbit/s) > 0 -> watts 0 .. 10000 "
                             f"(got {bad[0]:g}: {value[bad[0]]:g})")
        return value

    def overrides(self) -> dict:
        """The fields set away from the defaults, as fabricjax.bom.assumptions takes them."""
        return self.model_dump(exclude_defaults=True)


class Scenario(_Strict):
    name: str = "scenario"
    seed: int = Field(0, ge=0, le=2**31 - 1)
    fabric: FabricConfig = FabricConfig()
    workload: list[WorkloadConfig] = []
    # jobs share the fabric at once, on disjoint GPUs: each is also reported alone
    jobs: list[WorkloadConfig] = []
    policies: list[Literal["ecmp", "spray", "mrc", "optimal"]] = Field(
        default=list(POLICIES), min_length=1)
    ecmp: EcmpConfig = EcmpConfig()
    spray: SprayConfig = SprayConfig()
    mrc: MrcConfig = MrcConfig()
    optimal: OptimalConfig = OptimalConfig()
    solver: SolverConfig = SolverConfig()
    failures: FailuresConfig | None = None
    reliability: ReliabilityConfig | None = None
    bom: BomConfig = BomConfig()

    # the scenario file's folder, for traffic files (set by load_scenario; not a field)
    _base_dir: Path | None = PrivateAttr(default=None)
    # flows of each traffic file, {(section, index): count}, for the memory estimate
    _traffic_flows: dict = PrivateAttr(default_factory=dict)

    @field_validator("policies")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"each policy may appear once, got {value}")
        return value

    @property
    def items(self) -> list[tuple[str, int, Any]]:
        """Every workload item then every job, as (section, index, config)."""
        return ([("workload", i, w) for i, w in enumerate(self.workload)] +
                [("jobs", i, j) for i, j in enumerate(self.jobs)])


# --------------------------------------------------------------------------- geometry checks

def two_tier_ports(fabric: FabricConfig) -> tuple[int, int]:
    """(down, up) ports of a T0 for the radix and oversubscription (down:up ratio)."""
    up = fabric.radix / (1.0 + fabric.oversubscription)
    return fabric.radix - round(up), round(up)


def t0_count(gpus: int, down: int, rail_width: int = 1) -> int:
    """T0s per plane: ceil(N / D) in GPU order; with rails of width w (one T0 per local rank
    of each group of D servers), w T0s per started group."""
    return -(-gpus // (down * rail_width)) * rail_width


def check_family_scenario(scenario: "Scenario") -> None:
    """What fat-tree and graph fabrics do not model yet, refused naming the field (they run
    ecmp and spray over stored paths; mrc, optimal, failures, sharing need the Clos's
    (plane, spine) structure)."""
    kind = scenario.fabric.kind
    bad = [p for p in scenario.policies if p not in ("ecmp", "spray")]
    if bad:
        raise ScenarioError("policies", f"{', '.join(bad)} need the multi-plane Clos's "
                            f"(plane, spine) paths; allowed on kind {kind}: ecmp, spray "
                            "(--policy ecmp --policy spray)")
    for field in ("failures", "reliability"):
        if getattr(scenario, field) is not None:
            raise ScenarioError(field, f"not modelled on kind {kind} yet; allowed: kind "
                                "multiplane-clos")
    if len(scenario.jobs) > 1:
        raise ScenarioError("jobs", f"jobs sharing the fabric are not modelled on kind {kind} "
                            "yet; allowed: one job, or workload items")


def check_other_fabric(fabric: FabricConfig) -> None:
    """What a fat-tree or graph fabric needs (the graph file itself is checked when read)."""
    if fabric.kind == "graph":
        if fabric.file is None:
            raise ScenarioError("fabric.file", "kind graph needs a file: GraphML or an edge "
                                "list, relative to the scenario")
        return
    if fabric.file is not None:
        raise ScenarioError("fabric.file", f"only kind graph reads a file (kind is "
                            f"{fabric.kind!r})")
    if fabric.tiers != 3:
        raise ScenarioError("fabric.tiers", "kind fat-tree is the three-tier fat tree; allowed: "
                            "3 (two tiers: kind multiplane-clos with planes: 1)")
    k = fabric.radix
    if k % 2 or k < 4:
        raise ScenarioError("fabric.radix", f"a fat tree needs an even radix >= 4 (got {k})")
    if fabric.oversubscription != 1.0:
        raise ScenarioError("fabric.oversubscription", "fat trees are built 1:1; allowed: 1")
    if fabric.paths % fabric.planes:
        raise ScenarioError("fabric.paths", f"{fabric.paths} paths cannot be split equally "
                            f"over {fabric.planes} planes; allowed: multiples of fabric.planes")
    reach = 2 * (k // 2) ** fabric.tiers
    if fabric.gpus > reach:
        raise ScenarioError("fabric.gpus", f"{fabric.gpus} GPUs exceed what {fabric.tiers} "
                            f"tiers of radix {k} reach ({reach:,}); allowed: 2..{reach}")


def check_fabric(fabric: FabricConfig) -> None:
    """Raise a ScenarioError for a fabric that cannot be built."""
    if fabric.kind != "multiplane-clos":
        return check_other_fabric(fabric)
    if fabric.tiers != 2 or fabric.file is not None:
        raise ScenarioError("fabric.tiers" if fabric.tiers != 2 else "fabric.file",
                            "the multi-plane Clos has tiers: 2 and no file; allowed: kind "
                            "fat-tree for tiers: 3, kind graph for a file")
    if fabric.radix % 2:
        raise ScenarioError("fabric.radix", f"must be even (got {fabric.radix})")
    up_exact = fabric.radix / (1.0 + fabric.oversubscription)
    if abs(up_exact - round(up_exact)) > 1e-9 or round(up_exact) < 1:
        raise ScenarioError(
            "fabric.oversubscription",
            f"{fabric.oversubscription:g} does not split radix {fabric.radix} into whole "
            f"down:up port counts; allowed: ratios d/u with d + u = {fabric.radix}, e.g. 1, 3",
        )
    down, up = two_tier_ports(fabric)
    reach = fabric.radix * down
    if fabric.gpus > reach:
        raise ScenarioError(
            "fabric.gpus",
            f"{fabric.gpus} GPUs exceed what two tiers of radix {fabric.radix} reach "
            f"({fabric.radix} T0s x {down} GPUs = {reach}); allowed: 2..{reach}",
        )
    t0s = t0_count(fabric.gpus, down, fabric.gpus_per_server if fabric.rail_optimised else 1)
    if fabric.rail_optimised and t0s > fabric.radix:
        raise ScenarioError(
            "fabric.rail_optimised",
            f"{fabric.gpus} GPUs in servers of {fabric.gpus_per_server} need {t0s} rail T0s per "
            f"plane, more than a spine's {fabric.radix} ports; allowed: a GPU count that fills "
            f"whole rail groups ({fabric.gpus_per_server} x {down} GPUs), or "
            "rail_optimised: false")
    links = 2 * fabric.planes * (fabric.gpus + t0s * up)
    if links > MAX_LINK_ID:
        raise ScenarioError(
            "fabric.gpus",
            f"{fabric.gpus} GPUs on {fabric.planes} planes make {links:,} directed links; "
            f"link ids are int32, allowed: up to {MAX_LINK_ID:,} links (fewer GPUs or planes)")


def check_policies(scenario: Scenario) -> None:
    """EVs are assigned equally per plane, so their count must divide evenly."""
    planes = scenario.fabric.planes
    for section in ("spray", "mrc"):
        evs = getattr(scenario, section).evs
        if evs % planes:
            raise ScenarioError(
                f"{section}.evs",
                f"{evs} EVs cannot be split equally over {planes} planes; allowed: multiples "
                f"of fabric.planes ({planes}, {2 * planes}, ..., "
                f"e.g. {planes * max(1, round(evs / planes))})")


def check_workload(scenario: Scenario) -> None:
    """What a schema cannot say about the workload items and jobs (ScenarioError on the
    first problem): GPUs exist and suffice, placements match their `gpus`, jobs fit on the
    fabric together, and each algorithm's constraints on the GPU count hold."""
    n = scenario.fabric.gpus
    if not scenario.items:
        raise ScenarioError("workload", "is missing or empty; a scenario needs at least 1 "
                            "item (or 'jobs': a list of the same items, sharing the fabric)")
    for section, i, item in scenario.items:
        field = f"{section}[{i}].gpus"
        if isinstance(item.gpus, int):
            if item.gpus > n:
                raise ScenarioError(field, f"{item.gpus} GPUs requested but the fabric has {n}")
        elif isinstance(item.gpus, list):
            if len(item.gpus) < 2:
                raise ScenarioError(field, "a job needs at least 2 GPUs")
            bad = [g for g in item.gpus if not 0 <= g < n]
            if bad:
                raise ScenarioError(field, f"GPU {bad[0]} does not exist; allowed: 0..{n - 1}")
            if len(set(item.gpus)) != len(item.gpus):
                raise ScenarioError(field, "lists a GPU more than once")
        explicit = isinstance(item.gpus, list)
        if item.placement == "explicit" and not explicit:
            raise ScenarioError(f"{section}[{i}].placement",
                                "'explicit' needs gpus: a list of GPU ids")
        if explicit and item.placement not in (None, "explicit"):
            raise ScenarioError(f"{section}[{i}].placement",
                                f"{item.placement!r} places a GPU count, but gpus is a list; "
                                "allowed with a list: explicit (or leave placement out)")
        size = job_size(item, n)
        if isinstance(item, PermutationConfig) and item.shift is not None:
            if item.shift % size == 0:
                raise ScenarioError(
                    f"{section}[{i}].shift",
                    f"{item.shift} maps every GPU onto itself in a {size}-GPU job; "
                    f"allowed: any integer not a multiple of {size}",
                )
        if isinstance(item, AllReduceConfig) and item.algorithm == "halving-doubling":
            if size & (size - 1):
                low = 1 << (size.bit_length() - 1)
                raise ScenarioError(
                    f"{section}[{i}].algorithm",
                    f"halving-doubling needs a power-of-two GPU count (got {size}); allowed: "
                    f"gpus {low} or {2 * low}, or algorithm ring or tree")
        if isinstance(item, _RankedBase) and item.hierarchical and item.algorithm != "ring":
            raise ScenarioError(f"{section}[{i}].hierarchical",
                                f"hierarchical runs rings; allowed with algorithm ring only "
                                f"(got {item.algorithm!r})")
        if isinstance(item, SendRecvConfig) and size % 2:
            raise ScenarioError(field, f"send-recv pairs the ranks, so the GPU count must be "
                                f"even (got {size})")
    jobs = scenario.jobs
    if jobs:
        total = sum(job_size(job, n) for job in jobs)
        if total > n:
            raise ScenarioError("jobs", f"the jobs need {total} GPUs together but the fabric "
                                f"has {n}; jobs run at once on disjoint GPUs ('all' takes "
                                "every GPU)")
        owner: dict[int, int] = {}
        for i, job in enumerate(jobs):
            for gpu in job.gpus if isinstance(job.gpus, list) else ():
                if gpu in owner:
                    raise ScenarioError(f"jobs[{i}].gpus", f"GPU {gpu} is already "
                                        f"jobs[{owner[gpu]}]'s; jobs run on disjoint GPUs")
                owner[gpu] = i


def job_size(item: Any, fabric_gpus: int) -> int:
    """The GPU count of a workload item or job."""
    if item.gpus == "all":
        return fabric_gpus
    if isinstance(item.gpus, int):
        return item.gpus
    return len(item.gpus)


# --------------------------------------------------------------------------- error messages

def _strip_annotated(annotation: Any) -> Any:
    """The model type behind Annotated[...] and Optional[...] (X | None)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _strip_annotated(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_annotated(args[0])
    return annotation


def _allowed_fields(loc: tuple) -> list[str] | None:
    """Field names allowed at `loc` (the parent of an unknown key), walking the models."""
    node: Any = Scenario
    for part in loc:
        node = _strip_annotated(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            if part not in node.model_fields:
                return None
            node = node.model_fields[part].annotation
            continue
        origin = typing.get_origin(node)
        if origin is list and isinstance(part, int):
            node = typing.get_args(node)[0]
            continue
        if origin in (Union, types.UnionType) and isinstance(part, str):
            variants = [
                v for v in typing.get_args(node)
                if isinstance(v, type) and issubclass(v, BaseModel)
                and "collective" in v.model_fields
                and part in typing.get_args(v.model_fields["collective"].annotation)
            ]
            if not variants:
                return None
            node = variants[0]
            continue
        return None
    node = _strip_annotated(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return None


def _field_path(loc: tuple) -> str:
    """Dotted path for a pydantic loc, without the union tag (``workload[0].permutation``)."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif loc[0] in ("workload", "jobs") and i == 2:
            continue  # the discriminated-union tag: the user never wrote it
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _short(value: Any) -> str:
    return short_repr(value, 60)


# A scenario is a few dozen values; YAML aliases can make a small file expand to billions.
MAX_SCENARIO_VALUES = 100_000
MAX_MERGED_KEYS = 10_000
MAX_SCENARIO_DEPTH = 32


def _check_values(data: Any) -> None:
    """Refuse, before validation walks it, data that expands (through shared YAML aliases) to
    more than MAX_SCENARIO_VALUES values, and any string or key holding a character that
    cannot be printed on one line (a control character, a line separator, a lone surrogate).
    Iterative and bounded by the count, so an alias bomb costs at most that many steps."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    seen = 0
    while stack:
        value, path, depth = stack.pop()
        seen += 1
        if depth > MAX_SCENARIO_DEPTH:   # also keeps every path string short
            raise ScenarioError(path[:80] + "...", f"nested more than {MAX_SCENARIO_DEPTH} "
                                "levels deep (a YAML alias inside itself?); a scenario nests "
                                "a few")
        if seen > MAX_SCENARIO_VALUES:
            raise ScenarioError("", f"expands to more than {MAX_SCENARIO_VALUES:,} values "
                                "(YAML aliases repeating a large value?); a scenario is a few "
                                "dozen")
        if isinstance(value, str):
            bad = next((c for c in value if not (c.isprintable() or c in " \t")), None)
            if bad is not None:
                raise ScenarioError(path, f"contains the character U+{ord(bad):04X}; allowed: "
                                    "printable text on one line")
        elif isinstance(value, dict):
            for key, item in value.items():
                name = one_line(str(key))
                child = f"{path}.{name}" if path else name
                if isinstance(key, str):
                    stack.append((key, child, depth + 1))
                stack.append((item, child, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value))


def _format_validation_error(err: pydantic.ValidationError) -> ScenarioError:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    path = _field_path(loc)
    kind = first["type"]
    msg = first["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if kind == "extra_forbidden":
        allowed = _allowed_fields(loc[:-1])
        message = f"unknown field {loc[-1]!r}"
        if allowed:
            message += f"; allowed: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required field is missing"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        path += ".collective"
        allowed = ", ".join(repr(c) for c in COLLECTIVES)
        if kind == "union_tag_invalid":
            message = f"unknown collective {_short(first['ctx']['tag'])}; allowed: {allowed}"
        else:
            message = f"required field is missing; allowed: {allowed}"
    else:
        message = msg[0].lower() + msg[1:] if msg else kind
        if "input" in first and "got" not in message:
            message += f" (got {_short(first['input'])})"
    more = len(err.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return ScenarioError(path, message)


# --------------------------------------------------------------------------- loading

def parse_scenario(data: Any, *, default_name: str = "scenario") -> Scenario:
    """Validate already-parsed YAML data into a Scenario (raises ScenarioError)."""
    if data is None:
        raise ScenarioError("", "the file is empty; a scenario needs at least a 'workload'")
    if not isinstance(data, dict):
        raise ScenarioError(
            "", f"expected a mapping of fields at the top level, got {type(data).__name__}"
        )
    _check_values(data)
    data = dict(data)
    data.setdefault("name", default_name)
    try:
        scenario = Scenario.model_validate(data)
    except pydantic.ValidationError as err:
        raise _format_validation_error(err) from None
    check_fabric(scenario.fabric)
    check_workload(scenario)
    check_policies(scenario)
    if scenario.fabric.kind != "multiplane-clos":
        check_family_scenario(scenario)
    if scenario.failures is not None:
        from fabricjax.failures import check_failures  # imports the fabric (and this module)

        check_failures(scenario)
    return scenario


class _SafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that (1) reports a bad scalar (`2024-13-45`, `!!int abc`) as a
    ConstructorError at its line, not a bare ValueError/KeyError/AttributeError; (2) reads
    YAML 1.2 floats such as `1e-4` as numbers (YAML 1.1 wants `1.0e-4`); (3) refuses a key given
    twice in one mapping instead of silently keeping the last."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):  # else the base class raises its own error
            seen = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {_short(key_node.value)} appears twice in one mapping",
                        key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)

    def flatten_mapping(self, node):
        # PyYAML copies every merged (`<<`) key into the mapping, recursively: nested merges
        # through aliases grow exponentially before any validation could refuse them
        super().flatten_mapping(node)
        if len(node.value) > MAX_MERGED_KEYS:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) expand one mapping to more than "
                f"{MAX_MERGED_KEYS:,} keys", node.start_mark)

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as err:  # PyYAML's scalar constructors raise bare Python errors
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {_short(node.value)} as {node.tag}: {err}",
                node.start_mark) from None


_SafeLoader.yaml_implicit_resolvers = {
    first: list(resolvers) for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_scenario(path: str | Path) -> Scenario:
    """Read, parse and validate a scenario file; every failure is a ScenarioError."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError("", "no such file", source) from None
    except IsADirectoryError:
        raise ScenarioError("", "is a directory, expected a YAML scenario file", source) from None
    except OSError as err:
        raise ScenarioError("", f"cannot read: {err.strerror}", source) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScenarioError("", "is not UTF-8 text; expected a YAML scenario file",
                            source) from None
    try:
        data = yaml.load(text, Loader=_SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "unparseable"
        raise ScenarioError("", f"is not valid YAML ({problem}{where})", source) from None
    except RecursionError:
        raise ScenarioError("", "is nested too deeply to be a scenario", source) from None
    try:
        scenario = parse_scenario(data, default_name=path.stem)
    except ScenarioError as err:
        raise err.with_source(source) from None
    scenario._base_dir = path.parent
    if scenario.fabric.kind == "graph":   # read (and checked) now, before anything runs
        from fabricjax.graph_analysis import build_graph

        try:
            build_graph(scenario)
        except ScenarioError as err:
            raise err.with_source(source) from None
    if any(isinstance(item, TrafficConfig) for _, _, item in scenario.items):
        from fabricjax.workload import check_traffic_files

        try:
            check_traffic_files(scenario)
        except ScenarioError as err:
            raise err.with_source(source) from None
    return scenario


def with_overrides(scenario: Scenario, **fields: Any) -> Scenario:
    """A copy with top-level fields replaced (command-line overrides win over the file)."""
    data = scenario.model_dump()
    data.update({k: v for k, v in fields.items() if v is not None})
    out = parse_scenario(data)
    out._base_dir = scenario._base_dir
    out._traffic_flows = dict(scenario._traffic_flows)
    return out

