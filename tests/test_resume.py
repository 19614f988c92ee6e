"""Long studies that lose nothing: streamed results, `--resume` after a kill.

Contract checked here: a failure study and a sweep hand every finished failure set / point
over as soon as it is computed, in order; resumed from any prefix of what they streamed they
compute only the rest and give the same report, rows and files as an uninterrupted run (the
measured seconds aside, which no two runs share); a stream written for another scenario or
other options is refused with one line. Fault injection: the real command is killed with
SIGKILL at random moments and resumed; the final outputs must equal an uninterrupted run's,
with no row lost or repeated (a few kills here, 20 + 20 in the slow run).
"""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fabricjax.core.stream import StreamError, record_line
from fabricjax.report.json import report_dict
from fabricjax.scenario import parse_scenario
from fabricjax.study.analyze import analyze
from fabricjax.sweeps import (PointResult, SweepStreams, parse_sets, read_sweep_stream,
                              run_sweep, sweep_header, sweep_points)
from test_cli import _env, assert_one_line_error, fabricjax

STUDY = {
    "name": "study", "seed": 2,
    "fabric": {"gpus": 16, "planes": 2, "radix": 8},
    "workload": [{"name": "perm", "collective": "permutation", "size": "4MB"},
                 {"name": "hd", "collective": "all-reduce", "algorithm": "halving-doubling",
                  "size": "8MB"}],
    "policies": ["ecmp", "spray"], "spray": {"evs": 8}, "solver": {"progressive": False},
    "failures": {"samples": 10, "links": {"random": 2}, "nic_ports": {"random": 1},
                 "chunk": 4},
}


def test_a_failure_study_resumed_from_any_prefix_is_the_same_study():
    """Records stream a chunk at a time, in (policy, item, set) order; resumed from a prefix
    (inside a chunk, inside the second item, all) the study solves
    only the sets after it and its report is the same, byte for byte."""
    scenario = parse_scenario(STUDY)
    chunks: list[list[dict]] = []
    full = analyze(scenario, on_failure_records=chunks.append)
    records = [r for chunk in chunks for r in chunk]
    assert records == full.failures.records                  # streamed = reported, in order
    assert [len(c) for c in chunks[:3]] == [4, 4, 2]          # a chunk at a time
    text = json.dumps(report_dict(full))
    for k in (3, 13, len(records)):
        again: list[dict] = []
        report = analyze(scenario, failure_records=records[:k],
                         on_failure_records=lambda new: again.extend(new))
        assert again == records[k:], k                         # nothing lost, nothing twice
        assert json.dumps(report_dict(report)) == text, k
    with pytest.raises(StreamError, match="is not failure set 1 of ecmp on perm"):
        analyze(scenario, failure_records=[records[0], records[2]])


def _fake_analyze(scenario, progress=None):
    records = [SimpleNamespace(policy=p, workload="w", gpus=16, p100_utilisation=1.0 +
                               scenario.seed / 7, p99_utilisation=1.0, completion_s=None,
                               slowdown=None, fabric_slowdown=None,
                               busbw_gbps=0.1 * scenario.seed, status="ok")
               for p in scenario.policies]
    return SimpleNamespace(records=records, failures=None)


def test_a_sweep_resumed_from_its_stream_is_the_same_sweep(tmp_path):
    """Points stream to the JSON Lines file and the CSV as they finish; read back (a cut last
    line dropped), a resumed sweep runs only the points left and writes the same rows."""
    base = parse_scenario({k: v for k, v in STUDY.items() if k != "failures"})
    axes = parse_sets(["seed=0,1,2,3,4", "spray.evs=8,16"])
    points = sweep_points(base, axes)
    device = {"device": "cpu", "devices_used": 1}
    first = sweep_header(base, axes, points, device)
    jsonl, table = tmp_path / "s.jsonl", tmp_path / "s.csv"
    streams = SweepStreams.open(points, first, jsonl=str(jsonl), csv_path=str(table), done=[],
                                resumed=False)
    full = run_sweep(points, analyze_fn=_fake_analyze, on_point=streams)
    streams.close()
    whole_csv, whole_jsonl = table.read_text(), jsonl.read_text()
    lines = whole_jsonl.splitlines(keepends=True)
    jsonl.write_text("".join(lines[:5]) + lines[5][:40])          # killed writing point 4
    done = read_sweep_stream(jsonl, first, points)
    assert [d.index for d in done] == [0, 1, 2, 3]
    assert jsonl.read_text() == "".join(lines[:5])                 # the cut line is gone
    streams = SweepStreams.open(points, first, jsonl=str(jsonl), csv_path=str(table),
                                done=done, resumed=True)
    seen: list[int] = []

    def on_point(result):
        seen.append(result.index)
        streams(result)

    resumed = run_sweep(points, analyze_fn=_fake_analyze, done=done, on_point=on_point)
    streams.close()
    assert seen == list(range(4, 10))                               # only the points left
    assert resumed.rows == full.rows
    assert resumed.wall_s[:4] == full.wall_s[:4]                    # kept from the stream
    assert _without_times_csv(table.read_text()) == _without_times_csv(whole_csv)
    assert [json.loads(x)["point"] for x in jsonl.read_text().splitlines()[1:]] == list(
        range(10))
    other = sweep_header(base, parse_sets(["seed=0,1,2,3,4", "spray.evs=8,32"]),
                         points, device)
    with pytest.raises(StreamError, match=r"in the options, sets\[1\].values\[1\]\[0\] is "
                                          "'16' there and '32' here"):
        read_sweep_stream(jsonl, other, points)
    with pytest.raises(StreamError, match="not points 0..1"):
        run_sweep(points, analyze_fn=_fake_analyze, done=[done[0], done[2]])


