"""A whole report printed on a rich console: the one order and layout that `fabricjax analyze`
and the Python API (`Analysis.show`) share.

Contract: `print_report(console, report)` prints the scenario's line, the model line, then
every table and line that applies (`tables`), each fitted to the console's width; it writes
no file and imports no JAX. `print_sweep` does the same for a sweep's rows.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from fabricjax.report.sweep import sweep_legend, sweep_notes, sweep_table_rows
from fabricjax.report.tables import (adaptation_table, bottleneck_lines, dynamic_table,
                                     fabric_line, failure_header, failure_lines, failure_table,
                                     flow_table, model_line, paths_warning, reliability_table,
                                     sensitivity_table, sharing_table, step_lines,
                                     step_summary_table, step_table, sweep_table, time_table,
                                     trace_lines, transient_table, utilisation_table)
from fabricjax.results import Report


def _lines(console: Console, lines: list[str], indent_first: bool = False) -> None:
    """A heading, then its lines indented (or every line indented)."""
    for index, line in enumerate(lines):
        indent = "  " if index or indent_first else ""
        console.print(f"{indent}{escape(line)}", highlight=False)


def print_report(console: Console, report: Report) -> None:
    """Every table and line of `report` that applies, in the CLI's order."""
    console.print(f"[bold]{escape(report.scenario)}[/]: {escape(fabric_line(report.fabric))}",
                  highlight=False)
    warning = paths_warning(report.fabric)
    if warning is not None:
        console.print(f"[yellow]{escape(warning)}[/]", highlight=False)
    model = model_line(report)
    if model is not None:
        console.print(escape(model), highlight=False)
    console.print(utilisation_table(report))
    console.print(time_table(report))
    for table in (flow_table(report), dynamic_table(report), sharing_table(report),
                  adaptation_table(report)):
        if table is not None:
            console.print(table)
    _lines(console, trace_lines(report))
    _lines(console, bottleneck_lines(report))
    for table in (step_table(report), step_summary_table(report)):
        if table is not None:
            console.print(table)
    _lines(console, step_lines(report), indent_first=True)
    if report.failures is not None:
        console.print(escape(failure_header(report)), highlight=False)
        console.print(failure_table(report))
        console.print(transient_table(report))
        _lines(console, failure_lines(report), indent_first=True)
    if report.reliability:
        console.print(reliability_table(report))
    if report.sensitivity:
        console.print(sensitivity_table(report))


def print_sweep(console: Console, result: Any) -> None:
    """The sweep table of `result` (rows, paths, columns), with its legend and notes."""
    console.print(sweep_table(*sweep_table_rows(result), sweep_legend(result),
                              sweep_notes(result)))
