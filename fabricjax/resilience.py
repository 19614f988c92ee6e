"""What failures cost each policy: batched failure sets in, distributions and transients out.

Contract: `failure_study` takes the scenario, its fabric and workload and the baseline (no
failure) outcomes of `analysis` (the slots each policy ran on), evaluates every failure set of
`failures.sample_failures` under every policy in chunked, jitted calls, and returns one
`FailureStudy`: a record per (policy, workload item, failure set) and a `FailureSummary` per
(policy, workload item). `reliability_whatif` turns component failure rates into expected
events, stall time and crash probability per policy. Nothing here loops over flows or links;
the loops are over policies, workload phases and chunks of failure sets.

The transient (README, "Failures"): a flow with bytes on a pre-failure path that died is
*affected*; its collective step stalls until the policy reacts: routing reconvergence for ECMP
(flows hashed onto the dead path are black-holed) and for oblivious spraying (it keeps spraying
onto the dead EVs until routing withdraws them), MRC's reaction time for MRC. A stall at least
as long as the transport timeout fails the job, which then restarts from a checkpoint. The
optimal bound has no transient. GPU-seconds lost = stall x the job's GPUs.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable

import numpy as np

from fabricjax.devices import device_mesh, fetch, place, shard_devices
from fabricjax.fabric import TIER_NAMES, Fabric
from fabricjax.failures import (STALLED_SHOWN, FailureBatch, SetOutcome, sample_failures,
                                sets_per_call, solve_failure_chunk, vmap_width)
from fabricjax.scenario import FailuresConfig, Scenario
from fabricjax.solver import status_names
from fabricjax.workload import Collective

QUANTILES = {"p50": 50.0, "p99": 99.0, "max": 100.0}


def reaction_window_s(policy: str, cfg: FailuresConfig) -> float | None:
    """How long an affected flow's lost bytes stay lost under `policy` (None: no transport)."""
    if policy in ("ecmp", "spray"):
        return cfg.reconvergence_s
    if policy == "mrc":
        return cfg.mrc_reaction_us * 1e-6
    return None


def _distribution(values: np.ndarray) -> dict | None:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    return {name: float(np.percentile(values, q)) for name, q in QUANTILES.items()}


@dataclasses.dataclass(frozen=True)
class FailureSummary:
    """One policy on one workload item, over all failure sets."""

    policy: str
    workload: str
    sets: int
    p100_utilisation: dict | None       # P50 / P99 / max over sets of the P100
    completion_s: dict | None           # over the sets where no flow stalled
    slowdown: dict | None
    stalled_sets: int                   # sets in which some flow has no live path
    worst_set: int                      # index of the worst set (stalled first, then slowest)
    worst_set_components: list
    top_p100_links: list                # [{link, sets}]: links that most often set the P100
    window_s: float | None              # reaction window of the policy (None: no transient)
    sets_hit: int                       # sets in which some flow lost bytes (transient)
    affected_flows_mean: float
    stall_s_mean: float | None
    crashed_sets: int
    gpu_seconds_lost_mean: float | None
    status: str                         # flags seen in any set

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


def _policy_extra(policy: str, scenario: Scenario, fabric: Fabric, flows, outcome,
                  item: int, index: int) -> dict:
    """The policy's pre-failure state for one phase (what every failure set starts from)."""
    from fabricjax.analysis import _POLICY_STREAM, phase_key

    if policy == "optimal":
        from fabricjax.optimal import commodities, full_slot_grid

        groups = commodities(fabric.geometry, flows.src, flows.dst)
        plane, spine = full_slot_grid(fabric.geometry, flows.num_flows)
        return dict(plane=plane, spine=spine, flow_commodity=groups.flow_commodity,
                    comm_src=groups.src_t0, comm_dst=groups.dst_t0,
                    max_iters=np.int32(scenario.optimal.max_iters),
                    tol=np.float32(scenario.optimal.tol))
    import jax

    extra = dict(plane=outcome.plane, spine=outcome.spine)
    # PRNG keys travel as raw key data: plain uint32 arrays can be placed as global arrays
    if policy == "ecmp":   # the switches' hash for re-hashing: fixed per flow, not per set
        extra["key"] = jax.random.key_data(phase_key(scenario.seed, item, index,
                                                     _POLICY_STREAM["ecmp"]))
    if policy == "mrc":
        cfg = scenario.mrc
        extra.update(key=jax.random.key_data(phase_key(scenario.seed, item, index,
                                                       _POLICY_STREAM["mrc"])),
                     threshold=np.float32(cfg.threshold), damping=np.float32(cfg.damping),
                     tol=np.float32(cfg.tol))
    return extra


