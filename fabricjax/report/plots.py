"""Figures of a report, for people who would rather look than read: PNG files, no JAX.

Contract: every `plot_*` function reads a `Report` (or sweep rows) and nothing else, draws on
its own Agg `Figure` (no pyplot, no global state), writes one PNG atomically (a temporary file
in the target's folder, renamed over it) and returns its path; called without a path it
returns the `Figure` unsaved (the Python API's `fabricjax.plot`); None, without writing, when
the report has nothing to draw. `write_plots` writes every applicable figure under a stable
name. A policy keeps its colour in every figure (the one it declares, `Policy.display.colour`, looked
up in `core.registry`); figures are 8 x 5 in at 150 dpi (grids of three or more rows of panels
grow 2.5 in per row).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from fabricjax.config import FabricKind
from fabricjax.core.output import write_output
from fabricjax.core.registry import known_names, lookup
from fabricjax.core.units import format_bytes, value_text

DPI = 150
FIGSIZE = (8.0, 5.0)                 # inches, for up to two rows of panels
ROW_HEIGHT = 2.5                     # inches per row, from three rows of panels on
MAX_COLUMNS = 3
LOG_X_ABOVE = 10.0                   # utilisation CDF: log-x once the tail reaches this
ZOOM_ABOVE = 2.0                     # utilisation CDF: a zoom panel when one policy's P100
                                     # is this many times every other policy's
SHARE_Y_WITHIN = 4.0                 # side-by-side panels share y when their tops are this close

# A policy that declares no colour (or is not registered in this process) gets a stable pick
# by name, and a dash-dot reference line beside an iteration trace.
_OTHER_COLOURS = ("#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e")
_OTHER_LINE = (0, (3, 1, 1, 1))
_WORKLOAD_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v"))

FILE_NAMES = {"utilisation_cdf": "utilisation_cdf.png", "completion": "completion.png",
              "mrc_trace": "mrc_trace.png", "sharing": "sharing.png",
              "dynamic_series": "dynamic_series.png"}
SWEEP_METRICS = ("p100_utilisation", "completion_s", "busbw_gbps", "slowdown",
                 "fabric_slowdown", "failures_p100_p99", "failures_slowdown_p99")
METRIC_LABELS = {
    "p100_utilisation": "P100 link utilisation (load / capacity)",
    "p99_utilisation": "P99 link utilisation (load / capacity)",
    "completion_s": "completion time",
    "busbw_gbps": "bus bandwidth (Gbit/s)",
    "slowdown": "slowdown (completion / line rate, no overhead)",
    "fabric_slowdown": "fabric slowdown (completion / endpoint-bound time)",
    "failures_p100_p99": "P100 link utilisation, P99 over failure sets",
    "failures_slowdown_p99": "failure slowdown, P99 over failure sets (completion / healthy)",
}


def _declared(policy: str, attribute: str) -> Any:
    """What a registered policy's `Display` says of it (None when unregistered or unset)."""
    try:
        return getattr(lookup(policy).display, attribute, None) or None
    except KeyError:
        return None


def policy_colour(policy: str) -> str:
    """The colour of `policy` in every figure: the one it declares, else a stable pick by
    name."""
    return (_declared(policy, "colour") or
            _OTHER_COLOURS[sum(map(ord, policy)) % len(_OTHER_COLOURS)])


def policy_line(policy: str) -> Any:
    """The style of `policy`'s reference line beside another's iteration trace."""
    return _declared(policy, "line_style") or _OTHER_LINE


def figure_size(rows: int) -> tuple[float, float]:
    """(width, height) in inches of a figure with `rows` rows of panels."""
    return FIGSIZE[0], max(FIGSIZE[1], ROW_HEIGHT * rows)


def grid_shape(panels: int) -> tuple[int, int]:
    """(rows, columns) of a grid of small multiples: one row up to three, 2 x 2 for four."""
    if panels <= MAX_COLUMNS:
        return 1, max(panels, 1)
    cols = 2 if panels == 4 else MAX_COLUMNS
    return math.ceil(panels / cols), cols


# --------------------------------------------------------------------------- helpers

