"""`fabricjax` commands. This file only parses options, calls the library and renders.

Exit codes: 0 success, 2 bad input (one line on stderr naming the field), 130 interrupted,
1 an internal error (set FABRICJAX_DEBUG=1 for the traceback). JAX is imported inside the
commands so that `--help` stays instant.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="fabricjax",
    help="Flow-level analysis of multi-plane AI-training fabrics: ECMP vs packet spraying vs "
    "MRC adaptive spraying, against the optimal bound.",
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
# Piped output (make demo, CI logs) gets a width that fits the tables, unless COLUMNS names one
# (the tables then fit that width: `COLUMNS=80 fabricjax analyze ... | less`).
out = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 150)
err = Console(stderr=True)


def _printable(text: str) -> str:
    """A user's text (a path, a key) escaped to stay on one line, without terminal escapes."""
    from fabricjax.core.errors import one_line

    return one_line(str(text))


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {escape(_printable(message))}", highlight=False,
              soft_wrap=True)
    raise typer.Exit(code)


# streams this run has started (JSON Lines of finished points or failure sets): what an
# interrupt leaves behind for --resume
_streams: list[str] = []


def _interrupted() -> None:
    """Ctrl-C: one line and exit 130 at once. Reports are written atomically at the end, so
    there is nothing to clean up; a stream holds whole lines only (a cut line is dropped when
    it is read back). Skipping interpreter shutdown matters because JAX's runtime threads may
    still be mid-computation, and tearing them down under the interpreter crashed (SIGSEGV) in
    testing."""
    if _streams:
        kept = ", ".join(_printable(p) for p in _streams)
        err.print(f"[bold red]interrupted:[/] what was finished is in {escape(kept)}; rerun "
                  "the same command with --resume to go on", highlight=False, soft_wrap=True)
    else:
        err.print("[bold red]interrupted:[/] nothing was written", highlight=False)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def _version(value: bool) -> None:
    if value:
        from fabricjax.core.version import __version__

        out.print(f"fabricjax {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """fabricjax: the tail of link utilisation and collective time, per load-balancing policy."""


# the Python API's arguments as the commands spell them: an error about one names the option
OPTION_NAMES = {"policies": "--policy", "seed": "--seed", "samples": "--samples",
                "chunk": "--chunk", "max_memory": "--max-memory", "cache_dir": "--cache-dir",
                "model": "--model"}

# options that `analyze` and `sweep` share, declared once
PolicyOption = Annotated[Optional[list[str]], typer.Option(
    "--policy", "-p", metavar="NAME",
    help="Policy to evaluate (repeatable): ecmp, spray, mrc, optimal. "
    "Default: the scenario's `policies`.")]
ModelOption = Annotated[Optional[str], typer.Option(
    "--model", metavar="LEVEL",
    help="The flow-level figures' model: static (settled max-min rates and the progressive "
    "simulation) or dynamic (queues, ECN, NSCC and each policy's reaction in time steps). "
    "Default: the scenario's `solver.model`.")]
CacheDirOption = Annotated[Optional[str], typer.Option(
    "--cache-dir", metavar="DIR|off", help="Keep compiled programs in DIR for the next "
    "run (default: $FABRICJAX_CACHE_DIR, else ~/.cache/fabricjax/xla); off: compile "
    "afresh.")]
DistributedOption = Annotated[bool, typer.Option(
    "--distributed", help="Join a multi-process run (one process per host): every process "
    "runs the same command; analyze shards the failure sets over all their devices, sweep "
    "deals the points out to the processes; process 0 gathers, prints and writes. The "
    "coordinator, process count and id come from SLURM or Open MPI, or from "
    "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID.")]
ResumeOption = Annotated[bool, typer.Option(
    "--resume", help="Go on from an interrupted run: analyze streams a failure study's "
    "per-set records to NAME.jsonl beside --json NAME.json, sweep its finished points to "
    "--jsonl (or the .jsonl beside --json / --csv); --resume reads that stream, checks it "
    "belongs to this scenario and options, and computes only what is left. The results are "
    "the same as an uninterrupted run's.")]
QuietOption = Annotated[bool, typer.Option(
    "--quiet", "-q", help="No progress bar; tables only.")]


def _load(scenario: Path, **overrides):
    """The validated scenario with the options' overrides (`api.configure`); a bad file or a
    bad option value is one line and exit 2, naming the file's field or the option the user
    typed."""
    from fabricjax.core.errors import ScenarioError
    from fabricjax.scenario import load_scenario

    try:
        loaded = load_scenario(scenario)
    except ScenarioError as error:
        _fail(str(error))
    if all(value is None for value in overrides.values()):
        return loaded             # validated already (and `topo` imports no JAX)
    from fabricjax.api import configure   # the studies' module: JAX comes with it

    try:
        return configure(loaded, names=OPTION_NAMES, **overrides)
    except ScenarioError as error:
        _fail(str(error))


def _check_plot_dir(path: Optional[str]) -> None:
    """Fail before computing when `--plot DIR` names something that is not a folder."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        _fail(f"--plot: {_printable(path)} is a file; allowed: a folder (created if missing)")


def _check_output(path: Optional[str], option: str, scenario: Path) -> None:
    """Fail before computing when `path` cannot be written. Output paths are taken as `str`:
    click's Path type drops a trailing slash, and `--json newdir/` names a folder."""
    if path is None:
        return
    from fabricjax.core.output import check_writable

    try:
        check_writable(path, protect=(scenario,))
    except OSError as error:
        _fail(f"{option} {path}: cannot write there ({error})")


def _check_distinct(outputs: dict) -> None:
    """Fail when two outputs name the same file, or more than one is `-` (standard output)."""
    from fabricjax.core.output import STDOUT, resolved

    seen: dict = {}
    for option, path in outputs.items():
        if path is None:
            continue
        key = STDOUT if path == STDOUT else resolved(path)
        if key in seen:
            what = "standard output (-)" if key == STDOUT else f"the same file ({path})"
            _fail(f"{option}: {seen[key]} already writes to {what}; give each output its "
                  "own path")
        seen[key] = option


def _writing(option: str, write) -> None:
    """`write()`, an output's writing: a failure (ENOSPC on /dev/full, a missing folder)
    becomes one line naming the option and the path, and exit 2."""
    from fabricjax.core.output import OutputError

    try:
        write()
    except OutputError as error:
        _fail(f"{option} {error}" if option else str(error))
    except BrokenPipeError:
        raise
    except OSError as error:
        _fail(f"{option} {getattr(error, 'filename', '') or ''}: cannot write "
              f"({error.strerror or error})")


def _stream_for(path: Optional[str], scenario: Path) -> Optional[str]:
    """The stream beside output `path` (`core.stream.beside`), checked to be writable."""
    if path is None:
        return None
    from fabricjax.core.stream import beside

    stream = beside(path)
    if stream is not None:
        _check_output(stream, "stream", scenario)
    return stream


def _streamed_outputs(source: Path, csv_path: Optional[str], json_path: Optional[str],
                      jsonl_path: Optional[str], resume: bool) -> Optional[str]:
    """Check a streaming command's outputs before computing (each writable, no two the same,
    `--resume` given a file) and return its stream's path: `--jsonl`, else the .jsonl beside
    `--json`, else beside `--csv` (None: no stream)."""
    for path, option in ((csv_path, "--csv"), (json_path, "--json"), (jsonl_path, "--jsonl")):
        _check_output(path, option, source)
    stream_path = jsonl_path
    if stream_path is None:
        stream_path = _stream_for(json_path, source) or _stream_for(csv_path, source)
    _check_distinct({"--csv": csv_path, "--json": json_path,
                     "--jsonl" if jsonl_path is not None else "the stream": stream_path})
    from fabricjax.core.output import output_kind

    if resume and (stream_path is None or output_kind(stream_path) != "file"):
        _fail("--resume: needs a file to resume from: --jsonl PATH, or --json / --csv naming a "
              "file (the stream NAME.jsonl goes beside it)")
    return stream_path


def _open_stream(path: str, first: str, resume: bool):
    """The leader's writer of a stream: appended to when resuming from an existing file (read
    and trimmed already), else started afresh with `first` (the header line)."""
    from fabricjax.core.output import OutputError
    from fabricjax.core.stream import StreamWriter

    try:
        if resume and Path(path).exists():
            writer = StreamWriter.append(path)
        else:
            writer = StreamWriter.create(path, first)
    except OutputError as error:
        _fail(str(error))
    _streams.append(path)
    return writer


@app.command()
def analyze(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.",
                                             metavar="SCENARIO.yaml")],
    policy: PolicyOption = None,
    seed: Annotated[Optional[int], typer.Option(
        metavar="N",
        help="Random seed for workload and path draws (overrides the scenario's).")] = None,
    json_path: Annotated[Optional[str], typer.Option(
        "--json", metavar="PATH",
        help="Write the full report as JSON to this path (atomically).")] = None,
    trace: Annotated[bool, typer.Option(
        "--trace", help="Record mrc's P100 after every iteration (printed, and in the JSON "
        "as `trace`).")] = False,
    samples: Annotated[Optional[int], typer.Option(
        metavar="N", help="Number of failure sets (overrides `failures.samples`; the scenario "
        "needs a `failures` section).")] = None,
    chunk: Annotated[Optional[int], typer.Option(
        metavar="N", help="Failure sets per device call (overrides `failures.chunk`). "
        "Never changes a result: the JSON is byte-identical for every N.")] = None,
    device: Annotated[Optional[str], typer.Option(
        metavar="cpu|gpu", help="Where JAX computes. Default: what JAX finds (a GPU when "
        "one is installed and visible, else the CPU).")] = None,
    devices: Annotated[Optional[int], typer.Option(
        metavar="N", help="Shard the failure sets over N devices: the first N GPUs, or "
        "on the CPU N virtual devices that run sets side by side on separate cores. Default: "
        "every GPU found, one CPU device.")] = None,
    distributed: DistributedOption = False,
    max_memory: Annotated[Optional[str], typer.Option(
        metavar="SIZE", help="Refuse, before computing, a scenario whose estimated peak "
        "memory exceeds SIZE (e.g. 8GiB). Default: the memory available now.")] = None,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="DIR", help="Write PNG figures into DIR: the CDF of link utilisation "
        "per policy, completion per policy (with the failure-set spread), mrc's convergence "
        "(implies --trace) and, with jobs, alone vs together.")] = None,
    sensitivity: Annotated[bool, typer.Option(
        "--sensitivity", help="Name the links whose upgrade would most shorten each "
        "collective (the gradient of its time and P100 with respect to link capacity).")
    ] = False,
    model: ModelOption = None,
    cache_dir: CacheDirOption = None,
    resume: ResumeOption = False,
    quiet: QuietOption = False,
) -> None:
    """Evaluate each policy on the scenario's workload: utilisation tail and completion time,
    and, when the scenario has `failures`, their distribution over failure sets."""
    config = _load(scenario, policies=policy, seed=seed, samples=samples, chunk=chunk,
                   model=model)
    limit = _memory_limit(max_memory)
    _check_output(json_path, "--json", scenario)
    # a failure study streams its per-set records to NAME.jsonl beside the report
    stream_path = _stream_for(json_path, scenario) if config.failures is not None else None
    if resume and config.failures is not None and stream_path is None:
        _fail("--resume: needs --json naming a file: the failure sets' records stream to the "
              ".jsonl beside it, and that is what --resume reads" if json_path is None else
              f"--resume: --json {json_path} is not a file, so nothing streams beside it; "
              "give a file name")
    _check_plot_dir(plot)
    _select_device(device, devices, distributed)
    from fabricjax.api import prepare
    from fabricjax.core.devices import from_leader, is_leader
    from fabricjax.core.errors import ScenarioError
    from fabricjax.core.stream import StreamError, record_line

    try:   # before any file is written: `api.analyze`'s checks, which it then takes as made
        prepared = prepare(config, max_memory=limit, cache_dir=cache_dir, names=OPTION_NAMES)
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    done, sink = None, None
    if stream_path is not None:
        from fabricjax.study.analyze import failure_header, read_failure_stream

        first = failure_header(config)
        if resume:
            try:
                done = from_leader(lambda: read_failure_stream(stream_path, first))
            except StreamError as error:
                _fail(f"--resume: {error}")
        if is_leader():
            sink = _open_stream(stream_path, record_line(first), resume).write_records
    report = _computing(lambda: _run_analysis(prepared, quiet or not is_leader(),
                                              trace or plot is not None, sensitivity, done,
                                              sink),
                        scenario)
    if not is_leader():   # a distributed run's other processes computed their share; done
        return
    from fabricjax.core.output import STDOUT, write_json
    from fabricjax.report.console import print_report
    from fabricjax.report.json import report_dict

    if json_path is not None:   # first: a closed pipe on stdout must not cost the report
        _writing("--json", lambda: write_json(report_dict(report), json_path))
    figures = []
    if plot is not None:
        from fabricjax.report.plots import write_plots

        _writing("--plot", lambda: figures.extend(write_plots(report, plot)))
    if json_path == STDOUT:     # standard output carries the report alone
        return
    print_report(out, report)
    if done:
        out.print(f"resumed: {len(done):,} of {len(report.failures.records):,} failure-set "
                  f"records taken from {escape(_printable(stream_path))}", highlight=False)
    for path in [p for p in (json_path, stream_path) if p is not None]:
        out.print(f"wrote {escape(_printable(path))}", highlight=False)
    for figure in figures:
        out.print(f"wrote {escape(_printable(str(figure)))}", highlight=False)


