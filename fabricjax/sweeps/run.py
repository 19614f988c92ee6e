"""Running a sweep: one analysis per grid point, one row per (point, policy, workload item or
job), streamed as the points finish, and the sweep's files.

Contract: `run_sweep` evaluates the points in order, so points with equal array shapes reuse
JAX's compiled code, and hands each finished point (`PointResult`) to `on_point` at once:
`SweepStreams` appends it to the JSON Lines stream and the CSV (one write, flush and fsync per
point). `read_sweep_stream` reads a stream back for `--resume` (the finished points are
skipped). In a distributed run the points are dealt out to the processes in turn and gathered
by every process in point order, so the rows and files are those of one process. Memory stays
flat over a long sweep: a point's report is dropped once its rows are taken, and JAX's
compiled programs are cleared when too many pile up (`core.devices.bound_compiled`). The
rows' columns and the CSV text are `report.sweep`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

from fabricjax.config import Scenario, TrainingConfig
from fabricjax.core.devices import (allgather_bytes, bound_compiled, compiled_programs,
                                    device_record, local_devices, process_count,
                                    process_index)
from fabricjax.core.errors import ScenarioError
from fabricjax.core.output import output_kind, write_json as write_json_output, write_text
from fabricjax.core.stream import (StreamError, StreamWriter, header, read_stream,
                                   record_line)
from fabricjax.core.units import value_text
from fabricjax.fabric.bom import scenario_bom
from fabricjax.report.sweep import (BOM_COLUMNS, FAILURE_METRICS, METRICS, STEP_COLUMNS,
                                    STEP_PREFIX, check_finite, csv_header, csv_lines,
                                    csv_text)
from fabricjax.scenario import result_config
from fabricjax.study.analyze import analyze, versions
from fabricjax.sweeps.grid import Axis, Point, set_field

STREAM_KIND = "fabricjax sweep"
# JAX's caches are cleared after a point once more programs than this were compiled since the
# last clear. Measured on the 2-core CPU: a point compiles 1 (spray alone) to 22 (quickstart's
# four policies with the progressive simulation) programs the first time its shapes are seen;
# each new program added about 7.4 MiB of resident memory in bench/bench_soak.py --new-shapes,
# and a sweep that cleared nothing aborted near 250 programs ("LLVM ERROR: Unable to allocate
# section memory"). With 100, that bench levels off near 1.05 GiB; a sweep whose shapes repeat
# compiles nothing new after its first points and is never cleared.
COMPILED_LIMIT = 100


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Everything `run_sweep` measured. `rows`: one dict per (point, policy, item) with the
    keys `columns` (None where a number was not computed, e.g. a stalled completion);
    `wall_s[i]`: seconds point i took (compilation included); `total_s`: this run's seconds
    (a resumed run counts only its own). The points' reports are not kept: a long sweep's
    memory must not grow with its points."""

    paths: tuple[str, ...]
    points: list[Point]
    columns: tuple[str, ...]
    rows: list[dict]
    wall_s: list[float]
    total_s: float


class PointResult(NamedTuple):
    """One finished grid point: its index, the seconds it took and its rows (dicts with the
    sweep's `columns` as keys), as one record of the sweep's stream holds it."""

    index: int
    wall_s: float
    rows: list[dict]


# --------------------------------------------------------------------------- running

