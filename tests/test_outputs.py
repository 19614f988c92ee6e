"""Outputs never destroy what they point at, and streams keep whole lines.

Contract checked here: `core.output.write_output` renames a temporary file over a regular file
only (a symlink's target gets the new content, the link stays a link), writes straight into a
FIFO, a character device and ``-``, and reports a failed write (ENOSPC on /dev/full) as one
line; `core.stream.read_stream` ignores and truncates a last line cut short, refuses a corrupt
line in the middle, and `check_header` names what differs. The same through the real command
(`topo --json`, which needs no JAX, and `export`), the traffic writers and the plots.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from fabricjax.core.output import (OutputError, check_writable, output_kind, write_json,
                                   write_output, write_text)
from fabricjax.core.stream import (StreamError, StreamWriter, beside, check_header, header,
                                   read_stream, record_line)
from test_cli import TINY, assert_one_line_error, fabricjax, load_json_strict

FULL = Path("/dev/full")


def _read_fifo(path: Path, into: list) -> threading.Thread:
    def read():
        with open(path, "rb") as handle:
            into.append(handle.read())
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- the writer

def test_a_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    path = tmp_path / "out.json"
    write_text("one\n", path)
    assert path.read_text() == "one\n" and output_kind(path) == "file"
    path.chmod(0o640)
    write_json({"a": 1}, path)
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]   # no temporary left


def test_a_symlink_stays_a_link_and_its_target_gets_the_content(tmp_path):
    (tmp_path / "data").mkdir()
    target = tmp_path / "data" / "real.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text("new\n", link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["real.json"]
    dangling = tmp_path / "dangling.json"        # a link to a file not written yet
    dangling.symlink_to(tmp_path / "data" / "later.json")
    write_text("later\n", dangling)
    assert dangling.is_symlink() and (tmp_path / "data" / "later.json").read_text() == "later\n"


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    got: list = []
    reader = _read_fifo(fifo, got)
    write_json({"a": [1, 2]}, fifo)
    reader.join(10)
    assert json.loads(got[0]) == {"a": [1, 2]}
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.json"]


def test_stdout_gets_the_text(capsys):
    write_text("to stdout\n", "-")
    assert capsys.readouterr().out == "to stdout\n"


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_a_full_device_is_one_line_and_stays_a_device():
    with pytest.raises(OutputError) as info:
        write_json({"a": 1}, FULL)
    assert str(info.value) == "/dev/full: cannot write (No space left on device)"
    assert stat.S_ISCHR(os.stat(FULL).st_mode)
    check_writable(FULL)                 # accepted before computing; the write says why not
    assert output_kind(FULL) == "stream" and output_kind("/dev/null") == "stream"


def test_what_can_never_be_written_is_refused_before_computing(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("x")
    (tmp_path / "alias.yaml").symlink_to(scenario)
    for path, fragment in ((tmp_path, "directory"), (f"{tmp_path}/new/", "names a folder"),
                           (tmp_path / "no" / "x.json", "does not exist"),
                           (tmp_path / "alias.yaml", "input scenario")):
        with pytest.raises(OSError, match=fragment):
            check_writable(path, protect=(scenario,))
    with pytest.raises(OSError, match="directory"):
        write_text("x", tmp_path)
    check_writable("-")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    check_writable(fifo)                 # not opened: that would wait for a reader


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old\n")

    def broken(handle):
        handle.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OutputError, match=r"out.json: cannot write \(No space left on device\)"):
        write_output(path, broken)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


# --------------------------------------------------------------------------- streams

HEAD = header("test stream", {"fabric": {"gpus": 16}, "seed": 1}, {"sets": ["seed=1,2"]})


def _stream(path: Path, records: list[dict]) -> None:
    writer = StreamWriter.create(path, record_line(HEAD))
    for record in records:
        writer.write_records([record])
    writer.close()


def test_a_cut_last_line_is_ignored_and_truncated(tmp_path):
    path = tmp_path / "s.jsonl"
    _stream(path, [{"i": 0}, {"i": 1}])
    whole = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(b'{"i": 2, "rows": [1.5, ')          # a kill in the middle of a write
    head, records = read_stream(path, HEAD)
    assert head == HEAD and records == [{"i": 0}, {"i": 1}]
    assert path.read_bytes() == whole                      # truncated to the last whole line
    with open(path, "ab") as handle:
        handle.write(b'{"i": 2}')                         # whole JSON, but no newline yet
    assert read_stream(path)[1] == [{"i": 0}, {"i": 1}] and path.read_bytes() == whole
    writer = StreamWriter.append(path)                     # appending goes on cleanly
    writer.write_records([{"i": 2}])
    writer.close()
    assert read_stream(path)[1] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_a_corrupt_line_in_the_middle_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(record_line(HEAD) + "not json\n" + record_line({"i": 1}))
    with pytest.raises(StreamError, match="line 2 is not JSON"):
        read_stream(path)
    assert read_stream(tmp_path / "missing.jsonl") == (None, [])


def test_a_mismatched_header_names_what_differs_and_leaves_the_file(tmp_path):
    path = tmp_path / "s.jsonl"
    _stream(path, [{"i": 0}])
    with open(path, "ab") as handle:
        handle.write(b'{"i": 1')
    before = path.read_bytes()
    other = header("test stream", {"fabric": {"gpus": 32}, "seed": 1}, {"sets": ["seed=1,2"]})
    with pytest.raises(StreamError) as info:
        read_stream(path, other)
    assert str(info.value) == (f"{path} was written for other inputs: in the scenario, "
                               "fabric.gpus is 16 there and 32 here")
    assert path.read_bytes() == before                     # refused: not even trimmed
    options = header("test stream", {"fabric": {"gpus": 16}, "seed": 1}, {"sets": ["seed=3"]})
    with pytest.raises(StreamError, match=r"in the options, sets\[0\] is 'seed=1,2' there"):
        check_header(HEAD, options, path)
    with pytest.raises(StreamError, match="by fabricjax '0.0.1', this is"):
        check_header({**HEAD, "fabricjax": "0.0.1"}, HEAD, path)
    with pytest.raises(StreamError, match="is a stream of 'other', not of test stream"):
        check_header({**HEAD, "fabricjax_stream": "other"}, HEAD, path)
    with pytest.raises(StreamError, match="not a fabricjax stream"):
        check_header({"i": 0}, HEAD, path)


def test_streams_go_beside_files_only(tmp_path):
    assert beside(tmp_path / "out.json") == f"{tmp_path}/out.jsonl"
    assert beside(tmp_path / "out.csv") == f"{tmp_path}/out.jsonl"
    assert beside(tmp_path / "report") == f"{tmp_path}/report.jsonl"
    assert beside("-") is None and beside("/dev/null") is None


def test_a_stream_into_a_fifo_and_a_full_device(tmp_path):
    fifo = tmp_path / "rows"
    os.mkfifo(fifo)
    got: list = []
    reader = _read_fifo(fifo, got)
    writer = StreamWriter.create(fifo, record_line(HEAD))
    writer.write_records([{"i": 0}, {"i": 1}])
    writer.close()
    reader.join(10)
    assert [json.loads(line) for line in got[0].splitlines()] == [HEAD, {"i": 0}, {"i": 1}]
    if FULL.exists():
        with pytest.raises(OutputError, match="No space left on device"):
            StreamWriter.create(FULL, record_line(HEAD))
        assert stat.S_ISCHR(os.stat(FULL).st_mode)


# --------------------------------------------------------------------------- the command

@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full")
def test_cli_json_to_a_full_device_is_one_line_exit_2(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = fabricjax("topo", "tiny.yaml", "--json", "/dev/full", cwd=tmp_path)
    line = assert_one_line_error(proc, "--json /dev/full: cannot write (No space left on device)")
    assert "wrote" not in proc.stdout, line
    assert stat.S_ISCHR(os.stat(FULL).st_mode)


def test_cli_json_through_a_symlink_a_fifo_and_stdout(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    (tmp_path / "real.json").write_text("stale\n")
    (tmp_path / "link.json").symlink_to("real.json")
    proc = fabricjax("topo", "tiny.yaml", "--json", "link.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.json").is_symlink()
    assert load_json_strict(tmp_path / "real.json")["gpus"] == 64

    os.mkfifo(tmp_path / "pipe.json")
    got: list = []
    reader = _read_fifo(tmp_path / "pipe.json", got)
    proc = fabricjax("topo", "tiny.yaml", "--json", "pipe.json", cwd=tmp_path)
    reader.join(30)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(got[0])["gpus"] == 64
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe.json").st_mode)

    proc = fabricjax("topo", "tiny.yaml", "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gpus"] == 64          # stdout carries the JSON alone


def test_export_and_plots_write_through_a_symlink(tmp_path):
    from fabricjax.report.plots import plot_sweep
    from fabricjax.workload.traffic import TrafficMatrix, load_traffic, write_csv

    (tmp_path / "real.csv").write_text("stale\n")
    (tmp_path / "m.csv").symlink_to("real.csv")
    matrix = TrafficMatrix(np.array([0, 1]), np.array([1, 0]), np.array([5.0, 7.0]),
                           np.zeros(2))
    write_csv(tmp_path / "m.csv", matrix)
    assert (tmp_path / "m.csv").is_symlink()
    np.testing.assert_array_equal(load_traffic(tmp_path / "real.csv", "csv", 2, "f").size, [5, 7])

    (tmp_path / "real.png").write_bytes(b"stale")
    (tmp_path / "fig.png").symlink_to("real.png")
    rows = [{"x": x, "policy": "spray", "workload": "w", "p100_utilisation": 1.0 + x}
            for x in (1, 2)]
    plot_sweep(rows, ["x"], tmp_path / "fig.png", metric="p100_utilisation")
    assert (tmp_path / "fig.png").is_symlink()
    assert (tmp_path / "real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "m.csv", "real.csv",
                                                          "real.png"]


def test_cli_export_to_stdout_and_a_full_device(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.replace(
        "  - {name: ring, collective: all-reduce, size: 16MB, order: random}\n", ""))
    proc = fabricjax("export", "tiny.yaml", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Nodes 64\nConnections 64\n")
    if FULL.exists():
        proc = fabricjax("export", "tiny.yaml", "/dev/full", cwd=tmp_path)
        assert_one_line_error(proc, "/dev/full: cannot write (No space left on device)")
        assert stat.S_ISCHR(os.stat(FULL).st_mode)
