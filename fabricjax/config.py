"""The scenario schema: pydantic models, their defaults and bounds, and nothing that reads a
file or builds a fabric (that is `fabricjax.scenario`, one layer up).

Every field has a default a user would expect, so ``fabric: {gpus: 1024}`` plus one workload
line is a complete scenario. Models are strict (YAML's `yes` is not the integer 1), frozen and
forbid unknown fields; the loader turns a validation error into one line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, field_validator,
                      model_validator)

from fabricjax.core.errors import short_repr
from fabricjax.core.registry import BUILTIN as POLICIES
from fabricjax.core.registry import known_names
from fabricjax.core.units import parse_rate_gbps, parse_size

# Bounds that keep every derived number finite in float32 (times, rates, loads).
MIN_RATE_GBPS, MAX_RATE_GBPS = 1e-3, 1e5
MAX_SIZE_BYTES = 2.0**60
MAX_LINK_ID = 2**31 - 2   # link ids and the sentinel (one past the last link) are int32
COLLECTIVES = ("permutation", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "incast", "send-recv", "traffic", "training", "chakra")
PLACEMENTS = ("contiguous", "random", "strided", "explicit")


def _short(value: Any) -> str:
    return short_repr(value, 60)


def _known_policy(name: str) -> str:
    if name not in known_names():
        allowed = ", ".join(repr(n) for n in known_names())
        raise ValueError(f"unknown policy (got {_short(name)}); allowed: {allowed}")
    return name


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

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _ratio(cls, value: Any) -> Any:
        """`3`, `3.0` or the way it is said, `"3:1"` (down:up ports of a T0)."""
        if isinstance(value, str):
            parts = value.replace(" ", "").split(":")
            try:
                down, up = (float(p) for p in parts)
            except ValueError:
                raise ValueError(f"expected a number or a ratio such as '3:1' (down:up ports), "
                                 f"got {_short(value)}") from None
            if not (down > 0 and up > 0):
                raise ValueError(f"a ratio of positive numbers such as '3:1', got "
                                 f"{_short(value)}")
            return down / up
        return value

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


class RankedConfig(_SizedBase):
    """`order: random` shuffles the ranks (a ring or tree over a scheduler's scattered GPUs);
    `hierarchical: true` runs the collective inside servers over the scale-up domain and
    between servers over the fabric, one ring per local rank (rail), as NCCL does."""

    order: Literal["linear", "random"] = "linear"
    hierarchical: bool = False


class AllReduceConfig(RankedConfig):
    """NCCL-style all-reduce of `size` bytes. `ring`: 2(N-1) steps, each GPU sends size/N to
    its ring neighbour; `halving-doubling`: recursive halving reduce-scatter then recursive
    doubling all-gather, 2 log2 N steps (N a power of two); `tree`: NCCL's double binary tree,
    pipelined (every tree edge busy at once, each tree carrying half the data)."""

    collective: Literal["all-reduce"]
    algorithm: Literal["ring", "halving-doubling", "tree"] = "ring"


class AllGatherConfig(RankedConfig):
    """Ring all-gather: `size` is the gathered buffer (nccl-tests), each GPU contributes
    size/N; N-1 steps."""

    collective: Literal["all-gather"]
    algorithm: Literal["ring"] = "ring"


class ReduceScatterConfig(RankedConfig):
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


class ModelConfig(_Strict):
    """The model of a `training` item: a transformer of `layers` x `hidden` (attention 4h^2
    and an MLP of 2 h ffn_hidden parameters per layer, 3 h ffn_hidden when `gated_mlp`;
    `parameters`, when given, rescales that count to the total); `sequence` tokens per sample,
    `micro_batch` samples per micro-batch, `micro_batches` micro-batches per step (gradient
    accumulation); bytes per element of activations, gradients and parameters. `experts` > 0
    makes every `moe_every`-th layer a mixture of experts routing each token to `top_k` of
    them. `recompute`: full activation recomputation (the backward pass repeats the forward's
    tensor- and expert-parallel communication)."""

    layers: int = Field(ge=1, le=1_000_000)
    hidden: int = Field(ge=1, le=10**7)
    ffn_hidden: int | None = Field(None, ge=1, le=10**8)
    gated_mlp: bool = False
    parameters: float | None = Field(None, gt=0.0, le=1e16)
    sequence: int = Field(2048, ge=1, le=10**8)
    micro_batch: int = Field(1, ge=1, le=10**6)
    micro_batches: int = Field(1, ge=1, le=10**6)
    activation_bytes: float = Field(2.0, gt=0.0, le=64.0)
    gradient_bytes: float = Field(2.0, gt=0.0, le=64.0)
    parameter_bytes: float = Field(2.0, gt=0.0, le=64.0)
    experts: int = Field(0, ge=0, le=1_000_000)
    top_k: int = Field(2, ge=1, le=1_000_000)
    moe_every: int = Field(1, ge=1, le=1_000_000)
    recompute: bool = False


class ParallelConfig(_Strict):
    """How a `training` item is split: `tp` (tensor), `pp` (pipeline) and `dp` (data; default:
    the item's GPUs / (tp x pp)) ranks; `ep` expert-parallel ranks carved out of the
    data-parallel ones (as Megatron-LM does); `zero`: 0 all-reduces gradients, 1 and 2
    shard the optimizer (reduce-scatter gradients, all-gather parameters; 2 reduce-scatters
    after every micro-batch), 3 shards parameters too (FSDP: all-gather them in the forward
    and the backward of every micro-batch). `order`: how ranks map onto the item's GPUs,
    fastest-varying first (Megatron-LM's default is tp-dp-pp: TP inside a server, then DP,
    then PP)."""

    tp: int = Field(1, ge=1, le=1_000_000)
    pp: int = Field(1, ge=1, le=1_000_000)
    dp: int | None = Field(None, ge=1, le=1_000_000)
    ep: int = Field(1, ge=1, le=1_000_000)
    zero: Literal[0, 1, 2, 3] = 0
    order: Literal["tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp",
                   "pp-dp-tp"] = "tp-dp-pp"


class TrainingConfig(_WorkloadBase):
    """One training step of a model split over its GPUs (README, "Training steps"): every
    process group's collectives at once, phase by phase: tensor-parallel all-reduces,
    pipeline sends, expert all-to-alls, data-parallel gradient reduction.
    `microbatch_compute_s`: the forward plus backward compute of one micro-batch on one
    pipeline stage (seconds), for the exposed communication and the step time."""

    collective: Literal["training"]
    model: ModelConfig
    parallel: ParallelConfig = ParallelConfig()
    microbatch_compute_s: float | None = Field(None, ge=0.0, le=1e6)


class ChakraConfig(_WorkloadBase):
    """A step from Chakra execution traces (MLCommons; what ASTRA-sim reads): `folder` holds
    one `<prefix>.<rank>.et` file per rank, relative to the scenario's folder. Process groups
    come from `comm_groups` (ASTRA-sim's communicator-group JSON, {pg_name: [ranks]}, relative
    to the trace folder; default: its comm_group.json when present) or else from the ranks
    that use them. Trace rank r runs on the item's r-th GPU (ascending id)."""

    collective: Literal["chakra"]
    folder: str = Field(min_length=1, max_length=4096)
    comm_groups: str | None = Field(None, min_length=1, max_length=4096)


WorkloadConfig = Annotated[
    Union[PermutationConfig, AllReduceConfig, AllGatherConfig, ReduceScatterConfig,
          AllToAllConfig, IncastConfig, SendRecvConfig, TrafficConfig, TrainingConfig,
          ChakraConfig],
    Field(discriminator="collective"),
]


class EcmpConfig(_Strict):
    """Per-flow ECMP: `qps` queue pairs per plane (per NIC port), each hashed onto one spine."""

    qps: int = Field(1, ge=1, le=1024)


# Where a spraying policy's entropy values land. routed: the sender names each EV's path
# (MRC's SRv6 source routes), distinct and even across a plane's spines; hashed: every switch
# hashes the EV onto an uplink (UEC fabrics, htsim), independently and with replacement.
Placement = Literal["routed", "hashed"]


class SprayConfig(_Strict):
    """Oblivious spraying over `evs` entropy values (path slots), equal per plane, placed
    `routed` (distinct, even) or `hashed` (each EV onto a random path of its plane)."""

    evs: int = Field(128, ge=1, le=4096)
    placement: Placement = "routed"


class MrcConfig(_Strict):
    """MRC adaptive spraying: `evs` entropy values per flow (equal per plane, the same initial
    set as `spray` when the counts match); an EV whose path's worst controllable utilisation
    exceeds the marking level, `threshold` x max(1, the fabric links' mean utilisation), is
    marked and moves to a random spine of its plane with probability
    damping * (u - level) / u. Stops when nothing is marked, when the fabric overload has not
    improved by `tol` (relative) for `patience` iterations, or at `max_iters`. A failure set
    starts from the no-failure equilibrium (a warm start) and stops after `failure_patience`
    iterations without improvement (5: measured within 1.3% of `patience` 20's mean P100 over
    failure sets, 3.5x faster; README "Failures"). `placement` places the initial EVs as
    `spray.placement` does; a swap always draws a uniformly random path of the plane."""

    evs: int = Field(128, ge=1, le=4096)
    placement: Placement = "routed"
    threshold: float = Field(1.0, gt=0.0, le=100.0)
    damping: float = Field(0.3, gt=0.0, le=1.0)
    max_iters: int = Field(500, ge=1, le=100_000)
    tol: float = Field(0.01, ge=0.0, le=1.0)
    patience: int = Field(20, ge=1, le=100_000)
    failure_patience: int = Field(5, ge=1, le=100_000)


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
    flows and 2^18 (flow, path) pairs, where it costs seconds, not minutes, and given up (status
    `skipped`, no figures) when from 32 events on it has finished a smaller share of its flows,
    and of its time span, than it has spent of `max_events`; `true` always runs it, to the cap.
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
    model: Literal["static", "dynamic"] = Field(
        "static", description="static: the settled max-min rates (and the progressive "
        "simulation); dynamic: a fluid model in time steps of a fraction of the base RTT, "
        "with queues, ECN, trimming, NSCC windows and each policy's reaction at ACK time "
        "(engine.dynamic), for the flow completion times")


class TransportConfig(_Strict):
    """What a packet transport adds to a flow's bytes at its max-min rate (README "Transport").

    Every packet carries `mtu_bytes` of payload and `header_bytes` of headers, so a flow puts
    size x (1 + header/mtu) bytes on the wire (goodput below line rate). Its last byte also
    pays `link_latency_us` per link of its path (propagation and switching) and the store-and-
    forward of one packet at every switch (`fabric.port_gbps`): a phase ends when the last
    byte of its slowest flow arrives. A flow completion time is counted at the sender when its
    last byte is acknowledged, as RDMA and UEC transports count it: with `ack_return` the
    links' latency once more. `enabled: false` drops all of it (the bytes-over-rate fluid
    model). Defaults: a 4 KiB RoCE/UEC MTU, 64 header bytes (Ethernet, IP, UDP and the
    transport header), 1 us per link."""

    enabled: bool = True
    mtu_bytes: int = Field(4096, ge=256, le=65536)
    header_bytes: int = Field(64, ge=0, le=4096)
    link_latency_us: float = Field(1.0, ge=0.0, le=1e6)
    ack_return: bool = True


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
    policies: list[Annotated[str, AfterValidator(_known_policy)]] = Field(
        default=list(POLICIES), min_length=1)
    ecmp: EcmpConfig = EcmpConfig()
    spray: SprayConfig = SprayConfig()
    mrc: MrcConfig = MrcConfig()
    optimal: OptimalConfig = OptimalConfig()
    solver: SolverConfig = SolverConfig()
    transport: TransportConfig = TransportConfig()
    failures: FailuresConfig | None = None
    reliability: ReliabilityConfig | None = None
    bom: BomConfig = BomConfig()

    # Where the scenario came from (not fields: they never reach a report's config). The
    # folder of its file, against which traffic and graph files resolve, and the flows of
    # each traffic file, {(section, index): count}, counted at load time for the memory
    # estimate. Set once by `located`.
    _base_dir: Path | None = PrivateAttr(default=None)
    _traffic_flows: dict = PrivateAttr(default_factory=dict)

    @field_validator("policies")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"each policy may appear once, got {value}")
        return value

    @property
    def base_dir(self) -> Path | None:
        """The folder of the scenario file (None for a scenario built in memory)."""
        return self._base_dir

    @property
    def traffic_flows(self) -> dict:
        """{(section, index): flows} of every traffic-file item, as counted at load time."""
        return dict(self._traffic_flows)

    def located(self, base_dir: Path | None, traffic_flows: dict | None = None) -> "Scenario":
        """This scenario, told where its file lies and how many flows its traffic files hold
        (the loader and sweeps call this; a copy made by `model_copy` keeps them). Returns
        self, so ``parse_scenario(data).located(folder)`` reads naturally."""
        self._base_dir = base_dir
        self._traffic_flows = dict(traffic_flows or {})
        return self

    @property
    def items(self) -> list[tuple[str, int, Any]]:
        """Every workload item then every job, as (section, index, config)."""
        return ([("workload", i, w) for i, w in enumerate(self.workload)] +
                [("jobs", i, j) for i, j in enumerate(self.jobs)])


# --------------------------------------------------------------------------- derived counts

def two_tier_ports(fabric: FabricConfig) -> tuple[int, int]:
    """(down, up) ports of a T0 for the radix and oversubscription (down:up ratio)."""
    up = fabric.radix / (1.0 + fabric.oversubscription)
    return fabric.radix - round(up), round(up)


def t0_count(gpus: int, down: int, rail_width: int = 1) -> int:
    """T0s per plane: ceil(N / D) in GPU order; with rails of width w (one T0 per local rank
    of each group of D servers), w T0s per started group."""
    return -(-gpus // (down * rail_width)) * rail_width


def job_size(item: Any, fabric_gpus: int) -> int:
    """The GPU count of a workload item or job."""
    if item.gpus == "all":
        return fabric_gpus
    if isinstance(item.gpus, int):
        return item.gpus
    return len(item.gpus)

