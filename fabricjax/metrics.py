"""Records from solved phases: what a report says about one policy on one workload item,
with and without failures. Plain numpy on the host; nothing here solves anything.

Contract: `collective_record` turns a collective's `engine.phase.PhaseOutcome`s (one per
phase) into a `results.PolicyRecord` (utilisation tail of the busiest phase, completion,
ideal, busbw, status, bottlenecks, the progressive figures); `set_records` turns the
`engine.batch.SetOutcome`s of a chunk of failure sets into per-set JSON records and
`failure_summary` the records of every set into a `results.FailureSummary` (from the records
alone, so a resumed study's summary is the same). `phase_duration_s` is the one place a
phase's fabric time becomes its duration (repeats, scale-up flows, step latency).
"""

from __future__ import annotations

import collections

import numpy as np

from fabricjax.config import Scenario
from fabricjax.core.status import Status, status_text
from fabricjax.engine.batch import STALLED_SHOWN
from fabricjax.engine.phase import PhaseOutcome
from fabricjax.fabric.build import AnyFabric
from fabricjax.fabric.failures import FailureBatch
from fabricjax.results import FailureSummary, PolicyRecord
from fabricjax.workload.flows import Collective, Phase

OK, ITERATION_CAP, LOST_PLANE = int(Status.OK), int(Status.ITERATION_CAP), int(Status.LOST_PLANE)
EVENT_LIMIT = int(Status.EVENT_LIMIT)
QUANTILES = {"p50": 50.0, "p99": 99.0, "max": 100.0}


def step_latency_s(scenario: Scenario, phase: Phase) -> float:
    """The fixed cost of one step of `phase`: a base plus a per-link latency over its
    longest path (solver.step_latency_us, solver.hop_latency_us), paid `latency_steps` times
    (a pipelined tree's chunks climb and descend its depth)."""
    cfg = scenario.solver
    return phase.latency_steps * (cfg.step_latency_us + cfg.hop_latency_us * phase.hops) * 1e-6


def phase_duration_s(scenario: Scenario, phase: Phase, fabric_time):
    """All `repeat` steps of a phase: each lasts as long as the slower of its fabric flows and
    its scale-up flows, plus the step latency (float or numpy array of fabric times)."""
    return phase.repeat * (np.maximum(fabric_time, phase.scaleup_time) +
                           step_latency_s(scenario, phase))


def _quantile_dict(row: np.ndarray) -> dict:
    return {"p50": float(row[0]), "p99": float(row[1]), "p100": float(row[2])}


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray,
                        qs: tuple[float, ...]) -> list[float]:
    """Inverted-CDF quantiles of `values` where each value counts `weights` times."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order], dtype=np.float64)
    picks = np.searchsorted(cum, np.asarray(qs) * cum[-1], side="left")
    return [float(values[order][min(i, values.size - 1)]) for i in picks]


def progressive_figures(collective: Collective, outcomes: list[PhaseOutcome],
                        scenario: Scenario) -> dict:
    """The collective under the progressive model: its time (None when a flow stalls), the
    flow completion time P50/P99/max over its fabric flows (each step's flows counted once per
    repeat), the largest event count, and the status flags of the simulations."""
    if any(o.progressive is None for o in outcomes if o.slots):
        return {}
    total, events, status, fcts, weights = 0.0, 0, 0, [], []
    stalled = False
    for phase, outcome in zip(collective.phases, outcomes):
        run = outcome.progressive
        fabric_end = 0.0
        if run is not None:
            finish = np.asarray(run.finish, dtype=np.float64)
            start = (np.zeros_like(finish) if phase.flows.start is None
                     else phase.flows.start)
            sending = phase.flows.size > 0
            stalled |= bool(np.any(~np.isfinite(finish[sending])))
            fabric_end = float(np.max(finish[sending], initial=0.0))
            fcts.append((finish - start)[sending])
            weights.append(np.full(int(sending.sum()), phase.repeat, np.float64))
            events = max(events, int(run.events))
            status |= int(run.status) & EVENT_LIMIT
        total += float(phase_duration_s(scenario, phase, fabric_end))
    out = {"progressive_s": None if stalled else total, "events": events,
           "event_limit": bool(status & EVENT_LIMIT)}
    if fcts and not stalled:
        values, w = np.concatenate(fcts), np.concatenate(weights)
        if values.size:
            p50, p99 = _weighted_quantiles(values, w, (0.5, 0.99))
            out.update(fct_p50_s=p50, fct_p99_s=p99, fct_max_s=float(values.max()))
    return out


def collective_record(policy: str, collective: Collective, outcomes: list[PhaseOutcome],
                      fabric: AnyFabric, scenario: Scenario) -> PolicyRecord:
    phase_results = [o.result for o in outcomes]
    worst = max(range(len(phase_results)), key=lambda i: float(phase_results[i].stats[0, 2]))
    busiest = phase_results[worst]
    status = OK
    stalled = 0
    completion = 0.0
    ideal = 0.0
    rounds = 0
    min_rate = np.inf
    for phase, outcome in zip(collective.phases, outcomes):
        res = outcome.result
        status |= int(res.status)
        stalled += int(res.stalled)
        rounds = max(rounds, int(res.rounds))
        completion += float(phase_duration_s(scenario, phase, float(res.phase_time)))
        ideal += float(phase_duration_s(scenario, phase, float(res.ideal_time)))
        rates = np.asarray(res.rates)
        if outcome.aggregated is None:
            rates = rates[phase.flows.size > 0]
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
    adaptive = [o for o in outcomes if o.iterations is not None]
    if any(o.capped for o in outcomes):
        status |= ITERATION_CAP
    if any(o.lost_plane for o in outcomes):
        status |= LOST_PLANE
    prog = progressive_figures(collective, outcomes, scenario) if finished else {}
    if prog.get("event_limit"):
        status |= EVENT_LIMIT
    status_words = status_text(status)
    # the busiest phase's iteration when it had one (a phase inside servers has none)
    shown = outcomes[worst] if outcomes[worst].iterations is not None else (
        adaptive[0] if adaptive else None)
    aggregated = [o.aggregated for o in outcomes if o.aggregated is not None]
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
        ideal_s=ideal,
        slowdown=completion / ideal if finished and ideal > 0 else None,
        algbw_gbps=algbw,
        busbw_gbps=algbw * collective.busbw_factor if algbw is not None else None,
        ideal_busbw_gbps=bits / ideal * collective.busbw_factor if ideal > 0 else 0.0,
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
        fct_p50_s=prog.get("fct_p50_s"),
        fct_p99_s=prog.get("fct_p99_s"),
        fct_max_s=prog.get("fct_max_s"),
        events=prog.get("events"),
        aggregated_classes=sum(aggregated) if aggregated else None,
        utilisation_cdf=([float(v) for v in busiest.cdf] if busiest.cdf is not None
                         else None),
    )


def distribution(values: np.ndarray) -> dict | None:
    """P50 / P99 / max of the finite values (None when there is none)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    return {name: float(np.percentile(values, q)) for name, q in QUANTILES.items()}


