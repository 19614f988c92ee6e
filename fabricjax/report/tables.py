"""Turning results into what people read: rich tables and one-line summaries.

Contract: nothing here computes a metric; it formats what the studies measured
(`fabricjax.results`). Numbers that were not computed (a stalled collective has no completion
time) are a word in tables, never NaN or infinity. No JAX is imported here.
"""

from __future__ import annotations

import math

from rich.markup import escape
from rich.table import Table

from fabricjax.config import FabricKind
from fabricjax.core.units import format_bytes, format_seconds
from fabricjax.results import Report


def _u(value: float) -> str:
    """A utilisation for a table: rounded once at 1e-6 so that equal values (f32 1.68749994 and
    1.6875) print alike."""
    if math.isnan(value):
        return "nan"
    return f"{round(value, 6):.3f}" if math.isfinite(value) else "∞"


def _opt(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def fabric_line(fabric: dict) -> str:
    if not FabricKind(fabric.get("kind", FabricKind.CLOS)).arithmetic_routes:
        planes = fabric.get("planes", 1)
        nic = f"NIC {fabric['nic_gbps']:g}G" + (
            f" ({planes} planes x {fabric['port_gbps']:g}G)"
            if planes > 1 and fabric.get("port_gbps") else
            f" ({planes} planes)" if planes > 1 else "")
        return (f"{fabric['gpus']:,} GPUs · {fabric['kind']} · {fabric['switches']:,} switches · "
                f"{fabric['links_directed']:,} directed links · {nic} · "
                f"up to {fabric['paths_per_pair']} paths per pair")
    return (f"{fabric['gpus']:,} GPUs · {fabric['planes']} plane(s) × {fabric['port_gbps']:g}G "
            f"(NIC {fabric['nic_gbps']:g}G) · radix {fabric['radix']} · {fabric['tiers']} tiers · "
            f"{fabric['switches_t0']:,} T0 + {fabric['switches_t1']:,} T1 switches · "
            f"{fabric['links_directed']:,} directed links")


def model_line(report: Report) -> str | None:
    """The model choices the numbers depend on, in one line (None when there are none):
    where each spraying policy's EVs land (routed by the sender, or hashed by the switches)
    and what the transport adds (headers, latency, the last ACK)."""
    parts = [f"{name} EVs {described['placement']}"
             for name, described in (report.policies or {}).items()
             if "placement" in described]
    transport = (report.config or {}).get("transport")
    if transport is not None:
        if transport["enabled"]:
            parts.append(f"transport {transport['mtu_bytes']} B MTU + "
                         f"{transport['header_bytes']} B headers, "
                         f"{transport['link_latency_us']:g} us per link" +
                         (", FCT at the last ACK" if transport["ack_return"] else ""))
        else:
            parts.append("transport off (bytes over rate)")
    return "model: " + " · ".join(parts) if parts else None


def utilisation_table(report: Report) -> Table:
    table = Table(title="Link utilisation = offered load / capacity (busiest phase)",
                  title_justify="left")
    for column in ("policy", "workload", "P50", "P99", "P100"):
        table.add_column(column, justify="left" if column in ("policy", "workload") else "right")
    tier_names = list(report.records[0].utilisation_by_tier) if report.records else []
    for tier in tier_names:
        table.add_column(f"P100 {tier}", justify="right")
    for r in report.records:
        tiers = [_u(r.utilisation_by_tier[t]["p100"]) for t in tier_names]
        table.add_row(r.policy, escape(r.workload), _u(r.p50_utilisation), _u(r.p99_utilisation),
                      _u(r.p100_utilisation), *tiers)
    return table


def time_table(report: Report) -> Table:
    table = Table(title="Collective completion: slowdown = completion / line-rate time (every "
                  "GPU sends at its NIC rate); fabric slowdown = completion / endpoint bound "
                  "(a perfect network: the busiest NIC, sending or receiving, at line rate). "
                  "busbw in Gbit/s (nccl-tests prints GB/s = /8)", title_justify="left")
    for column in ("policy", "workload", "size", "steps", "completion", "line rate", "slowdown",
                   "endpoint bound", "fabric slowdown", "busbw Gbit/s", "status"):
        table.add_column(column, justify="left" if column in ("policy", "workload", "status")
                         else "right")
    for r in report.records:
        status = r.status if r.stalled_flows == 0 else f"{r.status} ({r.stalled_flows} flows)"
        table.add_row(r.policy, escape(r.workload), format_bytes(r.size_bytes), f"{r.steps:,}",
                      format_seconds(r.completion_s), format_seconds(r.line_rate_s),
                      _times(r.slowdown), format_seconds(r.endpoint_bound_s),
                      _times(r.fabric_slowdown), _opt(r.busbw_gbps, ".1f"), status)
    return table


def _times(value: float | None) -> str:
    """A ratio as the tables print it: 1.000×; — when not computed."""
    return "—" if value is None else _u(value) + "×"


def flow_table(report: Report) -> Table | None:
    """The progressive (flow-level) model beside the static one, and flow completion times.
    Figures of a simulation that hit `solver.max_events` carry a `*` and a caption: their
    unfinished flows were extrapolated from one last solve."""
    rows = [r for r in report.records if r.events is not None or r.aggregated_classes]
    if not rows:
        return None
    capped = any(r.progressive_status == "event_limit" for r in rows)
    skipped = any(r.progressive_status == "skipped" for r in rows)
    notes = []
    if capped:
        notes.append("* the simulation hit solver.max_events: the flows still running were "
                     "extrapolated from one last max-min solve")
    if skipped:
        notes.append("skipped: after the events shown the simulation had finished a smaller "
                     "share of its flows, and of its time span, than it had spent of "
                     "solver.max_events, so progressive: auto gave it up (progressive: true "
                     "runs it to the cap)")
    caption = "\n".join(notes) or None
    table = Table(title="Flow level: static (size / first max-min rate) vs progressive (rates "
                  "re-solved as flows finish); FCT over fabric flows", title_justify="left",
                  caption=caption, caption_justify="left")
    for column in ("policy", "workload", "algorithm", "static", "progressive", "FCT P50",
                   "FCT P99", "FCT max", "events"):
        table.add_column(column, justify="left" if column in ("policy", "workload", "algorithm")
                         else "right")
    for r in rows:
        events = f"{r.events:,}" if r.events is not None else (
            f"{r.aggregated_classes:,} classes" if r.aggregated_classes else "—")
        if r.progressive_status == "skipped":
            events = f"skipped ({r.events:,})"
        mark = "*" if r.progressive_status == "event_limit" else ""

        def simulated(value: float | None) -> str:
            # None: a stalled flow, or no simulation (aggregated, over the auto limit, or
            # given up)
            if value is None and (r.events is None or r.stalled_flows == 0 or
                                  r.progressive_status == "skipped"):
                return "—"
            return format_seconds(value) + mark

        table.add_row(r.policy, escape(r.workload), escape(r.algorithm or r.collective),
                      format_seconds(r.completion_s), simulated(r.progressive_s),
                      simulated(r.fct_p50_s), simulated(r.fct_p99_s), simulated(r.fct_max_s),
                      events + mark)
    return table


def step_table(report: Report) -> Table | None:
    """Training steps (and traces): each policy's communication split by parallel dimension."""
    if not report.steps:
        return None
    table = Table(title="Training step: communication by parallel dimension (phases one after "
                  "another; slowdown = time / line-rate time; busbw in Gbit/s = bytes per GPU "
                  "/ time)", title_justify="left")
    for column in ("policy", "workload", "dim", "groups", "bytes/GPU", "time", "share",
                   "slowdown", "busbw", "bound", "slowest group (n at slowest)",
                   "worst link"):
        table.add_column(column, justify="left" if column in (
            "policy", "workload", "dim", "bound", "slowest group (n at slowest)",
            "worst link") else "right")
    for step in report.steps:
        for row in step.dimensions:
            group = "—"
            if row["slowest_group"] is not None:
                group = (f"{row['slowest_group']} ({row['groups_at_slowest']:,}/"
                         f"{row['groups_in_phase']:,})")
            elif row["bound_by"] == "fabric" and row["groups_in_phase"]:
                group = "— (classes)"
            links = row["bottleneck_links"]
            link = f"{links[0]['link']} @{_u(links[0]['utilisation'])}" if links else "—"
            share = row["share"]
            table.add_row(step.policy, escape(step.workload), escape(row["dimension"]),
                          f"{row['groups']:,} × {row['group_size']}",
                          format_bytes(row["bytes_per_gpu"]), format_seconds(row["time_s"]),
                          "—" if share is None else f"{100 * share:.1f}%",
                          (_u(row["slowdown"]) + "×") if row["slowdown"] is not None else "—",
                          _opt(row["busbw_gbps"], ".1f"), row["bound_by"] or "—",
                          escape(group), escape(link))
    return table


def step_summary_table(report: Report) -> Table | None:
    """Training steps: communication in all, the dimension that dominates, and with a compute
    time the exposed communication and the step time."""
    if not report.steps:
        return None
    table = Table(title="Training step per policy (exposed = communication not hidden under "
                  "compute)", title_justify="left")
    for column in ("policy", "workload", "plan", "communication", "line rate", "dominant",
                   "compute", "hidden", "exposed", "step time"):
        table.add_column(column, justify="left" if column in (
            "policy", "workload", "plan", "dominant") else "right")
    for step in report.steps:
        dominant = step.dominant or "—"
        for row in step.dimensions:
            if row["dimension"] == step.dominant and row["share"] is not None:
                dominant = f"{step.dominant} ({100 * row['share']:.0f}%)"
        optional = [("—" if v is None else format_seconds(v))
                    for v in (step.compute_s, step.overlapped_s, step.exposed_s, step.step_s)]
        table.add_row(step.policy, escape(step.workload), escape(step.plan),
                      format_seconds(step.comm_s), format_seconds(step.line_rate_s),
                      escape(dominant), *optional)
    return table


def step_lines(report: Report) -> list[str]:
    """The overlap rule of each training item (once), and each slowest group's GPUs."""
    lines, seen = [], set()
    for step in report.steps or []:
        if step.overlap_rule and step.workload not in seen and step.compute_s is not None:
            seen.add(step.workload)
            lines.append(f"{step.workload}: {step.overlap_rule}")
    return lines


def sharing_table(report: Report) -> Table | None:
    """Job isolation: each job alone on the fabric vs sharing it with the other jobs."""
    if not report.sharing:
        return None
    table = Table(title="Jobs sharing the fabric: completion alone vs together (static model)",
                  title_justify="left")
    for column in ("policy", "job", "GPUs", "alone", "together", "together / alone"):
        table.add_column(column, justify="left" if column in ("policy", "job") else "right")
    for row in report.sharing:
        table.add_row(row.policy, escape(row.job), f"{row.gpus:,}", format_seconds(row.alone_s),
                      format_seconds(row.together_s) if row.together_s is not None
                      else "stalled", (_u(row.slowdown) + "×") if row.slowdown else "—")
    return table


def adaptation_table(report: Report) -> Table | None:
    """The iterative policies (mrc's EV-swap fixed point, optimal's bound): how each iteration
    ended. 0 iterations means the starting point already met the stop rule (nothing to move,
    or a certificate at the first check), not that the policy did not run."""
    rows = [r for r in report.records if r.iterations is not None]
    if not rows:
        return None
    labels = ", ".join(f"{name}: {(report.policies or {}).get(name, {}).get('label', name)}"
                       for name in dict.fromkeys(r.policy for r in rows))
    table = Table(title=f"Iterative policies ({labels})", title_justify="left")
    for column in ("policy", "workload", "iterations", "how it ended", "residual", "P100"):
        table.add_column(column, justify="left" if column in ("policy", "workload", "how it ended")
                         else "right")
    for r in rows:
        what = ((report.policies or {}).get(r.policy) or {}).get("residual", "residual")
        table.add_row(r.policy, escape(r.workload), f"{r.iterations:,}", r.convergence or "—",
                      f"{what} {r.residual:.4f}" if r.residual is not None else "—",
                      _u(r.p100_utilisation))
    return table


def trace_lines(report: Report, points: int = 8) -> list[str]:
    """A compact view of each iteration trace (mrc with --trace): the P100 at evenly spaced
    iterations, always including the one the policy returned (its best set, marked)."""
    lines = []
    for r in report.records:
        if not r.trace or len(r.trace) < 2:
            continue
        n = len(r.trace) - 1
        best = min(range(len(r.trace)), key=lambda i: (r.trace[i], i))
        marks = sorted({round(i * n / (points - 1)) for i in range(points)} | {best})
        path = " → ".join(f"{r.trace[i]:.3f}@{i}" + (" (returned)" if i == best else "")
                          for i in marks)
        lines.append(f"{r.policy} / {r.workload}: {path}")
    return ["P100 by iteration (value@iteration):"] + lines if lines else []


def bottleneck_lines(report: Report) -> list[str]:
    """The busiest link of each record; where every loaded link sits at the maximum, or more
    links tie at it than the record keeps, it says so instead of naming one at random."""
    lines = []
    for r in report.records:
        if not r.bottleneck_links:
            continue
        worst = r.bottleneck_links[0]
        top = worst["utilisation"]
        tied = [b for b in r.bottleneck_links if b["utilisation"] >= top * (1 - 1e-6)]
        if r.p50_utilisation >= top * (1 - 1e-6):
            text = f"all links at {_u(top)} (P50 = P100)"
        elif len(tied) == len(r.bottleneck_links) and len(tied) > 1:
            text = (f"{len(tied)} or more links tied at {_u(top)}, e.g. "
                    + ", ".join(b["link"] for b in tied[:3]))
        elif len(tied) > 1:
            text = f"{len(tied)} links tied at {_u(top)}: " + ", ".join(b["link"] for b in tied)
        else:
            text = f"{worst['link']} at {_u(top)}"
        lines.append(f"{r.policy} / {r.workload}: {text}")
    return ["Busiest link (bottleneck) of each policy and workload:"] + lines if lines else []


def sensitivity_table(report: Report) -> Table:
    """The links whose upgrade would most shorten each collective: -d time / d capacity."""
    table = Table(title="Which links to upgrade: time saved per Gbit/s of capacity added "
                  "(gradient; P100 drop beside it). Links tied at the bottleneck share it: "
                  "upgrade them together", title_justify="left")
    for column in ("policy", "workload", "link", "utilisation", "µs saved per Gbit/s",
                   "P100 drop per Gbit/s"):
        table.add_column(column, justify="left" if column in ("policy", "workload", "link")
                         else "right")
    for row in report.sensitivity:
        helpful = [link for link in row["links"]
                   if (link["d_time_d_gbps"] or 0.0) < 0 or link["d_p100_d_gbps"] < 0]
        if not helpful:
            table.add_row(row["policy"], escape(row["workload"]), "no single link (NIC-bound)",
                          "—", "0", "0")
        for link in helpful[:3]:
            d_time, d_p100 = link["d_time_d_gbps"], link["d_p100_d_gbps"]
            table.add_row(row["policy"], escape(row["workload"]), escape(link["link"]),
                          _u(link["utilisation"]),
                          "—" if d_time is None else f"{-d_time * 1e6 + 0.0:.4g}",
                          f"{-d_p100 + 0.0:.3g}")
    return table


# --------------------------------------------------------------------------- sweeps

SWEEP_TEXT_COLUMNS = ("policy", "workload", "status")


def sweep_table(headers: list[str], rows: list[list[str]], legend: str | None = None) -> Table:
    """One row per point, policy and item; every header and every number on one line (a
    narrow terminal wraps the text columns -- workload, status -- never a figure or a
    header), with the swept fields' full names in the caption."""
    notes = [f"swept: {legend}"] if legend else []
    if "slowdown" in headers and "fabric slowdown" not in headers:
        notes.append("fabric slowdown (completion / endpoint bound) = slowdown on every row")
    table = Table(title="Sweep: one row per point, policy and workload item (busbw in Gbit/s; "
                  "switches, optics and kW: the fabric's bill of materials)",
                  title_justify="left", caption="\n".join(notes) or None,
                  caption_justify="left")
    for index, column in enumerate(headers):
        text = column in SWEEP_TEXT_COLUMNS
        widest = max((len(row[index]) for row in rows), default=0)
        table.add_column(escape(column), min_width=len(column) if text else max(
            len(column), widest), justify="left" if text else "right")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


# --------------------------------------------------------------------------- failures

def _dist(d: dict | None, key: str, fmt) -> str:
    return "—" if d is None else fmt(d[key])


def failure_header(report: Report) -> str:
    study = report.failures
    parts = [f"{k.replace('_', ' ')} {v['p50']:g}" + (f" (max {v['max']})" if v["max"] != v["p50"]
                                                       else "")
             for k, v in study.components_per_set.items()]
    what = ", ".join(parts) if parts else "nothing failed"
    return (f"Failure sets: {study.samples:,} (seed {study.seed}); per set (median): {what}")


def failure_table(report: Report) -> Table:
    """Steady state after each policy's reaction: the distribution over failure sets (one
    figure per cell when there is one set)."""
    n = report.failures.samples
    keys = ("p50", "p99", "max") if n > 1 else ("max",)
    title = (f"Steady state over {n:,} failure sets, after each policy reacts (P50 / P99 / "
             "max over sets)" if n > 1 else
             "Steady state in the one failure set, after each policy reacts")
    table = Table(title=title, title_justify="left")
    for column in ("policy", "workload", "P100 util", "completion", "slowdown",
                   "fabric slowdown", "stalled sets" if n > 1 else "stalled"):
        table.add_column(column, justify="left" if column in ("policy", "workload") else "right")
    for s in report.failures.summaries:
        cells = [" / ".join(_dist(dist, k, fmt) for k in keys)
                 for dist, fmt in ((s.p100_utilisation, _u), (s.completion_s, format_seconds),
                                   (s.slowdown, _times), (s.fabric_slowdown, _times))]
        stalled = (f"{s.stalled_sets:,}" + (" (job stalls)" if s.stalled_sets else "")
                   if n > 1 else ("yes (job stalls)" if s.stalled_sets else "no"))
        table.add_row(s.policy, escape(s.workload), *cells, stalled)
    return table


def transient_table(report: Report) -> Table:
    """What happens between the failure and the policy's reaction."""
    table = Table(title="Transient: a step that lost bytes on a dead path waits for the policy "
                        "to react (ECMP/spray: routing reconvergence; MRC: EV retirement)",
                  title_justify="left")
    for column in ("policy", "workload", "reacts in", "sets hit", "flows hit (mean)",
                   "stall per set (mean)", "crashed sets", "GPU·s lost per set (mean)"):
        table.add_column(column, justify="left" if column in ("policy", "workload") else "right")
    for s in report.failures.summaries:
        if s.window_s is None:
            table.add_row(s.policy, escape(s.workload), "— (bound)", "—", "—", "—", "—", "—")
            continue
        table.add_row(s.policy, escape(s.workload), format_seconds(s.window_s),
                      f"{s.sets_hit:,} / {s.sets:,}", f"{s.affected_flows_mean:,.1f}",
                      format_seconds(s.stall_s_mean), f"{s.crashed_sets:,}",
                      f"{s.gpu_seconds_lost_mean:,.3g}")
    return table


def failure_lines(report: Report, shown: int = 6) -> list[str]:
    lines = []
    for s in report.failures.summaries:
        comps = s.worst_set_components
        text = ", ".join(comps[:shown]) + (f", … (+{len(comps) - shown})" if len(comps) > shown
                                           else "")
        lines.append(f"{s.policy} / {s.workload}: worst set #{s.worst_set}: "
                     f"{text or 'nothing failed'}")
        if s.top_p100_links:
            top = ", ".join(f"{t['link']} ({t['sets']})" for t in s.top_p100_links[:3])
            lines.append(f"    links that most often set the P100 (sets): {top}")
    return lines


def reliability_table(report: Report) -> Table:
    rows = report.reliability
    hours = rows[0].hours if rows else 24
    table = Table(title="Reliability what-if (Poisson component failures; events that hit the "
                        "job's paths)", title_justify="left")
    for column in ("policy", "workload", "GPUs", "events/h (fabric)", "stall s/h",
                   f"P(crash) in {hours:g} h", "GPU·s lost per event", "GPU·h lost per day",
                   "events per 1k steps"):
        table.add_column(column, justify="left" if column in ("policy", "workload") else "right")
    for r in rows:
        table.add_row(r.policy, escape(r.workload), f"{r.gpus:,}",
                      f"{r.events_per_hour:.3g} ({r.fabric_events_per_hour:.3g})",
                      f"{r.stall_s_per_hour:.3g}", f"{r.crash_probability:.3g}",
                      f"{r.gpu_seconds_lost_per_event:,.3g}", f"{r.gpu_hours_lost_per_day:.3g}",
                      _opt(r.events_per_1000_steps, ".3g"))
    return table
