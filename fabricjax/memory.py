"""The memory model: what a scenario's arrays will need, estimated from the config alone.

`estimate_memory` runs before anything large is allocated (no fabric arrays, no flows,
nothing on a device); `check_memory` refuses a scenario whose estimate exceeds the limit
(`--max-memory`, else what the machine has available) with a ScenarioError that names the
estimate, its largest part and a change that would fit. The coefficients are peak resident
bytes measured on the CPU (`bench/memory_calibration.py`) and rounded up, so the estimate is
an upper bound of the peak (1.1-1.5x of it on the calibration rows), not a description of
each array.
"""

from __future__ import annotations

import dataclasses
import math
import os

from fabricjax.errors import ScenarioError
from fabricjax.fabric import clos_geometry
from fabricjax.scenario import Scenario, job_size
from fabricjax.units import format_bytes

# Peak resident bytes, measured (bench/memory_calibration.py, 2-core CPU, JAX 0.10) and rounded
# up: the Python process with JAX loaded; the compiled solves of one policy (twice with a
# failure study, which compiles its own); per directed link (fabric arrays, link loads,
# statistics); per flow-path slot entry ([F, K] slots, [F, K, H] link ids, the max-min
# solve's entry arrays; mrc adds its candidate draws and loads per iteration). mrc's was
# 200 bytes before its iteration moved to [F, K] arrays (issue 7); recalibrated to 100.
RUNTIME_BYTES = 350 * 2**20
COMPILED_BYTES = {"ecmp": 50 * 2**20, "spray": 50 * 2**20, "mrc": 100 * 2**20,
                  "optimal": 50 * 2**20}
BYTES_PER_LINK = 120
BYTES_PER_SLOT = {"ecmp": 80, "spray": 80, "mrc": 100, "optimal": 100}
# A failure study on the host: each (policy, workload item, set) record with its JSON text;
# each failed component of a set (its name, ids, the list the records share) and its line in
# every record's JSON `components`. Measured on bench/memory_calibration.py's failure rows.
# An all-to-all solved by classes (fabricjax.aggregate) keeps its flows on the host: int32
# ids, float64 sizes, the int64 class keys and the scale-up split's masks (not yet
# calibrated by bench/memory_calibration.py: counted from the arrays, rounded up).
BYTES_PER_AGGREGATED_FLOW = 64
BYTES_PER_FAILURE_RECORD = 6_000
BYTES_PER_COMPONENT = 400
BYTES_PER_RECORD_COMPONENT = 50


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Upper estimate of a run's peak memory, in bytes, and the part that dominates it."""

    total: int
    runtime: int             # JAX and the compiled solves
    fabric: int
    solve: int               # the largest single policy solve (policies run one at a time)
    solve_policy: str
    flows: int               # the most concurrent flows of a phase
    slots: int               # that policy's path slots per flow
    failure_records: int     # the failure study: records, component lists, one set's solve

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def slots_per_flow(policy: str, scenario: Scenario) -> int:
    """K: the path slots each flow carries under `policy` (optimal: the whole P x S grid)."""
    planes = scenario.fabric.planes
    if policy == "ecmp":
        return scenario.ecmp.qps * planes
    if policy == "spray":
        return scenario.spray.evs
    if policy == "mrc":
        return scenario.mrc.evs
    geom = clos_geometry(scenario.fabric)
    return planes * geom.spines


def phase_flows(item, fabric_gpus: int, traffic_flows: int | None = None) -> int:
    """The most concurrent flows of one phase of a workload item or job of J GPUs: J for a
    permutation, a ring or halving-doubling step and send-recv, J - 1 for incast, 4(J - 1)
    for the double tree, J(J - 1) for an all-to-all, the file's flows for a traffic matrix
    (counted when the scenario was loaded; J if unknown)."""
    j = job_size(item, fabric_gpus)
    kind = item.collective
    if kind == "traffic":
        return traffic_flows if traffic_flows is not None else j
    if kind == "all-to-all":
        return j * (j - 1)
    if kind == "all-reduce" and item.algorithm == "tree":
        return 4 * (j - 1)
    return j - 1 if kind == "incast" else j


