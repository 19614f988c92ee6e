"""Parameter sweeps: `--set path=v1,v2,...` options in, one validated Scenario per grid point,
one row per (point, policy, workload item or job) out, as CSV, JSON or table rows.

Contract: `parse_sets` and `sweep_points` raise a `ScenarioError` whose field names `--set`
before anything is computed (every point is validated up front); `run_sweep` evaluates the
points in order in this process, so points with equal array shapes reuse JAX's compiled code.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import io
import itertools
import math
import re
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import yaml

from fabricjax.config import ChakraConfig, Scenario, TrafficConfig
from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.core.output import write_json_atomic, write_text_atomic
from fabricjax.core.units import format_seconds, value_text
from fabricjax.fabric.bom import scenario_bom
from fabricjax.scenario import SafeLoader, allowed_fields, parse_scenario
from fabricjax.study.analyze import analyze, versions
from fabricjax.workload.build import traffic_flow_counts

MAX_POINTS = 10_000
FIELD = "--set"

# `name` then any `[i]`, joined by dots: fabric.planes, workload[0].size, failures.links.random
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PATH_RE = re.compile(rf"^{_NAME}(?:\[[0-9]+\])*(?:\.{_NAME}(?:\[[0-9]+\])*)*$")
_PART_RE = re.compile(rf"({_NAME})|\[([0-9]+)\]")

# the per-row metrics of every record, then those of the failure study when there is one
METRICS = ("gpus", "p100_utilisation", "p99_utilisation", "completion_s", "slowdown",
           "fabric_slowdown", "busbw_gbps", "status")
BOM_COLUMNS = ("switches", "optic_modules", "watts")   # the fabric's bill of materials
# training steps add step_<dimension>_s (time per parallel dimension), step_exposed_s and
# step_time_s (compute + exposed; None without a compute time)
STEP_PREFIX = "step_"
FAILURE_METRICS = ("failures_p100_p50", "failures_p100_p99", "failures_p100_max",
                   "failures_completion_p50_s", "failures_completion_p99_s",
                   "failures_completion_max_s", "stalled_sets")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One `--set` option: the `paths` that move together and their values, one tuple per
    grid value (`values`: as YAML read each token; `tokens`: the text as written)."""

    paths: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    tokens: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.values)