def set_records(policy: str, collective: Collective, results: list, fabric: AnyFabric,
                scenario: Scenario, batch: FailureBatch, ideal_s: float, window: float | None,
                first: int = 0) -> list[dict]:
    """The JSON records of failure sets first..first+C-1 of one policy on one collective
    (vectorised over sets; the small loop is over the collective's phases). `results`: one
    SetOutcome of numpy arrays [C] per phase; `window`: the policy's reaction window (None: no
    transient). A set's record depends on that set alone, so records computed chunk by chunk
    (or read back from a stream) are the records of one call over every set."""
    cfg = scenario.failures
    B = int(results[0].stats.shape[0])
    p100 = np.stack([r.stats[:, 0, -1] for r in results], axis=1)          # [C, phases]
    busiest = np.argmax(p100, axis=1)
    rows = np.arange(B)
    stats = np.stack([r.stats for r in results], axis=1)[rows, busiest]    # [C, 5, 1]
    top_links = np.stack([r.top_links for r in results], axis=1)[rows, busiest]
    top_util = np.stack([r.top_util for r in results], axis=1)[rows, busiest]
    stalled = sum(r.stalled.astype(np.int64) for r in results)
    affected = sum(r.affected.astype(np.int64) for r in results)
    completion = sum(phase_duration_s(scenario, phase, r.phase_time.astype(np.float64))
                     for phase, r in zip(collective.phases, results))
    finished = stalled == 0
    completion = np.where(finished, completion, np.nan)
    status = np.zeros(B, dtype=np.int64)
    for r in results:
        status |= r.status | (r.adapt_status & (ITERATION_CAP | LOST_PLANE))
    hit = affected > 0
    crash = hit & (window is not None and window >= cfg.transport_timeout_s)
    stall = np.where(hit, window if window is not None else 0.0, 0.0)
    lost = collective.gpus * np.where(crash, cfg.transport_timeout_s + cfg.restart_s, stall)

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
            "failure_set": first + b,
            "components": batch.names[first + b],
            "p100_utilisation": float(stats[b, 0, -1]),
            "p100_by_tier": {t: float(stats[b, i + 1, -1])
                             for i, t in enumerate(fabric.tier_names)},
            "p100_link": names[b],
            "completion_s": float(completion[b]) if finished[b] else None,
            "slowdown": float(slowdown[b]) if finished[b] and ideal_s > 0 else None,
            "status": status_text(int(status[b])),
            "stalled_flows": int(stalled[b]),
            "stalled_pairs": stalled_pairs(b) if stalled[b] else [],
            "affected_flows": int(affected[b]),
            "stall_s": float(stall[b]) if window is not None else None,
            "crash": bool(crash[b]),
            "gpu_seconds_lost": float(lost[b]) if window is not None else None,
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
        stalled_sets=int(np.sum(~finished)),
        worst_set=int(records[worst]["failure_set"]),
        worst_set_components=records[worst]["components"],
        top_p100_links=[{"link": n, "sets": c} for n, c in counts.most_common(5)],
        window_s=window,
        sets_hit=int(np.sum(affected > 0)),
        affected_flows_mean=float(np.mean(affected)),
        stall_s_mean=float(np.mean(_column(records, "stall_s"))) if window is not None else None,
        crashed_sets=int(np.sum(crash)),
        gpu_seconds_lost_mean=(float(np.mean(_column(records, "gpu_seconds_lost")))
                               if window is not None else None),
        status=", ".join(sorted({r["status"] for r in records})),
    )


def failure_set_records(policy: str, collective: Collective, results: list, fabric: AnyFabric,
                        scenario: Scenario, batch: FailureBatch, ideal_s: float,
                        window: float | None) -> tuple[list[dict], FailureSummary]:
    """Per-set records and the summary of one policy on one collective over every set of
    `batch` (`results`: one SetOutcome of numpy arrays [B] per phase)."""
    records = set_records(policy, collective, results, fabric, scenario, batch, ideal_s, window)
    return records, failure_summary(policy, collective.name, records, window)
