"""Turning results into what people read: rich tables and one-line summaries.

Contract: nothing here computes a metric; it formats what the studies measured
(`fabricjax.results`). Numbers that were not computed (a stalled collective has no completion
time) are a word in tables, never NaN or infinity. No JAX is imported here.
"""

from __future__ import annotations

import math

from fabricjax.config import FabricKind
from fabricjax.core.units import format_bytes, format_seconds
from fabricjax.report.layout import Column, FitTable
from fabricjax.results import Report

# a figure whose meaning differs by policy carries this mark, and the table a line saying why
LOST_PLANE_MARK = "†"
LOST_PLANE_NOTE = (f"{LOST_PLANE_MARK} lost_plane: this policy drops the share of traffic meant "
                   "for a dead plane instead of moving it onto the live planes, so its P100 "
                   "counts the surviving load only; the policies that move that share load the "
                   "live planes' links more. Compare completion times, not these P100s.")


def _table(title: str, columns: list[tuple[str, bool]], caption: str | None = None, *,
           keys: int = 2) -> FitTable:
    """A FitTable from (header, is text) pairs; the first `keys` columns repeat in every part
    when the table is split to fit the screen."""
    return FitTable(title, [Column(header, text) for header, text in columns], keys=keys,
                    caption=caption)


def _lost_plane(status: str | None) -> bool:
    return bool(status) and "lost_plane" in status.split("+")


def _marked(text: str, status: str | None) -> str:
    """`text` with the lost-plane mark when `status` carries that flag."""
    return text + LOST_PLANE_MARK if _lost_plane(status) else text


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


def paths_warning(fabric: dict) -> str | None:
    """A warning when `fabric.paths` caps GPU pairs below their equal-cost set (a fat tree
    or graph fabric), with the figure: the P100s of spray, mrc and optimal then count only
    the paths kept. None otherwise."""
    kept, full = fabric.get("paths_per_pair"), fabric.get("equal_cost_paths")
    if kept is None or full is None or kept >= full:
        return None
    return (f"warning: fabric.paths = {kept} keeps {kept} of up to {full:,} equal-cost paths "
            f"per GPU pair: the utilisation of spray, mrc and optimal may read up to "
            f"{full / kept:.3g}x high; leave paths out for the whole set")


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


def utilisation_table(report: Report) -> FitTable:
    """P50 / P99 / P100 of link utilisation, and the P100 per tier. A P100 of a record whose
    status has lost_plane carries LOST_PLANE_MARK and the table LOST_PLANE_NOTE."""
    tier_names = list(report.records[0].utilisation_by_tier) if report.records else []
    marked = any(_lost_plane(r.status) for r in report.records)
    table = _table("Link utilisation = offered load / capacity (busiest phase)",
                   [("policy", True), ("workload", True), ("P50", False), ("P99", False),
                    ("P100", False), *((f"P100 {tier}", False) for tier in tier_names)],
                   LOST_PLANE_NOTE if marked else None)
    for r in report.records:
        tiers = [_marked(_u(r.utilisation_by_tier[t]["p100"]), r.status) for t in tier_names]
        table.add_row(r.policy, r.workload, _u(r.p50_utilisation), _u(r.p99_utilisation),
                      _marked(_u(r.p100_utilisation), r.status), *tiers)
    return table


def time_table(report: Report) -> FitTable:
    table = _table("Collective completion (the static level: the slowest flow at its first "
                   "max-min rate on the settled split): line rate = payload bytes x 8 / NIC rate (the "
                   "busiest sender, no overhead); slowdown = completion / line rate; endpoint "
                   "bound = a perfect network with the transport (the busiest NIC, sending or "
                   "receiving, its wire bytes at line rate, plus latency); fabric slowdown = "
                   "completion / endpoint bound. busbw in Gbit/s (nccl-tests prints GB/s = /8)",
                   [("policy", True), ("workload", True), ("size", False), ("steps", False),
                    ("completion", False), ("line rate", False), ("slowdown", False),
                    ("endpoint bound", False), ("fabric slowdown", False),
                    ("busbw Gbit/s", False), ("status", True)])
    for r in report.records:
        status = r.status if r.stalled_flows == 0 else f"{r.status} ({r.stalled_flows} flows)"
        table.add_row(r.policy, r.workload, format_bytes(r.size_bytes), f"{r.steps:,}",
                      format_seconds(r.completion_s), format_seconds(r.line_rate_s),
                      _times(r.slowdown), format_seconds(r.endpoint_bound_s),
                      _times(r.fabric_slowdown), _opt(r.busbw_gbps, ".1f"), status)
    return table


