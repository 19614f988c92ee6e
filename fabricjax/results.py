"""Result containers: plain data that the studies fill and the reports render (no I/O, no
JAX). Every number that was not computed is None, and a status says why; `as_dict` gives the
JSON form."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PolicyRecord:
    """One row of the report: one policy on one workload item."""

    policy: str
    workload: str
    collective: str
    gpus: int
    size_bytes: float
    steps: int
    paths_per_flow: int
    p50_utilisation: float
    p99_utilisation: float
    p100_utilisation: float
    utilisation_by_tier: dict
    completion_s: float | None
    line_rate_s: float                   # payload bytes x 8 / NIC rate of the busiest sender,
                                         # every repeat: no overhead, nothing contends
    endpoint_bound_s: float              # a perfect network with the transport: the busiest
                                         # NIC's wire bytes at line rate, plus the latencies
    slowdown: float | None               # completion / line_rate_s
    fabric_slowdown: float | None        # completion / endpoint_bound_s: the fabric's share
    algbw_gbps: float | None
    busbw_gbps: float | None
    line_rate_busbw_gbps: float
    min_rate_gbps: float
    status: str
    stalled_flows: int
    rate_rounds: int
    bottleneck_links: list
    iterations: int | None = None        # mrc: EV-swap iterations; optimal: solver iterations
    convergence: str | None = None       # mrc / optimal: how the iteration ended
    residual: float | None = None        # mrc: overload of the returned EVs; optimal: gap
    trace: list | None = None            # mrc with --trace: P100 after each iteration
    algorithm: str = ""                  # ring, tree, halving-doubling, hierarchical ring, ...
    job: bool = False                    # from `jobs` (shares the fabric; see Report.sharing)
    progressive_s: float | None = None   # completion under the progressive (flow-level) model
    progressive_status: str | None = None  # what the progressive figures are subject to
    progressive_reason: str | None = None  # why there are none (over auto's bound, classes)
    fct_p50_s: float | None = None       # flow completion times (progressive), over the fabric
    fct_p99_s: float | None = None       # flows of every step
    fct_max_s: float | None = None
    events: int | None = None            # most progressive events in one phase
    aggregated_classes: int | None = None  # all-to-all solved as this many T0-pair classes
    utilisation_cdf: list | None = None  # busiest phase: utilisation at quantiles 0..1 (101)
    dynamic: dict | None = None          # solver.model dynamic: the dynamic level's figures
                                         # (metrics.dynamic_figures), its own section

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """A training step (or Chakra trace) under one policy, split by parallel dimension.

    `comm_s`: the step's communication, its phases one after another (the record's
    completion_s); `dimensions`: one dict per dimension (time, share, bytes and busbw per GPU,
    the slowest process group and the links that bound it); with a compute time, `compute_s`
    of the step, the communication hidden under it (`overlapped_s`, by `overlap_rule`), the
    rest (`exposed_s`) and `step_s` = compute + exposed. None where not computed (a stalled
    flow, no compute time given)."""

    policy: str
    workload: str
    gpus: int
    plan: str
    comm_s: float | None
    line_rate_s: float          # the step's communication at line rate, no overhead
    endpoint_bound_s: float     # and on a perfect network with the transport
    dominant: str | None
    dimensions: list
    compute_s: float | None = None
    overlapped_s: float | None = None
    exposed_s: float | None = None
    step_s: float | None = None
    overlap_rule: str = ""
    status: str = "ok"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SharingRow:
    """One job under one policy: its completion alone on the fabric and sharing it with the
    scenario's other jobs (None when a flow stalls), together / alone, and the flags of the
    solves (round_limit, iteration_cap) that the figures rest on."""

    policy: str
    job: str
    gpus: int
    alone_s: float | None
    together_s: float | None
    slowdown: float | None
    mixes: int              # distinct sets of concurrent phases solved together
    status: str = "ok"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FailureSummary:
    """One policy on one workload item, over all failure sets."""

    policy: str
    workload: str
    sets: int
    p100_utilisation: dict | None       # P50 / P99 / max over sets of the P100
    completion_s: dict | None           # over the sets where no flow stalled
    slowdown: dict | None               # completion / the line-rate time
    fabric_slowdown: dict | None        # completion / the endpoint-bound time
    stalled_sets: int                   # sets in which some flow has no live path
    worst_set: int                      # index of the worst set (stalled first, then slowest)
    worst_set_components: list          # its first names (all with failures.detail: full)
    top_p100_links: list                # [{link, sets}]: links that most often set the P100
    window_s: float | None              # reaction window of the policy (None: no transient)
    sets_hit: int                       # sets in which some flow lost bytes (transient)
    affected_flows_mean: float
    stall_s_mean: float | None
    crashed_sets: int
    gpu_seconds_lost_mean: float | None
    status: str                         # flags seen in any set
    worst_set_components_total: int = 0  # how many components the worst set failed
    dynamic: dict | None = None         # solver.model dynamic: the sets in time
                                        # (metrics._dynamic_summary)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FailureStudy:
    samples: int
    seed: int
    components_per_set: dict             # kind -> P50 / max of the count per set
    records: list                        # dicts, one per (policy, workload item, set)
    summaries: list                      # FailureSummary

    def as_dict(self) -> dict:
        return {"samples": self.samples, "seed": self.seed,
                "components_per_set": self.components_per_set,
                "summary": [s.as_dict() for s in self.summaries], "records": self.records}


@dataclasses.dataclass(frozen=True)
class ReliabilityRow:
    """Expected cost of component failures to one job under one policy."""

    policy: str
    workload: str
    gpus: int
    cables_used: int                 # fabric cables that carry the job's traffic
    switches_used: int
    nic_ports_used: int
    events_per_hour: float           # failures that hit the job's traffic
    fabric_events_per_hour: float    # all failures of the fabric's components
    window_s: float
    stall_s_per_hour: float
    crashes_per_hour: float
    crash_probability: float         # over `hours`
    hours: float
    gpu_seconds_lost_per_event: float
    gpu_hours_lost_per_day: float
    events_per_1000_steps: float | None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything `fabricjax analyze` computed for one scenario."""

    scenario: str
    seed: int
    fabric: dict
    records: list[PolicyRecord]
    solver: dict
    config: dict          # the whole validated scenario, so a report can be reproduced
    failures: FailureStudy | None = None
    reliability: list | None = None  # ReliabilityRow per policy and job
    sharing: list | None = None      # SharingRow per policy and job, with two or more jobs
    sensitivity: list | None = None  # with --sensitivity: {policy, workload, links} per item
    versions: dict | None = None     # fabricjax, JAX, numpy, Python and the device
    steps: list | None = None        # StepRecord per policy and training item or trace
    # what the reports say of each policy, {name: {"label", "residual"}} (not in the JSON:
    # the policies' declarations, so renderers never ask a policy's name)
    policies: dict | None = None
