"""Up-front decisions: what a run will need and how each phase will be solved, decided on the
host from the config and the (small) built arrays, before anything large is allocated.

Contract:
  * The memory model: `estimate_memory` runs before anything large exists (no fabric arrays,
    no flows, nothing on a device); `check_memory` refuses a scenario whose estimate exceeds
    the limit (`--max-memory`, else what the machine has available) with a ScenarioError that
    names the estimate, its largest part and a change that would fit. Its coefficients are
    peak resident bytes measured on the CPU (`bench/memory_calibration.py`) and rounded up,
    per kind of device state a policy declares (`Policy.memory_profile`: `MEMORY`), for
    stored paths, the dynamic level and failure studies, so the estimate is an upper bound of
    the peak within 2x of it on every bundled scenario and the bench's grid of fabric kinds,
    sizes and levels (a cold run, which compiles, and a warm one, which loads its programs,
    differ by up to 1.9x on the smallest scenarios), not a description of each array.
  * Shapes: a phase on a Clos is padded to `flow_bucket(F)` flows (at most 25% more), so
    phases and scenarios of nearby sizes share one compiled program (`padded_flows`).
  * Per phase: whether it is solved as (T0, T0) classes (`use_aggregation`), whether its time
    needs only the slowest max-min rate (`slowest_only`), whether it gets the progressive
    simulation (`simulate_phase`) and when `auto` gives it up (`progressive_give_up`), and
    `check_resources`, the refusals that need the built workload (a policy's per-flow state
    beyond what it can hold).
  * Failure sets: how many run per device call and how many are vmapped (`sets_per_call`,
    `vmap_width`).
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np

from fabricjax.config import FabricKind, Scenario, job_size
from fabricjax.core.devices import current_device
from fabricjax.core.errors import ScenarioError
from fabricjax.core.units import format_bytes
from fabricjax.fabric.build import AnyFabric, build
from fabricjax.fabric.clos import clos_geometry
from fabricjax.fabric.failures import population
from fabricjax.policies import get
from fabricjax.scenario import check_sections
from fabricjax.solver.aggregate import aggregatable
from fabricjax.solver.incidence import REHASH_DRAWS
from fabricjax.workload.flows import Collective, Flows

# Flow-by-flow (flow, slot) entries beyond which `solver.aggregate: auto` solves an
# aggregatable phase by classes: 2^25 entries is twice the 131k-GPU ring step (131,072 flows
# x 128 EVs), which flow by flow still fits a laptop; a 4,096-GPU all-to-all has 2^31.
AGGREGATE_ABOVE = 2**25
# `solver.progressive: auto` simulates phases up to this many (flow, path) pairs and flows:
# every event is a full max-min solve, and a phase can take up to `max_events` of them.
# Measured on the 2-core CPU: the 131k-GPU ring step under ECMP (131k flows x 8 QPs) took 6
# minutes; the 8k ring step (2^20 pairs under spray and mrc, 128 EVs) 53 s and 35 s for 162
# and 198 events; the quickstart's 2^17-pair phases well under a second each.
PROGRESSIVE_AUTO_LIMIT = 2**18
PROGRESSIVE_AUTO_FLOWS = 2**15
# ... and gives up, from this many events on, a simulation that has finished a smaller share of
# its flows, and of its first solve's span, than it has spent of `max_events`: on that pace it
# would end at the cap with an extrapolation (the 128-GPU all-to-all under ECMP spent 59 s of a
# 65 s analysis on 256 such events; its skewed phase is now given up at 32, the uniform at 202,
# while spraying's skewed phase, done in 127, and the quickstart's, in up to 116, still run).
PROGRESSIVE_GIVE_UP_EVENTS = 32

# Peak resident bytes, measured (bench/memory_calibration.py, 2-core CPU, JAX 0.10) and rounded
# up: the Python process with JAX loaded; per directed link (fabric arrays, link loads,
# statistics). A failure study on the host: each (policy, workload item, set) record with its
# JSON text; each failed component of a set (its name, ids, the list the records share) and
# its line in every record's JSON `components`. An all-to-all solved by classes keeps its flows
# on the host: int32 ids, float64 sizes, the int64 class keys and the scale-up split's masks
# (not yet calibrated by bench/memory_calibration.py: counted from the arrays, rounded up).
RUNTIME_BYTES = 500 * 2**20
# The dynamic level (engine/dynamic.py), per run of one policy on one phase: device bytes per
# (flow, slot, hop) entry (ids, gathers, the scatter), per (flow, slot) (shares, rates,
# signals), per link and step of feedback lag (3 float32 signals, twice: the loop's carry in
# and out), per flow and step of ACK lag (bytes delivered and trimmed, twice), and its
# compiled program. Its lags are at most LAG_STEPS_MAX and ACK_LAG_STEPS_MAX steps (half a
# base RTT and one, at the finest step of 1/64 RTT).
BYTES_PER_ENTRY = 64
BYTES_PER_SLOT = 48
BYTES_PER_LINK_SIGNAL = 24
BYTES_PER_FLOW_ECHO = 16
DYNAMIC_COMPILED_BYTES = 120 * 2**20
LAG_STEPS_MAX, ACK_LAG_STEPS_MAX = 32, 64
GRAPH_HOPS = 4      # a graph file's paths: up to 2 x this many links (a fat tree's: 6)
# Fat trees and graph files (measured: bench/memory_calibration.py's fat-tree rows): per
# (flow, slot, stored hop), the host's int32 path cache, the device's copy and the solve's
# gathers; once, networkx, the built graph and the equal-cost search
BYTES_PER_STORED_HOP = 48
GRAPH_RUNTIME_BYTES = 150 * 2**20
BYTES_PER_LINK = 80
RESIDENT_SHARE = 0.5      # of each policy's solve but the largest, still resident at the peak
BYTES_PER_AGGREGATED_FLOW = 64
BYTES_PER_FAILURE_RECORD = 6_000
BYTES_PER_COMPONENT = 400
BYTES_PER_RECORD_COMPONENT = 50
# failed components a failure-set record names (failures.detail: summary): a probability
# draw at scale fails thousands per set, and naming them all in every record of every policy
# made 1,000 sets at 16,384 GPUs a report of 252 MB
COMPONENTS_SHOWN = 16




@dataclasses.dataclass(frozen=True)
class MemoryCoefficients:
    """What one policy's solves cost, by the kind of state it keeps on the device. Peak
    resident bytes, measured (bench/memory_calibration.py) and rounded up: per flow-slot
    entry of a solve (`bytes_per_slot`), for its compiled programs (`compiled_bytes`), and
    extra per flow-slot entry of one failure set (`failure_bytes_per_slot`: its candidate
    draws). `max_pairs`: the most flow-slot pairs of one phase it can hold flow by flow
    (None: no limit beyond memory)."""

    bytes_per_slot: int = 80
    compiled_bytes: int = 50 * 2**20
    failure_bytes_per_slot: int = 0
    max_pairs: int | None = None


MEMORY = {
    # a split over its slots
    "split": MemoryCoefficients(),
    # ... that re-hashes its slots on dead paths after a failure: the re-hash candidates
    "rehash": MemoryCoefficients(failure_bytes_per_slot=4 * REHASH_DRAWS * 3),
    # an iterative loop over every flow's slots (candidate draws and loads per failure set).
    # Its state lives on the device: past 2^25 flow-slot pairs (twice the 131k-GPU ring step)
    # it would not fit a laptop, and classes cannot hold per-flow slots.
    "swap-loop": MemoryCoefficients(bytes_per_slot=100, compiled_bytes=100 * 2**20,
                                    failure_bytes_per_slot=4 * 24, max_pairs=2**25),
    # an iterative split over commodities: about a dozen float32 [commodities, P, S] arrays
    # and weights over the full [F, P * S] slot grid; past 2^26 pairs it would not fit a laptop
    "commodity-loop": MemoryCoefficients(bytes_per_slot=100, max_pairs=2**26),
}


def coefficients(policy: str) -> MemoryCoefficients:
    """The memory model's coefficients for `policy` (by its `memory_profile`)."""
    profile = get(policy).memory_profile
    if profile not in MEMORY:
        raise ValueError(f"policy {policy!r}: unknown memory_profile {profile!r}; allowed: "
                         f"{', '.join(MEMORY)}")
    return MEMORY[profile]