def _memory_limit(text: Optional[str]) -> Optional[int]:
    from fabricjax.api import memory_limit
    from fabricjax.core.errors import ScenarioError

    try:
        return memory_limit(text, OPTION_NAMES)
    except ScenarioError as error:
        _fail(str(error))


def _select_device(name: Optional[str], count: Optional[int], distributed: bool) -> None:
    """Pin JAX to `name`, ask for `count` devices and join a distributed run before JAX starts
    a backend; fail when they are absent."""
    from fabricjax.core.devices import (DeviceError, check_devices, init_distributed,
                                        request_devices, select_device)

    if count is not None:
        try:
            request_devices(count)
        except DeviceError as error:
            _fail(f"--devices: {error}")
    if distributed:
        try:
            init_distributed(*_distributed_env())
        except DeviceError as error:
            _fail(f"--distributed: {error}")
    if name is not None:
        try:
            select_device(name)
        except DeviceError as error:
            _fail(f"--device: {error}")
    try:
        check_devices()
    except DeviceError as error:
        _fail(f"--devices: {error}")


def _distributed_env() -> tuple:
    """(coordinator, processes, process id) from the environment; None where unset (JAX then
    asks the cluster: SLURM, Open MPI)."""
    values = []
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        text = os.environ.get(name)
        if text is None:
            values.append(None)
            continue
        try:
            values.append(int(text))
        except ValueError:
            _fail(f"--distributed: {name} must be an integer, got {_printable(text)!r}")
    return (os.environ.get("JAX_COORDINATOR_ADDRESS"), *values)