def _times(value: float | None) -> str:
    """A ratio as the tables print it: 1.000×; — when not computed."""
    return "—" if value is None else _u(value) + "×"


def flow_table(report: Report) -> FitTable | None:
    """The progressive (flow-level) model beside the static one, and flow completion times:
    one row per record whenever some record was simulated or left out for a reason other than
    `solver.progressive: false` (the user's choice). A row without a simulation says why in
    its last column, the reason in full under the table. Figures of a simulation that hit
    `solver.max_events` carry a `*` and a caption: their unfinished flows were extrapolated
    from one last solve."""
    records = report.records
    if all(r.events is None and not r.aggregated_classes and
           r.progressive_status in (None, "off") for r in records):
        return None
    notes = []
    if any(r.progressive_status == "event_limit" for r in records):
        notes.append("* the simulation hit solver.max_events: the flows still running were "
                     "extrapolated from one last max-min solve")
    if any(r.progressive_status == "skipped" for r in records):
        notes.append("skipped (n): after the n events shown the simulation had finished a "
                     "smaller share of its flows, and of its time span, than it had spent of "
                     "solver.max_events, so progressive: auto gave it up (progressive: true "
                     "runs it to the cap)")
    reasons: dict[str, list[str]] = {}
    for r in records:
        if r.progressive_reason:
            reasons.setdefault(r.progressive_reason, []).append(f"{r.policy} / {r.workload}")
    for reason, rows in reasons.items():
        notes.append(f"not simulated ({', '.join(rows)}): {reason}")
    static_level = (report.solver or {}).get("model", "static") == "static"
    clocked = {name for name, described in (report.policies or {}).items()
               if described.get("clocked") and static_level}
    if any(r.policy in clocked and r.events is not None for r in records):
        notes.append("† on its convergence clock: the progressive time and the FCTs charge "
                     "the EV sets the policy passes through while it adapts (one iteration a "
                     "base RTT); static, and the completion above, are its settled set's")
    table = _table("Flow level: static (size / first max-min rate) vs progressive (rates "
                   "re-solved as flows finish); FCT over fabric flows",
                   [("policy", True), ("workload", True), ("algorithm", True),
                    ("static", False), ("progressive", False), ("FCT P50", False),
                    ("FCT P99", False), ("FCT max", False), ("events", True)],
                   "\n".join(notes) or None)
    for r in records:
        status = r.progressive_status
        mark = "*" if status == "event_limit" else ""
        if r.events is not None:
            events = f"{r.events:,}" + mark
            if status == "skipped":
                events = f"skipped ({r.events:,})"
        elif r.aggregated_classes:
            events = f"{r.aggregated_classes:,} classes"
        else:
            # the reason in full is in the caption
            events = {"over_limit": "over limit", "stalled": "stalled",
                      "off": "off"}.get(status, "—")

        def simulated(value: float | None) -> str:
            # None: a stalled flow, or no simulation (aggregated, over the auto limit, or
            # given up)
            if value is None and (r.events is None or r.stalled_flows == 0 or
                                  status == "skipped"):
                return "—"
            return format_seconds(value) + mark

        clock = "†" if r.policy in clocked and r.events is not None else ""
        table.add_row(r.policy, r.workload, r.algorithm or r.collective,
                      format_seconds(r.completion_s), simulated(r.progressive_s) + clock,
                      simulated(r.fct_p50_s), simulated(r.fct_p99_s), simulated(r.fct_max_s),
                      events)
    return table