def _new_figure(rows: int = 1, cols: int = 1, *, sharey: bool = False):
    """An Agg figure with a rows x cols grid of axes (a 2-d array), sized by `figure_size`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figure_size(rows), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey)
    for ax in axes.flat:
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(True, alpha=0.3, linewidth=0.6)
        ax.set_axisbelow(True)
    return fig, axes


def _save(fig, path: str | Path) -> Path:
    """Render `fig` through `core.output.write_output`: a file gets a temporary PNG beside it
    (beside a symlink's target) renamed over it, so a reader never sees half an image and a
    failed render leaves nothing behind; a FIFO is written straight into."""
    return write_output(path, lambda handle: fig.savefig(handle, format="png", dpi=DPI),
                        binary=True)


def _finish(fig, path: str | Path | None) -> Any:
    """The figure itself when `path` is None (a notebook shows it; nothing is written), else
    the path it was written to (`_save`)."""
    return fig if path is None else _save(fig, path)


def _ordered_policies(policies: Iterable[str]) -> list[str]:
    seen = list(dict.fromkeys(policies))
    order = known_names()    # registration order: the reports' column order
    return sorted(seen, key=lambda p: (order.index(p) if p in order else len(order),
                                       seen.index(p)))


def _workloads(records: Sequence) -> list[str]:
    return list(dict.fromkeys(r.workload for r in records))


def _finite(values: Iterable[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def time_unit(seconds: Iterable[float | None]) -> tuple[float, str]:
    """(scale, unit) that shows the largest finite time of `seconds` as 1 to 1000 units."""
    top = max((v for v in _finite(seconds) if v > 0), default=1.0)
    if top >= 1.0:
        return 1.0, "s"
    if top >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _number(value: float) -> str:
    return f"{value:.3g}"


def _subtitle(report) -> str:
    fabric = report.fabric or {}
    parts = []
    if "gpus" in fabric:
        parts.append(f"{fabric['gpus']:,} GPUs")
    if not FabricKind(fabric.get("kind", FabricKind.CLOS)).arithmetic_routes:
        planes = fabric.get("planes", 1)
        parts.append(f"{fabric['kind']}, NIC {fabric['nic_gbps']:g}G"
                     + (f" as {planes} planes" if planes > 1 else ""))
    elif "planes" in fabric and "port_gbps" in fabric:
        parts.append(f"{fabric['planes']} planes x {fabric['port_gbps']:g}G")
    if fabric.get("oversubscription", 1) not in (1, 1.0):
        parts.append(f"{fabric['oversubscription']:g}:1 oversubscribed")
    return ", ".join(parts)


def _suptitle(fig, report, what: str) -> None:
    sub = _subtitle(report)
    fig.suptitle(f"{report.scenario}: {what}" + (f"\n{sub}" if sub else ""), fontsize=12)


def _workload_title(report, workload: str) -> str:
    """The item's name over its collective, size and (when not the whole fabric) GPUs."""
    record = next(r for r in report.records if r.workload == workload)
    kind = record.collective + (f" ({record.algorithm})" if record.algorithm else "")
    what = f"{kind}, {format_bytes(record.size_bytes)}"
    if record.gpus != (report.fabric or {}).get("gpus"):
        what += f", {record.gpus:,} GPUs"
    return what if workload == record.collective else f"{workload}\n{what}"


def _hide_unused(axes, used: int) -> None:
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)