def _computing(run, scenario: Path):
    """`run()`, the long part of a command: a ScenarioError, a stream that cannot be resumed
    and a stream that cannot be written (ENOSPC) become one line and exit 2. Ctrl-C exits at
    once from a signal handler (exit 130, reports not written): a KeyboardInterrupt raised
    inside a callback (JAX's garbage-collection hook) is printed and swallowed by Python, and
    the run would go on to write its outputs."""
    from fabricjax.core.errors import ScenarioError
    from fabricjax.core.output import OutputError
    from fabricjax.core.stream import StreamError

    previous = signal.signal(signal.SIGINT, lambda *_: _interrupted())
    try:
        return run()
    except KeyboardInterrupt:
        _interrupted()
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    except StreamError as error:
        _fail(f"--resume: {error}")
    except OutputError as error:
        _fail(str(error))
    finally:
        signal.signal(signal.SIGINT, previous)


def _with_progress(run, quiet: bool, *, start: str, unit: str | None = None):
    """`run(progress)` under a transient progress bar on stderr (`progress` None if quiet).
    `unit`: also show "done/total <unit>"."""
    if quiet:
        return run(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [TextColumn("{task.description}", markup=False), BarColumn()]
    if unit:
        columns.append(TextColumn("{task.completed}/{task.total} " + unit))
    with Progress(*columns, TimeElapsedColumn(), console=err, transient=True) as progress:
        task = progress.add_task(start, total=None)

        def update(message: str, done: int, total: int) -> None:
            progress.update(task, description=message, completed=done, total=total)

        return run(update)


def _run_analysis(prepared, quiet: bool, trace: bool, sensitivity: bool = False, done=None,
                  sink=None):
    """`api.analyze` of an `api.prepare`d scenario: the one path the Python API takes too."""
    from fabricjax.api import analyze as run

    return _with_progress(lambda progress: run(
        prepared, trace=trace, progress=progress, sensitivity=sensitivity,
        failure_records=done, on_failure_records=sink, names=OPTION_NAMES).report, quiet,
        start="building")


@app.command()
def sweep(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file (the base point).",
                                             metavar="SCENARIO.yaml")],
    sets: Annotated[list[str], typer.Option(
        "--set", metavar="PATH=V1,V2,...",
        help="A scenario field and its values (repeatable; the points are the grid of all). "
        "PATH is dotted, with list indices: fabric.planes=1,2,4,8, workload[0].size=1GiB,4GiB, "
        "failures.links.random=0,16. Fields that move together: "
        "fabric.planes,fabric.port_gbps=1:800G,8:100G.")],
    policy: PolicyOption = None,
    csv_path: Annotated[Optional[str], typer.Option(
        "--csv", metavar="PATH", help="Write one row per point, policy and item as CSV, "
        "each point's rows as soon as the point finishes.")] = None,
    json_path: Annotated[Optional[str], typer.Option(
        "--json", metavar="PATH", help="Write the sweep as JSON (points, rows, times) at the "
        "end.")] = None,
    jsonl_path: Annotated[Optional[str], typer.Option(
        "--jsonl", metavar="PATH", help="Stream one JSON record per finished point to PATH "
        "(after a header line). Default: NAME.jsonl beside --json NAME.json, else beside "
        "--csv NAME.csv.")] = None,
    resume: ResumeOption = False,
    distributed: DistributedOption = False,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="DIR", help="Write sweep curves (metric vs the first swept field, one "
        "line per policy) as PNG files into DIR.")] = None,
    model: ModelOption = None,
    cache_dir: CacheDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """Evaluate the scenario at every point of a grid of field values: P100, completion and
    busbw per policy, and each design's switches, optics and watts. Points that share array
    shapes reuse the compiled code; finished points stream to the CSV and a JSON Lines file,
    and --resume goes on after an interruption."""
    config = _load(scenario, policies=policy, model=model)
    stream_path = _streamed_outputs(scenario, csv_path, json_path, jsonl_path, resume)
    from fabricjax.core.output import STDOUT, output_kind

    _check_plot_dir(plot)
    from fabricjax.core.errors import ScenarioError
    from fabricjax.sweeps import parse_sets, sweep_points

    try:
        axes = parse_sets(sets)
        points = sweep_points(config, axes)
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    _select_device(None, None, distributed)
    from fabricjax.api import check_points

    try:    # `api.sweep`'s checks, before any file is written
        check_points(points, cache_dir, names=OPTION_NAMES)
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    from fabricjax.core.devices import from_leader, is_leader
    from fabricjax.core.stream import StreamError
    from fabricjax.sweeps import (PointResult, SweepStreams, read_sweep_stream, sweep_device,
                                 sweep_header)

    first = sweep_header(config, axes, points, sweep_device())
    done = []
    if resume:
        def finished() -> list:
            return [r._asdict() for r in read_sweep_stream(stream_path, first, points)]
        try:
            done = [PointResult(**r) for r in from_leader(finished)]
        except StreamError as error:
            _fail(f"--resume: {error}")
    streams = None
    if is_leader():
        from fabricjax.core.output import OutputError

        try:
            streams = SweepStreams.open(points, first, jsonl=stream_path, csv_path=csv_path,
                                        done=done, resumed=resume)
        except OutputError as error:
            _fail(str(error))
        _streams.extend(p for p in (stream_path, csv_path)
                        if p is not None and output_kind(p) == "file")
    result = _computing(lambda: _run_sweep(points, quiet or not is_leader(), done, streams),
                        scenario)
    if not is_leader():   # the other processes of a distributed sweep computed their share
        return
    from fabricjax.report.console import print_sweep
    from fabricjax.sweeps import write_json

    _writing("", streams.close)
    if json_path is not None:
        _writing("--json", lambda: write_json(result, json_path))
    written = []
    if plot is not None:
        from fabricjax.report.plots import write_plots

        _writing("--plot", lambda: written.extend(write_plots(None, plot, sweep=result)))
    if STDOUT in (csv_path, json_path, stream_path):   # standard output carries that alone
        return
    print_sweep(out, result)
    resumed = f" ({len(done)} from {_printable(stream_path)})" if done else ""
    out.print(escape(f"{len(points)} point(s){resumed} in {result.total_s:.1f} s"),
              highlight=False)
    for path in [p for p in (csv_path, json_path, stream_path) if p is not None] + [
            str(w) for w in written]:
        out.print(f"wrote {escape(_printable(path))}", highlight=False)


