"""The scenario schema: pydantic models, their defaults and bounds, and nothing that reads a
file or builds a fabric (that is `fabricjax.scenario`, one layer up).

Every field has a default a user would expect, so ``fabric: {gpus: 1024}`` plus one workload
line is a complete scenario, and a `description` that the JSON Schema (`scenario_schema`), the
docs and the error messages share. Models are strict (YAML's `yes` is not the integer 1),
frozen and forbid unknown fields; the loader turns a validation error into one line naming the
field. A policy's section (`mrc:`, ...) is not declared here: each policy registers its own
settings model (`core.registry`), and the loader checks the section against it.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, PrivateAttr,
                      Tag, WithJsonSchema, create_model, field_validator, model_serializer,
                      model_validator)

from fabricjax.core.errors import short_repr
from fabricjax.core.registry import known_names, sections
from fabricjax.core.roles import STATIC, TRACED
from fabricjax.core.units import parse_rate_gbps, parse_size

# Bounds that keep every derived number finite in float32 (times, rates, loads).
MIN_RATE_GBPS, MAX_RATE_GBPS = 1e-3, 1e5
MAX_SIZE_BYTES = 2.0**60
MAX_LINK_ID = 2**31 - 2   # link ids and the sentinel (one past the last link) are int32
# candidate paths per GPU pair on a stored-path fabric: a k = 64 fat tree's (k/2)^2 = 1024
# equal-cost set between pods, at most
MAX_PATHS = 1024
COLLECTIVES = ("permutation", "all-reduce", "all-gather", "reduce-scatter", "all-to-all",
               "incast", "send-recv", "traffic", "training", "chakra")
PLACEMENTS = ("contiguous", "random", "strided", "explicit")

# A number, or the way it is said ('100G', '256MiB', '3:1'), which a validator reads: the JSON
# Schema an editor checks the file with accepts both.
NumberOrText = Annotated[float, WithJsonSchema({"anyOf": [{"type": "number"},
                                                          {"type": "string"}]})]


def _short(value: Any) -> str:
    return short_repr(value, 60)


def _known_policy(name: str) -> str:
    # before any policy registered (a process that solves nothing, such as `fabricjax topo`)
    # the names are checked later, with the sections (`scenario.check_sections`)
    if known_names() and name not in known_names():
        allowed = ", ".join(repr(n) for n in known_names())
        raise ValueError(f"unknown policy (got {_short(name)}); allowed: {allowed}")
    return name


def _registered_policies() -> list[str]:
    return list(known_names())


def down_up_ratio(value: Any) -> Any:
    """`3`, `3.0` or the way it is said, `"3:1"` (down:up ports of a T0), as a number."""
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


def port_rate_gbps(value: Any) -> float:
    """A port's or NIC's rate in Gbit/s from `100`, `'100G'` or `'1.6T'`, in range."""
    rate = parse_rate_gbps(value)
    if not MIN_RATE_GBPS <= rate <= MAX_RATE_GBPS:
        raise ValueError(f"allowed: {MIN_RATE_GBPS:g} .. {MAX_RATE_GBPS:g} Gbit/s "
                         f"(got {rate:g})")
    return rate


class Strict(BaseModel):
    # strict: YAML's `yes`/`true` must not pass as the integer 1 (`planes: yes`).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class FabricKind(str, enum.Enum):
    """The one fabric vocabulary: what the scenario's `fabric.kind` says and what a built
    fabric reports as its `kind`. A two-tier Clos routes arithmetically (its paths follow from
    the geometry); a fat tree and a graph file carry stored candidate paths, a fat tree's all
    equal-cost."""

    CLOS = "multiplane-clos"
    FAT_TREE = "fat-tree"
    GRAPH = "graph"

    @property
    def arithmetic_routes(self) -> bool:
        """Paths computed from the geometry (no per-flow path arrays): the Clos."""
        return self is FabricKind.CLOS

    @property
    def equal_cost_only(self) -> bool:
        """Every candidate path is a shortest one (a fat tree's): no detours to choose."""
        return self is FabricKind.FAT_TREE

    @property
    def planes_by_construction(self) -> bool:
        """Planes are built in (Clos, fat tree), not read off a file's graph."""
        return self is not FabricKind.GRAPH


class _FabricBase(Strict):
    """What every fabric kind has: the GPUs, their ports' rate, servers and scale-up (`kind`:
    each kind's own model names its one value)."""

    kind: str = Field(description="The fabric's kind.")
    gpus: int = Field(1024, ge=2, description="GPUs (NICs) on the fabric.")
    port_gbps: NumberOrText = Field(100.0, description="Rate of one port and link, in Gbit/s; also "
                             "written with a unit, e.g. 100G or 400 Gbit/s.")
    gpus_per_server: int = Field(8, ge=1, le=1024, description=(
        "GPUs per server: GPUs g*k .. g*k+g-1 share server k."))
    scaleup_gbps: float = Field(0.0, ge=0.0, le=MAX_RATE_GBPS, description=(
        "Scale-up bandwidth per GPU and direction in Gbit/s (e.g. 3600 for NVLink 4's 450 "
        "GB/s): traffic between GPUs of one server rides it and never touches the fabric; 0: "
        "no scale-up domain."))

    @field_validator("port_gbps", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> float:
        return port_rate_gbps(value)


class _PlanesOfSwitches(_FabricBase):
    """A fabric built here from planes of identical switches (the Clos and the fat tree)."""

    planes: int = Field(8, ge=1, le=64, description="Planes: each GPU has one port per plane "
                        "(its NIC split into `planes` ports of `port_gbps`).")
    radix: int = Field(64, ge=2, le=4096, description="Ports per switch.")


_PATHS_DESCRIPTION = (
    "Candidate paths per GPU pair, an even sample of its equal-cost set where that is larger "
    "(a graph file's pairs with fewer add the next shortest). Default: the fabric's largest "
    "equal-cost set, up to 1024, so every pair uses every shortest path it has; a smaller "
    "value caps pairs below their set and the report warns with the figure.")


class ClosConfig(_PlanesOfSwitches):
    """kind multiplane-clos (the default): a two-tier multi-plane Clos. Every GPU has one
    port per plane to a T0 of that plane, every T0 has one link to every T1 (spine) of its
    plane; paths follow from the geometry."""

    kind: Literal["multiplane-clos"] = Field("multiplane-clos", description=(
        "The fabric's kind: multiplane-clos (this one), fat-tree, or graph (a file)."))
    tiers: Literal[2] = Field(2, description="Switch tiers: 2 (three: kind fat-tree).")
    oversubscription: NumberOrText = Field(1.0, ge=1.0, description="Down:up ports of a T0, as a "
                                    "number (3) or a ratio ('3:1'); 1 is full bisection.")
    rail_optimised: bool = Field(False, description=(
        "Rail-optimised T0s: GPU i of every server is cabled to rail switch i (a T0 serves "
        "one local rank of D servers) instead of a T0 serving D consecutive GPUs."))

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _ratio(cls, value: Any) -> Any:
        return down_up_ratio(value)


class FatTreeConfig(_PlanesOfSwitches):
    """kind fat-tree: a three-tier fat tree per plane, built 1:1 from switches of `radix`
    ports, routed over stored equal-cost paths."""

    kind: Literal["fat-tree"] = Field(description="The fabric's kind: fat-tree.")
    tiers: Literal[3] = Field(3, description="Switch tiers: 3 (two: kind multiplane-clos).")
    paths: int | None = Field(None, ge=1, le=MAX_PATHS, description=_PATHS_DESCRIPTION)


class GraphConfig(_FabricBase):
    """kind graph: the network in a file (GraphML, or an edge list), its hosts the GPUs and its
    links' capacities its own; routed over its stored shortest paths. `port_gbps` is the port
    rate a packet's serialisation and the transport's timing assume."""

    kind: Literal["graph"] = Field(description="The fabric's kind: graph.")
    file: str = Field(min_length=1, max_length=4096, description=(
        "A networkx-readable file (GraphML, or an edge list 'u v capacity_gbps'), relative to "
        "the scenario's folder."))
    format: Literal["auto", "graphml", "edgelist"] = Field(
        "auto", description="The format of `file` (auto: by its name).")
    paths: int | None = Field(None, ge=1, le=MAX_PATHS, description=_PATHS_DESCRIPTION)


FABRIC_KINDS = {FabricKind.CLOS.value: ClosConfig, FabricKind.FAT_TREE.value: FatTreeConfig,
                FabricKind.GRAPH.value: GraphConfig}


def _fabric_tag(value: Any) -> Any:
    # a fabric without `kind` is the Clos; a tag that is not text cannot name a kind, and
    # pydantic reports it as an unknown one
    if isinstance(value, dict):
        kind = value.get("kind", FabricKind.CLOS.value)
    elif isinstance(value, _FabricBase):
        kind = value.kind
    else:
        return None     # not a mapping: pydantic says the tag is missing, the loader why
    return kind.value if isinstance(kind, FabricKind) else kind if isinstance(kind, str) else \
        short_repr(kind, 60)


# The scenario's `fabric`: one model per kind, told apart by `kind` (the Clos when omitted),
# so each kind takes only the fields it uses
FabricConfig = Annotated[
    Union[tuple(Annotated[model, Tag(kind)] for kind, model in FABRIC_KINDS.items())],
    Discriminator(_fabric_tag),
]


class _WorkloadBase(Strict):
    """What every workload item and job has: a name, its GPUs and their placement.

    `gpus`: 'all', a count, or an explicit list of GPU ids. `placement` picks a count's GPUs:
    contiguous (the lowest free ids: whole servers and T0s), random (seeded), strided (spread
    evenly over the fabric), explicit (the list). A job's ranks follow ascending GPU id."""

    name: str | None = Field(None, description="The item's name in reports (default: its "
                             "collective and index).")
    gpus: Literal["all"] | int | list[int] = Field(
        "all", description="'all', a GPU count (>= 2), or an explicit list of GPU ids.")
    placement: Literal["contiguous", "random", "strided", "explicit"] | None = Field(
        None, description="How a count's GPUs are picked: contiguous (the lowest free ids), "
        "random (seeded), strided (spread evenly), explicit (the list in `gpus`).")

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
    size: NumberOrText = Field(2**30, description=(
        "Bytes, as a number or with a unit (256MiB, 1GB)."))

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

    collective: Literal["permutation"] = Field(description="The kind of item: permutation.")
    shift: int | None = Field(None, description="Send GPU i to GPU i+shift (mod N) in job "
                              "order; default: a random derangement (one cycle), seeded.")


class RankedConfig(_SizedBase):
    """`order: random` shuffles the ranks (a ring or tree over a scheduler's scattered GPUs);
    `hierarchical: true` runs the collective inside servers over the scale-up domain and
    between servers over the fabric, one ring per local rank (rail), as NCCL does."""

    order: Literal["linear", "random"] = Field(
        "linear", description="Rank order: linear (ascending GPU id) or random (seeded).")
    hierarchical: bool = Field(False, description=(
        "Run the collective inside servers over the scale-up domain and between servers over "
        "the fabric, one ring per local rank (rail)."))


class AllReduceConfig(RankedConfig):
    """NCCL-style all-reduce of `size` bytes. `ring`: 2(N-1) steps, each GPU sends size/N to
    its ring neighbour; `halving-doubling`: recursive halving reduce-scatter then recursive
    doubling all-gather, 2 log2 N steps (N a power of two); `tree`: NCCL's double binary tree,
    pipelined (every tree edge busy at once, each tree carrying half the data)."""

    collective: Literal["all-reduce"] = Field(description="The kind of item: all-reduce.")
    algorithm: Literal["ring", "halving-doubling", "tree"] = Field(
        "ring", description="ring, halving-doubling (a power-of-two GPU count) or tree.")


class AllGatherConfig(RankedConfig):
    """Ring all-gather: `size` is the gathered buffer (nccl-tests), each GPU contributes
    size/N; N-1 steps."""

    collective: Literal["all-gather"] = Field(description="The kind of item: all-gather.")
    algorithm: Literal["ring"] = Field("ring", description="ring (the only one).")


class ReduceScatterConfig(RankedConfig):
    """Ring reduce-scatter: `size` is each GPU's input buffer (nccl-tests); N-1 steps of
    size/N."""

    collective: Literal["reduce-scatter"] = Field(description="The kind of item: reduce-scatter.")
    algorithm: Literal["ring"] = Field("ring", description="ring (the only one).")


class AllToAllConfig(_SizedBase):
    """Every GPU sends `size` bytes in all, spread over the job's GPUs (nccl-tests alltoall:
    size/N to each). `skew` > 0 models mixture-of-experts routing: destination popularity
    falls as rank^-skew (Zipf) over a seeded random ranking of the job's GPUs."""

    collective: Literal["all-to-all"] = Field(description="The kind of item: all-to-all.")
    skew: float = Field(0.0, ge=0.0, le=10.0, description=(
        "Zipf exponent of destination popularity (mixture-of-experts routing); 0: uniform."))


class IncastConfig(_SizedBase):
    """n-to-1: every GPU of the job but the first (rank 0) sends `size` bytes to rank 0."""

    collective: Literal["incast"] = Field(description="The kind of item: incast.")


class SendRecvConfig(_SizedBase):
    """Pairs (rank 2i, rank 2i+1) exchange `size` bytes, in both directions (`both`, as a
    pipeline-parallel boundary does with activations and gradients) or 2i -> 2i+1 only."""

    collective: Literal["send-recv"] = Field(description="The kind of item: send-recv.")
    direction: Literal["both", "forward"] = Field(
        "both", description="both: pairs exchange in both directions; forward: 2i -> 2i+1.")


class TrafficConfig(_WorkloadBase):
    """A traffic matrix from a file, relative to the scenario's folder: CSV (src, dst, bytes
    [, start seconds]), .npz (src, dst, size [, start]) or htsim's connection matrix. Ids in
    the file are the job's ranks (with gpus: all, the fabric's GPU ids)."""

    collective: Literal["traffic"] = Field(description="The kind of item: traffic.")
    file: str = Field(min_length=1, max_length=4096, description=(
        "The traffic matrix, relative to the scenario's folder."))
    format: Literal["auto", "csv", "npz", "htsim"] = Field(
        "auto", description="The format of `file` (auto: by its name).")


class ModelConfig(Strict):
    """The model of a `training` item: a transformer of `layers` x `hidden` (attention 4h^2
    and an MLP of 2 h ffn_hidden parameters per layer, 3 h ffn_hidden when `gated_mlp`;
    `parameters`, when given, rescales that count to the total); `sequence` tokens per sample,
    `micro_batch` samples per micro-batch, `micro_batches` micro-batches per step (gradient
    accumulation); bytes per element of activations, gradients and parameters. `experts` > 0
    makes every `moe_every`-th layer a mixture of experts routing each token to `top_k` of
    them. `recompute`: full activation recomputation (the backward pass repeats the forward's
    tensor- and expert-parallel communication)."""

    layers: int = Field(ge=1, le=1_000_000, description="Transformer layers.")
    hidden: int = Field(ge=1, le=10**7, description="Hidden size h.")
    ffn_hidden: int | None = Field(None, ge=1, le=10**8,
                                   description="MLP hidden size (default: 4 h).")
    gated_mlp: bool = Field(False, description="A gated MLP (3 h ffn_hidden parameters).")
    parameters: float | None = Field(None, gt=0.0, le=1e16, description=(
        "Total parameters; rescales the count from layers and hidden when given."))
    sequence: int = Field(2048, ge=1, le=10**8, description="Tokens per sample.")
    micro_batch: int = Field(1, ge=1, le=10**6, description="Samples per micro-batch.")
    micro_batches: int = Field(1, ge=1, le=10**6, description=(
        "Micro-batches per step (gradient accumulation)."))
    activation_bytes: float = Field(2.0, gt=0.0, le=64.0,
                                    description="Bytes per activation element.")
    gradient_bytes: float = Field(2.0, gt=0.0, le=64.0,
                                  description="Bytes per gradient element.")
    parameter_bytes: float = Field(2.0, gt=0.0, le=64.0,
                                   description="Bytes per parameter element.")
    experts: int = Field(0, ge=0, le=1_000_000, description=(
        "Experts of each mixture-of-experts layer; 0: a dense model."))
    top_k: int = Field(2, ge=1, le=1_000_000, description="Experts each token is routed to.")
    moe_every: int = Field(1, ge=1, le=1_000_000, description=(
        "Every moe_every-th layer is a mixture of experts."))
    recompute: bool = Field(False, description=(
        "Full activation recomputation: the backward pass repeats the forward's tensor- and "
        "expert-parallel communication."))


class ParallelConfig(Strict):
    """How a `training` item is split: `tp` (tensor), `pp` (pipeline) and `dp` (data; default:
    the item's GPUs / (tp x pp)) ranks; `ep` expert-parallel ranks carved out of the
    data-parallel ones (as Megatron-LM does); `zero`: 0 all-reduces gradients, 1 and 2
    shard the optimizer (reduce-scatter gradients, all-gather parameters; 2 reduce-scatters
    after every micro-batch), 3 shards parameters too (FSDP: all-gather them in the forward
    and the backward of every micro-batch). `order`: how ranks map onto the item's GPUs,
    fastest-varying first (Megatron-LM's default is tp-dp-pp: TP inside a server, then DP,
    then PP)."""

    tp: int = Field(1, ge=1, le=1_000_000, description="Tensor-parallel ranks.")
    pp: int = Field(1, ge=1, le=1_000_000, description="Pipeline-parallel stages.")
    dp: int | None = Field(None, ge=1, le=1_000_000, description=(
        "Data-parallel ranks (default: the item's GPUs / (tp x pp))."))
    ep: int = Field(1, ge=1, le=1_000_000, description=(
        "Expert-parallel ranks, carved out of the data-parallel ones."))
    zero: Literal[0, 1, 2, 3] = Field(0, description=(
        "ZeRO stage: 0 all-reduces gradients; 1 and 2 shard the optimizer; 3 also shards "
        "parameters (FSDP)."))
    order: Literal["tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp",
                   "pp-dp-tp"] = Field("tp-dp-pp", description=(
                       "How ranks map onto the item's GPUs, fastest-varying first."))


class TrainingConfig(_WorkloadBase):
    """One training step of a model split over its GPUs: every process group's collectives
    at once, phase by phase: tensor-parallel all-reduces, pipeline sends, expert all-to-alls,
    data-parallel gradient reduction."""

    collective: Literal["training"] = Field(description="The kind of item: training.")
    model: ModelConfig = Field(description="The model being trained.")
    parallel: ParallelConfig = Field(ParallelConfig(), description="How it is split.")
    microbatch_compute_s: float | None = Field(None, ge=0.0, le=1e6, description=(
        "Forward plus backward compute of one micro-batch on one pipeline stage, in seconds "
        "(for the exposed communication and the step time)."))


class ChakraConfig(_WorkloadBase):
    """A step from Chakra execution traces (MLCommons; what ASTRA-sim reads): `folder` holds
    one `<prefix>.<rank>.et` file per rank, relative to the scenario's folder. Process groups
    come from `comm_groups` (ASTRA-sim's communicator-group JSON, {pg_name: [ranks]}, relative
    to the trace folder; default: its comm_group.json when present) or else from the ranks
    that use them. Trace rank r runs on the item's r-th GPU (ascending id)."""

    collective: Literal["chakra"] = Field(description="The kind of item: chakra.")
    folder: str = Field(min_length=1, max_length=4096, description=(
        "The folder of `<prefix>.<rank>.et` trace files, relative to the scenario's folder."))
    comm_groups: str | None = Field(None, min_length=1, max_length=4096, description=(
        "Communicator groups ({pg_name: [ranks]}), relative to the trace folder (default: "
        "its comm_group.json when present)."))


WorkloadConfig = Annotated[
    Union[PermutationConfig, AllReduceConfig, AllGatherConfig, ReduceScatterConfig,
          AllToAllConfig, IncastConfig, SendRecvConfig, TrafficConfig, TrainingConfig,
          ChakraConfig],
    Field(discriminator="collective"),
]


class SolverConfig(Strict):
    """Max-min rate solver and time model.

    Every collective step costs `step_latency_us` plus `hop_latency_us` per link of its
    longest path (4 across the spines, 2 within a T0 or a server). The progressive simulation
    re-solves rates as flows finish and release their bandwidth; under `auto` it is given up
    when from 32 events on it has finished a smaller share of its flows, and of its time span,
    than it has spent of `max_events`."""

    eps: float = Field(0.01, ge=0.0, le=0.5, description=(
        "Progressive filling freezes every link within (1+eps) of the lowest fill level in "
        "one round (0 = exact)."))
    max_rounds: int = Field(2000, ge=1, le=1_000_000, description=(
        "Most rounds of progressive filling; hitting it is reported as a status."))
    step_latency_us: float = Field(0.0, ge=0.0, le=1e6, description=(
        "Latency every collective step costs, in microseconds."))
    hop_latency_us: float = Field(0.0, ge=0.0, le=1e6, description=(
        "Latency per link of a step's longest path, in microseconds."))
    rates: Literal["auto", "full"] = Field("auto", description=(
        "auto: a phase whose flows all send the same bytes takes its time from the slowest "
        "max-min rate alone (exact, one pass); full: always run the rounds."))
    progressive: Literal["auto"] | bool = Field("auto", description=(
        "Also simulate each phase flow by flow for the progressive completion time and the "
        "flow completion times. auto: phases of up to 32,768 flows and 2^18 flow-path pairs, "
        "given up (status skipped) when it falls behind its event budget; true: always, to "
        "the cap."))
    max_events: int = Field(256, ge=1, le=1_000_000, description=(
        "Most rate re-solves per phase of the progressive simulation."))
    event_batch: float = Field(0.01, ge=0.0, le=1.0, description=(
        "Completions within a factor (1 + event_batch) of the next one share an event."))
    aggregate: Literal["auto", "always", "never"] = Field("auto", description=(
        "Solve uniform phases (all-to-all) as (source T0, destination T0) classes; auto: when "
        "flow by flow would not fit (more than 2^25 flow-path pairs)."))
    model: Literal["static", "dynamic"] = Field("static", description=(
        "static: the settled max-min rates (and the progressive simulation); dynamic: a fluid "
        "model in time steps of a fraction of the base RTT, with queues, ECN, trimming, NSCC "
        "windows and each policy's reaction at ACK time, for the flow completion times."))


def _power_of_two(value: int) -> int:
    if value & (value - 1):
        raise ValueError(f"must be a power of two (got {value})")
    return value


PowerOfTwo = Annotated[int, AfterValidator(_power_of_two)]


class DynamicConfig(Strict):
    """The dynamic level's settings (`solver.model: dynamic`). A *static* field fixes the
    compiled program (a new value compiles a new one); a *traced* one is an array of it (a
    sweep over it compiles nothing); the others are read on the host. The defaults are the
    calibrated ones (bench/fidelity): one set for every case."""

    steps_per_rtt: Annotated[PowerOfTwo, STATIC] = Field(8, ge=1, le=1024, description=(
        "Time steps per base RTT of the network's longest path (a power of two: the "
        "feedback's lag is a whole number of steps)."))
    max_steps_per_rtt: Annotated[PowerOfTwo, STATIC] = Field(64, ge=1, le=4096, description=(
        "The finest step: steps_per_rtt is doubled, up to this, until the shortest flow's "
        "life spans flow_steps steps (a power of two, at least steps_per_rtt)."))
    flow_steps: int = Field(32, ge=1, le=1_000_000, description=(
        "Steps the shortest flow's life (its bytes at its NICs' fair share) should span."))
    horizon_completions: Annotated[float, TRACED] = Field(12.0, gt=0.0, le=1e6, description=(
        "The run's step bound, in static completions of the phase (plus horizon_rtts base "
        "RTTs); a phase still sending then is reported with status event_limit."))
    horizon_rtts: Annotated[float, TRACED] = Field(200.0, ge=0.0, le=1e9, description=(
        "Base RTTs added to the step bound."))
    mrc_ev_rule: Annotated[Literal["bitmap", "reps"], STATIC] = Field("bitmap", description=(
        "How mrc picks the EV of each packet in time: bitmap, htsim's walk that skips EVs "
        "whose packets came back marked or trimmed; reps, REPS's recycling of the EVs of "
        "clean ACKs."))
    plane_windows: Annotated[bool, STATIC] = Field(True, description=(
        "One NSCC window per plane on a multi-plane fabric, each at its port's rate with the "
        "plane's share of the flow's bytes (the calibration's packet-level reference); "
        "false: one window per flow over all its planes, so a slow plane's trims are resent "
        "on the others (a what-if no packet-level reference here checks)."))

    skip_steady: Annotated[bool, TRACED] = Field(True, description=(
        "Skip steady states: where every flow sending delivered at the same rate (within "
        "steady_tolerance) over two windows of steady_rtts base RTTs and no flow started or "
        "ended, jump to a window before the next event with the rates held and the bytes "
        "integrated (every calibration case's FCTs as full stepping's); false: step through "
        "the whole phase."))
    steady_rtts: Annotated[float, TRACED] = Field(8.0, gt=0.0, le=1e6, description=(
        "The steady-state test's window, in base RTTs (longer than NSCC's sawtooth)."))
    steady_tolerance: Annotated[float, TRACED] = Field(0.02, ge=0.0, le=1.0, description=(
        "The largest relative change of a flow's delivery rate from one window to the next "
        "that still counts as steady."))

    @model_validator(mode="after")
    def _finest_not_coarser(self) -> "DynamicConfig":
        if self.max_steps_per_rtt < self.steps_per_rtt:
            raise ValueError(f"max_steps_per_rtt: must be at least steps_per_rtt "
                             f"({self.steps_per_rtt}; got {self.max_steps_per_rtt})")
        return self


class TransportConfig(Strict):
    """What a packet transport adds to a flow's bytes at its max-min rate.

    Every packet carries `mtu_bytes` of payload and `header_bytes` of headers, so a flow puts
    size x (1 + header/mtu) bytes on the wire (goodput below line rate). Its last byte also
    pays `link_latency_us` per link of its path (propagation and switching) and the store-and-
    forward of one packet at every switch (`fabric.port_gbps`): a phase ends when the last
    byte of its slowest flow arrives. A flow completion time is counted at the sender when its
    last byte is acknowledged, as RDMA and UEC transports count it: with `ack_return` the
    links' latency once more. `enabled: false` drops all of it (the bytes-over-rate fluid
    model). Defaults: a 4 KiB RoCE/UEC MTU, 64 header bytes (Ethernet, IP, UDP and the
    transport header), 1 us per link."""

    enabled: bool = Field(True, description=(
        "false: the bytes-over-rate fluid model, without headers or latency."))
    mtu_bytes: int = Field(4096, ge=256, le=65536, description="Payload bytes per packet.")
    header_bytes: int = Field(64, ge=0, le=4096, description="Header bytes per packet.")
    link_latency_us: float = Field(1.0, ge=0.0, le=1e6, description=(
        "Propagation and switching latency per link, in microseconds."))
    ack_return: bool = Field(True, description=(
        "A flow completes when its last byte is acknowledged: the links' latency once more."))


class FailureKindConfig(Strict):
    """One kind of failed component. A failure set holds every component in `names`, plus
    `random` components drawn uniformly without replacement, plus each remaining component
    independently with `probability`; the random parts are drawn anew for every set.

    Shorthand: ``links: 4`` means ``{random: 4}``; ``links: [plane0/t0-3/up5]`` means
    ``{names: [...]}``."""

    names: Annotated[list[str], WithJsonSchema(
        {"type": "array", "items": {"type": ["string", "integer"]}})] = Field([], description=(
        "Components that fail in every set, by name (planes may be bare numbers)."))
    random: int = Field(0, ge=0, le=1_000_000, description=(
        "Components drawn uniformly without replacement for each set."))
    probability: float = Field(0.0, ge=0.0, le=1.0, description=(
        "Each remaining component fails independently with this probability."))

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict:
        # the shorthands are part of the file format: `links: 4`, `links: [name, ...]`
        return {"anyOf": [handler(core_schema), {"type": "integer", "minimum": 0},
                          {"type": "array", "items": {"type": ["string", "integer"]}}]}

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
    """Whole switches as built (every link of the switch): `tier` restricts the random draws.
    A Clos's T1 below full size is a physical spine that takes a bundle of every T0's
    uplinks (`fabricjax topo` counts them), so a T1 down costs each T0 of its plane that
    bundle."""

    tier: Literal["t0", "t1", "any"] = Field("any", description=(
        "The tier the random draws come from."))


class DegradedConfig(FailureKindConfig):
    """Cables still up at a fraction `factor` of their capacity (both directions), e.g. 0.75
    for a 4-lane transceiver with one lane down. Fabric (T0-T1) cables are drawn at random."""

    factor: float = Field(0.5, gt=0.0, lt=1.0, description=(
        "The fraction of its capacity a degraded cable keeps."))


class FailuresConfig(Strict):
    """Failure sets, and how each policy reacts."""

    samples: int | None = Field(None, ge=1, le=1_000_000, description=(
        "Failure sets drawn (default: 100 when anything is random, else 1)."))
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description=(
        "Seed of the draws (default: the scenario's)."))
    links: FailureKindConfig = Field(FailureKindConfig(), description=(
        "T0-T1 cables, both directions (names may also be host cables)."))
    switches: SwitchFailureConfig = Field(SwitchFailureConfig(), description=(
        "Whole T0 or T1 switches."))
    nic_ports: FailureKindConfig = Field(FailureKindConfig(), description=(
        "One GPU's port on one plane, both directions."))
    planes: FailureKindConfig = Field(FailureKindConfig(), description="Whole planes.")
    degraded: DegradedConfig = Field(DegradedConfig(), description=(
        "Cables at reduced capacity."))
    reconvergence_s: float = Field(5.0, ge=0.0, le=1e6, description=(
        "Routing (BGP) reconvergence in seconds: ECMP flows hashed onto a dead path, and "
        "oblivious spraying's EVs on one, are black-holed this long."))
    transport_timeout_s: float = Field(30.0, gt=0.0, le=1e6, description=(
        "RDMA transport timeout in seconds; a stall at least this long fails the job "
        "(NCCL_IB_TIMEOUT=20 and 7 retries: 7 x 4.096 us x 2^20 = 30 s)."))
    mrc_reaction_us: float = Field(50.0, ge=0.0, le=1e12, description=(
        "MRC retires an EV at its first lost packet: its reaction time in microseconds."))
    restart_s: float = Field(600.0, ge=0.0, le=1e7, description=(
        "A crashed job's restart from its last checkpoint, plus recomputed work, in seconds."))
    at_s: float | None = Field(None, ge=0.0, le=1e6, description=(
        "Seconds into each workload item's first step at which every failure set strikes "
        "(needs solver.model: dynamic): each policy then reacts in time, ECMP and oblivious "
        "spraying after reconvergence_s, mrc after mrc_reaction_us; the later steps run on "
        "the set's steady state. Default: the set is there from the start, after the "
        "policies reacted."))
    chunk: int | None = Field(None, ge=1, le=1_000_000, description=(
        "Failure sets per device call (default: 16 on a CPU, sized to an accelerator's "
        "memory); never changes a result."))
    detail: Literal["summary", "full"] = Field("summary", description=(
        "What each failure set's record names: summary (its first 16 failed components and "
        "how many there are, so a study of many sets stays a few MB) or full (every failed "
        "component, as many as a probability draws; write --json NAME.json.gz to compress)."))

    @property
    def kinds(self) -> dict[str, FailureKindConfig]:
        return {"links": self.links, "switches": self.switches, "nic_ports": self.nic_ports,
                "planes": self.planes, "degraded": self.degraded}

    @property
    def num_samples(self) -> int:
        if self.samples is not None:
            return self.samples
        return 100 if any(kind.drawn for kind in self.kinds.values()) else 1


class ReliabilityConfig(Strict):
    """Component failure rates (events per component per hour) for the reliability what-if:
    expected failure events that hit each job, stall time and crash probability per policy.
    `step_time_s`: one training step (for events per 1,000 steps); `hours`: the horizon of the
    crash probability."""

    link_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0, description=(
        "Failure events per cable per hour."))
    switch_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0, description=(
        "Failure events per switch per hour."))
    nic_port_failures_per_hour: float = Field(0.0, ge=0.0, le=1.0, description=(
        "Failure events per NIC port per hour."))
    step_time_s: float | None = Field(None, gt=0.0, le=1e6, description=(
        "One training step in seconds, for events per 1,000 steps."))
    hours: float = Field(24.0, gt=0.0, le=1e6, description=(
        "The horizon of the crash probability, in hours."))