def dynamic_table(report: Report) -> FitTable | None:
    """The dynamic level's own figures (`solver.model: dynamic`), one row per record that ran
    in time: its completion beside the static level's, busbw, FCTs, the busiest phase's
    time-averaged P100 beside its static P100, the largest queue fill, the bytes trimmed and
    sent again, the timer's resends and ACK stalls, and the steps it took."""
    rows = [r for r in report.records if r.dynamic is not None]
    if not rows:
        return None
    notes = ["completion: every phase at the dynamic level's end at the receivers, with the "
             "static completion's latencies and step costs; P100: the busiest link's "
             "utilisation averaged over the phase (static: the settled rates')"]
    if any(r.dynamic["stalled_flows"] for r in rows):
        notes.append("stalled: a flow has no live path (the job would hang); the other flows "
                     "ran to their end")
    table = _table("Dynamic level (time-stepped fluid with NSCC windows, queues and trims)",
                   [("policy", True), ("workload", True), ("completion", False),
                    ("static", False), ("busbw", False), ("FCT P50", False),
                    ("FCT P99", False), ("FCT max", False), ("P100 avg / static", False),
                    ("queue max", False), ("trimmed", False), ("timeouts", False),
                    ("ACK stalls", False), ("steps", False)], "\n".join(notes))
    for r in rows:
        d = r.dynamic

        def secs(value):
            return "stalled" if value is None and d["stalled_flows"] else (
                "—" if value is None else format_seconds(value))

        table.add_row(r.policy, r.workload, secs(d["completion_s"]),
                      secs(d["static_completion_s"]), _opt(d["busbw_gbps"], ".1f"),
                      secs(d["fct_p50_s"]), secs(d["fct_p99_s"]), secs(d["fct_max_s"]),
                      f"{_u(d['p100_time_avg'])} / {_u(d['p100_static'])}",
                      f"{d['queue_fill_max']:.2f}", format_bytes(d["trimmed_bytes"]),
                      f"{d['timeouts']:,}", f"{d['ack_stalls']:,}", f"{d['steps']:,}")
    return table


def step_table(report: Report) -> FitTable | None:
    """Training steps (and traces): each policy's communication split by parallel dimension."""
    if not report.steps:
        return None
    table = _table("Training step: communication by parallel dimension (phases one after "
                   "another; slowdown = time / line rate (payload at NIC rate, no overhead); busbw in Gbit/s = bytes per GPU "
                   "/ time)",
                   [("policy", True), ("workload", True), ("dim", True), ("groups", False),
                    ("bytes/GPU", False), ("time", False), ("share", False),
                    ("slowdown", False), ("busbw", False), ("bound", True),
                    ("slowest group (n at slowest)", True), ("worst link", True)], keys=3)
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
            table.add_row(step.policy, step.workload, row["dimension"],
                          f"{row['groups']:,} × {row['group_size']}",
                          format_bytes(row["bytes_per_gpu"]), format_seconds(row["time_s"]),
                          "—" if share is None else f"{100 * share:.1f}%",
                          (_u(row["slowdown"]) + "×") if row["slowdown"] is not None else "—",
                          _opt(row["busbw_gbps"], ".1f"), row["bound_by"] or "—",
                          group, link)
    return table


def step_summary_table(report: Report) -> FitTable | None:
    """Training steps: communication in all, the dimension that dominates, and with a compute
    time the exposed communication and the step time."""
    if not report.steps:
        return None
    table = _table("Training step per policy (exposed = communication not hidden under "
                   "compute)",
                   [("policy", True), ("workload", True), ("plan", True),
                    ("communication", False), ("line rate", False), ("dominant", True),
                    ("compute", False), ("hidden", False), ("exposed", False),
                    ("step time", False)])
    for step in report.steps:
        dominant = step.dominant or "—"
        for row in step.dimensions:
            if row["dimension"] == step.dominant and row["share"] is not None:
                dominant = f"{step.dominant} ({100 * row['share']:.0f}%)"
        optional = [("—" if v is None else format_seconds(v))
                    for v in (step.compute_s, step.overlapped_s, step.exposed_s, step.step_s)]
        table.add_row(step.policy, step.workload, step.plan,
                      format_seconds(step.comm_s), format_seconds(step.line_rate_s),
                      dominant, *optional)
    return table


def step_lines(report: Report) -> list[str]:
    """The overlap rule of each training item (once), and each slowest group's GPUs."""
    lines, seen = [], set()
    for step in report.steps or []:
        if step.overlap_rule and step.workload not in seen and step.compute_s is not None:
            seen.add(step.workload)
            lines.append(f"{step.workload}: {step.overlap_rule}")
    return lines


def sharing_table(report: Report) -> FitTable | None:
    """Job isolation: each job alone on the fabric vs sharing it with the other jobs."""
    if not report.sharing:
        return None
    table = _table("Jobs sharing the fabric: completion alone vs together (static model)",
                   [("policy", True), ("job", True), ("GPUs", False), ("alone", False),
                    ("together", False), ("together / alone", False)])
    for row in report.sharing:
        table.add_row(row.policy, row.job, f"{row.gpus:,}", format_seconds(row.alone_s),
                      format_seconds(row.together_s) if row.together_s is not None
                      else "stalled", (_u(row.slowdown) + "×") if row.slowdown else "—")
    return table