def _run_sweep(points, quiet: bool, done, streams):
    from fabricjax.sweeps import run_sweep

    return _with_progress(lambda progress: run_sweep(points, progress=progress, done=done,
                                                     on_point=streams),
                          quiet, start="sweeping", unit="points")


@app.command()
def design(
    design_file: Annotated[Path, typer.Argument(
        help="Design YAML file: a scenario (GPUs, workload, failures) plus a `design` section "
        "(space, target, objective, catalog).", metavar="DESIGN.yaml")],
    json_path: Annotated[Optional[str], typer.Option(
        "--json", metavar="PATH", help="Write the search as JSON: the cheapest feasible design "
        "under `best`, the Pareto front under `front`, every design, every drop and why, the "
        "time per stage.")] = None,
    csv_path: Annotated[Optional[str], typer.Option(
        "--csv", metavar="PATH", help="Write one row per evaluated design (fabric x policy) "
        "as CSV.")] = None,
    jsonl_path: Annotated[Optional[str], typer.Option(
        "--jsonl", metavar="PATH", help="Stream one record per decided design to PATH (after "
        "a header line), for --resume. Default: NAME.jsonl beside --json NAME.json, else "
        "beside --csv NAME.csv.")] = None,
    resume: ResumeOption = False,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", metavar="DIR", help="Write the trade (objective against the target metric, "
        "the front joined) as design_front.png into DIR.")] = None,
    cache_dir: CacheDirOption = None,
    quiet: QuietOption = False,
) -> None:
    """Find the cheapest fabric (money, watts or optics) that meets a completion, slowdown or
    busbw target at a quantile over the failure sets: closed-form bounds first, then the
    static level on the survivors, cheapest first, then the dynamic level on the front."""
    from fabricjax.core.errors import ScenarioError
    from fabricjax.scenario import load_design

    try:
        base, spec = load_design(design_file)
    except ScenarioError as error:
        _fail(str(error))
    stream_path = _streamed_outputs(design_file, csv_path, json_path, jsonl_path, resume)
    from fabricjax.core.output import STDOUT, write_json, write_text

    _check_plot_dir(plot)
    from fabricjax.api import use_cache
    from fabricjax.core.stream import StreamError, record_line
    from fabricjax.sweeps.design import (design_csv, design_dict, design_header,
                                         design_search, order_of, read_design_stream)

    try:
        use_cache(cache_dir, names=OPTION_NAMES)
        first = design_header(base, spec, order_of(base, spec))
    except ScenarioError as error:
        _fail(str(error.with_source(str(design_file))))
    done = []
    if resume:
        try:
            done = read_design_stream(stream_path, first)
        except StreamError as error:
            _fail(f"--resume: {error}")
    writer = None
    if stream_path is not None:
        writer = _open_stream(stream_path, record_line(first), resume)

    def record(item: dict) -> None:
        if writer is not None:
            writer.write(record_line(item))

    result = _computing(lambda: _with_progress(
        lambda progress: design_search(base, spec, progress=progress, done=done,
                                       on_record=record),
        quiet, start="bounding", unit="designs"), design_file)
    if writer is not None:
        _writing("", writer.close)
    data = design_dict(result)
    if json_path is not None:
        _writing("--json", lambda: write_json(data, json_path))
    if csv_path is not None:
        _writing("--csv", lambda: write_text(design_csv(result), csv_path))
    written = []
    if plot is not None:
        from fabricjax.report.plots import plot_design_front

        def draw() -> None:
            Path(plot).mkdir(parents=True, exist_ok=True)
            path = plot_design_front(data, Path(plot) / "design_front.png")
            if path is not None:
                written.append(path)
        _writing("--plot", draw)
    if STDOUT in (csv_path, json_path, stream_path):   # standard output carries that alone
        return
    from fabricjax.report.design import print_design

    print_design(out, data)
    replayed = sum(1 for r in done if r.get("stage") in ("static", "confirm"))
    if replayed:
        out.print(escape(f"{replayed} solve(s) taken from {_printable(stream_path)}"),
                  highlight=False)
    out.print(escape(f"searched in {result.total_s:.1f} s"), highlight=False)
    for path in [p for p in (csv_path, json_path, stream_path) if p is not None] + [
            str(w) for w in written]:
        out.print(f"wrote {escape(_printable(path))}", highlight=False)