class Point(NamedTuple):
    """One grid point: {path: value} of every swept path, and the validated scenario."""

    values: dict[str, Any]
    scenario: Scenario

    @property
    def label(self) -> str:
        return ", ".join(f"{path}={value_text(v)}" for path, v in self.values.items())


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Everything `run_sweep` measured. `rows`: one dict per (point, policy, item) with the
    keys `columns` (None where a number was not computed, e.g. a stalled completion);
    `wall_s[i]`: seconds point i took (compilation included); `reports[i]`: its Report."""

    paths: tuple[str, ...]
    points: list[Point]
    columns: tuple[str, ...]
    rows: list[dict]
    wall_s: list[float]
    total_s: float
    reports: list = dataclasses.field(default_factory=list, repr=False)


# --------------------------------------------------------------------------- parsing

def _split_path(path: str) -> tuple[str | int, ...]:
    if not _PATH_RE.match(path):
        raise ScenarioError(FIELD, f"{short_repr(path)} is not a field path; expected names "
                            "joined by dots, with [i] for list items, e.g. fabric.planes or "
                            "workload[0].size")
    return tuple(name if name else int(index) for name, index in _PART_RE.findall(path))


def _yaml_value(token: str, path: str) -> Any:
    try:
        return yaml.load(token, Loader=SafeLoader)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or "unparseable"
        raise ScenarioError(FIELD, f"{path}={short_repr(token)} is not a YAML value "
                            f"({problem})") from None
    except RecursionError:
        raise ScenarioError(FIELD, f"{path}={short_repr(token)} is nested too deeply") from None


def parse_sets(options: list[str]) -> list[Axis]:
    """One Axis per option: ``path=v1,v2,...``, or zipped ``p1,p2=a1:a2,b1:b2`` (the paths
    move together, each value a colon-separated tuple). Each token is read as YAML (`2`,
    `1.5`, `true`, `100G`, `1GiB`). Raises ScenarioError('--set', ...) on a missing `=`, an
    empty value, a path given twice (or inside another), a tuple of the wrong length, or more
    than MAX_POINTS grid points in all."""
    axes: list[Axis] = []
    seen: dict[tuple, str] = {}
    points = 1
    for option in options:
        if "=" not in option:
            raise ScenarioError(FIELD, f"{short_repr(option)} has no '='; expected "
                                "path=v1,v2,... (e.g. fabric.planes=1,2,4,8)")
        left, right = option.split("=", 1)
        paths = tuple(p.strip() for p in left.split(","))
        names = ",".join(paths)
        for path in paths:
            parts = _split_path(path)
            for other_parts, other in seen.items():
                shorter = min(len(parts), len(other_parts))
                if parts[:shorter] == other_parts[:shorter]:
                    what = ("is set twice" if parts == other_parts else
                            f"and {other} overlap (one lies inside the other)")
                    raise ScenarioError(FIELD, f"{path} {what}; each field may be swept by "
                                        "one --set")
            seen[parts] = path
        if not right.strip():
            raise ScenarioError(FIELD, f"{names}= has no values; expected {names}=v1,v2,...")
        tokens = []
        for token in (t.strip() for t in right.split(",")):
            if not token:
                raise ScenarioError(FIELD, f"{names}={short_repr(right)} has an empty value "
                                    "(two commas, or one at an end)")
            # one path: a colon is part of the value; zipped paths: it separates the values
            parts = tuple(t.strip() for t in token.split(":")) if len(paths) > 1 else (token,)
            if len(parts) != len(paths):
                raise ScenarioError(FIELD, f"{short_repr(token)} has {len(parts)} "
                                    f"colon-separated value(s) but {names} names "
                                    f"{len(paths)} fields; expected one per field, e.g. "
                                    f"{':'.join(['v'] * len(paths))}")
            if not all(parts):
                raise ScenarioError(FIELD, f"{short_repr(token)} has an empty value in {names}")
            tokens.append(parts)
        for i, token in enumerate(tokens):
            if token in tokens[:i]:
                raise ScenarioError(FIELD, f"{names} lists {':'.join(token)} twice")
        points *= len(tokens)
        if points > MAX_POINTS:
            raise ScenarioError(FIELD, f"the options make more than {MAX_POINTS:,} grid points; "
                                "allowed: up to that many (sweep fewer values, or zip fields "
                                "that move together: a,b=1:x,2:y)")
        values = tuple(tuple(_yaml_value(t, p) for t, p in zip(token, paths))
                       for token in tokens)
        axes.append(Axis(paths, values, tuple(tokens)))
    return axes


# --------------------------------------------------------------------------- grid points

def _model_loc(data: dict, parts: tuple) -> tuple:
    """The loc `allowed_fields` walks for `parts`: a workload item or job's collective (the
    union tag) inserted after its index."""
    loc: list = []
    node: Any = data
    for i, part in enumerate(parts):
        loc.append(part)
        node = node[part] if isinstance(node, (dict, list)) else None
        if i == 1 and parts[0] in ("workload", "jobs") and isinstance(node, dict):
            loc.append(node.get("collective"))
    return tuple(loc)


def _dotted(parts: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else ("." if k else "") + p
                   for k, p in enumerate(parts))


def _assign(data: dict, parts: tuple, value: Any, path: str) -> None:
    """data[parts...] = value, creating an optional section (failures, reliability, ...)
    that the dump holds as None or lacks; ScenarioError('--set PATH') for a path the
    scenario does not have."""
    field = f"{FIELD} {path}"
    node: Any = data
    for depth, part in enumerate(parts):
        where = _dotted(parts[:depth]) or "the scenario"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise ScenarioError(field, f"{where} is not a list; [{part}] indexes lists")
            if part >= len(node):
                allowed = f"[0]..[{len(node) - 1}]" if node else "none (the list is empty)"
                raise ScenarioError(field, f"{where} has {len(node)} item(s); allowed: "
                                    f"{allowed}")
        elif isinstance(node, list):
            raise ScenarioError(field, f"{where} is a list; pick an item first, e.g. "
                                f"{where}[0].{part}")
        elif not isinstance(node, dict):
            raise ScenarioError(field, f"{where} is a value, not a section with fields")
        elif part not in node:
            allowed = allowed_fields(_model_loc(data, parts[:depth]))
            if not allowed or part not in allowed:
                message = f"unknown field {part!r}"
                if allowed:
                    message += f" in {where}; allowed: {', '.join(allowed)}"
                raise ScenarioError(field, message)
            node[part] = None
        if depth == len(parts) - 1:
            node[part] = value
            return
        if node[part] is None and isinstance(parts[depth + 1], str):
            node[part] = {}     # an optional section the base leaves out: its defaults apply
        node = node[part]


def _traffic_key(scenario: Scenario) -> tuple:
    """What the flow counts of traffic items and Chakra traces depend on: the file or folder,
    its format or groups, the job's GPUs."""
    return (scenario.fabric.gpus,
            tuple((s, i, item.file, item.format, str(item.gpus)) for s, i, item in scenario.items
                  if isinstance(item, TrafficConfig)),
            tuple((s, i, item.folder, item.comm_groups, str(item.gpus))
                  for s, i, item in scenario.items if isinstance(item, ChakraConfig)))