def failure_figures(summary: Any, healthy_s: float | None = None) -> dict:
    """The failure study's figures for one row: the P100 and completion over the sets, and
    the failure slowdown, each set's completion over `healthy_s` (the same policy's and
    workload's completion with nothing failed: what the failures cost), None where either is
    missing (a stalled set's completion, no healthy time)."""
    def pick(dist: dict | None, key: str) -> float | None:
        return None if dist is None else dist.get(key)

    def cost(key: str) -> float | None:
        value = pick(completion, key)
        return None if value is None or not healthy_s else value / healthy_s

    p100, completion = summary.p100_utilisation, summary.completion_s
    return {"failures_p100_p50": pick(p100, "p50"), "failures_p100_p99": pick(p100, "p99"),
            "failures_p100_max": pick(p100, "max"),
            "failures_completion_p50_s": pick(completion, "p50"),
            "failures_completion_p99_s": pick(completion, "p99"),
            "failures_completion_max_s": pick(completion, "max"),
            "failures_slowdown_p50": cost("p50"), "failures_slowdown_p99": cost("p99"),
            "failures_slowdown_max": cost("max"),
            "failures_fabric_slowdown_p99": pick(summary.fabric_slowdown, "p99"),
            "stalled_sets": summary.stalled_sets, "failures_status": summary.status}


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
            row.update(failure_figures(summary, record.completion_s))
        step = steps.get((record.policy, record.workload))
        if step is not None:   # a training step: its time per dimension, exposed and in all
            row.update({f"{STEP_PREFIX}{d['dimension']}_s": d["time_s"]
                        for d in step.dimensions})
            row.update({f"{STEP_PREFIX}exposed_s": step.exposed_s,
                        f"{STEP_PREFIX}time_s": step.step_s})
        rows.append(row)
    return rows


def sweep_columns(points: list[Point]) -> tuple[str, ...]:
    """The rows' columns, known before any point runs (the CSV streams): the point, the swept
    paths, policy and workload, the metrics, the bill of materials, when some point has a
    training item its time per parallel dimension (a Chakra trace's dimensions are its own
    labels, known only once read: they stay in `analyze`'s step report), and when some point
    has `failures`, the failure study's figures."""
    paths = tuple(points[0].values) if points else ()
    columns = ("point", *paths, "policy", "workload", *METRICS, *BOM_COLUMNS)
    if any(isinstance(item, TrainingConfig) for point in points
           for _, _, item in point.scenario.items):
        columns += STEP_COLUMNS
    if any(point.scenario.failures is not None for point in points):
        columns += FAILURE_METRICS
    return columns


def static_only(scenario: Scenario) -> Scenario:
    """The scenario a sweep point runs: without the progressive simulation, whose figures no
    sweep column carries (on the quickstart it was 90% of a point's time after compile)."""
    if scenario.solver.progressive is False:
        return scenario
    solver = scenario.solver.model_copy(update={"progressive": False})
    return scenario.model_copy(update={"solver": solver})


def _evaluate(point: Point, index: int, total: int, columns: tuple[str, ...],
              analyze_fn: Callable, progress: Callable | None) -> PointResult:
    label = f"[{index + 1}/{total}] {point.label}" if point.values else f"[1/{total}]"
    if progress is not None:
        progress(label, index, total)

        def inner(message: str, done: int, of: int) -> None:
            progress(f"{label}: {message}", index, total)
    else:
        inner = None
    began = time.perf_counter()
    try:
        report = analyze_fn(static_only(point.scenario), progress=inner)
    except ScenarioError as err:
        where = f"{err.field}: " if err.field else ""
        settings = {path: value_text(v) for path, v in point.values.items()}
        raise ScenarioError(set_field(settings) if point.values else err.field,
                            f"{where}{err.message}" if point.values else err.message,
                            err.source) from None
    rows = [{c: row.get(c) for c in columns}
            for row in (dict(r, point=index) for r in point_rows(point, report))]
    del report                   # the point's arrays go now, not at the next point
    return PointResult(index, time.perf_counter() - began, rows)


def _exchange(result: PointResult | None, error: BaseException | None) -> list[PointResult]:
    """Every process's point of this round, in process order (so in point order); an error
    raised on any process is raised on all of them, as the same one line."""
    if error is not None:
        kind = "scenario" if isinstance(error, ScenarioError) else "internal"
        payload = {"error": kind, "text": str(error),
                   "field": getattr(error, "field", ""), "message": getattr(error, "message", ""),
                   "source": getattr(error, "source", None)}
    elif result is not None:
        payload = {"point": result.index, "wall_s": result.wall_s, "rows": result.rows}
    else:
        payload = None
    gathered = [json.loads(b) for b in allgather_bytes(json.dumps(payload).encode("utf-8"))]
    for item in gathered:
        if item is not None and "error" in item:
            if item["error"] == "scenario":
                raise ScenarioError(item["field"], item["message"], item["source"])
            raise RuntimeError(f"a process of the distributed sweep failed: {item['text']}")
    return [PointResult(item["point"], item["wall_s"], item["rows"])
            for item in gathered if item is not None]