@app.command()
def topo(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file (its `fabric` section).",
                                             metavar="SCENARIO.yaml")],
    json_path: Annotated[Optional[str], typer.Option(
        "--json", metavar="PATH",
        help="Write the summary as JSON to this path (atomically).")] = None,
) -> None:
    """Summarise the fabric: GPUs, switches per tier and plane, links, paths, bisection."""
    config = _load(scenario)
    _check_output(json_path, "--json", scenario)
    from fabricjax.config import FabricKind
    from fabricjax.core.errors import ScenarioError
    from fabricjax.core.output import STDOUT, write_json
    from fabricjax.fabric.bom import baseline_designs, bom, scenario_bom
    from fabricjax.fabric.build import build, summary
    from fabricjax.fabric.clos import fabric_summary
    from fabricjax.report.topo import bom_lines, bom_table, graph_topo_table, topo_table

    clos = config.fabric.kind == FabricKind.CLOS
    try:   # the Clos's counts follow from its geometry: no link arrays for 131k GPUs
        counts = fabric_summary(config.fabric) if clos else summary(config, build(config))
        baselines = None
        if clos:
            baselines = baseline_designs(config.fabric, config.bom.overrides())
            designs = [bom(config.fabric, overrides=config.bom.overrides()),
                       *baselines.designs]
        else:
            designs = [scenario_bom(config)]
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    note = baselines.note if baselines is not None else None
    if json_path is not None:   # first: a closed pipe on stdout must not cost the file
        _writing("--json", lambda: write_json(
            {**counts, "bom": designs[0], "baselines": designs[1:], "baseline_note": note},
            json_path))
    if json_path == STDOUT:     # standard output carries the JSON alone
        return
    if clos:
        out.print(topo_table(counts))
    else:
        out.print(graph_topo_table(counts, config.fabric.kind))
    if "modules" in designs[0]:
        out.print(bom_table(designs))
    for line in bom_lines(designs, note):
        out.print(f"  {escape(line)}", highlight=False)
    if json_path is not None:
        out.print(f"wrote {escape(_printable(json_path))}", highlight=False)


