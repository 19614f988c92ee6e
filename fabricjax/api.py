"""The Python API: what a notebook user calls, and what the `fabricjax` commands call too.
After `import fabricjax as fj`::

    sc = fj.load("scenarios/quickstart.yaml")              # or fj.Scenario.from_dict({...})
    sc2 = sc.replace({"fabric.planes": 4, "spray.evs": 64})  # dotted paths, validated
    rep = fj.analyze(sc2, policies=["ecmp", "mrc"])
    df = rep.to_pandas()                                   # one row per policy x workload item
    sw = fj.sweep(sc, {"fabric.planes": [1, 2, 4, 8]})     # a DataFrame
    fj.plot.cdf(rep)                                       # a matplotlib Figure, not saved

Contract: every bad input is a `ScenarioError` naming the field as the caller wrote it (a
dotted path, or an argument such as `policies`; `names` maps the arguments to other words, the
CLI's options); `analyze` applies the same overrides, memory check and compilation cache as
the CLI, which is built on these calls. Importing this module imports JAX (the studies it
runs); `import fabricjax` does not, since the package root loads this module on first use.
pandas is optional (`fabricjax[pandas]`); `to_records()`
needs nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

# the policy modules fill the registry that policy names and sections are checked against
import fabricjax.policies  # noqa: F401
from fabricjax.config import Scenario as ScenarioConfig
from fabricjax.core.cache import CacheError, enable_compile_cache
from fabricjax.core.errors import ScenarioError
from fabricjax.core.units import SIZE_HELP, parse_size, value_text
from fabricjax.engine.plan import available_memory, check_memory
from fabricjax.handle import Scenario, as_config, load
from fabricjax.report.console import print_report
from fabricjax.report.json import report_dict
from fabricjax.results import Report
from fabricjax.report.design import print_design
from fabricjax.scenario import load_design, parse_design, with_overrides
from fabricjax.study.analyze import analyze as run_analysis
from fabricjax.sweeps import Axis, failure_figures, run_sweep, sweep_points
from fabricjax.sweeps.design import (DESIGN_COLUMNS, DesignResult, design_dict, design_rows,
                                     design_search)

Progress = Callable[[str, int, int], None]
# the API's arguments that override scenario fields, and those fields
OVERRIDES = {"policies": "policies", "seed": "seed", "samples": "failures.samples",
             "chunk": "failures.chunk", "model": "solver.model"}


def _renamed(error: ScenarioError, names: Mapping[str, str]) -> ScenarioError:
    """`error` with an overridden field named as the caller knows it (an argument, an
    option); other fields stay the scenario's."""
    for argument, field in OVERRIDES.items():
        if error.field == field or error.field.startswith((field + "[", field + ".")):
            word = names.get(argument, argument)
            return ScenarioError(word, error.message, error.source)
    return error


def configure(scenario: Scenario | ScenarioConfig | str | Path, *,
              policies: Iterable[str] | None = None, seed: int | None = None,
              samples: int | None = None, chunk: int | None = None,
              model: str | None = None,
              names: Mapping[str, str] | None = None) -> ScenarioConfig:
    """The validated scenario with the arguments that override its fields (None: keep the
    scenario's). A bad value is a ScenarioError naming the argument (or `names[argument]`);
    `samples` and `chunk` need a `failures` section."""
    names = dict(names or {})
    config = as_config(scenario)
    given = {"samples": samples, "chunk": chunk}
    failures = {k: v for k, v in given.items() if v is not None}
    if failures and config.failures is None:
        argument = next(iter(failures))
        raise ScenarioError(names.get(argument, argument), f"the scenario {config.name!r} "
                            "has no `failures` section to draw sets from")
    overrides: dict[str, Any] = {"policies": list(policies) if policies is not None else None,
                                 "seed": seed}
    if failures:
        overrides["failures"] = {**config.failures.model_dump(), **failures}
    if model is not None:         # the level of the flow-level figures: static | dynamic
        overrides["solver"] = {**config.solver.model_dump(), "model": model}
    if all(value is None for value in overrides.values()):
        return config                 # validated already: nothing to re-check
    try:
        return with_overrides(config, **overrides)
    except ScenarioError as error:
        raise _renamed(error, names) from None


def memory_limit(max_memory: int | str | None, names: Mapping[str, str] | None = None
                 ) -> int | None:
    """Bytes from `max_memory` (an int, or a size such as "8GiB"); None stays None."""
    if max_memory is None or isinstance(max_memory, int) and not isinstance(max_memory, bool):
        return max_memory
    word = dict(names or {}).get("max_memory", "max_memory")
    try:
        return int(parse_size(str(max_memory)))
    except ValueError:
        raise ScenarioError(word, f"expected {SIZE_HELP}, got {max_memory!r}") from None