def _blame(error: ScenarioError, axes: list[Axis], tokens: dict) -> str:
    """The `--set` settings a validation error is about (as an error's field): those of the
    one option whose paths contain the error's field (or lie inside it), else all."""
    def related(path: str) -> bool:
        return bool(error.field) and (error.field == path or
                                      error.field.startswith((path + ".", path + "[")) or
                                      path.startswith((error.field + ".", error.field + "[")))
    owners = [axis.paths for axis in axes if any(related(p) for p in axis.paths)]
    named = owners[0] if len(owners) == 1 else list(tokens)
    return _set_field({p: tokens[p] for p in named})


def _set_field(settings: dict[str, str]) -> str:
    """An error's field for a point's settings, as typed: ``--set a=1 --set b=x``."""
    return " ".join(f"{FIELD} {path}={text}" for path, text in settings.items())


def sweep_points(base: Scenario, axes: list[Axis]) -> list[Point]:
    """The Cartesian product of `axes` (zipped paths move together; the first axis varies
    slowest), each applied to `base.model_dump()` and validated with `parse_scenario`, with
    the base's private attributes (scenario folder, traffic flow counts) carried over. No axes:
    one point, the base itself. Raises ScenarioError('--set ...') for a path the scenario does
    not have or a value it refuses, before anything is computed."""
    dump = base.model_dump()
    parts_of = {path: _split_path(path) for axis in axes for path in axis.paths}
    probe = copy.deepcopy(dump)
    for path, parts in parts_of.items():    # a bad path is reported once, whatever the values
        _assign(probe, parts, None, path)
    base_key = _traffic_key(base)
    traffic_flows: dict[tuple, dict] = {base_key: base.traffic_flows}
    points = []
    for combo in itertools.product(*(range(len(axis)) for axis in axes)):
        data = copy.deepcopy(dump)
        values: dict[str, Any] = {}
        tokens: dict[str, str] = {}
        for axis, index in zip(axes, combo):
            for path, value, token in zip(axis.paths, axis.values[index], axis.tokens[index]):
                _assign(data, parts_of[path], value, path)
                values[path], tokens[path] = value, token
        try:
            scenario = parse_scenario(data, default_name=base.name, base_dir=base.base_dir)
            key = _traffic_key(scenario)
            if key not in traffic_flows:
                traffic_flows[key] = traffic_flow_counts(scenario)
            scenario.located(base.base_dir, traffic_flows[key])
        except ScenarioError as err:
            where = f"{err.field}: " if err.field else ""
            raise ScenarioError(_blame(err, axes, tokens),
                                f"{where}{err.message}", err.source) from None
        points.append(Point(values, scenario))
    return points