@app.command()
def export(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.",
                                             metavar="SCENARIO.yaml")],
    output: Annotated[str, typer.Argument(
        help="File to write: .csv (src,dst,bytes,start) or htsim's connection matrix "
        "(any other name, e.g. .cm).", metavar="OUT")],
    item: Annotated[Optional[str], typer.Option(
        metavar="NAME", help="The workload item or job to export (default: the only one).")
    ] = None,
    phase: Annotated[Optional[int], typer.Option(
        metavar="K", help="Which phase, for collectives with several different ones "
        "(halving-doubling steps, hierarchical rings); a ring's one repeated step is 0.")
    ] = None,
) -> None:
    """Write one phase of a workload item's flows as a traffic matrix (GPU ids of the fabric,
    every flow including those inside servers), for htsim or `collective: traffic`."""
    config = _load(scenario)
    _check_output(output, "OUT", scenario)
    from fabricjax.core.errors import ScenarioError
    from fabricjax.workload.build import export_matrix
    from fabricjax.workload.traffic import write_csv, write_htsim

    try:
        matrix = export_matrix(config, item, phase)
        if output.lower().endswith(".csv"):
            write_csv(Path(output), matrix, field="OUT")
        else:
            write_htsim(Path(output), matrix, config.fabric.gpus, field="OUT")
    except ScenarioError as error:
        _fail(str(error.with_source(str(scenario))))
    if output != "-":           # standard output carries the matrix alone
        out.print(f"wrote {matrix.num_flows:,} flows of {escape(matrix.source)} to "
                  f"{escape(_printable(output))}", highlight=False)