def check_fits(config: ScenarioConfig, max_memory: int | str | None = None, *,
               names: Mapping[str, str] | None = None) -> None:
    """Refuse, before anything is computed, a scenario whose estimated peak memory exceeds
    `max_memory` (default: the memory available now). Imports JAX (to ask the device)."""

    word = dict(names or {}).get("max_memory", "max_memory")
    limit = memory_limit(max_memory, names)
    check_memory(config, limit if limit is not None else available_memory(),
                 option=word if limit is not None else f"available now; {word} overrides")


def use_cache(cache_dir: str | None = None, *, names: Mapping[str, str] | None = None
              ) -> Path | None:
    """Keep compiled programs in `cache_dir` (default: $FABRICJAX_CACHE_DIR, else
    ~/.cache/fabricjax/xla; "off": none). A folder that cannot be used is a ScenarioError
    naming `cache_dir` (the environment variable's folder: no field)."""

    try:
        return enable_compile_cache(cache_dir)
    except CacheError as error:
        word = dict(names or {}).get("cache_dir", "cache_dir")
        raise ScenarioError(word if cache_dir is not None else "", str(error)) from None


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A scenario ready to analyse (`prepare`): its overrides applied, checked against the
    memory it may use and the compilation cache set. `analyze` takes one as it is, so a
    caller that checks before it writes anything (the CLI, before its output files) runs the
    checks once."""

    config: ScenarioConfig


def prepare(scenario: Scenario | ScenarioConfig | str | Path, *,
            policies: Iterable[str] | None = None, seed: int | None = None,
            samples: int | None = None, chunk: int | None = None,
            max_memory: int | str | None = None, cache_dir: str | None = None,
            names: Mapping[str, str] | None = None) -> Prepared:
    """What `analyze` does before it computes: the overrides (`configure`), the memory check
    (`check_fits`) and the compilation cache (`use_cache`); every refusal a ScenarioError."""
    config = configure(scenario, policies=policies, seed=seed, samples=samples, chunk=chunk,
                       names=names)
    check_fits(config, max_memory, names=names)
    use_cache(cache_dir, names=names)
    return Prepared(config)


def check_points(points: Iterable[Any], cache_dir: str | None = None, *,
                 names: Mapping[str, str] | None = None) -> None:
    """What `sweep` checks before its first point runs: every point fits the memory
    available now (a refusal is a ScenarioError naming the point, then the field) and the
    compilation cache can be used."""
    for point in points:
        try:
            check_fits(point.scenario)
        except ScenarioError as error:
            what = f"{error.field}: {error.message}" if error.field else error.message
            raise ScenarioError(f"point {point.label}", what, error.source) from None
    use_cache(cache_dir, names=names)


def _progress(progress: bool | Progress | None) -> tuple[Progress | None, Any]:
    """(callback, the rich Progress to stop) for `progress`: a callable is used as is; True
    draws a transient bar on standard error."""
    if not progress:
        return None, None
    if callable(progress):
        return progress, None
    from rich.console import Console
    from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

    bar = Bar(TextColumn("{task.description}", markup=False), BarColumn(),
              TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    task = bar.add_task("starting", total=None)
    bar.start()

    def update(message: str, done: int, total: int) -> None:
        bar.update(task, description=message, completed=done, total=total)

    return update, bar


class Analysis:
    """What `analyze` measured: `report` (a `results.Report`: one record per policy and
    workload item, the failure study, ...) and the `scenario` it ran."""

    def __init__(self, report: Report, scenario: ScenarioConfig):
        self.report = report
        self.scenario = Scenario(scenario)

    @property
    def records(self) -> list:
        return self.report.records

    def to_records(self) -> list[dict]:
        """One dict per policy x workload item: every number of its record (per-tier P100 as
        `p100_<tier>`), and with failures the failure study's figures (`failures_*`)."""

        summaries = {}
        if self.report.failures is not None:
            summaries = {(s.policy, s.workload): s for s in self.report.failures.summaries}
        rows = []
        for record in self.report.records:
            row = {"scenario": self.report.scenario}
            for key, value in record.as_dict().items():
                if key == "utilisation_by_tier":
                    row.update({f"p100_{tier}": q["p100"] for tier, q in value.items()})
                elif key == "dynamic" and value is not None:
                    row.update({f"dynamic_{k}": v for k, v in value.items()
                                if not isinstance(v, (list, dict))})
                elif not isinstance(value, (list, dict)):
                    row[key] = value
            summary = summaries.get((record.policy, record.workload))
            if summary is not None:
                row.update(failure_figures(summary))
            rows.append(row)
        return rows

    def to_pandas(self) -> Any:
        """`to_records()` as a pandas DataFrame (needs the `fabricjax[pandas]` extra)."""
        return _frame(self.to_records())

    def dynamic_series(self, policy: str, workload: str, failure_set: int | None = None
                       ) -> Any:
        """The dynamic level's time series (`solver.model: dynamic`) of one record, or of
        failure set `failure_set` when the sets strike during the phase (`failures.at_s`):
        a DataFrame of time_s, queue_fill_max, throughput_gbps and flows_sending, one row per
        record interval (the busiest phase's; the struck step's). KeyError when there is
        none."""
        if failure_set is None:
            found = [r.dynamic for r in self.report.records
                     if r.policy == policy and r.workload == workload and r.dynamic]
        else:
            records = self.report.failures.records if self.report.failures else []
            found = [r["dynamic"] for r in records
                     if (r["policy"], r["workload"], r["failure_set"]) ==
                     (policy, workload, failure_set) and r.get("dynamic")]
        if not found or not found[0].get("series"):
            raise KeyError(f"no dynamic time series for {policy} / {workload}"
                           + ("" if failure_set is None else f", failure set {failure_set}"))
        columns = ("time_s", "queue_fill_max", "throughput_gbps", "flows_sending")
        return _frame([dict(zip(columns, row)) for row in found[0]["series"]], columns)

    def to_dict(self) -> dict:
        """The JSON form `fabricjax analyze --json` writes."""
        return report_dict(self.report)

    def show(self, console: Any = None) -> None:
        """Print the tables `fabricjax analyze` prints (on `console`, else standard output)."""
        from rich.console import Console


        print_report(console or Console(), self.report)

    def __repr__(self) -> str:
        cells = ", ".join(f"{r.policy}/{r.workload}: P100 {r.p100_utilisation:.3f}"
                          for r in self.report.records[:6])
        more = ", ..." if len(self.report.records) > 6 else ""
        return f"Analysis({self.report.scenario!r}: {cells}{more})"