def _log_axis(axis) -> None:
    """Plain-number labels (0.1, 0.5, 1, 2, 50) on a log axis, no minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _empty_note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
            color="0.4", fontsize=10)


# --------------------------------------------------------------------------- report figures

def cdf_panels(report) -> list[tuple[str, float | None]]:
    """The panels of the utilisation CDF: (workload, None) for each workload item's whole
    range, each followed by (workload, x_limit) -- a zoom to x <= x_limit -- when one policy's
    P100 is ZOOM_ABOVE times or more every other policy's (an ECMP tail of 4x beside spraying
    at 1x would otherwise squeeze the others into one vertical line at the left)."""
    panels: list[tuple[str, float | None]] = []
    for workload in _workloads(report.records):
        tails = sorted(r.p100_utilisation for r in report.records
                       if r.workload == workload and r.utilisation_cdf)
        panels.append((workload, None))
        if len(tails) >= 2 and tails[-2] > 0 and tails[-1] >= ZOOM_ABOVE * tails[-2]:
            panels.append((workload, max(1.1, 1.1 * tails[-2])))
    return panels


def plot_utilisation_cdf(report, path: str | Path | None = None) -> Any:
    """One panel per workload item, one line per policy: the fraction of links (y) loaded at
    most x times their capacity, over the links of the item's busiest phase; a dashed line
    at 1.0 marks capacity. The 101 quantiles are drawn as a staircase (steps at the
    quantiles: interpolating between them would invent links). Log-x when the tail reaches
    10x capacity and the loaded links span more than 10x (idle links then sit at the left
    edge). When one policy's tail is far beyond the others' (`cdf_panels`), a second, linear
    panel beside it zooms to the others' range. All panels share the y axis. None (nothing
    written) when no record has a utilisation CDF."""
    records = [r for r in report.records if r.utilisation_cdf]
    if not records:
        return None
    panels = cdf_panels(report)
    rows, cols = grid_shape(len(panels))
    fig, axes = _new_figure(rows, cols, sharey=True)
    for ax, (workload, zoom) in zip(axes.flat, panels):
        mine = {r.policy: r for r in records if r.workload == workload}
        values = np.asarray([v for r in mine.values() for v in r.utilisation_cdf], float)
        loaded = values[values > 0]
        # linear keeps "how many times capacity" direct; only a tail of 10x capacity or more
        # (an incast) would squash every link at or below capacity into the left tenth
        log = (zoom is None and bool(loaded.size)
               and loaded.max() >= max(LOG_X_ABOVE, 10 * loaded.min()))
        floor = loaded.min() / 2 if log else 0.0
        for order, policy in enumerate(_ordered_policies(mine)):
            record = mine[policy]
            x = np.asarray(record.utilisation_cdf, float)
            y = np.linspace(0.0, 1.0, x.size)
            # thinner lines on top, so policies with the same distribution stay visible
            ax.plot(np.maximum(x, floor) if log else x, y, color=policy_colour(policy),
                    lw=max(4.0 - 1.2 * order, 1.0), drawstyle="steps-post",
                    label=f"{policy} (P100 {record.p100_utilisation:.2f})")
        ax.axvline(1.0, color="black", ls="--", lw=1, label="capacity")
        title = _workload_title(report, workload)
        if log:
            ax.set_xscale("log")
            _log_axis(ax.xaxis)
        elif zoom is not None:
            ax.set_xlim(0.0, zoom)
            beyond = ", ".join(p for p in _ordered_policies(mine)
                               if mine[p].p100_utilisation > zoom)
            title = f"zoom to x ≤ {zoom:.3g} ({beyond} runs on to the right)"
        else:   # capacity stays inside the panel even when no link exceeds it
            ax.set_xlim(0.0, max(1.1, 1.05 * float(values.max(initial=0.0))))
        ax.set_title(title, fontsize=9 if zoom is not None else 10)
        ax.set_xlabel("link utilisation (load / capacity)" +
                      (", log; idle links at the left edge" if log else ""))
        ax.set_ylim(0.0, 1.02)
        if mine and zoom is None:
            ax.legend(loc="best", fontsize=8, framealpha=0.9)
        elif not mine:
            _empty_note(ax, "no fabric traffic")
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of links ≤ x")
    _hide_unused(axes, len(panels))
    _suptitle(fig, report, "link utilisation CDF, busiest phase of each workload")
    return _finish(fig, path)


def _stalled_bar(ax, x: float, width: float, height: float, colour: str, text: str) -> None:
    ax.bar(x, height, width, fill=False, hatch="xx", edgecolor=colour, linewidth=1.2)
    ax.text(x, height / 2, text, rotation=90, ha="center", va="center", fontsize=8,
            color=colour, fontweight="bold",
            bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))


def _bar_label(ax, x: float, y: float, text: str, *, above: int = 0, fontsize: float = 8,
               **style) -> int:
    """Centred text just over (x, y), shifted up past `above` lines of 8 pt text; returns the
    lines it took together with those."""
    ax.annotate(text, (x, y), xytext=(0, 3 + 9.6 * above), textcoords="offset points",
                ha="center", va="bottom", fontsize=fontsize, **style)
    return above + text.count("\n") + 1


def share_y(tops: Iterable[float | None]) -> bool:
    """Whether side-by-side panels whose largest values are `tops` share one y axis: yes when
    every top is within SHARE_Y_WITHIN (4) x of the others (a common scale compares them at a
    glance), no when one would flatten another (a 4 MB and a 4 GB all-reduce)."""
    finite = [t for t in _finite(tops) if t > 0]
    return not finite or max(finite) <= SHARE_Y_WITHIN * min(finite)


def _differs(bound: float | None, reference: float | None) -> bool:
    return bool(bound) and bool(reference) and bound > 1.01 * reference


def plot_completion(report, path: str | Path | None = None) -> Any:
    """One panel per workload item, one bar per policy: the completion time, labelled with
    its slowdown over the line-rate time (every flow at its NIC rate: the dotted line); when
    endpoints share NICs (an incast, skewed all-to-all) the endpoint-bound time is a dash-dot
    line and the label adds the fabric's own slowdown over it. When the report has a failure
    study, a whisker runs from the P50 (dot) to the max over the failure sets. A stalled
    completion is a hatched bar labelled "stalled", and stalled failure sets are counted
    above the bar ("k/N sets stalled"). Panels share the y axis when their times are within
    4x of each other (`share_y`), else each has its own scale."""
    records = report.records
    workloads = _workloads(records)
    summaries = {}
    if report.failures is not None:
        summaries = {(s.policy, s.workload): s for s in report.failures.summaries}
    panel_times = {}
    for workload in workloads:
        mine = [r for r in records if r.workload == workload]
        spread = [v for r in mine if (r.policy, workload) in summaries
                  and summaries[(r.policy, workload)].completion_s
                  for v in summaries[(r.policy, workload)].completion_s.values()]
        panel_times[workload] = ([r.completion_s for r in mine]
                                 + [r.line_rate_s for r in mine]
                                 + [r.endpoint_bound_s for r in mine] + spread)
    shared = len(workloads) > 1 and share_y(max(_finite(t), default=None)
                                            for t in panel_times.values())
    every = [t for times in panel_times.values() for t in times]
    rows, cols = grid_shape(len(workloads))
    fig, axes = _new_figure(rows, cols, sharey=shared)
    any_endpoint = False
    for ax, workload in zip(axes.flat, workloads):
        mine = {r.policy: r for r in records if r.workload == workload}
        policies = _ordered_policies(mine)
        scale, unit = time_unit(every if shared else panel_times[workload])
        top = max(_finite(every if shared else panel_times[workload]), default=0.0) * scale
        top = top or 1.0
        for x, policy in enumerate(policies):
            record, colour = mine[policy], policy_colour(policy)
            if record.completion_s is None:
                label_y = top * 1.05
                _stalled_bar(ax, x, 0.7, label_y, colour, "stalled")
            else:
                label_y = record.completion_s * scale
                ax.bar(x, label_y, 0.7, color=colour)
            summary = summaries.get((policy, workload))
            if summary is not None and summary.completion_s:
                low = summary.completion_s["p50"] * scale
                high = summary.completion_s["max"] * scale
                # beside the bar's centre, clear of the value printed there
                ax.errorbar(x + 0.22, low, yerr=[[0.0], [high - low]], fmt="o", color="black",
                            ms=4, capsize=4, lw=1.3, zorder=3)
                label_y = max(label_y, high)
            lines = 0
            if record.completion_s is not None:
                height = record.completion_s * scale
                text = _number(height)
                if record.slowdown is not None:
                    text += f"\n×{record.slowdown:.2f}"
                if (_differs(record.endpoint_bound_s, record.line_rate_s)
                        and record.fabric_slowdown is not None):
                    text += f"\nfabric ×{record.fabric_slowdown:.2f}"
                if height >= 0.12 * top * (text.count("\n") + 1) / 2:
                    # inside the bar: a whisker above it is not its
                    ax.annotate(text, (x, height), xytext=(0, -4), textcoords="offset points",
                                ha="center", va="top", fontsize=8, color="white",
                                fontweight="bold")
                else:
                    lines = _bar_label(ax, x, label_y, text)
            if summary is not None and summary.stalled_sets:
                sets = (f"all {summary.sets}" if not summary.completion_s
                        else f"{summary.stalled_sets}/{summary.sets}")
                _bar_label(ax, x, label_y, f"{sets} sets\nstalled",
                           above=lines, color="#b00000", fontsize=7)
        line_rate = next((r.line_rate_s for r in mine.values() if r.line_rate_s), None)
        endpoint = next((r.endpoint_bound_s for r in mine.values() if r.endpoint_bound_s), None)
        if line_rate:   # under the bars
            ax.axhline(line_rate * scale, color="black", ls=":", lw=1.3, zorder=0.9)
        if _differs(endpoint, line_rate):
            any_endpoint = True
            ax.axhline(endpoint * scale, color="0.35", ls="-.", lw=1.3, zorder=0.9)
        ax.set_xticks(range(len(policies)), policies)
        for tick, policy in zip(ax.get_xticklabels(), policies):
            tick.set_color(policy_colour(policy))
        ax.set_xlim(-0.6, len(policies) - 0.4)
        ax.set_ylim(0.0, top * (1.45 if summaries else 1.3))
        if not shared or ax in list(axes[:, 0]):
            ax.set_ylabel(f"completion time ({unit})")
        ax.set_title(_workload_title(report, workload), fontsize=10)
    _hide_unused(axes, len(workloads))
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="black", ls=":", lw=1.3,
                      label="line rate: every flow at its NIC rate (×: slowdown over it)")]
    if any_endpoint:
        handles.append(Line2D([], [], color="0.35", ls="-.", lw=1.3,
                              label="endpoint bound: NICs shared, fabric uncontended "
                                    "(fabric ×: over it)"))
    if summaries:
        handles.append(Line2D([], [], color="black", marker="o", ms=4, lw=1.3,
                              label=f"bars: no failure; whisker: {report.failures.samples} "
                                    "failure sets, P50 (dot) to max (cap)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=1 if len(handles) > 2
               else len(handles), fontsize=8, frameon=False)
    what = "completion time per policy" + (", with failure sets" if summaries else "")
    _suptitle(fig, report, what)
    return _finish(fig, path)


def plot_mrc_trace(report, path: str | Path | None = None) -> Any:
    """An adaptive policy's P100 after each iteration (mrc's EV swaps), one panel per record
    with a trace (the busiest phase's; panels share the y axis), a star at the best set (the one it returns), beside
    the P100 of the other policies on the same item that lie near the curve (spraying,
    dashed; the optimal bound, dash-dot; a far tail such as ECMP's would flatten it); None
    (nothing written) when no record has a trace of at least one iteration."""
    # a trace of one point (zero iterations: balanced at the start) has no curve to show
    traced = [r for r in report.records if r.trace and len(r.trace) >= 2]
    if not traced:
        return None
    from matplotlib.ticker import MaxNLocator

    rows, cols = grid_shape(len(traced))
    fig, axes = _new_figure(rows, cols, sharey=True)
    levels: list[float] = []
    for ax, record in zip(axes.flat, traced):
        trace = np.asarray(record.trace, float)
        steps = np.arange(trace.size)
        ax.plot(steps, trace, color=policy_colour(record.policy), lw=2,
                marker="o" if trace.size <= 40 else None, ms=3,
                label=f"{record.policy} ({record.iterations} it., {record.convergence})")
        # an adaptive policy returns the best set it reached, not the last (P100 fluctuates)
        best = int(np.argmin(trace))
        ax.plot(best, trace[best], ls="none", marker="*", ms=14,
                color=policy_colour(record.policy), mec="black", mew=0.8, zorder=3,
                label=f"returned: P100 {trace[best]:.2f}")
        others = [r for r in report.records if r.workload == record.workload
                  and r.policy != record.policy and r.p100_utilisation <= 1.25 * trace.max()]
        for other in others:
            style = policy_line(other.policy)
            ax.axhline(other.p100_utilisation, color=policy_colour(other.policy), ls=style,
                       lw=1.5, label=f"{other.policy} P100 {other.p100_utilisation:.2f}")
        ax.axhline(1.0, color="black", lw=0.8, alpha=0.5)
        levels += [y for line in ax.get_lines() for y in np.atleast_1d(line.get_ydata())]
        ax.set_xlim(-0.5, max(trace.size - 1, 1) + 0.5)   # whole iterations, even for one
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(_workload_title(report, record.workload), fontsize=10)
        ax.set_xlabel(f"{record.policy.upper()} iteration (0: its initial slots)")
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    # one y range for every panel (shared), with headroom above the curves for the legend,
    # so it never hides the start of a trace
    low, high = min(levels), max(levels)
    span = max(high - low, 0.1)
    axes.flat[0].set_ylim(low - 0.05 * span, high + 0.5 * span)
    for ax in axes[:, 0]:
        ax.set_ylabel("P100 link utilisation")
    _hide_unused(axes, len(traced))
    names = ", ".join(dict.fromkeys(r.policy.upper() for r in traced))
    _suptitle(fig, report, f"{names} convergence, busiest phase")
    return _finish(fig, path)


def dynamic_series_rows(report) -> tuple[list[tuple[str, str, list]], str]:
    """(policy, workload, series) per record that ran in time, and what they show: with a
    failure that strikes during the phase (`failures.at_s`), failure set 0's first step,
    else the busiest phase of the no-failure analysis."""
    failures = getattr(report, "failures", None)
    at_s = ((report.config or {}).get("failures") or {}).get("at_s")
    if failures is not None and at_s is not None:
        rows = [(r["policy"], r["workload"], r["dynamic"]["series"]) for r in failures.records
                if r["failure_set"] == 0 and (r.get("dynamic") or {}).get("series")]
        if rows:
            return rows, f"failure set 0 strikes {at_s * 1e6:g} µs into the first step"
    return ([(r.policy, r.workload, r.dynamic["series"]) for r in report.records
             if r.dynamic is not None and r.dynamic.get("series")], "busiest phase")


def plot_dynamic_series(report, path: str | Path | None = None) -> Any:
    """The dynamic level in time (`solver.model: dynamic`): per workload item, the throughput
    delivered (Gbit/s, top) and the fullest queue (queue / buffer, bottom), one line per
    policy (`dynamic_series_rows`: a failure that strikes during the phase shows its stall and
    each policy's recovery, on a log time axis when it spans microseconds to seconds). None
    (nothing written) when no record ran in time."""
    rows, what = dynamic_series_rows(report)
    if not rows:
        return None
    workloads = list(dict.fromkeys(w for _, w, _ in rows))
    order = _ordered_policies(p for p, _, _ in rows)
    fig, axes = _new_figure(2, len(workloads))
    for col, workload in enumerate(workloads):
        mine = sorted([r for r in rows if r[1] == workload], key=lambda r: order.index(r[0]))
        times = [row[0] for _, _, series in mine for row in series if row[0] > 0]
        logarithmic = bool(times) and max(times) > 1e3 * min(times)
        scale, unit = time_unit(times)
        for policy, _, series in mine:
            series = np.asarray(series, float)
            colour, style = policy_colour(policy), policy_line(policy)
            for row, column in ((0, 2), (1, 1)):
                axes[row, col].plot(series[:, 0] * scale, series[:, column], color=colour,
                                    ls=style, lw=1.6, label=policy,
                                    drawstyle="steps-pre")
        at_s = ((report.config or {}).get("failures") or {}).get("at_s")
        for row in (0, 1):
            if logarithmic:
                axes[row, col].set_xscale("log")
            if at_s and what.startswith("failure"):
                axes[row, col].axvline(at_s * scale, color="black", lw=0.8, ls=":")
        axes[0, col].set_title(_workload_title(report, workload), fontsize=10)
        axes[0, col].set_ylabel("throughput delivered (Gbit/s)")
        axes[1, col].set_ylabel("fullest queue (queue / buffer)")
        axes[1, col].set_xlabel(f"time ({unit}), {what}")
        axes[1, col].set_ylim(-0.02, 1.05)
        axes[0, col].legend(loc="best", fontsize=8, framealpha=0.9)
    _suptitle(fig, report, "dynamic level over time")
    return _finish(fig, path)


def plot_sharing(report, path: str | Path | None = None) -> Any:
    """Jobs sharing the fabric: one panel per job (one time scale when the jobs' times are
    within 4x of each other, `share_y`, else each its own), a pair of
    bars per policy: its completion alone (light, hatched) and together with the other jobs
    (solid), with together / alone above; a stalled run is a hatched outline labelled
    "stalled". None (nothing written) without `report.sharing`."""
    rows = report.sharing
    if not rows:
        return None
    jobs = list(dict.fromkeys(r.job for r in rows))
    job_times = {job: [t for r in rows if r.job == job for t in (r.alone_s, r.together_s)]
                 for job in jobs}
    shared = len(jobs) > 1 and share_y(max(_finite(t), default=None)
                                       for t in job_times.values())
    every = [t for times in job_times.values() for t in times]
    grid_rows, grid_cols = grid_shape(len(jobs))
    fig, axes = _new_figure(grid_rows, grid_cols, sharey=shared)
    width = 0.38
    for ax, job in zip(axes.flat, jobs):
        mine = {r.policy: r for r in rows if r.job == job}
        policies = _ordered_policies(mine)
        times = every if shared else job_times[job]
        scale, unit = time_unit(times)
        top = max(_finite(times), default=0.0) * scale or 1.0
        for x, policy in enumerate(policies):
            row, colour = mine[policy], policy_colour(policy)
            for k, (value, together) in enumerate(((row.alone_s, False),
                                                   (row.together_s, True))):
                at = x + (k - 0.5) * width
                if value is None:
                    _stalled_bar(ax, at, width * 0.95, top * 1.05, colour, "stalled")
                elif together:
                    ax.bar(at, value * scale, width * 0.95, color=colour)
                else:
                    ax.bar(at, value * scale, width * 0.95, color=colour, alpha=0.35,
                           hatch="//", edgecolor=colour)
            if row.slowdown is not None:
                height = max(row.alone_s or 0.0, row.together_s or 0.0) * scale
                _bar_label(ax, x, height, f"×{row.slowdown:.2f}")
        ax.set_xticks(range(len(policies)), policies)
        for tick, policy in zip(ax.get_xticklabels(), policies):
            tick.set_color(policy_colour(policy))
        ax.set_xlim(-0.6, len(policies) - 0.4)
        ax.set_ylim(0.0, top * 1.25)
        if not shared or ax in list(axes[:, 0]):
            ax.set_ylabel(f"completion time ({unit})")
        ax.set_title(f"{job} ({mine[policies[0]].gpus:,} GPUs)", fontsize=10)
    _hide_unused(axes, len(jobs))
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="0.6", alpha=0.35, hatch="//", edgecolor="0.3",
                     label="alone on the fabric"),
               Patch(facecolor="0.3", label="together with the other jobs"),
               Patch(facecolor="none", edgecolor="none", label="×: together / alone")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8,
               frameon=False)
    _suptitle(fig, report, "each job alone and sharing the fabric")
    return _finish(fig, path)


# --------------------------------------------------------------------------- sweeps

def _value_text(value: Any) -> str:
    """A swept value as the user typed it (the sweep table's spelling)."""
    return value_text(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


def _linked(rows: list[dict], x_axis: str, other: str) -> bool:
    """Whether `other` moves with `x_axis` (one `--set` of several paths): one value per x."""
    seen: dict[str, str] = {}
    for row in rows:
        x, v = _value_text(row.get(x_axis)), _value_text(row.get(other))
        if seen.setdefault(x, v) != v:
            return False
    return True


def plot_sweep(rows: list[dict], axes: Sequence[str], path: str | Path | None = None, *,
               metric: str = "p100_utilisation", title: str | None = None) -> Any:
    """Sweep curves: x = the first axis's value, y = `metric`, one line per policy (colour)
    and workload item (line style and marker); one panel per combination of the other axes
    (those that do not move with the first). Numeric x values are placed by value (log-x when
    positive and spanning 100x or more), others in order of first appearance. A point whose
    metric is None (a stalled completion) is skipped and marked with an x at the bottom. The
    y axis starts at 0; panels share it when their tops are within 4x of each other
    (`share_y`), else each has its own range (and time unit). The title and x label name
    every field swept together with the first (a zipped `--set a,b=...`).
    None (nothing written) when there are no rows."""
    if not axes:
        raise ValueError("plot_sweep needs at least one swept axis")
    if not rows:
        return None
    x_axis = axes[0]
    panel_axes = [a for a in axes[1:] if not _linked(rows, x_axis, a)]
    zipped = [x_axis] + [a for a in axes[1:] if a not in panel_axes]
    x_name = " + ".join(zipped)
    panels = list(dict.fromkeys(tuple(_value_text(row.get(a)) for a in panel_axes)
                                for row in rows))
    raw_x = [row.get(x_axis) for row in rows]
    numeric = all(_is_number(v) for v in raw_x)
    categories = list(dict.fromkeys(_value_text(v) for v in raw_x))
    log_x = numeric and min(raw_x) > 0 and max(raw_x) >= 100 * min(raw_x)

    def x_of(value: Any) -> float:
        return float(value) if numeric else float(categories.index(_value_text(value)))

    workloads = list(dict.fromkeys(row.get("workload") for row in rows))
    policies = _ordered_policies(row.get("policy") for row in rows)
    label = METRIC_LABELS.get(metric, metric)
    # a zipped sweep labels each x with every field that moved with it (1 / 800G / 8)
    def tick_label(row: dict) -> str:
        return "\n".join(_value_text(row.get(a)) for a in zipped)

    tick_text = {float(row.get(x_axis)): tick_label(row) for row in rows} if numeric else {}
    labels = {_value_text(row.get(x_axis)): tick_label(row) for row in rows}
    grid_rows, grid_cols = grid_shape(len(panels))

    def panel_rows(panel: tuple) -> list[dict]:
        return [row for row in rows
                if tuple(_value_text(row.get(a)) for a in panel_axes) == panel]

    # one y range unless that would flatten a panel: swept sizes can differ by 1000x
    shared = len(panels) > 1 and share_y(max(_finite(r.get(metric) for r in panel_rows(p)),
                                             default=None) for p in panels)
    fig, grid = _new_figure(grid_rows, grid_cols, sharey=shared)
    handles: dict[str, Any] = {}
    units = []
    for ax, panel in zip(grid.flat, panels):
        mine = panel_rows(panel)
        scaled = rows if shared else mine
        scale, unit = time_unit(r.get(metric) for r in scaled) if metric.endswith("_s") else (
            1.0, "")
        units.append(unit)
        for policy in policies:
            for w, workload in enumerate(workloads):
                series = sorted(((x_of(row[x_axis]), row.get(metric)) for row in mine
                                 if row.get("policy") == policy
                                 and row.get("workload") == workload),
                                key=lambda p: p[0])
                if not series:
                    continue
                line, marker = _WORKLOAD_STYLES[w % len(_WORKLOAD_STYLES)]
                name = policy if len(workloads) == 1 else f"{policy}, {workload}"
                xs = np.asarray([x for x, y in series], float)
                ys = np.asarray([np.nan if y is None else y * scale for x, y in series], float)
                # NaN breaks the line at a point without a value instead of bridging it
                (handles[name],) = ax.plot(xs, ys, color=policy_colour(policy), ls=line,
                                           marker=marker, ms=5, lw=1.8)
                gaps = xs[np.isnan(ys)]
                if gaps.size:
                    (handles["no value (stalled)"],) = ax.plot(
                        gaps, np.full_like(gaps, 0.02), ls="none", marker="x", ms=9, mew=2,
                        color=policy_colour(policy), clip_on=False,
                        transform=ax.get_xaxis_transform())
        if metric in ("p100_utilisation", "p99_utilisation", "failures_p100_p99"):
            handles["capacity"] = ax.axhline(1.0, color="black", ls="--", lw=1)
        if metric == "failures_slowdown_p99":
            handles["healthy"] = ax.axhline(1.0, color="black", ls=":", lw=1)
        if metric == "slowdown":
            handles["line rate"] = ax.axhline(1.0, color="black", ls=":", lw=1)
        if metric == "fabric_slowdown":
            handles["endpoint bound"] = ax.axhline(1.0, color="black", ls=":", lw=1)
        ax.set_ylim(bottom=0.0)
        if log_x:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(categories)), [labels[c] for c in categories])
        elif len(tick_text) <= 12:
            ax.set_xticks(sorted(tick_text), [tick_text[v] for v in sorted(tick_text)])
            ax.minorticks_off()
        if panel_axes:
            ax.set_title(", ".join(f"{a}={v}" for a, v in zip(panel_axes, panel)),
                         fontsize=9)
        ax.set_xlabel("\n".join(zipped) if len(zipped) > 1 else x_axis, fontsize=9)
    for ax, unit in zip(grid.flat, units):
        if ax in list(grid[:, 0]) or not shared:
            ax.set_ylabel(f"{label} ({unit})" if unit else label)
    _hide_unused(grid, len(panels))
    extras = ("no value (stalled)", "capacity", "line rate", "endpoint bound", "healthy")
    names = [n for n in handles if n not in extras] + [n for n in extras if n in handles]
    fig.legend([handles[n] for n in names], names, loc="outside lower center",
               ncols=min(4, len(handles)), fontsize=8, frameon=False)
    heading = f"sweep over {x_name}: {label.split(' (')[0]}"
    fig.suptitle(f"{title}: {heading}" if title else heading, fontsize=12)
    return _finish(fig, path)


# --------------------------------------------------------------------------- all of them

def _sweep_parts(sweep: Any) -> tuple[list[dict], list[str]]:
    """(rows, axes) of a `sweeps.SweepResult` or of a (rows, axes) pair."""
    if hasattr(sweep, "rows") and hasattr(sweep, "paths"):
        return list(sweep.rows), list(sweep.paths)
    rows, axes = sweep
    return list(rows), list(axes)


def write_plots(report, directory: str | Path, *, sweep: Any = None) -> list[Path]:
    """Write every figure that applies into `directory` (created if needed) and return their
    paths: utilisation_cdf.png, completion.png, mrc_trace.png (mrc records with a trace),
    sharing.png (two or more jobs), dynamic_series.png (solver.model: dynamic) from `report` (may be None with a sweep), and
    sweep_<metric>.png for each of SWEEP_METRICS that some row of `sweep` (a SweepResult or
    (rows, axes)) has a value for, when it sweeps at least one axis."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path | None] = []
    if report is not None:
        written.append(plot_utilisation_cdf(report, folder / FILE_NAMES["utilisation_cdf"]))
        written.append(plot_completion(report, folder / FILE_NAMES["completion"]))
        written.append(plot_mrc_trace(report, folder / FILE_NAMES["mrc_trace"]))
        written.append(plot_sharing(report, folder / FILE_NAMES["sharing"]))
        written.append(plot_dynamic_series(report, folder / FILE_NAMES["dynamic_series"]))
    if sweep is not None:
        rows, axes = _sweep_parts(sweep)
        title = report.scenario if report is not None else None
        if axes:
            for metric in SWEEP_METRICS:
                if any(row.get(metric) is not None for row in rows):
                    written.append(plot_sweep(rows, axes, folder / f"sweep_{metric}.png",
                                              metric=metric, title=title))
    return [p for p in written if p is not None]


# --------------------------------------------------------------------------- design search

OBJECTIVE_AXES = {"cost": ("cost_usd", "cost (US$)"), "watts": ("watts", "power (W)"),
                  "optics": ("optic_modules", "optic modules")}


def plot_design_front(data: dict, path: str | Path | None = None) -> Any:
    """A design search's trade (`sweeps.design.design_dict` data): every evaluated design at
    its objective (x) and target metric (y), one colour per policy, hollow where it misses the
    target; the Pareto front (of the designs that meet it) joined, the target drawn, the
    cheapest feasible design ringed.
    None when no design has a metric."""
    target, objective = data["target"], data["objective"]
    metric = target["metric"]
    key, label = OBJECTIVE_AXES[objective]
    designs = [d for d in data["designs"] if d["metric"] is not None]
    if not designs:
        return None
    fig, axes = _new_figure()
    ax = axes[0, 0]
    for policy in _ordered_policies({d["policy"] for d in designs}):
        mine = [d for d in designs if d["policy"] == policy]
        colour = policy_colour(policy)
        for feasible in (True, False):
            pts = [d for d in mine if d["feasible"] is feasible]
            if pts:
                ax.scatter([d[key] for d in pts], [d["metric"] for d in pts], s=36,
                           label=policy if feasible or not any(d["feasible"] for d in mine)
                           else None, facecolors=colour if feasible else "none",
                           edgecolors=colour, linewidths=1.2, zorder=3)
    front = sorted(data["front"], key=lambda d: d[key])
    if front:
        ax.plot([d[key] for d in front], [d["metric"] for d in front], color="0.4",
                linewidth=0.8, linestyle="--", label="Pareto front", zorder=2)
    bound = target["max"] if target["max"] is not None else target["min"]
    ax.axhline(bound, color="#c0392b", linewidth=1.0, label=f"target {bound:g}")
    best = data["best"]
    if best is not None:
        ax.scatter([best[key]], [best["metric"]], s=220, facecolors="none",
                   edgecolors="black", linewidths=1.5, zorder=4, label="cheapest feasible")
        ax.annotate(best["design"], (best[key], best["metric"]), textcoords="offset points",
                    xytext=(8, 8), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(label + " (log)")
    ax.set_ylabel(f"{metric} at {target['quantile']}")
    ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"{data['scenario']}: {target['text']}", fontsize=10)
    return _finish(fig, path)