def run_sweep(points: list[Point], *, progress: Callable[[str, int, int], None] | None = None,
              analyze_fn: Callable | None = None, done: list[PointResult] | None = None,
              on_point: Callable[[PointResult], None] | None = None) -> SweepResult:
    """Evaluate every point in order with `analyze_fn` (default `study.analyze.analyze`).

    Points run one after another in a process on purpose: JAX keeps every jitted solve
    compiled per input shape and static argument, so points that differ only in traced values
    (sizes, seeds, counts of failed components, solver tolerances) compile once and reuse it;
    a point that changes shapes (planes, GPUs, EVs) or the fabric's static geometry
    (`port_gbps` is part of it) compiles its own. When more than COMPILED_LIMIT programs were
    compiled since the last clear, JAX's caches are cleared after the point, so a sweep over
    ever new shapes keeps its memory bounded.

    `done`: the points an earlier run finished (`read_sweep_stream`: points 0..k-1); they are
    not run again. `on_point(result)`: called with every newly finished point, in point
    order, as soon as it is known. In a distributed run (`core.devices.process_count() > 1`)
    process r runs points r, r + P, ... of what is left (on its own devices only), each round
    of P points is gathered by every process, and `on_point` sees them in point order.

    `progress(message, done, total)`: before every point (done = points finished), as the
    point's analysis advances, and once at the end. A ScenarioError raised while computing a
    point (e.g. a resource check) is re-raised naming the point's `--set` values."""
    analyze_fn = analyze if analyze_fn is None else analyze_fn
    total = len(points)
    columns = sweep_columns(points)
    results = list(done or [])
    if [r.index for r in results] != list(range(len(results))) or len(results) > total:
        raise StreamError(f"the finished points are not points 0..{len(results) - 1} of the "
                          f"{total:,} of this sweep")
    start = time.perf_counter()
    compiled_programs()                       # count compilations from here on
    processes, rank = process_count(), process_index()
    left = list(range(len(results), total))
    with local_devices() if processes > 1 else contextlib.nullcontext():
        for first in range(0, len(left), processes):
            round_ = left[first:first + processes]
            mine = round_[rank] if rank < len(round_) else None
            result = error = None
            if mine is not None:
                try:
                    result = _evaluate(points[mine], mine, total, columns, analyze_fn,
                                       progress)
                except Exception as err:      # raised in every process after the exchange
                    if processes == 1:
                        raise
                    error = err
            finished = [result] if processes == 1 else _exchange(result, error)
            for item in finished:
                results.append(item)
                if on_point is not None:
                    on_point(item)
            bound_compiled(COMPILED_LIMIT)
    if progress is not None:
        progress("done", total, total)
    paths = tuple(points[0].values) if points else ()
    rows = [row for r in results for row in r.rows]
    return SweepResult(paths, list(points), columns, rows, [r.wall_s for r in results],
                       time.perf_counter() - start)


# --------------------------------------------------------------------------- streams

def _axis_options(axes: list[Axis]) -> list[dict]:
    return [{"paths": list(axis.paths), "values": [list(t) for t in axis.tokens]}
            for axis in axes]


def sweep_device() -> dict:
    """Where a point's failure sets run: the platform and the devices one process uses (a
    distributed sweep gives each point to one process, on that process's devices)."""
    with local_devices() if process_count() > 1 else contextlib.nullcontext():
        record = device_record()
    return {"device": record["device"], "devices_used": record["devices_used"]}