class BomConfig(Strict):
    """Bill-of-materials assumptions (`fabricjax topo`, sweeps): see `fabricjax.fabric.bom`
    for the sources."""

    switch_watts_51t: float = Field(2000.0, ge=0.0, le=1e6, description=(
        "Watts of a 51.2 Tbit/s switch without optics (others scale with radix x port "
        "rate)."))
    switch_watts: float | None = Field(None, ge=0.0, le=1e6, description=(
        "One flat figure in watts per switch instead."))
    optic_watts: dict[float, float] = Field({}, description=(
        "Watts per pluggable module by its speed in Gbit/s (merged into the defaults)."))
    module_gbps: float = Field(800.0, ge=1.0, le=1e5, description=(
        "A module's capacity in Gbit/s (800G OSFP)."))
    module_lanes: int = Field(8, ge=1, le=64, description=(
        "A module's lanes (8 x 100G breakout)."))
    host_links: Literal["optics", "copper"] = Field("optics", description=(
        "Optics or copper between NICs and T0s."))
    copper_watts_per_end: float = Field(0.0, ge=0.0, le=1e4, description=(
        "Watts per copper cable end."))

    @field_validator("optic_watts")
    @classmethod
    def _watts(cls, value: dict) -> dict:
        bad = [k for k, v in value.items() if not (k > 0 and 0 <= v <= 1e4)]
        if bad:
            raise ValueError(f"allowed: module speed (Gbit/s) > 0 -> watts 0 .. 10000 "
                             f"(got {bad[0]:g}: {value[bad[0]]:g})")
        return value

    def overrides(self) -> dict:
        """The fields set away from the defaults, as `fabric.bom.assumptions` takes them."""
        return self.model_dump(exclude_defaults=True)