# Flow-count buckets per doubling: a phase is padded to the next m * 2^k flows, m in 4..7, so
# at most 25% more flows (none for a power of two, the common collective size) and four
# compiled programs per doubling of the flow count instead of one per count.
BUCKETS_PER_DOUBLING = 4


# --------------------------------------------------------------------------- per phase

def flow_bucket(num_flows: int) -> int:
    """The smallest m * 2^k >= num_flows with m in BUCKETS_PER_DOUBLING..2*BUCKETS_PER_DOUBLING-1
    (num_flows itself up to BUCKETS_PER_DOUBLING): the flow count a phase is padded to."""
    if num_flows <= BUCKETS_PER_DOUBLING:
        return max(num_flows, 0)
    step = 1 << max(0, (num_flows - 1).bit_length() - BUCKETS_PER_DOUBLING.bit_length())
    return -(-num_flows // step) * step


def padded_flows(scenario: Scenario, num_flows: int) -> int:
    """The flows a phase of `num_flows` occupies on the device: bucketed on a Clos (whose
    routes are arithmetic, so inert padding flows cost only their slots); exact on the
    stored-path fabrics (whose routes are per-flow host arrays)."""
    if scenario.fabric.kind == FabricKind.CLOS:
        return flow_bucket(num_flows)
    return num_flows


def slots_per_flow(policy: str, scenario: Scenario) -> int:
    """K: the path slots each flow carries under `policy` on the scenario's fabric."""
    return get(policy).slots_per_flow(scenario)


def aggregation_wanted(scenario: Scenario, flows: Flows, policy: str) -> bool:
    """Whether `solver.aggregate` asks for classes for this phase and policy (before checking
    that the phase allows it)."""
    mode = scenario.solver.aggregate
    if mode == "never" or not get(policy).aggregatable:
        return False
    return mode == "always" or flows.num_flows * slots_per_flow(policy, scenario) > AGGREGATE_ABOVE


def use_aggregation(scenario: Scenario, fabric: AnyFabric, flows: Flows,
                    alive: np.ndarray | None, policy: str) -> bool:
    """Solve this phase by (source T0, destination T0) classes: a Clos, a policy that can be
    aggregated, wanted, every link alive, all flows starting together with equal bytes and
    equal offered demand."""
    if fabric.kind != FabricKind.CLOS or not aggregation_wanted(scenario, flows, policy):
        return False
    if (alive is not None and not np.all(alive)) or flows.start is not None:
        return False
    return aggregatable(flows.src, flows.dst, flows.size)


def slowest_only(scenario: Scenario, flows: Flows) -> bool:
    """Whether a phase's time needs only the slowest max-min rate (`solver.rates: auto`, all
    flows start together and every sending flow sends the same bytes): exact in one pass
    instead of the full rounds."""
    if scenario.solver.rates == "full" or flows.start is not None:
        return False
    sending = flows.size[flows.size > 0]
    return bool(sending.size == 0 or np.all(sending == sending[0]))


def simulate_phase(scenario: Scenario, flows: Flows, policy: str) -> bool:
    """Whether this phase gets the progressive simulation (`solver.progressive`)."""
    mode = scenario.solver.progressive
    if mode == "auto":
        return (flows.num_flows <= PROGRESSIVE_AUTO_FLOWS and
                flows.num_flows * slots_per_flow(policy, scenario) <= PROGRESSIVE_AUTO_LIMIT)
    return bool(mode)


def progressive_give_up(scenario: Scenario) -> int:
    """The event count after which a progressive simulation on pace to pass `max_events`
    stops (`solver.progressive.progressive_completion`'s `give_up_after`): only under
    `auto`; `progressive: true` runs to the cap."""
    return PROGRESSIVE_GIVE_UP_EVENTS if scenario.solver.progressive == "auto" else 0


def check_resources(scenario: Scenario, collectives: list[Collective],
                    fabric: AnyFabric) -> None:
    """Refuse, before the solvers allocate, what would not fit (a ScenarioError names the
    fix). Runs after the (small) host-side fabric and workload arrays are built."""
    for collective in collectives:
        for phase in collective.phases:
            flows = phase.flows
            for name in scenario.policies:
                max_pairs = coefficients(name).max_pairs
                pairs = flows.num_flows * slots_per_flow(name, scenario)
                if use_aggregation(scenario, fabric, flows, None, name):
                    continue
                if max_pairs is not None and pairs > max_pairs:
                    raise ScenarioError(
                        "policies", f"{name!r} keeps every flow's path slots: "
                        f"{collective.name} has {flows.num_flows:,} flows x "
                        f"{slots_per_flow(name, scenario):,} paths, {pairs:,} flow-path "
                        f"pairs, more than the {max_pairs:,} it holds (about "
                        f"{format_bytes(pairs * 4 * 16)}); classes (solver.aggregate) cover "
                        "only policies without per-flow state; allowed: --policy for the "
                        "others, fewer GPUs or fewer paths")
            if scenario.failures is not None and any(
                    use_aggregation(scenario, fabric, flows, None, p) for p in scenario.policies):
                raise ScenarioError(
                    "failures", f"failure sets are solved flow by flow, but {collective.name}'s "
                    f"{flows.num_flows:,} flows only fit as classes; allowed: fewer GPUs, "
                    "solver.aggregate: never (if it fits), or no failures section")
    jobs = [c for c in collectives if c.job]
    if len(jobs) > 1:
        flows = sum(max(p.flows.num_flows for p in c.phases) for c in jobs)
        for name in scenario.policies:
            pairs = flows * slots_per_flow(name, scenario)
            if pairs > AGGREGATE_ABOVE:
                raise ScenarioError(
                    "jobs", f"jobs sharing the fabric are solved flow by flow: up to "
                    f"{flows:,} concurrent flows x {slots_per_flow(name, scenario)} paths "
                    f"under '{name}' exceed {AGGREGATE_ABOVE:,} flow-path pairs; allowed: "
                    "fewer or smaller jobs, fewer EVs, or one job per scenario")


# --------------------------------------------------------------------------- failure batches

CPU_SETS_PER_CALL = 16   # failure sets per device call on a CPU (progress granularity)
MAX_VMAP_WIDTH = 256


def bytes_per_set(policy: str, links: int, planes: int, num_flows: int, slots: int) -> int:
    """A rough upper estimate of the device memory one failure set needs inside a vmapped
    chunk (the max-min solve's [F, E] entry arrays dominate, plus the policy's own draws)."""
    entries = num_flows * (2 * slots + 2 * planes)
    per = 4 * (12 * (links + 1) + 16 * entries)
    return int(per + coefficients(policy).failure_bytes_per_slot * num_flows * slots)


def vmap_width(policy: str, links: int, planes: int, num_flows: int, slots: int,
               samples: int) -> int:
    """Failure sets evaluated together (vmapped) inside one device call: 1 on a CPU, else what
    fits in a quarter of the accelerator's memory, at most MAX_VMAP_WIDTH.

    On a CPU vmapping does not pay (measured on 2 cores: 4 or 16 spray sets vmapped were
    1.3-1.5x slower per set than one at a time) and it costs bit-reproducibility: XLA reduces a
    batched array in another order, and the optimal bound's commodity solve then differs in
    the last float32 bit. One set at a time keeps every chunk size byte-identical."""
    device = current_device()
    if device.platform == "cpu":
        return 1
    try:
        limit = (device.memory_stats() or {}).get("bytes_limit", 16 * 2**30)
    except Exception:  # noqa: BLE001 - a backend without memory statistics: assume 16 GiB
        limit = 16 * 2**30
    per_set = max(bytes_per_set(policy, links, planes, num_flows, slots), 1)
    fit = max(1, int(limit // 4 // per_set))
    return max(1, min(MAX_VMAP_WIDTH, fit, samples))


def sets_per_call(width: int, samples: int, configured: int | None = None,
                  num_devices: int = 1) -> int:
    """Failure sets per device call: `failures.chunk` when given, else CPU_SETS_PER_CALL or
    one vmapped group per device, whichever is larger; rounded up to a multiple of the vmap
    width times the devices the call is sharded over."""
    group = width * max(num_devices, 1)
    wanted = configured if configured is not None else max(group, CPU_SETS_PER_CALL)
    wanted = min(wanted, samples)
    return group * max(1, -(-wanted // group))


# --------------------------------------------------------------------------- memory model

@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Upper estimate of a run's peak memory, in bytes, and the part that dominates it."""

    total: int
    runtime: int             # JAX and the compiled solves
    fabric: int
    solve: int               # the largest single policy solve (the total holds every one)
    solve_policy: str
    flows: int               # the most concurrent flows of a phase
    slots: int               # that policy's path slots per flow
    failure_records: int     # the failure study: records, component lists, one set's solve
    dynamic: int = 0         # the dynamic level's run of the largest phase (solver.model)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def phase_flows(item, fabric_gpus: int, traffic_flows: int | None = None) -> int:
    """The most concurrent flows of one phase of a workload item or job of J GPUs: J for a
    permutation, a ring or halving-doubling step and send-recv, J - 1 for incast, 4(J - 1)
    for the double tree, J(J - 1) for an all-to-all, the file's flows for a traffic matrix
    and the largest phase of a Chakra trace (counted when the scenario was loaded; J if
    unknown). A training step: the largest of its phases, J for the TP and DP rings, 2J(pp-1)/pp
    for the pipeline sends, J(ep - 1) for the expert all-to-alls."""
    j = job_size(item, fabric_gpus)
    kind = item.collective
    if kind in ("traffic", "chakra"):
        return traffic_flows if traffic_flows is not None else j
    if kind == "training":
        return max(flows for flows, _ in training_phase_flows(item, j))
    if kind == "all-to-all":
        return j * (j - 1)
    if kind == "all-reduce" and item.algorithm == "tree":
        return 4 * (j - 1)
    return j - 1 if kind == "incast" else j


def training_phase_flows(item, gpus: int) -> list[tuple[int, bool]]:
    """(flows, uniform) of every kind of phase of a training step on `gpus` GPUs: the TP and
    DP ring steps (one flow per GPU), the pipeline sends (2 per stage boundary and pipeline,
    unequal out-degrees: never classes), the expert all-to-alls."""
    par = item.parallel
    out = [(gpus if par.tp > 1 or par.tp * par.pp < gpus else 0, True),
           (2 * gpus * (par.pp - 1) // par.pp, False)]
    if par.ep > 1:
        out.append((gpus * (par.ep - 1), True))
    return out


def phase_candidates(scenario: Scenario) -> list[tuple[int, bool, bool]]:
    """(flows, may_aggregate, alone) of the largest phase of every workload item and job,
    plus the jobs' phases all at once (never aggregated) when jobs share the fabric. Only
    phases whose flows all send the same bytes from the start can be solved as classes."""
    n = scenario.fabric.gpus
    counts = scenario.traffic_flows
    out = []
    for section, i, item in scenario.items:
        if item.collective == "training":
            out += [(flows, uniform, True)
                    for flows, uniform in training_phase_flows(item, job_size(item, n))]
            continue
        flows = phase_flows(item, n, counts.get((section, i)))
        uniform = item.collective not in ("traffic", "chakra") and not (
            item.collective == "all-to-all" and item.skew > 0)
        out.append((flows, uniform, True))
    if len(scenario.jobs) > 1:
        out.append((sum(phase_flows(job, n, counts.get(("jobs", i)))
                        for i, job in enumerate(scenario.jobs)), False, False))
    return out


def max_flows(scenario: Scenario) -> int:
    """The most concurrent flows of any phase (jobs sharing the fabric: all of theirs)."""
    return max(flows for flows, _, _ in phase_candidates(scenario))


def aggregated(scenario: Scenario, policy: str, flows: int) -> bool:
    """Whether `policy` would solve a phase of `flows` flows by classes (`aggregation_wanted`;
    the phase must also be uniform, which the largest all-to-alls are)."""
    mode = scenario.solver.aggregate
    if (scenario.fabric.kind != FabricKind.CLOS or not get(policy).aggregatable
            or mode == "never"):
        return False
    return mode == "always" or flows * slots_per_flow(policy, scenario) > AGGREGATE_ABOVE


def aggregated_bytes(flows: int, geom) -> float:
    """Host flow arrays plus the class arrays: C classes (at most one per flow and per T0
    pair) x planes x spines of slot counts (int64 counts and their float32 copy on the
    device; a policy whose counts are the same on every spine needs less)."""
    classes = min(flows, geom.t0s * geom.t0s)
    return BYTES_PER_AGGREGATED_FLOW * flows + classes * geom.planes * geom.spines * 12


def estimate_memory(scenario: Scenario) -> MemoryEstimate:
    """The estimate (an upper bound of the peak, see the module docstring). Fat trees and
    graph files store [F, K, H] link ids (H = 6 on a fat tree, up to 2 GRAPH_HOPS on a
    graph file) on the host and the device, and their solves gather per stored hop: each
    slot of the widest policy costs BYTES_PER_STORED_HOP per hop once (the phase's paths
    serve every policy), beside each policy's own per-slot bytes, and the graph (networkx,
    the path search) GRAPH_RUNTIME_BYTES once (both in `fabric`)."""
    check_sections(scenario)
    clos = scenario.fabric.kind == FabricKind.CLOS
    geom = clos_geometry(scenario.fabric) if clos else None
    flows = max_flows(scenario)
    fabric = BYTES_PER_LINK * (geom.num_links + 1) if clos else GRAPH_RUNTIME_BYTES
    stored_hops = (0 if clos else 6 if scenario.fabric.kind == FabricKind.FAT_TREE
                   else 2 * GRAPH_HOPS)
    candidates = phase_candidates(scenario)

    def solve_bytes(policy: str, flows: int, uniform: bool) -> float:
        if uniform and aggregated(scenario, policy, flows):
            return aggregated_bytes(flows, geom)
        per_slot = coefficients(policy).bytes_per_slot
        return per_slot * padded_flows(scenario, flows) * slots_per_flow(policy, scenario)

    solves = {policy: max(solve_bytes(policy, f, u) for f, u, _ in candidates)
              for policy in scenario.policies}
    # a phase's stored paths are built once and shared by every policy (the widest's slots)
    stored = stored_hops * BYTES_PER_STORED_HOP * flows * max(
        (slots_per_flow(p, scenario) for p in scenario.policies), default=0)
    policy = max(solves, key=solves.get)
    records = 0
    if scenario.failures is not None:   # failure sets run each item alone
        alone = max(f for f, _, alone in candidates if alone)
        records = _failure_study_bytes(scenario, {p: solve_bytes(p, alone, False)
                                                  for p in scenario.policies},
                                       alone, solves[policy])
    compiled = sum(coefficients(p).compiled_bytes for p in scenario.policies)
    runtime = RUNTIME_BYTES + compiled * (2 if scenario.failures is not None else 1)
    dynamic = 0
    if scenario.solver.model == "dynamic":     # beside the static solve it starts from
        hops = 4 if clos else stored_hops
        dynamic = max(dynamic_memory(flows, slots_per_flow(p, scenario), hops,
                                     geom.num_links if clos else 0, LAG_STEPS_MAX,
                                     ACK_LAG_STEPS_MAX) for p in scenario.policies)
    # a policy's solve leaves part of itself resident beside the next one's (its outcome
    # feeds the report): measured on the bundled all-to-all, ecmp, spray, mrc and optimal
    # alone peak at 294, 432, 470 and 466 MiB and together at 1,002 MiB, so the largest solve
    # counts whole and each other one by RESIDENT_SHARE (all of each: 2.03x the peak of the
    # 131,072-GPU stargate's three policies; only the largest: 0.80x the all-to-all's)
    others = sum(solves.values()) - solves[policy]
    total = runtime + fabric + stored + solves[policy] + RESIDENT_SHARE * others + records + \
        dynamic
    return MemoryEstimate(total=int(total), runtime=int(runtime), fabric=int(fabric + stored),
                          solve=int(solves[policy]), solve_policy=policy, flows=flows,
                          slots=slots_per_flow(policy, scenario), failure_records=int(records),
                          dynamic=int(dynamic))


def dynamic_memory(num_flows: int, slots: int, hops: int, num_links: int = 0,
                   lag: int = 0, ack_lag: int = 0) -> int:
    """Estimated peak device bytes of one dynamic run (`lag`: steps of feedback delay, whose
    link signals the loop keeps; `ack_lag`: steps of ACK delay, whose per-flow echoes it
    keeps)."""
    return (num_flows * slots * (hops * BYTES_PER_ENTRY + BYTES_PER_SLOT) +
            num_flows * (ack_lag + 1) * BYTES_PER_FLOW_ECHO +
            (lag + 1) * (num_links + 1) * BYTES_PER_LINK_SIGNAL + DYNAMIC_COMPILED_BYTES)


def components_per_set(scenario: Scenario, target=None) -> float:
    """An upper estimate of the failed components in one set: every name, every random draw,
    and the mean plus four standard deviations of the probability draws. `target`: the Clos
    geometry or built fabric (built here when a probability needs the population)."""
    total = 0.0
    for kind, cfg in scenario.failures.kinds.items():
        rest = 0
        if cfg.probability > 0:
            if target is None:
                target = (clos_geometry(scenario.fabric)
                          if scenario.fabric.kind == FabricKind.CLOS else build(scenario))
            rest = max(population(target, kind, cfg) - len(cfg.names) - cfg.random, 0)
        mean = rest * cfg.probability
        total += len(cfg.names) + cfg.random + mean + 4.0 * math.sqrt(
            mean * (1.0 - cfg.probability))
    return total


def _failure_study_bytes(scenario: Scenario, set_solves: dict[str, float], flows: int,
                         solve: float) -> float:
    """Host records and component lists of every set, plus what one set's solve needs beyond
    the no-failure `solve` it follows (the sets run the same program over masks, one at a
    time on a CPU, after the no-failure solve has freed its arrays): each policy's solve of
    the item alone (`set_solves`) and its per-set candidate draws. A record names at most
    COMPONENTS_SHOWN components unless failures.detail is full."""
    sets = scenario.failures.num_samples
    records = sets * len(scenario.policies) * len(scenario.items)
    components = components_per_set(scenario)
    named = components if scenario.failures.detail == "full" else min(components,
                                                                       COMPONENTS_SHOWN)
    device = max(set_solves[p] + coefficients(p).failure_bytes_per_slot * flows *
                 slots_per_flow(p, scenario) for p in scenario.policies)
    return (records * (BYTES_PER_FAILURE_RECORD + BYTES_PER_RECORD_COMPONENT * named) +
            sets * components * BYTES_PER_COMPONENT + max(device - solve, 0.0))


def available_memory() -> int | None:
    """Bytes this process may still allocate: the accelerator's memory limit when JAX runs on
    one (memory statistics), else the host's MemAvailable; None when neither is known."""
    device = current_device()
    if device.platform != "cpu":
        try:
            stats = device.memory_stats() or {}
        except Exception:  # noqa: BLE001 - a backend without memory statistics
            stats = {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _fitting_change(scenario: Scenario, estimate: MemoryEstimate, limit: int) -> str:
    """The first change, in the order a user would try them, whose estimate fits: fewer paths
    for the dominant policy, fewer policies, fewer failure sets; else a smaller fabric."""
    def fits(changed: Scenario) -> bool:
        return estimate_memory(changed).total <= limit

    def with_field(section: str, field: str, value: int) -> Scenario:
        part = (scenario.section(section) or getattr(scenario, section)).model_copy(
            update={field: value})
        return scenario.model_copy(update={section: part})

    paths = get(estimate.solve_policy).path_field(scenario)
    if paths is not None:
        section, field, step = paths
        current = getattr(scenario.section(section) or getattr(scenario, section), field)
        for value in range(current - step, step - 1, -step):
            if fits(with_field(section, field, value)):
                multiple = " (a multiple of fabric.planes)" if step > 1 else ""
                return f"{section}.{field} <= {value}{multiple}"
    # keep the cheapest policies that fit together
    cheapest = sorted(scenario.policies,
                      key=lambda p: (coefficients(p).bytes_per_slot *
                                     slots_per_flow(p, scenario)))
    for keep in range(len(cheapest) - 1, 0, -1):
        kept = [p for p in scenario.policies if p in cheapest[:keep]]
        if fits(scenario.model_copy(update={"policies": kept})):
            return "only " + " ".join(f"--policy {p}" for p in kept)
    if scenario.failures is not None and estimate.failure_records:
        per_set = estimate.failure_records // max(scenario.failures.num_samples, 1)
        spare = limit - (estimate.total - estimate.failure_records)
        if spare >= per_set:
            samples = int(spare // per_set)
            fewer = scenario.failures.model_copy(update={"samples": samples})
            if fits(scenario.model_copy(update={"failures": fewer})):
                return f"--samples {samples:,} (failures.samples)"
    return "a smaller fabric or job (fabric.gpus, workload[].gpus)"


def check_memory(scenario: Scenario, limit: int | None, *, option: str = "--max-memory"
                 ) -> MemoryEstimate:
    """The estimate, or a ScenarioError when it exceeds `limit` bytes (None: no check). A
    scenario loaded before the policies registered has its policy sections checked first."""
    estimate = estimate_memory(scenario)
    if limit is not None and estimate.total > limit:
        part = (f"{estimate.solve_policy} on {estimate.flows:,} flows x {estimate.slots:,} "
                f"paths: {format_bytes(estimate.solve)}")
        raise ScenarioError(
            "", f"needs about {format_bytes(estimate.total)} of memory ({part}), more than "
            f"the {format_bytes(limit)} available ({option}); would fit: "
            f"{_fitting_change(scenario, estimate, limit)}")
    return estimate