def solve_failure_sets(policy: str, scenario: Scenario, fabric: Fabric, flows, outcome,
                       batch: FailureBatch, stream: tuple[int, int],
                       progress: Callable[[int], None] | None = None):
    """Every failure set of `batch` under `policy` for one phase: SetOutcome of numpy arrays
    with a leading [B] axis. One compiled function per (policy, phase shape), chunks padded to
    one shape so that no chunk recompiles. With several devices (`devices.shard_devices`) each
    chunk is sharded over them, and in a distributed run results are gathered from every
    process."""
    from fabricjax.analysis import TOP_LINKS, _phase_inputs, _tier_bounds, slowest_only

    g = fabric.geometry
    demand, size32, flow_cap, capacity, _, eps, max_rounds = _phase_inputs(
        fabric, flows, scenario, None)
    common = dict(src=flows.src, dst=flows.dst, demand=demand, size=size32, flow_cap=flow_cap,
                  capacity=capacity, link_src=fabric.link_src, link_dst=fabric.link_dst,
                  eps=eps, max_rounds=max_rounds)
    extra = _policy_extra(policy, scenario, fabric, flows, outcome, *stream)
    slots = extra["plane"].shape[1]
    width = vmap_width(policy, g, flows.num_flows, slots, batch.size)
    num_devices = shard_devices(batch.size)
    mesh = device_mesh(num_devices) if num_devices > 1 else None
    common, extra = place((common, extra), mesh, replicated=True)
    per_call = sets_per_call(width, batch.size, scenario.failures.chunk, num_devices)
    cfg = scenario.mrc
    parts = []
    for start in range(0, batch.size, per_call):   # chunks of failure sets, not flows
        stop = min(start + per_call, batch.size)
        out = solve_failure_chunk(
            policy, g, common, extra, place(batch.take(start, stop, per_call), mesh),
            tier_bounds=_tier_bounds(fabric), top_k=min(TOP_LINKS, fabric.num_links),
            max_iters=cfg.max_iters, patience=cfg.patience,
            slowest_only=slowest_only(scenario, flows),
            vmap_width=width, mesh=mesh)
        out = fetch(out)
        parts.append(type(out)(*(np.asarray(x)[: stop - start] for x in out)))
        if progress is not None:
            progress(stop - start)
    return type(parts[0])(*(np.concatenate(xs) for xs in zip(*parts)))


