"""Records from solved phases: what a report says about one policy on one workload item,
with and without failures. Plain numpy on the host; nothing here solves anything.

Contract: `collective_record` turns a collective's `engine.phase.PhaseOutcome`s (one per
phase) into a `results.PolicyRecord` (utilisation tail of the busiest phase, completion,
line-rate and endpoint-bound times, busbw, status, bottlenecks, the progressive figures);
`set_records` turns the `engine.batch.SetOutcome`s of a chunk of failure sets into per-set JSON
records and `failure_summary` the records of every set into a `results.FailureSummary` (from
the records alone, so a resumed study's summary is the same). The baseline and every failure
set finish a phase's time through the same `engine.timing.phase_duration_s`, from the same
prepared phase (arrival cohorts, hops); `reference_times` gives the endpoint bound (with the
transport) and the line rate (payload at NIC rate, no overhead) it is read against.
`step_record` splits a training step's (or trace's) record by parallel dimension, names each
dimension's slowest process group (`slowest_flows`: the flows progressive filling freezes
first) and applies the step's overlap rule.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.status import Status, status_text
from fabricjax.engine.batch import STALLED_SHOWN
from fabricjax.engine.phase import PhaseOutcome, slot_links_host
from fabricjax.engine.plan import (COMPONENTS_SHOWN, PROGRESSIVE_AUTO_FLOWS,
                                   PROGRESSIVE_AUTO_LIMIT, simulate_phase)
from fabricjax.engine.timing import (endpoint_bound_time_s, fabric_end_s, line_rate_time_s,
                                     phase_duration_s, relative_starts, transport_latency_s,
                                     wire_factor)
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.failures import FailureBatch
from fabricjax.results import FailureSummary, PolicyRecord, StepRecord
from fabricjax.workload.flows import Collective, Phase

OK, ITERATION_CAP, LOST_PLANE = int(Status.OK), int(Status.ITERATION_CAP), int(Status.LOST_PLANE)
EVENT_LIMIT, SKIPPED = int(Status.EVENT_LIMIT), int(Status.SKIPPED)
QUANTILES = {"p50": 50.0, "p99": 99.0, "max": 100.0}


def reference_times(scenario: Scenario, fabric: AnyFabric, phase: Phase,
                    hops: int) -> tuple[float, float]:
    """(endpoint bound, line rate) of all the steps of a phase, the two references its
    completion is read against. Endpoint bound: a perfect network with the transport (the
    busiest NIC's wire bytes, the same latencies and step costs as the completion). Line rate:
    payload bytes x 8 / NIC rate of the busiest sender (or the scale-up time, whichever is
    longer), every repeat, with no overhead at all."""
    nic = fabric.nic_rate()
    endpoint = phase_duration_s(
        scenario, phase, endpoint_bound_time_s(phase.flows, nic, wire_factor(scenario)), hops)
    line_rate = phase.repeat * max(line_rate_time_s(phase.flows, nic), phase.scaleup_time)
    return float(endpoint), float(line_rate)


def collective_references(scenario: Scenario, fabric: AnyFabric, collective: Collective,
                          outcomes: list[PhaseOutcome]) -> tuple[float, float]:
    """(endpoint bound, line rate) of a whole collective: `reference_times` summed."""
    refs = [reference_times(scenario, fabric, p, o.hops)
            for p, o in zip(collective.phases, outcomes)]
    return sum(r[0] for r in refs), sum(r[1] for r in refs)


def _quantile_dict(row: np.ndarray) -> dict:
    return {"p50": float(row[0]), "p99": float(row[1]), "p100": float(row[2])}


def weighted_quantiles(values: np.ndarray, weights: np.ndarray,
                       qs: tuple[float, ...]) -> list[float]:
    """Inverted-CDF quantiles of `values` where each value counts `weights` times: the
    smallest value whose cumulative weight reaches q of the total (numpy's `inverted_cdf` with
    unit weights). The one convention every FCT quantile a report shows uses."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order], dtype=np.float64)
    picks = np.searchsorted(cum, np.asarray(qs) * cum[-1], side="left")
    return [float(values[order][min(i, values.size - 1)]) for i in picks]


def progressive_figures(collective: Collective, outcomes: list[PhaseOutcome],
                        scenario: Scenario, fabric: AnyFabric) -> dict:
    """The collective under the progressive model: its time (None when a flow stalls), the
    flow completion time P50/P99/max over its fabric flows (each step's flows counted once per
    repeat; a flow's time on the fabric for its wire bytes, plus its own path's transport
    latency and last acknowledgement), the largest event count, and the status flags of the
    simulations. Start times stay on the host in float64: a flow's end is its start plus its
    own duration. A phase whose policy adapts over time (`PhaseOutcome.first_step`) pays
    its convergence in its first step only; its other repeats run on the settled split. A
    simulation that `auto` gave up (`Status.SKIPPED`) leaves only its event count and
    "skipped"."""
    if any(o.progressive is None for o in outcomes if o.slots):
        return {}
    runs = [o.progressive for o in outcomes if o.progressive is not None]
    if any(int(run.status) & SKIPPED for run in runs):
        return {"events": max(int(run.events) for run in runs), "skipped": True}
    total, events, status, fcts, weights = 0.0, 0, 0, [], []
    stalled = False
    for phase, outcome in zip(collective.phases, outcomes):
        run = outcome.progressive
        if run is None:
            total += float(phase_duration_s(scenario, phase, 0.0, outcome.hops))
            continue
        settled = np.asarray(run.duration, dtype=np.float64)
        # an adapting policy's first step pays for its convergence, the repeats run settled
        steps = ([(settled, phase.repeat)] if outcome.first_step is None else
                 [(np.asarray(outcome.first_step, np.float64), 1),
                  (settled, phase.repeat - 1)])
        start = relative_starts(phase.flows)
        sending = phase.flows.size > 0
        latency = transport_latency_s(scenario, fabric.flow_hops(phase.flows.src,
                                                                 phase.flows.dst),
                                      acknowledged=True)
        for duration, repeat in steps:
            if repeat <= 0:
                continue
            stalled |= bool(np.any(~np.isfinite(duration[sending])))
            fabric_end = float(np.max((start + duration)[sending], initial=0.0))
            fcts.append((duration + latency)[sending])
            weights.append(np.full(int(sending.sum()), repeat, np.float64))
            total += float(phase_duration_s(scenario, dataclasses.replace(phase, repeat=repeat),
                                            fabric_end, outcome.hops))
        events = max(events, int(run.events))
        status |= int(run.status) & EVENT_LIMIT
    out = {"progressive_s": None if stalled else total, "events": events,
           "event_limit": bool(status & EVENT_LIMIT)}
    if fcts and not stalled:
        values, w = np.concatenate(fcts), np.concatenate(weights)
        if values.size:
            p50, p99 = weighted_quantiles(values, w, (0.5, 0.99))
            out.update(fct_p50_s=p50, fct_p99_s=p99, fct_max_s=float(values.max()))
    return out


def dynamic_figures(collective: Collective, outcomes: list[PhaseOutcome],
                    scenario: Scenario, fabric: AnyFabric, line_rate: float,
                    endpoint: float, *, series: bool = True) -> dict | None:
    """The collective under the dynamic level (`PhaseOutcome.dynamic`), its own section of a
    record: completion (every phase's steps at the dynamic phase's end at the receivers, the
    same latencies and step costs as the static completion; None when a flow stalls),
    slowdown, fabric slowdown and busbw from it, the static completion beside; FCT P50/P99/max
    over the fabric flows (each step's flows once per repeat); the busiest phase's
    time-averaged P100, overall and per tier, beside its static P100; the largest queue fill
    and the P99 over the links that carried traffic (queue / buffer); wire bytes trimmed
    (and sent again) and sent twice by a timer, the timer's resends and the ACK stalls (every
    repeat counted); steps; status; and (`series`) the busiest phase's time series, rows of
    (time s, largest queue fill, throughput Gbit/s, flows sending). None when no phase ran
    in time (classes, static model)."""
    runs = [(phase, o, o.dynamic) for phase, o in zip(collective.phases, outcomes)
            if o.dynamic is not None]
    if not runs:
        return None
    total, status, steps, stalled = 0.0, 0, 0, 0
    trimmed = duplicated = timeouts = stalls = blackholed = stall_s = 0.0
    fcts, weights = [], []
    for phase, outcome in zip(collective.phases, outcomes):
        run = outcome.dynamic
        if run is None:
            total += float(phase_duration_s(scenario, phase, outcome.fabric_end_s,
                                             outcome.hops))
            continue
        sending = phase.flows.size > 0
        total += float(phase_duration_s(scenario, phase, run.completion_s, outcome.hops))
        fcts.append(run.fct_s[sending])
        weights.append(np.full(int(sending.sum()), phase.repeat, np.float64))
        status |= int(run.status)
        steps += int(run.steps) * phase.repeat
        stalled += int(run.stalled)
        trimmed += float(run.trimmed_bytes.sum()) * phase.repeat
        duplicated += float(run.duplicated_bytes.sum()) * phase.repeat
        timeouts += run.timeouts * phase.repeat
        stalls += float(run.ack_stalls.sum()) * phase.repeat
        if run.blackholed_bytes is not None:
            blackholed += float(run.blackholed_bytes.sum()) * phase.repeat
        stall_s = max(stall_s, run.stall_s)
    finished = stalled == 0 and not status & int(Status.EVENT_LIMIT)
    # the busiest phase's figures; a failure during the phase: that phase's (the series shows
    # the stall and the recovery)
    def struck_first(run) -> tuple[bool, float]:
        black = run.blackholed_bytes
        return black is not None and bool(black.sum() > 0), run.p100_time_avg

    busiest = max((run for _, _, run in runs), key=struck_first)
    tiers = {name: float(np.max(busiest.link_util[lo:hi], initial=0.0))
             for name, (lo, hi) in zip(fabric.tier_names, fabric.tier_bounds)}
    carried = busiest.link_util > 0
    fill = busiest.link_fill[carried]
    bits = collective.size * 8e-9
    algbw = bits / total if finished and total > 0 else None
    out = {
        "completion_s": total if finished else None,
        "static_completion_s": None,
        "slowdown": total / line_rate if finished and line_rate > 0 else None,
        "fabric_slowdown": total / endpoint if finished and endpoint > 0 else None,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * collective.busbw_factor if algbw is not None else None,
        "fct_p50_s": None, "fct_p99_s": None, "fct_max_s": None,
        "p100_time_avg": busiest.p100_time_avg,
        "p100_time_avg_by_tier": tiers,
        "p100_static": busiest.p100_static,
        "queue_fill_p99": float(np.quantile(fill, 0.99, method="inverted_cdf"))
        if fill.size else 0.0,
        "queue_fill_max": float(np.max(busiest.link_fill, initial=0.0)),
        "trimmed_bytes": trimmed,
        "duplicated_bytes": duplicated,
        "timeouts": int(timeouts),
        "ack_stalls": int(stalls),
        "blackholed_bytes": blackholed,
        "stall_s": stall_s,
        "stalled_flows": stalled,
        "steps": steps,
        "dt_s": busiest.dt_s,
        "status": status_text(status),
    }
    if fcts:
        values, w = np.concatenate(fcts), np.concatenate(weights)
        if values.size and np.all(np.isfinite(values)):
            p50, p99 = weighted_quantiles(values, w, (0.5, 0.99))
            out.update(fct_p50_s=p50, fct_p99_s=p99, fct_max_s=float(values.max()))
    if series:
        out["series"] = [[float(v) for v in row] for row in busiest.series]
    return out


def progressive_absent(policy: str, collective: Collective, outcomes: list[PhaseOutcome],
                       scenario: Scenario, finished: bool) -> tuple[str, str] | None:
    """(status, reason) when the progressive simulation did not run for this record, so the
    flow table can say why instead of leaving the row out; None when it ran. Statuses:
    `stalled` (a flow has no live path), `classes` (solved by T0-pair classes: no per-flow
    state to simulate), `off` (solver.progressive: false), `over_limit` (auto's flow or
    flow-path bound)."""
    if not finished:
        return "stalled", "a flow has no live path, so there is nothing to simulate"
    if scenario.solver.model == "dynamic":
        return "off", "solver.model: dynamic (the dynamic level's own table)"
    if not any(o.slots and o.progressive is None for o in outcomes):
        return None
    if any(o.classes is not None for o in outcomes):
        return "classes", ("solved by T0-pair classes (solver.aggregate), which keep no "
                           "per-flow state to simulate")
    if scenario.solver.progressive is False:
        return "off", "solver.progressive: false"
    flows = max((p.flows.num_flows for p in collective.phases
                 if not simulate_phase(scenario, p.flows, policy)), default=0)
    pairs = max((p.flows.num_flows * o.slots for p, o in zip(collective.phases, outcomes)
                 if not simulate_phase(scenario, p.flows, policy)), default=0)
    what = (f"{flows:,} flows, over the {PROGRESSIVE_AUTO_FLOWS:,}"
            if flows > PROGRESSIVE_AUTO_FLOWS else
            f"{pairs:,} flow-path pairs, over the {PROGRESSIVE_AUTO_LIMIT:,}")
    return "over_limit", (f"{what} that solver.progressive: auto simulates "
                          "(progressive: true runs it)")


def collective_record(policy: str, collective: Collective, outcomes: list[PhaseOutcome],
                      fabric: AnyFabric, scenario: Scenario) -> PolicyRecord:
    phase_results = [o.result for o in outcomes]
    worst = max(range(len(phase_results)), key=lambda i: float(phase_results[i].stats[0, 2]))
    busiest = phase_results[worst]
    status = OK
    stalled = 0
    completion = 0.0
    endpoint, line_rate = collective_references(scenario, fabric, collective, outcomes)
    rounds = 0
    min_rate = np.inf
    for phase, outcome in zip(collective.phases, outcomes):
        res = outcome.result
        status |= int(res.status)
        stalled += int(res.stalled)
        rounds = max(rounds, int(res.rounds))
        completion += float(phase_duration_s(scenario, phase, outcome.fabric_end_s,
                                             outcome.hops))
        rates = np.asarray(res.rates)[phase.flows.size > 0]
        if rates.size:
            min_rate = min(min_rate, float(np.min(rates)))
    finished = stalled == 0
    bits = collective.size * 8e-9
    algbw = bits / completion if finished and completion > 0 else None
    by_tier = {name: _quantile_dict(busiest.stats[i + 1])
               for i, name in enumerate(fabric.tier_names)}
    bottlenecks = [
        {"link": fabric.link_name(int(l)), "utilisation": float(u)}
        for l, u in zip(busiest.top_links, busiest.top_util) if np.isfinite(u)
    ]
    adaptive = [o.adaptation for o in outcomes if o.adaptation is not None]
    if any(a.capped for a in adaptive):
        status |= ITERATION_CAP
    if any(a.lost_plane for a in adaptive):
        status |= LOST_PLANE
    prog = progressive_figures(collective, outcomes, scenario, fabric) if finished else {}
    # the completion table's status: what the static time rests on (the progressive
    # simulation's own cap is the flow table's business, `progressive_status`)
    status_words = status_text(status)
    progressive_status = progressive_reason = None
    if "events" in prog:
        progressive_status = ("skipped" if prog.get("skipped") else
                              "event_limit" if prog.get("event_limit") else "ok")
    else:
        absent = progressive_absent(policy, collective, outcomes, scenario, finished)
        if absent is not None:
            progressive_status, progressive_reason = absent
    # the busiest phase's iteration when it had one (a phase inside servers has none)
    shown = outcomes[worst].adaptation or (adaptive[0] if adaptive else None)
    dynamic = dynamic_figures(collective, outcomes, scenario, fabric, line_rate, endpoint)
    if dynamic is not None:
        dynamic["static_completion_s"] = completion if finished else None
    aggregated = [o.classes for o in outcomes if o.classes is not None]
    return PolicyRecord(
        policy=policy,
        workload=collective.name,
        collective=collective.kind,
        gpus=collective.gpus,
        size_bytes=collective.size,
        steps=collective.steps,
        paths_per_flow=max(o.slots for o in outcomes),
        p50_utilisation=float(busiest.stats[0, 0]),
        p99_utilisation=float(busiest.stats[0, 1]),
        p100_utilisation=float(busiest.stats[0, 2]),
        utilisation_by_tier=by_tier,
        completion_s=completion if finished else None,
        line_rate_s=line_rate,
        endpoint_bound_s=endpoint,
        slowdown=completion / line_rate if finished and line_rate > 0 else None,
        fabric_slowdown=completion / endpoint if finished and endpoint > 0 else None,
        algbw_gbps=algbw,
        busbw_gbps=algbw * collective.busbw_factor if algbw is not None else None,
        line_rate_busbw_gbps=(bits / line_rate * collective.busbw_factor if line_rate > 0
                              else 0.0),
        min_rate_gbps=float(min_rate) if np.isfinite(min_rate) else 0.0,
        status=status_words,
        stalled_flows=stalled,
        rate_rounds=rounds,
        bottleneck_links=bottlenecks,
        iterations=max(o.iterations for o in adaptive) if adaptive else None,
        convergence=shown.convergence if shown else None,
        residual=max(o.residual for o in adaptive) if adaptive else None,
        trace=[float(v) for v in shown.trace] if shown and shown.trace is not None else None,
        algorithm=collective.algorithm,
        job=collective.job,
        progressive_s=prog.get("progressive_s"),
        progressive_status=progressive_status,
        progressive_reason=progressive_reason,
        fct_p50_s=prog.get("fct_p50_s"),
        fct_p99_s=prog.get("fct_p99_s"),
        fct_max_s=prog.get("fct_max_s"),
        events=prog.get("events"),
        aggregated_classes=sum(aggregated) if aggregated else None,
        utilisation_cdf=([float(v) for v in busiest.cdf] if busiest.cdf is not None
                         else None),
        dynamic=dynamic,
    )


def distribution(values: np.ndarray) -> dict | None:
    """P50 / P99 / max of the finite values (None when there is none)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    return {name: float(np.percentile(values, q)) for name, q in QUANTILES.items()}


def set_records(policy: str, collective: Collective, results: list,
                outcomes: list[PhaseOutcome], fabric: AnyFabric, scenario: Scenario,
                batch: FailureBatch, line_rate_s: float, endpoint_bound_s: float,
                window: float | None, first: int = 0) -> list[dict]:
    """The JSON records of failure sets first..first+C-1 of one policy on one collective
    (vectorised over sets; the small loop is over the collective's phases). `results`: one
    SetOutcome of numpy arrays [C] per phase; `outcomes`: the no-failure baseline's, whose
    prepared phases (arrival cohorts, hops) the sets share, so a set's times are finished
    exactly as the baseline's; `line_rate_s`, `endpoint_bound_s`: the
    collective's times without the fabric (the no-failure record's); `window`: the policy's
    reaction window (None: no transient). A set's record depends on that set alone, so records
    computed chunk by chunk (or read back from a stream) are the records of one call over every
    set."""
    cfg = scenario.failures
    full_detail = cfg.detail == "full"
    B = int(results[0].stats.shape[0])
    p100 = np.stack([r.stats[:, 0, -1] for r in results], axis=1)          # [C, phases]
    busiest = np.argmax(p100, axis=1)
    rows = np.arange(B)
    stats = np.stack([r.stats for r in results], axis=1)[rows, busiest]    # [C, 5, 1]
    top_links = np.stack([r.top_links for r in results], axis=1)[rows, busiest]
    top_util = np.stack([r.top_util for r in results], axis=1)[rows, busiest]
    stalled = sum(r.stalled.astype(np.int64) for r in results)
    affected = sum(r.affected.astype(np.int64) for r in results)
    completion = sum(
        phase_duration_s(scenario, phase,
                         fabric_end_s(o.prepared.cohorts, r.cohort_end) if o.prepared
                         else np.zeros(B), o.hops)
        for phase, r, o in zip(collective.phases, results, outcomes))
    finished = stalled == 0
    completion = np.where(finished, completion, np.nan)
    status = np.zeros(B, dtype=np.int64)
    for r in results:
        status |= r.status | (r.adapt_status & (ITERATION_CAP | LOST_PLANE))
    hit = affected > 0
    # a set that leaves a flow with no live path stalls the job for good: past the transport
    # timeout it fails, as does a transient at least that long, and restarts from a checkpoint
    crash = (~finished) | (hit & (window is not None and window >= cfg.transport_timeout_s))
    stall = np.where(hit, window if window is not None else 0.0, 0.0)
    lost = collective.gpus * np.where(crash, cfg.transport_timeout_s + cfg.restart_s, stall)
    costed = np.logical_or(window is not None, crash)

    def stalled_pairs(b: int) -> list[str]:
        pairs = []
        for phase, r in zip(collective.phases, results):
            for f in r.stalled_flows[b]:
                if f >= 0 and len(pairs) < STALLED_SHOWN:
                    pairs.append(f"gpu{phase.flows.src[f]}->gpu{phase.flows.dst[f]}")
        return pairs

    names = [fabric.link_name(int(l)) if np.isfinite(u) else None
             for l, u in zip(top_links[:, 0], top_util[:, 0])]
    slowdown = completion / line_rate_s if line_rate_s > 0 else np.full(B, np.nan)
    fabric_slowdown = (completion / endpoint_bound_s if endpoint_bound_s > 0
                       else np.full(B, np.nan))
    records = []
    for b in range(B):  # one JSON record per failure set
        records.append({
            "policy": policy,
            "workload": collective.name,
            "failure_set": first + b,
            "components": (batch.names[first + b] if full_detail
                           else batch.names[first + b][:COMPONENTS_SHOWN]),
            "components_total": len(batch.names[first + b]),
            "p100_utilisation": float(stats[b, 0, -1]),
            "p100_by_tier": {t: float(stats[b, i + 1, -1])
                             for i, t in enumerate(fabric.tier_names)},
            "p100_link": names[b],
            "completion_s": float(completion[b]) if finished[b] else None,
            "slowdown": float(slowdown[b]) if finished[b] and line_rate_s > 0 else None,
            "fabric_slowdown": (float(fabric_slowdown[b])
                                if finished[b] and endpoint_bound_s > 0 else None),
            "status": status_text(int(status[b])),
            "stalled_flows": int(stalled[b]),
            "stalled_pairs": stalled_pairs(b) if stalled[b] else [],
            "affected_flows": int(affected[b]),
            "stall_s": float(stall[b]) if window is not None else None,
            "crash": bool(crash[b]),
            "gpu_seconds_lost": float(lost[b]) if costed[b] else None,
        })
    return records


def _column(records: list[dict], key: str, dtype=np.float64) -> np.ndarray:
    # None (not computed) becomes NaN, which `distribution` leaves out
    return np.asarray([np.nan if r[key] is None else r[key] for r in records], dtype=dtype)


def failure_summary(policy: str, workload: str, records: list[dict],
                    window: float | None) -> FailureSummary:
    """The summary of one policy on one collective over its per-set `records` (those of
    `set_records`, in set order), from the records alone: a study resumed from a stream of
    records gets the same summary, to the bit, as one that computed every set."""
    B = len(records)
    p100 = _column(records, "p100_utilisation")        # float32 values, exact in float64
    completion = _column(records, "completion_s")
    slowdown = _column(records, "slowdown")
    fabric_slowdown = _column(records, "fabric_slowdown")
    stalled = np.asarray([r["stalled_flows"] for r in records], dtype=np.int64)
    affected = np.asarray([r["affected_flows"] for r in records], dtype=np.int64)
    crash = np.asarray([r["crash"] for r in records], dtype=bool)
    finished = stalled == 0
    # worst: a set that stalls flows beats any finite time; then the slowest, then P100
    order = np.lexsort((p100, np.nan_to_num(completion, nan=np.inf), stalled))
    worst = int(order[-1])
    counts = collections.Counter(r["p100_link"] for r in records if r["p100_link"] is not None)
    return FailureSummary(
        policy=policy,
        workload=workload,
        sets=B,
        p100_utilisation=distribution(p100),
        completion_s=distribution(completion),
        slowdown=distribution(slowdown),
        fabric_slowdown=distribution(fabric_slowdown),
        stalled_sets=int(np.sum(~finished)),
        worst_set=int(records[worst]["failure_set"]),
        worst_set_components=records[worst]["components"],
        worst_set_components_total=int(records[worst].get(
            "components_total", len(records[worst]["components"]))),
        top_p100_links=[{"link": n, "sets": c} for n, c in counts.most_common(5)],
        window_s=window,
        sets_hit=int(np.sum(affected > 0)),
        affected_flows_mean=float(np.mean(affected)),
        stall_s_mean=float(np.mean(_column(records, "stall_s"))) if window is not None else None,
        crashed_sets=int(np.sum(crash)),
        gpu_seconds_lost_mean=(float(np.mean(_column(records, "gpu_seconds_lost")))
                               if window is not None else None),
        status=", ".join(sorted({r["status"] for r in records})),
        dynamic=_dynamic_summary(records),
    )


def _dynamic_summary(records: list[dict]) -> dict | None:
    """Over the sets that ran in time (`solver.model: dynamic`): P50 / P99 / max of the
    dynamic completion, slowdown and FCT max (sets where no flow stalled), the sets where a
    flow stalled, and the mean bytes trimmed and timer resends per set; None otherwise."""
    timed = [r["dynamic"] for r in records if r.get("dynamic") is not None]
    if not timed:
        return None

    def column(name):
        return np.asarray([np.nan if d[name] is None else d[name] for d in timed], np.float64)

    return {"sets": len(timed),
            "completion_s": distribution(column("completion_s")),
            "slowdown": distribution(column("slowdown")),
            "fct_max_s": distribution(column("fct_max_s")),
            "stalled_sets": int(sum(d["stalled_flows"] > 0 for d in timed)),
            "stall_s_max": float(max(d.get("stall_s", 0.0) for d in timed)),
            "crashed_sets": int(sum(bool(d.get("crash")) for d in timed)),
            "trimmed_bytes_mean": float(np.mean(column("trimmed_bytes"))),
            "timeouts_mean": float(np.mean(column("timeouts")))}




# --------------------------------------------------------------------------- training steps

SLOWEST_RTOL = 1e-5       # flows within this of the slowest rate count as the slowest
ENTRIES_PER_CHUNK = 1 << 22   # (flow, slot, hop) entries per host pass of `slowest_flows`
GROUP_GPUS_SHOWN = 8


def slowest_flows(fabric: AnyFabric, flows, outcome: PhaseOutcome) -> np.ndarray | None:
    """bool[F]: the flows of a phase that progressive filling freezes first, i.e. the ones
    at the phase's slowest max-min rate, from the split the phase ran on (None when it was
    solved as classes). The first level of filling is min(capacity / weight crossing each
    link, each flow's NIC cap), as `solver.maxmin.slowest_rate`; a flow is at it when one of
    its links (or its cap) sets it. Host numpy, in chunks of flows."""
    split = outcome.split
    if split is None or flows.num_flows == 0:
        return None
    num_links = fabric.num_links
    weights = np.asarray(split.weights, np.float64)
    count, slots = weights.shape
    chunk = max(1, ENTRIES_PER_CHUNK // max(1, slots * 4))
    kept = count * slots * 4 <= 8 * ENTRIES_PER_CHUNK    # small enough to keep between passes
    cache: list = []

    def chunks():
        if cache:
            yield from cache
            return
        for start in range(0, count, chunk):   # chunks of flows, not a loop over flows
            stop = min(count, start + chunk)
            part = dataclasses.replace(split, plane=split.plane[start:stop],
                                       choice=split.choice[start:stop])
            links = slot_links_host(fabric, flows.take(slice(start, stop)), part)
            item = (start, stop, np.asarray(links, np.int32))
            if kept:
                cache.append(item)
            yield item

    growth = np.zeros(num_links + 1)
    for start, stop, links in chunks():
        w = np.broadcast_to(weights[start:stop, :, None], links.shape)
        growth += np.bincount(links.reshape(-1), weights=w.reshape(-1), minlength=num_links + 1)
    capacity = np.append(np.asarray(fabric.capacity, np.float64), np.inf)
    share = np.where(growth > 0, capacity / np.where(growth > 0, growth, 1.0), np.inf)
    share[num_links] = np.inf
    bound = np.full(count, np.inf)
    for start, stop, links in chunks():
        used = weights[start:stop, :, None] > 0
        bound[start:stop] = np.min(np.where(used, share[links], np.inf), axis=(1, 2))
    carried = np.asarray(split.carried, np.float64)
    cap = np.asarray(fabric.gpu_nic_gbps, np.float64)[flows.src] * carried
    rate = np.minimum(bound, np.where(weights.sum(axis=1) > 0, cap, np.inf))
    sending = (flows.size > 0) & np.isfinite(rate)
    if not np.any(sending):
        return None
    slowest = rate[sending].min()
    return sending & (rate <= slowest * (1 + SLOWEST_RTOL))


def _dimension_row(dim, indices: list[int], collective: Collective,
                   outcomes: list[PhaseOutcome], fabric: AnyFabric, scenario: Scenario,
                   finished: bool) -> dict:
    """One dimension of a step record (see `step_record`)."""
    plan = collective.step
    phases = [collective.phases[i] for i in indices]
    results = [outcomes[i].result for i in indices]
    durations = [float(phase_duration_s(scenario, p, outcomes[i].fabric_end_s, outcomes[i].hops))
                 for p, i in zip(phases, indices)]
    refs = [reference_times(scenario, fabric, p, outcomes[i].hops)
            for p, i in zip(phases, indices)]
    endpoint = sum(r[0] for r in refs)
    line_rate = sum(r[1] for r in refs)
    time = sum(durations) if finished else None
    row = {"dimension": dim.name, "collectives": dim.collectives, "groups": dim.groups,
           "group_size": dim.group_size, "bytes_per_gpu": dim.bytes_per_gpu,
           "phases": len(indices), "steps": sum(p.repeat for p in phases),
           "time_s": time, "line_rate_s": line_rate, "endpoint_bound_s": endpoint,
           "slowdown": time / line_rate if time is not None and line_rate > 0 else None,
           "fabric_slowdown": time / endpoint if time is not None and endpoint > 0 else None,
           "busbw_gbps": (dim.bytes_per_gpu * 8e-9 / time if time else None),
           "line_rate_busbw_gbps": (dim.bytes_per_gpu * 8e-9 / line_rate if line_rate > 0
                                    else None),
           "bound_by": None, "slowest_phase": None, "slowest_group": None,
           "slowest_group_gpus": [], "groups_at_slowest": None, "groups_in_phase": None,
           "bottleneck_links": []}
    if not indices:
        return row
    k = int(np.argmax(durations))
    phase, outcome, result = phases[k], outcomes[indices[k]], results[k]
    row["slowest_phase"] = phase.name
    fabric_time = outcome.fabric_end_s
    if phase.scaleup_time >= fabric_time and phase.scaleup_flows:
        row["bound_by"] = "scale-up"
        return row
    row["bound_by"] = "fabric"
    row["bottleneck_links"] = [
        {"link": fabric.link_name(int(l)), "utilisation": float(u)}
        for l, u in list(zip(result.top_links, result.top_util))[:3] if np.isfinite(u)]
    group = phase.flows.group
    if group is None:
        return row
    row["groups_in_phase"] = int(np.unique(group).shape[0])
    flags = slowest_flows(fabric, phase.flows, outcome)
    if flags is None:
        return row
    ids, counts = np.unique(group[flags], return_counts=True)
    worst = int(ids[np.argmax(counts)])
    gpus = plan.group_gpus[worst]
    row["slowest_group"] = plan.group_names[worst]
    row["slowest_group_gpus"] = [int(g) for g in gpus[:GROUP_GPUS_SHOWN]]
    row["groups_at_slowest"] = int(ids.shape[0])
    return row


def step_record(record: PolicyRecord, collective: Collective, outcomes: list[PhaseOutcome],
                fabric: AnyFabric, scenario: Scenario) -> StepRecord:
    """The step record of a training item or trace (`collective.step`): per dimension the
    summed duration of its phases, its share of the step's communication, bytes and busbw
    per GPU (bytes_per_gpu / time), what bounds its longest phase (the fabric or the
    scale-up domain), that phase's most utilised links and slowest process group; then the
    overlap rule: the overlapped dimensions hide up to `overlap_window_s` of their time under
    the compute, the rest is exposed."""
    plan = collective.step
    finished = record.completion_s is not None
    rows = []
    for dim in plan.dimensions:
        indices = [i for i, p in enumerate(collective.phases) if p.dimension == dim.name]
        rows.append(_dimension_row(dim, indices, collective, outcomes, fabric, scenario,
                                   finished))
    comm = record.completion_s
    for row in rows:
        row["share"] = row["time_s"] / comm if comm and row["time_s"] is not None else None
    dominant = (max(rows, key=lambda r: r["time_s"])["dimension"]
                if finished and rows else None)
    compute = overlapped = exposed = step = None
    if plan.compute_s is not None and finished:
        hideable = sum(r["time_s"] for r in rows if r["dimension"] in plan.overlapped)
        overlapped = min(hideable, plan.overlap_window_s)
        exposed = comm - overlapped
        compute = plan.compute_s
        step = compute + exposed
    return StepRecord(policy=record.policy, workload=record.workload, gpus=record.gpus,
                      plan=collective.algorithm, comm_s=comm, line_rate_s=record.line_rate_s,
                      endpoint_bound_s=record.endpoint_bound_s,
                      dominant=dominant, dimensions=rows, compute_s=compute,
                      overlapped_s=overlapped, exposed_s=exposed, step_s=step,
                      overlap_rule=plan.overlap_rule, status=record.status)