def _without_times_csv(text: str) -> list[list[str]]:
    rows = list(csv.reader(text.splitlines()))
    return [row[:-1] for row in rows]         # point_wall_s is the last column


def _without_times_json(path: Path) -> dict:
    data = json.loads(path.read_text())
    data.pop("total_s")
    for point in data["points"]:
        point.pop("wall_s")
    return data


# --------------------------------------------------------------------------- the command

SWEEP_YAML = textwrap.dedent("""\
    name: sweep
    seed: 2
    fabric: {gpus: 16, planes: 2, radix: 8}
    workload:
      - {collective: permutation, size: 4MB}
    policies: [spray]
    spray: {evs: 8}
    solver: {progressive: false}
    failures: {samples: 32, links: {random: 2}, chunk: 8}
    """)
# 60 points of 25-30 ms each after a start of about 4 s (JAX, the first compile): measured
SWEEP_ARGS = ["sweep", "s.yaml", "-q", "--set", "seed=" + ",".join(map(str, range(60))),
              "--csv", "out.csv", "--json", "out.json"]
# 600 sets in 300 chunks of 2 (a record streamed every 2-6 ms, measured) after a start of
# about 4 s
STUDY_YAML = SWEEP_YAML.replace("name: sweep", "name: study").replace(
    "failures: {samples: 32, links: {random: 2}, chunk: 8}",
    "failures: {samples: 600, links: {random: 2}, nic_ports: {random: 1}, chunk: 2}")
STUDY_ARGS = ["analyze", "s.yaml", "-q", "--json", "out.json"]


def test_resume_refuses_a_changed_scenario_with_one_line(tmp_path):
    """A stream written for another scenario or other options is refused before anything is
    computed, naming the field, and left as it was."""
    from fabricjax.core.stream import StreamWriter
    from fabricjax.scenario import load_scenario
    from fabricjax.study.analyze import failure_header

    (tmp_path / "s.yaml").write_text(STUDY_YAML)
    StreamWriter.create(tmp_path / "out.jsonl", record_line(failure_header(
        load_scenario(tmp_path / "s.yaml")))).close()
    before = (tmp_path / "out.jsonl").read_bytes()
    (tmp_path / "s.yaml").write_text(STUDY_YAML.replace("seed: 2", "seed: 3"))
    proc = fabricjax(*STUDY_ARGS, "--resume", cwd=tmp_path)
    assert_one_line_error(proc, "--resume: out.jsonl was written for other inputs: in the "
                          "scenario, seed is 2 there and 3 here")
    assert (tmp_path / "out.jsonl").read_bytes() == before           # left as it was
    (tmp_path / "s.yaml").write_text(STUDY_YAML)
    proc = fabricjax(*STUDY_ARGS, "--samples", "8", "--resume", cwd=tmp_path)
    assert_one_line_error(proc, "failures.samples is 600 there and 8 here")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "s.yaml"]
    proc = fabricjax("analyze", "s.yaml", "--resume", cwd=tmp_path)
    assert_one_line_error(proc, "--resume: needs --json naming a file")
    proc = fabricjax("sweep", "s.yaml", "--set", "seed=1,2", "--resume", cwd=tmp_path)
    assert_one_line_error(proc, "--resume: needs a file to resume from")
    proc = fabricjax("sweep", "s.yaml", "--set", "seed=1,2", "--csv", "out.jsonl", "--json",
                     "x.json", "--jsonl", "out.jsonl", cwd=tmp_path)
    assert_one_line_error(proc, "already writes to the same file")


def _run(args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=300)


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _started(args, cwd, stream: Path) -> tuple[subprocess.Popen, float]:
    """Start the command; return it once `stream` holds one more line than before (its first
    new record), and the seconds that took (the start: JAX, the first compile)."""
    before = _lines(stream) or 1                      # a fresh stream's header is no record
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", *args], cwd=cwd, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None and _lines(stream) <= before:
        time.sleep(0.005)
    return proc, time.perf_counter() - began


def _stream_state(path: Path) -> tuple[int, bool]:
    """(whole records after the header, whether the last line is cut short)."""
    if not path.exists():
        return 0, False
    data = path.read_bytes()
    return max(0, data.count(b"\n") - 1), bool(data) and not data.endswith(b"\n")


