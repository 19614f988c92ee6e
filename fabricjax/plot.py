"""Figures for notebooks: `fj.plot.cdf(rep)` and friends return matplotlib Figures, unsaved.

Contract: each function takes what the API returns (an `api.Analysis`, a `results.Report`, or
for `sweep` a DataFrame or list of row dicts) and returns the figure `report.plots` draws
(`fig.savefig(...)` writes it), or None when there is nothing to draw. matplotlib is imported
when a figure is drawn, never at `import fabricjax`.
"""

from __future__ import annotations

from typing import Any, Sequence

from fabricjax.report.plots import (plot_completion, plot_mrc_trace, plot_sharing,
                                    plot_sweep, plot_utilisation_cdf)


def _report(analysis: Any) -> Any:
    """The `results.Report` behind an `api.Analysis` (or the report itself)."""
    return getattr(analysis, "report", analysis)


def cdf(analysis: Any) -> Any:
    """The CDF of link utilisation per policy, one panel per workload item."""
    return plot_utilisation_cdf(_report(analysis))


def completion(analysis: Any) -> Any:
    """Completion time per policy (with the failure sets' spread when there are some)."""
    return plot_completion(_report(analysis))


def trace(analysis: Any) -> Any:
    """mrc's P100 after each iteration (an analysis run with trace=True)."""
    return plot_mrc_trace(_report(analysis))


def sharing(analysis: Any) -> Any:
    """Each job alone vs sharing the fabric (two or more jobs)."""
    return plot_sharing(_report(analysis))


def sweep(rows: Any, axes: Sequence[str] | None = None, *,
          metric: str = "p100_utilisation") -> Any:
    """`metric` against the first swept field, one line per policy and workload item. `rows`:
    what `fj.sweep` returned (a DataFrame or a list of dicts); `axes`: the swept fields
    (default: the columns before `policy`, except `point`)."""
    if hasattr(rows, "to_dict"):
        columns = list(rows.columns)
        rows = rows.to_dict("records")
    else:
        rows = list(rows)
        columns = list(rows[0]) if rows else []
    if axes is None:
        before = columns[:columns.index("policy")] if "policy" in columns else []
        axes = [c for c in before if c != "point"]
    return plot_sweep(rows, list(axes), metric=metric)


__all__ = ["cdf", "completion", "sharing", "sweep", "trace"]