# --------------------------------------------------------------------------- design search

class CatalogSwitch(Strict):
    """A switch part: one ASIC's box, without optics."""

    capacity_gbps: float = Field(gt=0.0, le=1e7, description=(
        "Switching capacity in Gbit/s (51200 for a 51.2 Tbit/s ASIC)."))
    port_speeds: list[float] = Field(min_length=1, description=(
        "Port rates in Gbit/s the box can run (each gives radix = capacity / rate)."))
    watts: float = Field(ge=0.0, le=1e6, description="Watts of the box without optics.")
    price_usd: float = Field(ge=0.0, le=1e9, description="Price of one box in US dollars.")
    source: str = Field("", description="Where the figures come from.")


class CatalogPart(Strict):
    """A priced part with a power draw: an optic module, a copper cable, a NIC."""

    price_usd: float = Field(ge=0.0, le=1e9, description="Price of one in US dollars.")
    watts: float = Field(0.0, ge=0.0, le=1e5, description="Watts of one.")
    source: str = Field("", description="Where the figures come from.")


class CatalogConfig(Strict):
    """Parts and prices a design is costed with. The bundled catalog
    (`fabricjax/data/catalog.yaml`) is complete; a design file's `design.catalog` lays parts
    over it (a switch or optic named there replaces or adds that one part)."""

    note: str = Field("", description="What the figures are (approximate, not a quote).")
    switches: dict[str, CatalogSwitch] = Field({}, description="Switch parts by name.")
    optics: dict[float, CatalogPart] = Field({}, description=(
        "Pluggable optic modules by speed in Gbit/s (one module serves up to 8 ports)."))
    copper: CatalogPart | None = Field(None, description="A copper (DAC) cable.")
    nic: CatalogPart | None = Field(None, description=(
        "One GPU's NIC (all its planes); the same on every design, so it moves no ranking."))