def kill_and_resume(kind: str, root: Path, cycles: int, seed: int, *,
                    kill_resumed_every: int = 0) -> dict:
    """`cycles` times: start `kind` ("sweep" or "study") afresh, SIGKILL it at a random moment
    while it streams (uniform over 1.1 times the time an uninterrupted run took from its first
    record to its last, so that a few kills come after the last record), resume it to the end
    and check the outputs against the uninterrupted run's. Every `kill_resumed_every`-th cycle
    the first resumed run is killed too (appending after a trimmed stream)."""
    rng = random.Random(seed)
    yaml_text, args = (SWEEP_YAML, SWEEP_ARGS) if kind == "sweep" else (STUDY_YAML, STUDY_ARGS)
    reference = root / "reference"
    reference.mkdir()
    (reference / "s.yaml").write_text(yaml_text)
    proc, _ = _started(args, reference, reference / "out.jsonl")
    first = last = time.perf_counter()
    lines = _lines(reference / "out.jsonl")
    while proc.poll() is None:                        # the time of the last record
        if _lines(reference / "out.jsonl") > lines:
            lines, last = _lines(reference / "out.jsonl"), time.perf_counter()
        time.sleep(0.005)
    assert proc.returncode == 0
    window = last - first                             # from the first record to the last
    stats = {"kills": 0, "finished_first": 0, "records_at_kill": [], "cut_lines": 0,
             "window_s": round(window, 2)}
    for cycle in range(cycles):
        work = root / f"run{cycle}"
        work.mkdir()
        (work / "s.yaml").write_text(yaml_text)
        rounds = 2 if kill_resumed_every and cycle % kill_resumed_every == 0 else 1
        for k in range(rounds):
            proc, _ = _started(args + (["--resume"] if k else []), work, work / "out.jsonl")
            try:
                proc.wait(timeout=rng.uniform(0.0, 1.1) * window)
                stats["finished_first"] += 1
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=60)
                stats["kills"] += 1
                records, cut = _stream_state(work / "out.jsonl")
                stats["records_at_kill"].append(records)
                stats["cut_lines"] += cut
        records, _ = _stream_state(work / "out.jsonl")
        proc = _run(args + ["--resume"], work)
        assert proc.returncode == 0, proc.stderr
        # every whole record was taken, none computed again: at most what was in flight is
        said = (f"({records} from out.jsonl)" if kind == "sweep" else
                f"resumed: {records:,} of ")
        assert said in proc.stdout, (records, proc.stdout[-500:])
        _same_outputs(kind, reference, work)
    return stats


def _same_outputs(kind: str, reference: Path, work: Path) -> None:
    ref_lines = (reference / "out.jsonl").read_text().splitlines()
    lines = (work / "out.jsonl").read_text().splitlines()
    assert len(lines) == len(ref_lines)                       # no record lost or repeated
    if kind == "study":
        assert (work / "out.json").read_bytes() == (reference / "out.json").read_bytes()
        assert lines == ref_lines
        return
    assert [json.loads(x)["point"] for x in lines[1:]] == list(range(len(lines) - 1))
    for a, b in zip(lines, ref_lines):
        a, b = json.loads(a), json.loads(b)
        a.pop("wall_s", None)
        b.pop("wall_s", None)
        assert a == b
    assert _without_times_csv((work / "out.csv").read_text()) == _without_times_csv(
        (reference / "out.csv").read_text())
    assert _without_times_json(work / "out.json") == _without_times_json(
        reference / "out.json")


# each kind is a killed process and two more, 14 s with a cold compilation cache: the quick
# run keeps the study; `make test-slow` runs the sweep too
@pytest.mark.parametrize("kind", [pytest.param("sweep", marks=pytest.mark.slow), "study"])
def test_a_killed_run_resumes_to_the_same_outputs(tmp_path, kind):
    """A SIGKILL at a random moment while the run streams, then a resume to the end: the
    same outputs as an uninterrupted run, no row lost or repeated."""
    stats = kill_and_resume(kind, tmp_path, cycles=1, seed=int(time.time()))
    assert stats["kills"] + stats["finished_first"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sweep", "study"])
def test_twenty_random_kills_each_resume_to_the_same_outputs(tmp_path, kind):
    """The target: 20 runs killed at random moments, each resumed to the end (every
    fourth also killed again while resuming), all with the outputs of an uninterrupted run.
    Prints what the kills hit (README, "Long runs")."""
    seed = int(os.environ.get("FABRICJAX_KILL_SEED", time.time()))
    stats = kill_and_resume(kind, tmp_path, cycles=20, seed=seed, kill_resumed_every=4)
    print(f"\n{kind}: seed {seed}, streaming window {stats['window_s']} s, {stats['kills']} "
          f"kills, {stats['finished_first']} runs "
          f"finished before their kill; whole records in the stream after each kill: "
          f"{stats['records_at_kill']}; cut last lines: {stats['cut_lines']}; 20 of 20 "
          "resumed to the uninterrupted run's outputs")
    assert stats["kills"] >= 15          # the random moments fall inside the run