def phase_candidates(scenario: Scenario) -> list[tuple[int, bool, bool]]:
    """(flows, may_aggregate, alone) of the largest phase of every workload item and job,
    plus the jobs' phases all at once (never aggregated) when jobs share the fabric. Only
    phases whose flows all send the same bytes from the start can be solved as classes."""
    n = scenario.fabric.gpus
    counts = getattr(scenario, "_traffic_flows", None) or {}
    out = []
    for section, i, item in scenario.items:
        flows = phase_flows(item, n, counts.get((section, i)))
        uniform = item.collective != "traffic" and not (
            item.collective == "all-to-all" and item.skew > 0)
        out.append((flows, uniform, True))
    if len(scenario.jobs) > 1:
        out.append((sum(phase_flows(job, n, counts.get(("jobs", i)))
                        for i, job in enumerate(scenario.jobs)), False, False))
    return out


def max_flows(scenario: Scenario) -> int:
    """The most concurrent flows of any phase (jobs sharing the fabric: all of theirs)."""
    return max(flows for flows, _, _ in phase_candidates(scenario))


def _graph_estimate(scenario: Scenario) -> MemoryEstimate:
    """Fat-tree and graph fabrics (ecmp and spray over stored link ids, fabricjax.
    graph_analysis): [F, K, H] link ids with H up to 8 links, as the flow-by-flow solves
    (not calibrated separately; the per-slot coefficient of spray, doubled for the longer
    paths)."""
    flows = max_flows(scenario)
    slots = max(scenario.fabric.paths, scenario.ecmp.qps)
    solve = 2 * BYTES_PER_SLOT["spray"] * flows * slots
    runtime = RUNTIME_BYTES + sum(COMPILED_BYTES[p] for p in scenario.policies)
    return MemoryEstimate(total=int(runtime + solve), runtime=int(runtime), fabric=0,
                          solve=int(solve), solve_policy="spray", flows=flows, slots=slots,
                          failure_records=0)


def aggregated(scenario: Scenario, policy: str, flows: int) -> bool:
    """Whether `policy` would solve a phase of `flows` flows by classes (analysis'
    `aggregation_wanted`; the phase must also be uniform, which the largest all-to-alls are)."""
    from fabricjax.analysis import AGGREGATE_ABOVE

    mode = scenario.solver.aggregate
    if policy not in ("ecmp", "spray") or mode == "never":
        return False
    return mode == "always" or flows * slots_per_flow(policy, scenario) > AGGREGATE_ABOVE


def aggregated_bytes(scenario: Scenario, policy: str, flows: int, geom) -> float:
    """Host flow arrays plus the class arrays: C classes (at most one per flow and per T0
    pair) x planes, times the spines for ECMP's per-spine QP counts (int64 counts and their
    float32 copy on the device)."""
    classes = min(flows, geom.t0s * geom.t0s)
    per_class = geom.planes * (geom.spines * 12 if policy == "ecmp" else 4)
    return BYTES_PER_AGGREGATED_FLOW * flows + classes * per_class