def _frame(rows: list[dict], columns: Iterable[str] | None = None) -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError("to_pandas needs pandas: pip install 'fabricjax[pandas]' (or use "
                          "to_records(), which needs nothing)") from None
    return pandas.DataFrame(rows, columns=list(columns) if columns is not None else None)


def analyze(scenario: Scenario | ScenarioConfig | str | Path | Prepared,
            policies: Iterable[str] | None = None, *, seed: int | None = None,
            samples: int | None = None, chunk: int | None = None, trace: bool = False,
            sensitivity: bool = False, max_memory: int | str | None = None,
            cache_dir: str | None = None, progress: bool | Progress | None = None,
            failure_records: list[dict] | None = None,
            on_failure_records: Callable[[list[dict]], None] | None = None,
            names: Mapping[str, str] | None = None) -> Analysis:
    """Evaluate the policies (default: the scenario's) on its workload, and under its failure
    sets when it has `failures`: the overrides (`configure`), the memory check (`check_fits`)
    and the compilation cache (`use_cache`) of `fabricjax analyze`, then
    `study.analyze.analyze`. `progress`: True for a bar on standard error, or a callable
    (message, done, total). `failure_records`, `on_failure_records`: a failure study's
    streamed per-set records, as `study.analyze.analyze` takes them. A `Prepared` scenario
    (`prepare`) is taken as it is: its overrides and checks were made."""

    if not isinstance(scenario, Prepared):
        scenario = prepare(scenario, policies=policies, seed=seed, samples=samples,
                           chunk=chunk, max_memory=max_memory, cache_dir=cache_dir,
                           names=names)
    elif any(v is not None for v in (policies, seed, samples, chunk, max_memory, cache_dir)):
        raise ValueError("a Prepared scenario carries its overrides and checks: pass them to "
                         "prepare, not to analyze")
    config = scenario.config
    callback, bar = _progress(progress)
    try:
        report = run_analysis(config, trace=trace, progress=callback, sensitivity=sensitivity,
                              failure_records=failure_records,
                              on_failure_records=on_failure_records)
    finally:
        if bar is not None:
            bar.stop()
    return Analysis(report, config)