@app.command()
def cache(
    cache_dir: Annotated[Optional[str], typer.Option(
        "--cache-dir", metavar="DIR", help="The cache folder to look at (default: "
        "$FABRICJAX_CACHE_DIR, else ~/.cache/fabricjax/xla).")] = None,
    clear: Annotated[bool, typer.Option(
        "--clear", help="Delete every compiled program in it.")] = False,
) -> None:
    """Where the compilation cache is, how many programs and bytes it holds; --clear empties
    it (the next run compiles afresh)."""
    from fabricjax.core.cache import (ENV_DIR, cache_dir as chosen_dir, cache_usage,
                                      clear_cache, max_bytes)
    from fabricjax.core.units import format_bytes

    folder = chosen_dir(cache_dir)
    if folder is None:
        out.print(f"compilation cache: off (--cache-dir or {ENV_DIR} says off)",
                  highlight=False)
        return
    if clear:
        removed = clear_cache(folder)
        out.print(f"cleared {removed:,} compiled programs from {escape(_printable(folder))}",
                  highlight=False)
        return
    programs, size = cache_usage(folder)
    out.print(f"compilation cache: {escape(_printable(folder))}: {programs:,} programs, "
              f"{format_bytes(size)} (bounded at {format_bytes(max_bytes())})", highlight=False)


@app.command()
def schema() -> None:
    """Print the scenario JSON Schema (every field, policy sections included), for editors:
    scenarios start with `# yaml-language-server: $schema=schema.json`."""
    from fabricjax.policies import schema_text

    sys.stdout.write(schema_text())


def main() -> None:
    try:
        app()
    except BrokenPipeError:  # `fabricjax analyze ... | head`: the reader left; not an error
        sys.stderr.close()
        os._exit(0)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as error:  # a bug, not bad input: say so briefly
        if os.environ.get("FABRICJAX_DEBUG"):
            raise
        err.print(f"[bold red]internal error:[/] {type(error).__name__}: {escape(str(error))} "
                  "(set FABRICJAX_DEBUG=1 for the traceback)", highlight=False, soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