def estimate_memory(scenario: Scenario) -> MemoryEstimate:
    if scenario.fabric.kind != "multiplane-clos":
        return _graph_estimate(scenario)
    geom = clos_geometry(scenario.fabric)
    flows = max_flows(scenario)
    fabric = BYTES_PER_LINK * (geom.num_links + 1)
    candidates = phase_candidates(scenario)

    def solve_bytes(policy: str, flows: int, uniform: bool) -> float:
        if uniform and aggregated(scenario, policy, flows):
            return aggregated_bytes(scenario, policy, flows, geom)
        return BYTES_PER_SLOT[policy] * flows * slots_per_flow(policy, scenario)

    solves = {policy: max(solve_bytes(policy, f, u) for f, u, _ in candidates)
              for policy in scenario.policies}
    policy = max(solves, key=solves.get)
    records = 0
    if scenario.failures is not None:   # failure sets run each item alone
        records = _failure_study_bytes(scenario, geom,
                                       max(f for f, _, alone in candidates if alone))
    runtime = RUNTIME_BYTES + sum(COMPILED_BYTES[p] for p in scenario.policies) * (
        2 if scenario.failures is not None else 1)
    total = runtime + fabric + solves[policy] + records
    return MemoryEstimate(total=int(total), runtime=int(runtime), fabric=int(fabric),
                          solve=int(solves[policy]), solve_policy=policy, flows=flows,
                          slots=slots_per_flow(policy, scenario), failure_records=int(records))


def components_per_set(scenario: Scenario, geom=None) -> float:
    """An upper estimate of the failed components in one set: every name, every random draw,
    and the mean plus four standard deviations of the probability draws."""
    from fabricjax.failures import population

    geom = geom if geom is not None else clos_geometry(scenario.fabric)
    total = 0.0
    for kind, cfg in scenario.failures.kinds.items():
        rest = max(population(geom, kind, cfg) - len(cfg.names) - cfg.random, 0)
        mean = rest * cfg.probability
        total += len(cfg.names) + cfg.random + mean + 4.0 * math.sqrt(
            mean * (1.0 - cfg.probability))
    return total


def _failure_study_bytes(scenario: Scenario, geom, flows: int) -> float:
    """Host records and component lists of every set, plus one set's device working set
    (CPU runs the sets of a call one at a time)."""
    from fabricjax.failures import bytes_per_set

    sets = scenario.failures.num_samples
    records = sets * len(scenario.policies) * len(scenario.items)
    components = components_per_set(scenario, geom)
    device = max(bytes_per_set(p, geom, flows, slots_per_flow(p, scenario))
                 for p in scenario.policies)
    return (records * (BYTES_PER_FAILURE_RECORD + BYTES_PER_RECORD_COMPONENT * components) +
            sets * components * BYTES_PER_COMPONENT + device)


def available_memory() -> int | None:
    """Bytes this process may still allocate: the accelerator's memory limit when JAX runs on
    one (memory statistics), else the host's MemAvailable; None when neither is known."""
    from fabricjax.devices import current_device  # imports JAX: only called from the CLI

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

    def with_section(section: str, **fields) -> Scenario:
        part = getattr(scenario, section).model_copy(update=fields)
        return scenario.model_copy(update={section: part})

    policy, planes = estimate.solve_policy, scenario.fabric.planes
    if policy in ("spray", "mrc"):
        for evs in range(getattr(scenario, policy).evs - planes, planes - 1, -planes):
            if fits(with_section(policy, evs=evs)):
                return f"{policy}.evs <= {evs} (a multiple of fabric.planes)"
    if policy == "ecmp":
        for qps in range(scenario.ecmp.qps - 1, 0, -1):
            if fits(with_section("ecmp", qps=qps)):
                return f"ecmp.qps <= {qps}"
    # keep the cheapest policies that fit together
    cheapest = sorted(scenario.policies,
                      key=lambda p: BYTES_PER_SLOT[p] * slots_per_flow(p, scenario))
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
    """The estimate, or a ScenarioError when it exceeds `limit` bytes (None: no check)."""
    estimate = estimate_memory(scenario)
    if limit is not None and estimate.total > limit:
        part = (f"{estimate.solve_policy} on {estimate.flows:,} flows x {estimate.slots:,} "
                f"paths: {format_bytes(estimate.solve)}")
        raise ScenarioError(
            "", f"needs about {format_bytes(estimate.total)} of memory ({part}), more than "
            f"the {format_bytes(limit)} available ({option}); would fit: "
            f"{_fitting_change(scenario, estimate, limit)}")
    return estimate