# --------------------------------------------------------------------------- running

def _failure_figures(summary: Any) -> dict:
    def pick(dist: dict | None, key: str) -> float | None:
        return None if dist is None else dist.get(key)
    p100, completion = summary.p100_utilisation, summary.completion_s
    return {"failures_p100_p50": pick(p100, "p50"), "failures_p100_p99": pick(p100, "p99"),
            "failures_p100_max": pick(p100, "max"),
            "failures_completion_p50_s": pick(completion, "p50"),
            "failures_completion_p99_s": pick(completion, "p99"),
            "failures_completion_max_s": pick(completion, "max"),
            "stalled_sets": summary.stalled_sets}


def point_rows(point: Point, report: Any) -> list[dict]:
    """One row per record of `report` (policy x workload item or job): the point's swept
    values, the record's key metrics and, when the scenario has failures, the failure
    study's figures for the same policy and workload."""
    summaries = {}
    if getattr(report, "failures", None) is not None:
        summaries = {(s.policy, s.workload): s for s in report.failures.summaries}
    steps = {(s.policy, s.workload): s for s in getattr(report, "steps", None) or []}
    cost = scenario_bom(point.scenario)
    rows = []
    for record in report.records:
        row = dict(point.values)
        row.update(policy=record.policy, workload=record.workload)
        row.update({name: getattr(record, name) for name in METRICS})
        # what the design costs beside what it does (the fabric's bill of materials)
        row.update(switches=cost["switches"], optic_modules=cost.get("modules"),
                   watts=cost.get("watts"))
        summary = summaries.get((record.policy, record.workload))
        if summary is not None:
            row.update(_failure_figures(summary))
        step = steps.get((record.policy, record.workload))
        if step is not None:   # a training step: its time per dimension, exposed and in all
            row.update({f"{STEP_PREFIX}{d['dimension']}_s": d["time_s"]
                        for d in step.dimensions})
            row.update({f"{STEP_PREFIX}exposed_s": step.exposed_s,
                        f"{STEP_PREFIX}time_s": step.step_s})
        rows.append(row)
    return rows


def run_sweep(points: list[Point], *, progress: Callable[[str, int, int], None] | None = None,
              analyze_fn: Callable | None = None) -> SweepResult:
    """Evaluate every point in order with `analyze_fn` (default `study.analyze.analyze`).

    All points run in this one process on purpose: JAX keeps every jitted solve compiled per
    input shape and static argument, so points that differ only in traced values (sizes,
    seeds, counts of failed components, solver tolerances) compile once and reuse it; a point
    that changes shapes (planes, GPUs, EVs) or the fabric's static geometry (`port_gbps` is
    part of it) compiles its own. Nothing here clears JAX's caches.

    `progress(message, done, total)`: before every point (done = points finished), as the
    point's analysis advances, and once at the end. A ScenarioError raised while computing a
    point (e.g. a resource check) is re-raised naming the point's `--set` values."""
    analyze_fn = analyze if analyze_fn is None else analyze_fn
    total = len(points)
    rows: list[dict] = []
    wall: list[float] = []
    reports = []
    start = time.perf_counter()
    for index, point in enumerate(points):
        label = f"[{index + 1}/{total}] {point.label}" if point.values else f"[1/{total}]"
        if progress is not None:
            progress(label, index, total)

            def inner(message: str, done: int, of: int, label=label, index=index) -> None:
                progress(f"{label}: {message}", index, total)
        else:
            inner = None
        began = time.perf_counter()
        try:
            report = analyze_fn(point.scenario, progress=inner)
        except ScenarioError as err:
            where = f"{err.field}: " if err.field else ""
            settings = {path: value_text(v) for path, v in point.values.items()}
            raise ScenarioError(_set_field(settings) if point.values else err.field,
                                f"{where}{err.message}" if point.values else err.message,
                                err.source) from None
        wall.append(time.perf_counter() - began)
        reports.append(report)
        rows += [dict(row, point=index) for row in point_rows(point, report)]
    if progress is not None:
        progress("done", total, total)
    paths = tuple(points[0].values) if points else ()
    columns = ("point", *paths, "policy", "workload", *METRICS, *BOM_COLUMNS)
    step_columns = tuple(dict.fromkeys(k for row in rows for k in row
                                       if k.startswith(STEP_PREFIX)))
    columns += step_columns
    if any(set(FAILURE_METRICS) & set(row) for row in rows):
        columns += FAILURE_METRICS
    rows = [{c: row.get(c) for c in columns} for row in rows]
    return SweepResult(paths, list(points), columns, rows, wall, time.perf_counter() - start,
                       reports)