def adaptation_table(report: Report) -> FitTable | None:
    """The iterative policies (mrc's EV-swap fixed point, optimal's bound): how each iteration
    ended. 0 iterations means the starting point already met the stop rule (nothing to move,
    or a certificate at the first check), not that the policy did not run."""
    rows = [r for r in report.records if r.iterations is not None]
    if not rows:
        return None
    labels = ", ".join(f"{name}: {(report.policies or {}).get(name, {}).get('label', name)}"
                       for name in dict.fromkeys(r.policy for r in rows))
    marked = any(_lost_plane(r.status) for r in rows)
    table = _table(f"Iterative policies ({labels})",
                   [("policy", True), ("workload", True), ("iterations", False),
                    ("how it ended", True), ("residual", False), ("P100", False)],
                   LOST_PLANE_NOTE if marked else None)
    for r in rows:
        what = ((report.policies or {}).get(r.policy) or {}).get("residual", "residual")
        table.add_row(r.policy, r.workload, f"{r.iterations:,}", r.convergence or "—",
                      f"{what} {r.residual:.4f}" if r.residual is not None else "—",
                      _marked(_u(r.p100_utilisation), r.status))
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


def sensitivity_table(report: Report) -> FitTable:
    """The links whose upgrade would most shorten each collective: -d time / d capacity."""
    table = _table("Which links to upgrade: time saved per Gbit/s of capacity added "
                   "(gradient; P100 drop beside it). Links tied at the bottleneck share it: "
                   "upgrade them together",
                   [("policy", True), ("workload", True), ("link", True),
                    ("utilisation", False), ("µs saved per Gbit/s", False),
                    ("P100 drop per Gbit/s", False)])
    for row in report.sensitivity:
        helpful = [link for link in row["links"]
                   if (link["d_time_d_gbps"] or 0.0) < 0 or link["d_p100_d_gbps"] < 0]
        if not helpful:
            table.add_row(row["policy"], row["workload"], "no single link (NIC-bound)",
                          "—", "0", "0")
        for link in helpful[:3]:
            d_time, d_p100 = link["d_time_d_gbps"], link["d_p100_d_gbps"]
            table.add_row(row["policy"], row["workload"], link["link"],
                          _u(link["utilisation"]),
                          "—" if d_time is None else f"{-d_time * 1e6 + 0.0:.4g}",
                          f"{-d_p100 + 0.0:.3g}")
    return table


# --------------------------------------------------------------------------- sweeps

SWEEP_TEXT_COLUMNS = ("policy", "workload", "status")


def sweep_table(headers: list[str], rows: list[list[str]], legend: str | None = None,
                notes: list[str] | None = None) -> FitTable:
    """One row per point, policy and item (`report.sweep.sweep_table_rows`); every header and
    every figure whole (a narrow terminal wraps the text columns -- workload, status -- and
    deals the figures out over more tables, each repeating the swept values, policy and
    workload), with the swept fields' full names and `notes` in the caption."""
    notes = ([f"swept: {legend}"] if legend else []) + list(notes or [])
    if "slowdown" in headers and "fabric slowdown" not in headers:
        notes.append("fabric slowdown (completion / endpoint bound) = slowdown on every row")
    keys = headers.index("workload") + 1 if "workload" in headers else 0
    table = _table("Sweep: one row per point, policy and workload item (busbw in Gbit/s; "
                   "switches, optics and kW: the fabric's bill of materials)",
                   [(column, column in SWEEP_TEXT_COLUMNS) for column in headers],
                   "\n".join(notes) or None, keys=keys)
    for row in rows:
        table.add_row(*row)
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


