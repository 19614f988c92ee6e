"""A design search printed: the cheapest feasible design, the Pareto front, the drops and
the time per stage, from the search's JSON data (`sweeps.design.design_dict`).

Contract: `print_design(console, data)` prints, in this order, the target line, the best
design (or that none meets the target, with the nearest), the front table, the dropped
designs grouped by stage and reason, and one line per stage; it writes no file, imports no
JAX and reads nothing but `data`.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fabricjax.core.units import value_text

MAX_REASONS = 12   # distinct drop reasons shown per stage; the JSON has every one


def money(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e9:
        return f"${value / 1e9:.2f}B"
    if value >= 1e6:
        return f"${value / 1e6:.1f}M"
    if value >= 1e3:
        return f"${value / 1e3:.0f}k"
    return f"${value:.0f}"


def watts(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f} MW"
    if value >= 1e3:
        return f"{value / 1e3:.1f} kW"
    return f"{value:.0f} W"


def figure(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if metric == "slowdown":
        return f"{value:.3f}x"
    if metric.endswith("_s"):
        return value_text(float(f"{value:.4g}")) + " s"
    return f"{value:,.1f}"


def dynamic_metric(metric: str) -> str:
    """The metric the dynamic check reports: a step time's compute is not its to time."""
    return "slowdown" if metric == "step_time_s" else metric


def best_lines(data: dict) -> list[str]:
    """The answer: the cheapest feasible design, its bill and its margin (or that none met the
    target, and the nearest)."""
    target = data["target"]
    metric = target["metric"]
    best = data["best"]
    if best is None:
        near = [d for d in data["designs"] if d["metric"] is not None]
        lines = [f"No design meets {target['text']}."]
        if near:
            wanted_max = target["max"] is not None
            nearest = (min if wanted_max else max)(near, key=lambda d: d["metric"])
            lines.append(f"nearest: {nearest['design']} with {nearest['policy']}: "
                         f"{figure(nearest['metric'], metric)} ({nearest['binding']} binds)")
        return lines
    margin = best["margin"]
    lines = [f"Cheapest design meeting {target['text']}: {best['design']} with "
             f"{best['policy']}",
             f"{money(best['cost_usd'])}, {watts(best['watts'])}, {best['switches']:,} "
             f"switches, {best['optic_modules']:,} optic modules; {metric} "
             f"{figure(best['metric'], metric)} ({margin * 100:.1f}% margin; "
             f"{best['binding']} binds)"]
    if best.get("dynamic_note"):
        dyn = best.get("dynamic_metric")
        shown = dynamic_metric(metric)
        lines.append(f"dynamic level: {figure(dyn, shown)} ({best['dynamic_note']}; static "
                     f"healthy {figure(best['healthy_metric'], metric)})" if dyn is not None
                     else f"dynamic level: {best['dynamic_note']}")
    if "upgrades" in best:
        links = best["upgrades"]
        lines.append("upgrade first (healthy fabric): " + (", ".join(
            f"{u['link']} ({u['us_saved_per_gbps']:.3g} µs saved per Gbit/s)" for u in links)
            if links else "no single link helps: the NICs bind"))
    return lines


def front_table(data: dict) -> Table:
    """The Pareto front: one row per design and policy, in objective order."""
    metric = data["target"]["metric"]
    quantile = data["target"]["quantile"]
    table = Table(title=f"Pareto front ({data['objective']}, watts, {metric} at {quantile})",
                  title_justify="left")
    for name, justify in (("design", "left"), ("policy", "left"), ("cost", "right"),
                          ("watts", "right"), ("switches", "right"), ("optics", "right"),
                          (metric, "right"), ("bound", "right"), ("meets", "center"),
                          ("dynamic", "right")):
        table.add_column(name, justify=justify)
    for d in data["front"]:
        table.add_row(escape(d["design"]), d["policy"], money(d["cost_usd"]), watts(d["watts"]),
                      f"{d['switches']:,}", f"{d['optic_modules']:,}",
                      figure(d["metric"], metric), figure(d["bound"], metric),
                      "yes" if d["feasible"] else "no",
                      figure(d.get("dynamic_metric"), dynamic_metric(metric)))
    return table


def dropped_lines(data: dict) -> list[str]:
    """The drops, grouped by stage, each reason once with the designs it dropped."""
    lines = []
    for stage in ("enumerate", "bound", "dominated", "static"):
        drops = [d for d in data["dropped"] if d["stage"] == stage]
        if not drops:
            continue
        by_reason: dict[str, list[str]] = {}
        for d in drops:
            by_reason.setdefault(d["reason"], []).append(d["design"])
        lines.append(f"dropped at {stage} ({len(drops)}):")
        for reason, names in list(by_reason.items())[:MAX_REASONS]:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
            lines.append(f"  {shown}: {reason}")
        if len(by_reason) > MAX_REASONS:
            lines.append(f"  ... {len(by_reason) - MAX_REASONS} more reasons (see --json)")
    return lines


def stage_lines(data: dict) -> list[str]:
    words = {"enumerate": "checked and priced", "bound": "closed-form bounds",
             "static": "static level", "confirm": "dynamic level"}
    out = []
    for s in data["stages"]:
        extra = f", {s['confirmed']} confirmed" if "confirmed" in s else ""
        out.append(f"{s['stage']} ({words[s['stage']]}): {s['designs_in']} in, "
                   f"{s['dropped']} dropped{extra}, {s['seconds']:.1f} s")
    return out


def print_design(console: Console, data: dict) -> None:
    """The whole search as `fabricjax design` prints it."""
    console.print(escape(f"{data['scenario']}: {data['candidates']} candidate fabrics, "
                         f"{len(data['designs'])} designs evaluated (fabric x policy); "
                         f"objective {data['objective']}; prices: {data['catalog_note']}"),
                  highlight=False)
    for i, line in enumerate(best_lines(data)):
        console.print(("  " if i else "") + escape(line), highlight=False)
    if data["front"]:
        console.print(front_table(data))
    for line in dropped_lines(data):
        console.print(escape(line), highlight=False)
    for line in stage_lines(data):
        console.print(escape(line), highlight=False)


__all__ = ["best_lines", "dropped_lines", "front_table", "money", "print_design",
           "stage_lines", "watts"]