def _collective_sets(policy: str, collective: Collective, results: list, fabric: Fabric,
                     scenario: Scenario, batch: FailureBatch, ideal_s: float
                     ) -> tuple[list[dict], FailureSummary]:
    """Per-set records and the summary of one policy on one collective (vectorised over sets;
    the small loop is over the collective's phases)."""
    from fabricjax.analysis import ADAPT_CAP
    from fabricjax.mrc import MRC_ITERATION_CAP
    from fabricjax.optimal import STATUS_ITERATION_LIMIT, STATUS_NO_PATH

    from fabricjax.analysis import phase_duration_s

    cfg = scenario.failures
    B = batch.size
    p100 = np.stack([r.stats[:, 0, -1] for r in results], axis=1)          # [B, phases]
    busiest = np.argmax(p100, axis=1)
    rows = np.arange(B)
    stats = np.stack([r.stats for r in results], axis=1)[rows, busiest]    # [B, 5, 1]
    top_links = np.stack([r.top_links for r in results], axis=1)[rows, busiest]
    top_util = np.stack([r.top_util for r in results], axis=1)[rows, busiest]
    stalled = sum(r.stalled.astype(np.int64) for r in results)
    affected = sum(r.affected.astype(np.int64) for r in results)
    completion = sum(phase_duration_s(scenario, phase, r.phase_time.astype(np.float64))
                     for phase, r in zip(collective.phases, results))
    finished = stalled == 0
    completion = np.where(finished, completion, np.nan)
    status = np.zeros(B, dtype=np.int64)
    lost_plane = np.zeros(B, dtype=bool)
    for r in results:
        status |= r.status
        if policy == "mrc":
            status |= np.where(r.adapt_status == MRC_ITERATION_CAP, ADAPT_CAP, 0)
        if policy == "optimal":
            status |= np.where(r.adapt_status & STATUS_ITERATION_LIMIT, ADAPT_CAP, 0)
            lost_plane |= (r.adapt_status & STATUS_NO_PATH) > 0
    window = reaction_window_s(policy, cfg)
    hit = affected > 0
    crash = hit & (window is not None and window >= cfg.transport_timeout_s)
    stall = np.where(hit, window if window is not None else 0.0, 0.0)
    lost = collective.gpus * np.where(crash, cfg.transport_timeout_s + cfg.restart_s, stall)

    def status_text(b: int) -> str:
        code = int(status[b])
        names = status_names(code & ~ADAPT_CAP) + (["iteration_cap"] if code & ADAPT_CAP
                                                   else [])
        if lost_plane[b]:
            names.append("lost_plane")
        return "+".join(names).replace("ok+", "")

    def stalled_pairs(b: int) -> list[str]:
        pairs = []
        for phase, r in zip(collective.phases, results):
            for f in r.stalled_flows[b]:
                if f >= 0 and len(pairs) < STALLED_SHOWN:
                    pairs.append(f"gpu{phase.flows.src[f]}->gpu{phase.flows.dst[f]}")
        return pairs

    names = [fabric.link_name(int(l)) if np.isfinite(u) else None
             for l, u in zip(top_links[:, 0], top_util[:, 0])]
    slowdown = completion / ideal_s if ideal_s > 0 else np.full(B, np.nan)
    records = []
    for b in range(B):  # one JSON record per failure set
        records.append({
            "policy": policy,
            "workload": collective.name,
            "failure_set": b,
            "components": batch.names[b],
            "p100_utilisation": float(stats[b, 0, -1]),
            "p100_by_tier": {t: float(stats[b, i + 1, -1]) for i, t in enumerate(TIER_NAMES)},
            "p100_link": names[b],
            "completion_s": float(completion[b]) if finished[b] else None,
            "slowdown": float(slowdown[b]) if finished[b] and ideal_s > 0 else None,
            "status": status_text(b),
            "stalled_flows": int(stalled[b]),
            "stalled_pairs": stalled_pairs(b) if stalled[b] else [],
            "affected_flows": int(affected[b]),
            "stall_s": float(stall[b]) if window is not None else None,
            "crash": bool(crash[b]),
            "gpu_seconds_lost": float(lost[b]) if window is not None else None,
        })
    # worst: a set that stalls flows beats any finite time; then the slowest, then P100
    order = np.lexsort((stats[:, 0, -1], np.nan_to_num(completion, nan=np.inf), stalled))
    worst = int(order[-1])
    counts = collections.Counter(n for n in names if n is not None)
    seen = sorted({records[b]["status"] for b in range(B)})
    summary = FailureSummary(
        policy=policy,
        workload=collective.name,
        sets=B,
        p100_utilisation=_distribution(stats[:, 0, -1]),
        completion_s=_distribution(completion),
        slowdown=_distribution(slowdown),
        stalled_sets=int(np.sum(~finished)),
        worst_set=worst,
        worst_set_components=batch.names[worst],
        top_p100_links=[{"link": n, "sets": c} for n, c in counts.most_common(5)],
        window_s=window,
        sets_hit=int(np.sum(hit)),
        affected_flows_mean=float(np.mean(affected)),
        stall_s_mean=float(np.mean(stall)) if window is not None else None,
        crashed_sets=int(np.sum(crash)),
        gpu_seconds_lost_mean=float(np.mean(lost)) if window is not None else None,
        status=", ".join(seen),
    )
    return records, summary


