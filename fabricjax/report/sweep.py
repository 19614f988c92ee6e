"""A sweep's rows as people and programs read them: the columns every row has, the CSV text,
and the plain-text cells of the sweep table (`tables.sweep_table` lays them out).

Contract: a sweep result is read through `rows` (dicts keyed by the columns below, None where
a figure was not computed), `paths` (the swept fields) and `wall_s` (seconds per point); a NaN
or infinity in a row is a bug upstream and raises. Nothing here runs a point; no JAX.
"""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from fabricjax.core.units import format_seconds, value_text
from fabricjax.report.tables import LOST_PLANE_MARK, LOST_PLANE_NOTE
from fabricjax.scenario import split_path
from fabricjax.workload.training import DIMENSIONS

# the per-row metrics of every record, then those of the failure study when there is one
METRICS = ("gpus", "p100_utilisation", "p99_utilisation", "completion_s", "slowdown",
           "fabric_slowdown", "busbw_gbps", "status")
BOM_COLUMNS = ("switches", "optic_modules", "watts")   # the fabric's bill of materials
# training steps add step_<dimension>_s (time per parallel dimension; None where the plan has
# no such dimension), step_exposed_s and step_time_s (compute + exposed; None without a
# compute time)
STEP_PREFIX = "step_"
STEP_COLUMNS = (*(f"{STEP_PREFIX}{d}_s" for d in DIMENSIONS), f"{STEP_PREFIX}exposed_s",
                f"{STEP_PREFIX}time_s")
# failures_slowdown_*: a set's completion over the healthy completion of the same policy and
# workload (what the failures cost); failures_fabric_slowdown_p99: over the endpoint bound
FAILURE_METRICS = ("failures_p100_p50", "failures_p100_p99", "failures_p100_max",
                   "failures_completion_p50_s", "failures_completion_p99_s",
                   "failures_completion_max_s", "failures_slowdown_p50",
                   "failures_slowdown_p99", "failures_slowdown_max",
                   "failures_fabric_slowdown_p99", "stalled_sets", "failures_status")


def check_finite(value: Any, where: str) -> Any:
    # a NaN or infinity here is a bug upstream (not-computed numbers are None), as in reports
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"sweep field {where} is {value}")
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value_text(value)


def csv_header(columns: tuple[str, ...]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([*columns, "point_wall_s"])
    return buffer.getvalue()


def csv_lines(result: Any, columns: tuple[str, ...]) -> str:
    """The CSV lines of one point's rows (`result.rows`; its `wall_s` in the last
    column)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in result.rows:
        cells = [_cell(check_finite(row[c], c)) for c in columns]
        writer.writerow([*cells, repr(result.wall_s)])
    return buffer.getvalue()


def csv_text(result: Any) -> str:
    """The whole CSV: the header, then every row with its point's wall time."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in result.rows:
        cells = [_cell(check_finite(row[c], c)) for c in result.columns]
        writer.writerow([*cells, repr(result.wall_s[row["point"]])])
    return csv_header(result.columns) + buffer.getvalue()


def _u(value: float | None) -> str:
    return "—" if value is None else f"{round(value, 6):.3f}"


def short_names(paths: tuple[str, ...]) -> dict[str, str]:
    """{path: column header}: each swept path's last component (`fabric.planes` -> `planes`,
    `workload[0].size` -> `size`), with as many components before it as it takes to tell
    paths apart (`spray.evs` and `mrc.evs` stay whole)."""
    def pieces(path: str) -> list[str]:       # ("jobs", 1, "gpus") -> ["jobs[1]", "gpus"]
        out: list[str] = []
        for part in split_path(path, "--set"):
            if isinstance(part, int):
                out[-1] += f"[{part}]"
            else:
                out.append(part)
        return out

    split = {path: pieces(path) for path in paths}
    names = {}
    for path, mine in split.items():
        for depth in range(1, len(mine) + 1):
            name = ".".join(mine[-depth:])
            if not any(q != path and ".".join(other[-depth:]) == name
                       for q, other in split.items()):
                break
        names[path] = name
    return names


def sweep_legend(result: Any) -> str | None:
    """The full field of every shortened column header, one line (None when none is)."""
    names = short_names(result.paths)
    pairs = [f"{names[p]} = {p}" for p in result.paths if names[p] != p]
    return "; ".join(pairs) if pairs else None


def sweep_table_rows(result: Any) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of plain strings, one row per point x policy x item: the swept values
    (headed by `short_names`) and the key metrics, every header one line. Plain text, not rich
    markup: escape before adding to a rich Table. The fabric slowdown column is left out
    when it equals the slowdown on every row (no NIC receives more than it sends), so that
    the table fits a terminal; the CSV and JSON always have both."""
    failures = "stalled_sets" in result.columns
    names = short_names(result.paths)
    fabric_column = any(row["fabric_slowdown"] is not None and row["slowdown"] is not None
                        and abs(row["fabric_slowdown"] - row["slowdown"])
                        > 1e-6 * row["slowdown"] for row in result.rows)
    headers = [*(names[p] for p in result.paths), "policy", "workload", "P100", "P99",
               "completion", "slowdown", "fabric slowdown", "busbw", "status", "switches",
               "optics", "kW"]
    steps = [c for c in result.columns if c.startswith(STEP_PREFIX)]
    headers += [c[len(STEP_PREFIX):-2] for c in steps]
    if failures:
        headers += ["fail P100 p99", "fail completion p99", "fail slowdown p99",
                    "stalled sets"]
    rows = []
    for row in result.rows:
        cells = [value_text(row[p]) for p in result.paths]
        cells += [row["policy"], row["workload"], _u(row["p100_utilisation"]),
                  _u(row["p99_utilisation"]), format_seconds(row["completion_s"]),
                  "—" if row["slowdown"] is None else _u(row["slowdown"]) + "×",
                  "—" if row["fabric_slowdown"] is None else _u(row["fabric_slowdown"]) + "×",
                  "—" if row["busbw_gbps"] is None else f"{row['busbw_gbps']:.1f}",
                  row["status"], f"{row['switches']:,}",
                  "—" if row["optic_modules"] is None else f"{row['optic_modules']:,}",
                  "—" if row["watts"] is None else f"{row['watts'] / 1e3:,.1f}"]
        cells += [format_seconds(row[c]) if row[c] is not None else "—" for c in steps]
        if failures:
            completion = row["failures_completion_p99_s"]
            lost = "lost_plane" in (row.get("failures_status") or "").split("+")
            cells += [_u(row["failures_p100_p99"]) + (LOST_PLANE_MARK if lost else ""),
                      "—" if completion is None else format_seconds(completion),
                      "—" if row.get("failures_slowdown_p99") is None
                      else _u(row["failures_slowdown_p99"]) + "×",
                      "—" if row["stalled_sets"] is None else str(row["stalled_sets"])]
        rows.append(cells)
    if not fabric_column:
        drop = headers.index("fabric slowdown")
        headers.pop(drop)
        rows = [cells[:drop] + cells[drop + 1:] for cells in rows]
    return headers, rows


def sweep_notes(result: Any) -> list[str]:
    """Lines the sweep table needs under it: why a marked figure means something else."""
    if any("lost_plane" in (row.get("failures_status") or "").split("+")
           for row in result.rows):
        return [LOST_PLANE_NOTE]
    return []