# --------------------------------------------------------------------------- output

def _check_finite(value: Any, where: str) -> Any:
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


def csv_text(result: SweepResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*result.columns, "point_wall_s"])
    for row in result.rows:
        cells = [_cell(_check_finite(row[c], c)) for c in result.columns]
        writer.writerow([*cells, repr(result.wall_s[row["point"]])])
    return buffer.getvalue()


def write_csv(result: SweepResult, path: str | Path) -> None:
    """One line per row (columns: `result.columns` then point_wall_s); empty cell = None."""
    write_text_atomic(csv_text(result), path)


def sweep_dict(result: SweepResult) -> dict:
    rows = [{c: _check_finite(row[c], c) for c in result.columns} for row in result.rows]
    return {
        "scenario": result.points[0].scenario.name if result.points else None,
        "versions": versions(),
        "paths": list(result.paths),
        "points": [{"index": i, "values": p.values, "wall_s": w}
                   for i, (p, w) in enumerate(zip(result.points, result.wall_s))],
        "total_s": result.total_s,
        "columns": list(result.columns),
        "rows": rows,
    }


def write_json(result: SweepResult, path: str | Path) -> None:
    """{scenario, versions, paths, points: [{index, values, wall_s}], total_s, columns, rows},
    written atomically (`output.write_json_atomic`, no NaN)."""
    write_json_atomic(sweep_dict(result), path)


def _u(value: float | None) -> str:
    return "—" if value is None else f"{round(value, 6):.3f}"


def short_names(paths: tuple[str, ...]) -> dict[str, str]:
    """{path: column header}: each swept path's last component (`fabric.planes` -> `planes`,
    `workload[0].size` -> `size`), with as many components before it as it takes to tell
    paths apart (`spray.evs` and `mrc.evs` stay whole)."""
    def pieces(path: str) -> list[str]:       # ("jobs", 1, "gpus") -> ["jobs[1]", "gpus"]
        out: list[str] = []
        for part in _split_path(path):
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


def sweep_legend(result: SweepResult) -> str | None:
    """The full field of every shortened column header, one line (None when none is)."""
    names = short_names(result.paths)
    pairs = [f"{names[p]} = {p}" for p in result.paths if names[p] != p]
    return "; ".join(pairs) if pairs else None


def sweep_table_rows(result: SweepResult) -> tuple[list[str], list[list[str]]]:
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
        headers += ["fail P100 p99", "fail completion p99", "stalled sets"]
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
            cells += [_u(row["failures_p100_p99"]),
                      "—" if completion is None else format_seconds(completion),
                      "—" if row["stalled_sets"] is None else str(row["stalled_sets"])]
        rows.append(cells)
    if not fabric_column:
        drop = headers.index("fabric slowdown")
        headers.pop(drop)
        rows = [cells[:drop] + cells[drop + 1:] for cells in rows]
    return headers, rows