def grid(scenario: Scenario | ScenarioConfig | str | Path,
         values: Mapping[str | tuple[str, ...], Iterable[Any]], *,
         policies: Iterable[str] | None = None) -> list:
    """The validated grid points (`sweeps.Point`) of `values`: {dotted path: values} (the
    points are the grid of all), or {(path, path): [(a, b), ...]} for fields that move
    together. A bad path or value is a ScenarioError naming it as ``path=value``."""

    config = configure(scenario, policies=policies)
    axes = []
    for key, options in values.items():
        paths = (key,) if isinstance(key, str) else tuple(key)
        options = list(options)
        if not options:
            raise ScenarioError(", ".join(paths), "has no values to sweep")
        rows = [tuple(v) if len(paths) > 1 else (v,) for v in options]
        for row in rows:
            if len(row) != len(paths):
                raise ScenarioError(", ".join(paths), f"{row!r} has {len(row)} value(s) for "
                                    f"{len(paths)} fields; expected one per field")
        axes.append(Axis(paths, tuple(rows),
                         tuple(tuple(value_text(v) for v in row) for row in rows)))
    return sweep_points(config, axes, option="")


def sweep(scenario: Scenario | ScenarioConfig | str | Path,
          values: Mapping[str | tuple[str, ...], Iterable[Any]], *,
          policies: Iterable[str] | None = None, progress: bool | Progress | None = None,
          cache_dir: str | None = None, frame: bool = True) -> Any:
    """Evaluate the scenario at every point of the grid of `values` (see `grid`): a pandas
    DataFrame with one row per point, policy and workload item -- the swept fields, P100,
    completion, busbw, the bill of materials, the failure study's figures -- the rows of
    `fabricjax sweep --csv` (with `frame=False`, a list of dicts). Every point is validated
    and checked against the memory available before the first one runs."""

    points = grid(scenario, values, policies=policies)
    check_points(points, cache_dir)
    callback, bar = _progress(progress)
    try:
        result = run_sweep(points, progress=callback)
    finally:
        if bar is not None:
            bar.stop()
    return _frame(result.rows, result.columns) if frame else list(result.rows)


class Design:
    """What `design` found: `best` (the cheapest design that meets the target, a dict; None
    when none does), `front` (the Pareto front), `dropped` (each dropped design, its stage and
    why), `stages` (designs in, dropped and seconds per stage) and `result` (the whole
    `sweeps.design.DesignResult`)."""

    def __init__(self, result: DesignResult):
        self.result = result
        self._data = design_dict(result)

    best = property(lambda self: self._data["best"])
    front = property(lambda self: self._data["front"])
    dropped = property(lambda self: self._data["dropped"])
    stages = property(lambda self: self._data["stages"])

    def to_records(self) -> list[dict]:
        """One dict per evaluated design (fabric x policy): its coordinates, bill and cost,
        the target metric, its bound, feasibility, margin and whether it is on the front."""
        return design_rows(self.result)

    def to_pandas(self) -> Any:
        """`to_records()` as a pandas DataFrame (needs the `fabricjax[pandas]` extra)."""
        return _frame(self.to_records(), DESIGN_COLUMNS)

    def to_dict(self) -> dict:
        """The JSON form `fabricjax design --json` writes."""
        return self._data

    def show(self, console: Any = None) -> None:
        """Print what `fabricjax design` prints (on `console`, else standard output)."""
        from rich.console import Console

        print_design(console or Console(), self._data)

    def __repr__(self) -> str:
        best = self.best
        found = (f"best {best['design']} / {best['policy']}" if best is not None
                 else "no design meets the target")
        return f"Design({self.result.scenario!r}: {found}, {len(self.front)} on the front)"


def design(scenario: Scenario | ScenarioConfig | str | Path, spec: Any = None, *,
           progress: bool | Progress | None = None, cache_dir: str | None = None,
           done: list[dict] | None = None,
           on_record: Callable[[dict], None] | None = None) -> Design:
    """Search a design space for the cheapest fabric that meets a target (see
    `sweeps.design`): `scenario` a design file's path (scenario plus `design` section) with
    `spec` None, or any scenario with `spec` the `design` section (a dict, as in the file, or
    a `config.DesignConfig`). `done` / `on_record`: the search's stream, as
    `fabricjax design --resume` replays and writes it."""
    if spec is None:
        if not isinstance(scenario, (str, Path)):
            raise ScenarioError("spec", "a design section is needed: pass spec={...} (space, "
                                "target, objective), or a design file's path")
        config, spec = load_design(scenario)
    else:
        config, spec = as_config(scenario), parse_design(spec)
    use_cache(cache_dir)
    callback, bar = _progress(progress)
    try:
        result = design_search(config, spec, progress=callback, done=done,
                               on_record=on_record)
    finally:
        if bar is not None:
            bar.stop()
    return Design(result)


__all__ = ["Analysis", "Design", "Prepared", "Scenario", "ScenarioError", "analyze",
           "check_fits", "check_points", "configure", "design", "grid", "load", "memory_limit",
           "prepare", "sweep", "use_cache"]