class DesignSpaceConfig(Strict):
    """The designs to search: every combination of these (`nic_gbps` split over `planes`
    sets each design's port rate; the switch's capacity over that rate sets its radix)."""

    switches: list[str] | None = Field(None, min_length=1, description=(
        "Catalog switch parts to build with (default: every one in the catalog)."))
    planes: list[Annotated[int, Field(ge=1, le=64)]] = Field([1, 8], min_length=1, description=(
        "Planes per NIC; each design's port rate is nic_gbps / planes."))
    tiers: list[Literal[2, 3]] = Field([2, 3], min_length=1, description=(
        "Switch tiers: 2 (multi-plane Clos) or 3 (fat tree, built 1:1)."))
    oversubscription: list[NumberOrText] = Field([1.0], min_length=1, description=(
        "T0 down:up ratios to try (1, 3 or '3:1'); fat trees are built 1:1 only."))
    policies: list[Annotated[str, AfterValidator(_known_policy)]] | None = Field(
        None, min_length=1, description=(
            "Load-balancing policies to try on each fabric (default: the scenario's, without "
            "optimal, which is a bound and not a deployable policy)."))
    evs: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(None, min_length=1, description=(
        "Entropy values (paths per connection) to try for spray and mrc (default: the "
        "scenario's sections)."))

    @field_validator("oversubscription", mode="before")
    @classmethod
    def _ratios(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [down_up_ratio(v) for v in value]

    @field_validator("planes", "tiers", "oversubscription", "switches", "policies", "evs")
    @classmethod
    def _distinct(cls, value: list | None) -> list | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError(f"each value may appear once, got {value}")
        return value


class DesignTargetConfig(Strict):
    """What a design must achieve, on every workload item and job, at `quantile` over the
    scenario's failure sets (`healthy`: with nothing failed)."""

    metric: Literal["slowdown", "completion_s", "busbw_gbps", "step_time_s"] = Field(
        "slowdown", description=(
            "slowdown: completion over the perfect network's (the endpoint bound; 1.05 = "
            "within 5%); completion_s: seconds; busbw_gbps: bus bandwidth; step_time_s: a "
            "training step's time (healthy only)."))
    max: float | None = Field(None, gt=0.0, le=1e12, description=(
        "The most the metric may be (slowdown, completion_s, step_time_s)."))
    min: float | None = Field(None, gt=0.0, le=1e12, description=(
        "The least the metric may be (busbw_gbps)."))
    quantile: Literal["healthy", "p50", "p99", "max"] = Field("p99", description=(
        "Where over the failure sets the target applies (healthy: no failures)."))

    @model_validator(mode="after")
    def _one_bound(self) -> "DesignTargetConfig":
        wanted = "min" if self.metric == "busbw_gbps" else "max"
        given = [k for k in ("max", "min") if getattr(self, k) is not None]
        if given != [wanted]:
            raise ValueError(f"{self.metric} needs '{wanted}' alone (a "
                             f"{'floor' if wanted == 'min' else 'ceiling'}); got "
                             f"{', '.join(given) or 'neither max nor min'}")
        if self.metric == "step_time_s" and self.quantile != "healthy":
            raise ValueError("step_time_s is known on the healthy fabric only; allowed: "
                             "quantile: healthy (or metric: slowdown, which the failure "
                             "sets give)")
        return self


class DesignConfirmConfig(Strict):
    """The dynamic level's confirmation of the front (healthy fabric, time-stepped)."""

    dynamic: bool = Field(True, description="Confirm the feasible front with the dynamic level.")
    max_flows: int = Field(20_000, ge=1, le=10**8, description=(
        "Items with a phase of more fabric flows than this are left out of the check (the "
        "dynamic level steps every flow through time)."))


class DesignConfig(Strict):
    """`fabricjax design`: the cheapest fabric that meets a target. The rest of the file is
    an ordinary scenario (GPUs, workload, failures); its `fabric` section gives what every
    design shares (GPUs, servers) and the space below what varies."""

    nic_gbps: NumberOrText = Field(800.0, description=(
        "Each GPU's NIC rate in Gbit/s ('800G'), split evenly over the planes."))
    space: DesignSpaceConfig = Field(DesignSpaceConfig(), description="The designs to search.")
    target: DesignTargetConfig = Field(description="What a design must achieve.")
    objective: Literal["cost", "watts", "optics"] = Field("cost", description=(
        "What 'cheapest' means: money (US dollars), watts, or optic modules."))
    catalog: CatalogConfig = Field(CatalogConfig(), description=(
        "Parts laid over the bundled catalog (same fields)."))
    paths: int | None = Field(None, ge=1, le=MAX_PATHS, description=(
        "The three-tier designs' candidate paths per GPU pair (a fat tree's fabric.paths); "
        "default: its equal-cost set, up to 1024."))
    confirm: DesignConfirmConfig = Field(DesignConfirmConfig(), description=(
        "The dynamic level's confirmation of the front."))
    upgrades: bool = Field(False, description=(
        "Name the links whose upgrade would most shorten the cheapest design's binding item "
        "(the healthy static solve's gradients, as analyze --sensitivity; one more solve)."))

    @field_validator("nic_gbps", mode="before")
    @classmethod
    def _nic(cls, value: Any) -> float:
        return port_rate_gbps(value)


class Scenario(Strict):
    """A scenario: the fabric, the traffic, the failures, the policies to compare.

    Besides the fields below, each registered policy that has settings owns a section under
    its name (`mrc: {evs: 128}`), validated by the settings model it registered
    (`core.registry.sections`). They are extra fields here, so that this layer names no
    policy: the loader (`scenario.check_sections`) checks them, fills in the defaults and
    refuses unknown keys; `scenario.mrc` then reads like any section."""

    # extra: the policies' sections (every other key is refused by `scenario.check_sections`)
    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field("scenario", description="The scenario's name in reports (default: "
                      "the file's name).")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of every random draw.")
    fabric: FabricConfig = Field(ClosConfig(), description="The network.")
    workload: list[WorkloadConfig] = Field([], description=(
        "Collectives and traffic, each analysed alone on the whole fabric."))
    jobs: list[WorkloadConfig] = Field([], description=(
        "Jobs sharing the fabric at once, on disjoint GPUs; each is also reported alone."))
    policies: list[Annotated[str, AfterValidator(_known_policy)]] = Field(
        default_factory=_registered_policies, description=(
            "The load-balancing policies to compare (default: every registered one)."))
    solver: SolverConfig = Field(SolverConfig(), description=(
        "Max-min rate solver and time model."))
    transport: TransportConfig = Field(TransportConfig(), description=(
        "What a packet transport adds to a flow's bytes."))
    dynamic: DynamicConfig = Field(DynamicConfig(), description=(
        "The dynamic level's settings (solver.model: dynamic)."))
    failures: FailuresConfig | None = Field(None, description=(
        "Failure sets to draw (none: the healthy fabric only)."))
    reliability: ReliabilityConfig | None = Field(None, description=(
        "Component failure rates for the reliability what-if."))
    bom: BomConfig = Field(BomConfig(), description="Bill-of-materials assumptions.")

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
        if not value and known_names():
            raise ValueError("needs at least 1 policy; allowed: "
                             f"{', '.join(repr(n) for n in known_names())}")
        return value

    @model_serializer(mode="wrap")
    def _sections_in_place(self, handler: Any) -> dict:
        # the policies' sections follow `policies`, where the reports have always shown them
        data = handler(self)
        if not self.policies and "policies" not in self.model_fields_set:
            # parsed before any policy registered: the default is still to come, and a copy
            # made from this dump must get it too (`scenario.check_sections`)
            data.pop("policies", None)
        extra = {k: data.pop(k) for k in (self.__pydantic_extra__ or {}) if k in data}
        if "policies" not in data:
            return {**data, **extra}
        out = {}
        for key, value in data.items():
            out[key] = value
            if key == "policies":
                out.update(extra)
        return out

    def section(self, name: str) -> Any:
        """The section of policy `name` (its settings model), None when it has none."""
        return (self.__pydantic_extra__ or {}).get(name)

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


def scenario_schema() -> dict:
    """The JSON Schema of a scenario file, with a section for every registered policy that
    has settings (under its name) and `policies` limited to the registered names."""
    names = known_names()
    fields: dict[str, Any] = {
        name: (model, Field(default_factory=model, description=_first_paragraph(model)))
        for name, model in sections().items()}
    if names:
        fields["policies"] = (list[Literal[names]], Field(  # type: ignore[valid-type]
            default_factory=_registered_policies, min_length=1,
            description=Scenario.model_fields["policies"].description))

    # a design file (`fabricjax design`) is a scenario plus this one section
    fields["design"] = (DesignConfig | None, Field(None, description=(
        "Design files only (fabricjax design): the space to search, the target, the "
        "objective and the parts catalog.")))

    class Checked(Scenario):
        model_config = ConfigDict(extra="forbid")

    model = create_model("Scenario", __base__=Checked, __doc__=Scenario.__doc__, **fields)
    schema = model.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _first_paragraph(model: type) -> str:
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


# --------------------------------------------------------------------------- derived counts

def two_tier_ports(fabric: ClosConfig) -> tuple[int, int]:
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