def null_set_outcome(fabric: Fabric, sets: int) -> SetOutcome:
    """What every failure set does to a phase with no fabric flow: nothing."""
    from fabricjax.analysis import TOP_LINKS

    k = min(TOP_LINKS, fabric.num_links)
    zeros = np.zeros(sets, np.int32)
    return SetOutcome(stats=np.zeros((sets, 1 + len(TIER_NAMES), 1), np.float32),
                      top_links=np.zeros((sets, k), np.int32),
                      top_util=np.full((sets, k), -np.inf, np.float32),
                      phase_time=np.zeros(sets, np.float32),
                      ideal_time=np.zeros(sets, np.float32), stalled=zeros,
                      stalled_flows=np.full((sets, STALLED_SHOWN), -1, np.int32),
                      min_rate=np.full(sets, np.inf, np.float32), rounds=zeros, status=zeros,
                      affected=zeros, iterations=zeros, adapt_status=zeros,
                      residual=np.zeros(sets, np.float32))


def failure_study(scenario: Scenario, fabric: Fabric, collectives: list[Collective],
                  baseline: dict, *, samples: int | None = None,
                  progress: Callable[[str, int, int], None] | None = None) -> FailureStudy:
    """Every policy on every workload item under every failure set.

    baseline: {(policy, item): [PhaseOutcome per phase]} from the no-failure analysis."""
    from fabricjax.analysis import phase_duration_s

    batch = sample_failures(scenario, samples)
    total = batch.size * len(scenario.policies) * sum(len(c.phases) for c in collectives)
    done = 0
    records, summaries = [], []
    for policy in scenario.policies:
        for item, collective in enumerate(collectives):
            results = []
            for index, phase in enumerate(collective.phases):
                label = f"{policy}: {collective.name} ({phase.name}), {batch.size:,} failure sets"

                def advance(n: int, label=label) -> None:
                    nonlocal done
                    done += n
                    if progress is not None:
                        progress(label, done, total)

                if progress is not None:
                    progress(label, done, total)
                if phase.flows.num_flows == 0:   # inside servers: no failure reaches it
                    results.append(null_set_outcome(fabric, batch.size))
                    advance(batch.size)
                    continue
                results.append(solve_failure_sets(
                    policy, scenario, fabric, phase.flows, baseline[(policy, item)][index],
                    batch, (collective.stream, index), advance))
            ideal = sum(float(phase_duration_s(scenario, p, float(o.result.ideal_time)))
                        for p, o in zip(collective.phases, baseline[(policy, item)]))
            recs, summary = _collective_sets(policy, collective, results, fabric, scenario,
                                             batch, ideal)
            records.extend(recs)
            summaries.append(summary)
    per_kind = collections.defaultdict(list)
    for names in batch.names:
        kinds = collections.Counter(_kind_of(n) for n in names)
        for kind in ("cable", "nic_port", "switch", "plane", "degraded"):
            per_kind[kind].append(kinds.get(kind, 0))
    components = {k: {"p50": float(np.median(v)), "max": int(max(v))}
                  for k, v in per_kind.items() if max(v) > 0}
    cfg = scenario.failures
    return FailureStudy(samples=batch.size,
                        seed=scenario.seed if cfg.seed is None else cfg.seed,
                        components_per_set=components, records=records, summaries=summaries)


def _kind_of(name: str) -> str:
    if "@" in name:
        return "degraded"
    parts = name.split("/")
    if len(parts) == 1:
        return "plane"
    if parts[1].startswith("gpu"):
        return "nic_port"
    return "cable" if len(parts) == 3 else "switch"


# --------------------------------------------------------------------------- reliability

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