def failure_table(report: Report) -> FitTable:
    """Steady state after each policy's reaction: the distribution over failure sets (one
    figure per cell when there is one set). The P100 of a policy that dropped a dead plane's
    share in some set (lost_plane) carries LOST_PLANE_MARK, and the table LOST_PLANE_NOTE."""
    n = report.failures.samples
    keys = ("p50", "p99", "max") if n > 1 else ("max",)
    title = (f"Steady state over {n:,} failure sets, after each policy reacts (P50 / P99 / "
             "max over sets)" if n > 1 else
             "Steady state in the one failure set, after each policy reacts")
    marked = any(_lost_plane(s.status) for s in report.failures.summaries)
    timed = any(s.dynamic is not None for s in report.failures.summaries)
    struck = timed and ((report.config or {}).get("failures") or {}).get("at_s") is not None
    notes = [LOST_PLANE_NOTE] if marked else []
    if timed:
        notes.append("dynamic: the same sets in time (solver.model: dynamic), from the policy's "
                     "initial slots on the split it settles to; trimmed: wire bytes sent again, "
                     "mean per set")
    if struck:
        notes.append("in-time stall: the longest a flow sent only onto dead paths after the set "
                     "struck (failures.at_s), until its policy reacted; a stall of at least "
                     "failures.transport_timeout_s crashes the job")
    table = _table(title, [("policy", True), ("workload", True), ("P100 util", False),
                           ("completion", False), ("slowdown", False),
                           ("fabric slowdown", False)] +
                   ([("dynamic completion", False), ("dynamic slowdown", False),
                     ("trimmed", False)] if timed else []) +
                   ([("in-time stall (crashed sets)", False)] if struck else []) +
                   [("stalled sets" if n > 1 else "stalled", True)],
                   "\n".join(notes) or None)
    for s in report.failures.summaries:
        cells = [" / ".join(_dist(dist, k, fmt) for k in keys)
                 for dist, fmt in ((s.p100_utilisation, _u), (s.completion_s, format_seconds),
                                   (s.slowdown, _times), (s.fabric_slowdown, _times))]
        cells[0] = _marked(cells[0], s.status)
        if timed:
            d = s.dynamic or {}
            cells += [" / ".join(_dist(d.get(name), k, fmt) for k in keys)
                      for name, fmt in (("completion_s", format_seconds), ("slowdown", _times))]
            cells.append(format_bytes(d["trimmed_bytes_mean"]) if d else "—")
        if struck:
            d = s.dynamic or {}
            stall = format_seconds(d["stall_s_max"]) if d and d["stall_s_max"] > 0 else "none"
            cells.append(f"{stall} ({d['crashed_sets']:,})" if d else "—")
        stalled = (f"{s.stalled_sets:,}" + (" (job stalls)" if s.stalled_sets else "")
                   if n > 1 else ("yes (job stalls)" if s.stalled_sets else "no"))
        table.add_row(s.policy, s.workload, *cells, stalled)
    return table


def transient_table(report: Report) -> FitTable:
    """What happens between the failure and the policy's reaction."""
    table = _table("Transient: a step that lost bytes on a dead path waits for the policy "
                   "to react (ECMP/spray: routing reconvergence; MRC: EV retirement); means "
                   "over the sets",
                   [("policy", True), ("workload", True), ("reacts in", False),
                    ("sets hit", False), ("flows hit", False), ("stall per set", False),
                    ("crashed sets", False), ("GPU·s lost per set", False)])
    for s in report.failures.summaries:
        if s.window_s is None:
            table.add_row(s.policy, s.workload, "— (bound)", "—", "—", "—", "—", "—")
            continue
        table.add_row(s.policy, s.workload, format_seconds(s.window_s),
                      f"{s.sets_hit:,} / {s.sets:,}", f"{s.affected_flows_mean:,.1f}",
                      format_seconds(s.stall_s_mean), f"{s.crashed_sets:,}",
                      f"{s.gpu_seconds_lost_mean:,.3g}")
    return table


def failure_lines(report: Report, shown: int = 6) -> list[str]:
    lines = []
    for s in report.failures.summaries:
        comps = s.worst_set_components
        total = max(s.worst_set_components_total, len(comps))
        text = ", ".join(comps[:shown]) + (f", … (+{total - shown})" if total > shown
                                           else "")
        lines.append(f"{s.policy} / {s.workload}: worst set #{s.worst_set}: "
                     f"{text or 'nothing failed'}")
        if s.top_p100_links:
            top = ", ".join(f"{t['link']} ({t['sets']})" for t in s.top_p100_links[:3])
            lines.append(f"    links that most often set the P100 (sets): {top}")
    return lines


def reliability_table(report: Report) -> FitTable:
    rows = report.reliability
    hours = rows[0].hours if rows else 24
    table = _table("Reliability what-if (Poisson component failures; events that hit the "
                   "job's paths)",
                   [("policy", True), ("workload", True), ("GPUs", False),
                    ("events/h (fabric)", False), ("stall s/h", False),
                    (f"P(crash) in {hours:g} h", False), ("GPU·s lost per event", False),
                    ("GPU·h lost per day", False), ("events per 1k steps", False)])
    for r in rows:
        table.add_row(r.policy, r.workload, f"{r.gpus:,}",
                      f"{r.events_per_hour:.3g} ({r.fabric_events_per_hour:.3g})",
                      f"{r.stall_s_per_hour:.3g}", f"{r.crash_probability:.3g}",
                      f"{r.gpu_seconds_lost_per_event:,.3g}", f"{r.gpu_hours_lost_per_day:.3g}",
                      _opt(r.events_per_1000_steps, ".3g"))
    return table