def sweep_header(base: Scenario, axes: list[Axis], points: list[Point], device: dict) -> dict:
    """The first record of a sweep's stream: the validated base scenario (and the digests of
    the files its points read), and what else changes results: the `--set` axes as typed, the
    number of points, the columns and the device the failure sets run on."""
    config = result_config(base)
    files = {}
    for i, point in enumerate(points):                # a swept traffic file is an input too
        for field, digest in result_config(point.scenario).get("files", {}).items():
            if config.get("files", {}).get(field) != digest:
                files[f"point {i}: {field}"] = digest
    options = {"sets": _axis_options(axes), "points": len(points),
               "columns": list(sweep_columns(points)), "point_files": files, **device}
    return header(STREAM_KIND, config, options)


def point_record(result: PointResult, point: Point) -> dict:
    """A point as one line of the stream: {point, values, wall_s, rows}."""
    return {"point": result.index, "values": point.values, "wall_s": result.wall_s,
            "rows": result.rows}


def read_sweep_stream(path: str | Path, expected: dict, points: list[Point]
                      ) -> list[PointResult]:
    """The finished points of the stream at `path` (none when there is no file), after
    checking its header against `expected` (`sweep_header`; StreamError naming what differs)
    and that its records are points 0, 1, ... of this grid with their values."""
    head, records = read_stream(path, expected)
    out = []
    for i, record in enumerate(records):
        if (record.get("point") != i or i >= len(points) or
                json.loads(json.dumps(points[i].values)) != record.get("values")):
            raise StreamError(f"{path}: record {i + 2} is not point {i} of this sweep")
        out.append(PointResult(i, record["wall_s"], record["rows"]))
    return out


class SweepStreams:
    """The outputs that grow point by point: the JSON Lines stream (the header, then one
    record per point) and the CSV (its header row, then each point's rows), each appended to
    with one write, flush and fsync per point (`core.stream.StreamWriter`)."""

    def __init__(self, points: list[Point], columns: tuple[str, ...],
                 jsonl: StreamWriter | None, csv_out: StreamWriter | None):
        self.points = points
        self.columns = columns
        self.jsonl = jsonl
        self.csv = csv_out

    @classmethod
    def open(cls, points: list[Point], first: dict, *, jsonl: str | None, csv_path: str | None,
             done: list[PointResult], resumed: bool) -> "SweepStreams":
        """Start the streams: a fresh stream gets `first` (`sweep_header`); a resumed one is
        appended to (`read_sweep_stream` checked and trimmed it). The CSV starts afresh with
        the rows of the `done` points, so it is whole and in point order."""
        columns = sweep_columns(points)
        stream = None
        if jsonl is not None:
            if resumed and output_kind(jsonl) == "file" and Path(jsonl).exists():
                stream = StreamWriter.append(jsonl)
            else:
                stream = StreamWriter.create(jsonl, record_line(first) + "".join(
                    record_line(point_record(r, points[r.index])) for r in done))
        csv_out = None
        if csv_path is not None:
            csv_out = StreamWriter.create(csv_path, csv_header(columns) + "".join(
                csv_lines(r, columns) for r in done))
        return cls(points, columns, stream, csv_out)

    def __call__(self, result: PointResult) -> None:
        if self.jsonl is not None:
            self.jsonl.write(record_line(point_record(result, self.points[result.index])))
        if self.csv is not None:
            self.csv.write(csv_lines(result, self.columns))

    def close(self) -> None:
        for writer in (self.jsonl, self.csv):
            if writer is not None:
                writer.close()


# --------------------------------------------------------------------------- files

def write_csv(result: SweepResult, path: str | Path) -> None:
    """One line per row (columns: `result.columns` then point_wall_s); empty cell = None.
    The same text `SweepStreams` streams point by point."""
    write_text(csv_text(result), path)


def sweep_dict(result: SweepResult) -> dict:
    rows = [{c: check_finite(row[c], c) for c in result.columns} for row in result.rows]
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
    written by `core.output.write_output` (a file atomically; no NaN)."""
    write_json_output(sweep_dict(result), path)