def used_links(fabric: Fabric, collective: Collective, outcomes: list) -> np.ndarray:
    """bool[L]: links that carry the job's traffic in the pre-failure slots of any phase."""
    from fabricjax.paths import clos_path_links

    g = fabric.geometry
    used = np.zeros(g.num_links + 1, dtype=bool)
    for phase, outcome in zip(collective.phases, outcomes):
        flows = phase.flows
        sending = flows.size > 0
        if not np.any(sending):
            continue
        if outcome.plane is None:  # aggregated: every spine of every plane between its T0s
            planes = np.arange(g.planes)[:, None, None]
            spines = np.arange(g.spines)[None, None, :]
            src, dst = flows.src[sending], flows.dst[sending]
            cross = g.t0_of(src) != g.t0_of(dst)
            up_t0 = np.unique(g.t0_of(src[cross]))[None, :, None]
            down_t0 = np.unique(g.t0_of(dst[cross]))[None, :, None]
            for ids in (g.gpu_up(planes[:, :, 0], np.unique(src)[None, :]),
                        g.gpu_down(planes[:, :, 0], np.unique(dst)[None, :]),
                        g.t0_up(planes, up_t0, spines), g.t1_down(planes, down_t0, spines)):
                used[np.asarray(ids).reshape(-1)] = True
            continue
        links = clos_path_links(g, flows.src[sending, None], flows.dst[sending, None],
                                outcome.plane[sending], outcome.spine[sending])
        used[links.reshape(-1)] = True
    return used[:-1]


def reliability_whatif(scenario: Scenario, fabric: Fabric, collectives: list[Collective],
                       baseline: dict) -> list[ReliabilityRow]:
    """Expected failure events, stall time and crash probability per policy and job, from
    component failure rates (Poisson events) and the components each policy's paths use."""
    rel = scenario.reliability
    cfg = scenario.failures or FailuresConfig()
    g = fabric.geometry
    starts = g.tier_starts
    fabric_cables = g.planes * g.t0s * g.spines
    switches_total = g.planes * (g.t0s + g.spines)
    nic_total = g.planes * g.gpus
    fabric_rate = (rel.link_failures_per_hour * fabric_cables +
                   rel.switch_failures_per_hour * switches_total +
                   rel.nic_port_failures_per_hour * nic_total)
    rows = []
    for policy in scenario.policies:
        window = reaction_window_s(policy, cfg)
        if window is None:
            continue
        for item, collective in enumerate(collectives):
            used = used_links(fabric, collective, baseline[(policy, item)])
            cable = used[starts[1]:starts[2]] | used[starts[2]:starts[3]]
            port = used[starts[0]:starts[1]] | used[starts[3]:]
            node = np.zeros(g.num_nodes, dtype=bool)
            node[fabric.link_src[used]] = True
            node[fabric.link_dst[used]] = True
            cables, ports, switches = int(cable.sum()), int(port.sum()), int(node[g.gpus:].sum())
            events = (rel.link_failures_per_hour * cables +
                      rel.switch_failures_per_hour * switches +
                      rel.nic_port_failures_per_hour * ports)
            crash = window >= cfg.transport_timeout_s
            per_event = collective.gpus * (cfg.transport_timeout_s + cfg.restart_s if crash
                                           else window)
            crashes = events if crash else 0.0
            rows.append(ReliabilityRow(
                policy=policy, workload=collective.name, gpus=collective.gpus,
                cables_used=cables, switches_used=switches, nic_ports_used=ports,
                events_per_hour=events, fabric_events_per_hour=fabric_rate, window_s=window,
                stall_s_per_hour=0.0 if crash else events * window,
                crashes_per_hour=crashes,
                crash_probability=-math.expm1(-crashes * rel.hours),
                hours=rel.hours,
                gpu_seconds_lost_per_event=per_event,
                gpu_hours_lost_per_day=events * 24 * per_event / 3600,
                events_per_1000_steps=(events * rel.step_time_s / 3.6
                                       if rel.step_time_s is not None else None),
            ))
    return rows
