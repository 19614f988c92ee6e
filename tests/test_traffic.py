"""Traffic-matrix import and export: each format loads, round trips are exact, and every bad
file is one ScenarioError naming the file, the line (text) or index (npz), and what is allowed.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fabricjax.workload import traffic_csv, traffic_htsim, traffic_matrix, traffic_npz
from fabricjax.core.errors import ScenarioError
from fabricjax.workload.traffic import TrafficMatrix, load_traffic, write_csv, write_htsim

DATA = Path(__file__).parent / "data"
FIELD = "workload[0].file"
ARRAYS = ("src", "dst", "size", "start")

# The four flows of tests/data/traffic_small.{csv,cm}.
SMALL = dict(src=[0, 1, 2, 3], dst=[1, 2, 3, 0], size=[1e6, 2e6, 4e6, 2.0**30],
             start=[0.0, 0.5e-6, 1e-6, 0.0])


def assert_same(a: TrafficMatrix, b: TrafficMatrix | dict) -> None:
    for name in ARRAYS:
        got, want = getattr(a, name), (b[name] if isinstance(b, dict) else getattr(b, name))
        np.testing.assert_array_equal(got, np.asarray(want, dtype=got.dtype), err_msg=name)


def load(path: Path, fmt: str = "auto", gpus: int = 4) -> TrafficMatrix:
    return load_traffic(path, fmt, gpus, FIELD)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def refused(path: Path, fmt: str = "auto", gpus: int = 4, *expected: str) -> str:
    """Load `path`, expecting a ScenarioError whose one-line message names the file, the
    field and every string of `expected`; return the message."""
    with pytest.raises(ScenarioError) as info:
        load(path, fmt, gpus)
    err, text = info.value, str(info.value)
    assert err.field == FIELD
    assert str(path) in text, text
    assert "\n" not in text and "Traceback" not in text and 'File "' not in text, text
    for part in expected:
        assert part in text, f"{part!r} not in {text!r}"
    return text


# ------------------------------------------------------------------------------ formats

@pytest.mark.parametrize("name, fmt", [("traffic_small.csv", "auto"), ("traffic_small.csv", "csv"),
                                       ("traffic_small.cm", "auto"), ("traffic_small.cm", "htsim")])
def test_samples_load(name, fmt):
    matrix = load(DATA / name, fmt)
    assert_same(matrix, SMALL)
    assert matrix.num_flows == 4 and matrix.source == name
    assert matrix.src.dtype == np.int64 and matrix.size.dtype == np.float64
    assert not matrix.src.flags.writeable and not matrix.start.flags.writeable


def test_csv_without_header_or_start(tmp_path):
    matrix = load(write(tmp_path, "t.csv", "0,1,100\n\n# note\n2,3,5e3  # trailing comment\n"))
    assert_same(matrix, dict(src=[0, 2], dst=[1, 3], size=[100, 5000], start=[0, 0]))


def test_csv_blank_lines_with_spaces_and_form_feeds(tmp_path):
    matrix = load(write(tmp_path, "t.csv", "0,1,5\n   \n\t\n1,0,6\f\n"))
    assert_same(matrix, dict(src=[0, 1], dst=[1, 0], size=[5, 6], start=[0, 0]))


def test_csv_header_names_columns_in_any_order(tmp_path):
    text = '"start","size","dst","src"\r\n1e-6,4KiB,0,3\r\n0,7,2,1\r\n'
    matrix = load(write(tmp_path, "t.csv", "\ufeff" + text))     # BOM, CRLF, quotes, units
    assert_same(matrix, dict(src=[3, 1], dst=[0, 2], size=[4096, 7], start=[1e-6, 0]))


def test_csv_fast_and_line_by_line_readers_agree(monkeypatch):
    rng = np.random.default_rng(1)
    rows = [f"{s}, {d} ,{float(b)!r},{float(t)!r}" for s, d, b, t in
            zip(rng.integers(0, 4, 50), rng.integers(4, 8, 50), rng.random(50) * 1e9 + 1,
                rng.random(50))]
    text = "src,dst,bytes,start\n# c\n" + "\n".join(rows) + "\n"
    slow = traffic_csv._parse_csv_lines(text, 8, None)
    with monkeypatch.context() as patch:            # the fast path must read this file alone
        patch.setattr(traffic_csv, "_parse_csv_lines", None)
        fast = traffic_csv.parse_csv(text, 8, None)
    for a, b in zip(fast[:4], slow[:4]):
        np.testing.assert_array_equal(a, b)
    assert fast[4](3) == slow[4](3) == "line 6"


def test_npz_loads_with_aliases_and_dtypes(tmp_path):
    path = tmp_path / "t.npz"
    np.savez(path, src=np.array([0, 3], np.uint32), dst=np.array([1, 2], np.int16),
             bytes=np.array([10, 20], np.float32))
    assert_same(load(path), dict(src=[0, 3], dst=[1, 2], size=[10, 20], start=[0, 0]))
    np.savez_compressed(path, src=[0], dst=[1], size=[5.5], start=[2e-3])
    assert_same(load(path, "npz"), dict(src=[0], dst=[1], size=[5.5], start=[2e-3]))


def test_auto_sniffs_content_when_the_suffix_says_nothing(tmp_path):
    htsim = write(tmp_path, "m.txt", (DATA / "traffic_small.cm").read_text())
    csv = write(tmp_path, "m.dat", (DATA / "traffic_small.csv").read_text())
    npz = tmp_path / "m.npz"
    np.savez(npz, src=[0], dst=[1], size=[5])
    packed = write(tmp_path, "m.bin", npz.read_bytes())
    assert_same(load(htsim), SMALL)
    assert_same(load(csv), SMALL)
    assert load(packed).num_flows == 1


def test_htsim_as_written_by_htsim_save_and_generators(tmp_path):
    # htsim's own save() writes no ids and fractional starts; the generators write ids.
    text = "Nodes 8\nConnections 2\n0->5 start 1500.5 size 100\n5->0 start 0 size 7\n"
    matrix = load(write(tmp_path, "s.cm", text), gpus=8)
    assert_same(matrix, dict(src=[0, 5], dst=[5, 0], size=[100, 7], start=[1500.5e-12, 0]))


def test_htsim_fast_and_line_by_line_readers_agree(monkeypatch):
    rng = np.random.default_rng(2)
    lines = [f"{s}->{s + 1} id {i + 1} start {t} size {b}" for i, (s, t, b) in
             enumerate(zip(rng.integers(0, 7, 40), rng.integers(0, 10**9, 40),
                           rng.integers(1, 10**6, 40)))]
    text = "Nodes 8\nConnections 40\n" + "\n".join(lines) + "\n"
    slow = traffic_htsim._parse_htsim_lines(text, 8, None)
    with monkeypatch.context() as patch:
        patch.setattr(traffic_htsim, "_parse_htsim_lines", None)
        fast = traffic_htsim.parse_htsim(text, 8, None)
    for a, b in zip(fast[:4], slow[:4]):
        np.testing.assert_array_equal(a, b)
    assert fast[4](0) == slow[4](0) == "line 3"


def test_htsim_ignores_priorities_and_unused_triggers():
    # tests/data/traffic_small.cm has prio, send_done_trigger and a trigger definition.
    assert_same(load(DATA / "traffic_small.cm"), SMALL)


def test_large_csv_loads(tmp_path):
    n = 200_000
    rng = np.random.default_rng(0)
    src = rng.integers(0, 1024, n)
    dst = (src + rng.integers(1, 1024, n)) % 1024
    table = np.column_stack([src, dst, rng.integers(1, 10**9, n)])
    path = tmp_path / "big.csv"
    np.savetxt(path, table, fmt="%d", delimiter=",", header="src,dst,bytes", comments="")
    matrix = load(path, gpus=1024)
    assert matrix.num_flows == n
    np.testing.assert_array_equal(matrix.size, table[:, 2])


# ---------------------------------------------------------------------------- round trips

def test_htsim_round_trip_is_exact(tmp_path):
    rng = np.random.default_rng(3)
    n = 500
    src = rng.integers(0, 64, n)
    matrix = TrafficMatrix(src, (src + rng.integers(1, 64, n)) % 64,
                           rng.integers(1, 2**31 - 1, n).astype(float),
                           rng.integers(0, 10**12, n) / 1e12)   # whole picoseconds
    path = tmp_path / "out.cm"
    write_htsim(path, matrix, nodes=64)
    again = load(path, gpus=64)
    assert_same(again, matrix)
    write_htsim(tmp_path / "again.cm", again, nodes=64)
    assert (tmp_path / "again.cm").read_text() == path.read_text()
    assert path.read_text().startswith("Nodes 64\nConnections 500\n")


def test_htsim_export_rounds_to_picoseconds_and_whole_bytes(tmp_path):
    matrix = TrafficMatrix([0, 1], [1, 0], [10.2, 3.0], [1.2345678e-7, 0.0])
    write_htsim(tmp_path / "r.cm", matrix, nodes=2)
    again = load(tmp_path / "r.cm", gpus=2)
    np.testing.assert_array_equal(again.size, [11, 3])
    assert abs(again.start[0] - matrix.start[0]) <= 0.5e-12


def test_sample_csv_exported_as_htsim_and_back(tmp_path):
    write_htsim(tmp_path / "small.cm", load(DATA / "traffic_small.csv"), nodes=4)
    assert_same(load(tmp_path / "small.cm"), SMALL)


def test_csv_round_trip_is_exact_for_any_floats(tmp_path):
    rng = np.random.default_rng(4)
    n = 300
    src = rng.integers(0, 16, n)
    matrix = TrafficMatrix(src, (src + 1) % 16, rng.random(n) * 1e12 + 1,
                           np.where(rng.random(n) < 0.2, 0.0, rng.random(n) * 1e-3))
    write_csv(tmp_path / "out.csv", matrix)
    assert_same(load(tmp_path / "out.csv", gpus=16), matrix)


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.cm"
    path.write_text("old")
    matrix = load(DATA / "traffic_small.csv")

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    import fabricjax.core.output

    monkeypatch.setattr(fabricjax.core.output.os, "replace", broken)   # the shared atomic writer
    for writer in (lambda: write_htsim(path, matrix, 4), lambda: write_csv(path, matrix)):
        with pytest.raises(ScenarioError, match="cannot write .No space left on device"):
            writer()
        assert path.read_text() == "old"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.cm"]


def test_write_htsim_refuses_what_htsim_cannot_read(tmp_path):
    path = tmp_path / "x.cm"
    with pytest.raises(ScenarioError, match="nodes >= 4"):
        write_htsim(path, load(DATA / "traffic_small.csv"), nodes=3)
    with pytest.raises(ScenarioError, match="up to 2147483647 bytes"):
        write_htsim(path, TrafficMatrix([0], [1], [2.0**31], [0.0]), nodes=2)
    with pytest.raises(ScenarioError, match="finite start times >= 0"):
        write_csv(path, TrafficMatrix([0], [1], [5.0], [-1.0]))
    assert not path.exists()


# ------------------------------------------------------------------------- refused files

def test_missing_directory_unreadable_empty(tmp_path, monkeypatch):
    refused(tmp_path / "nope.csv", "auto", 4, "file not found")
    refused(tmp_path, "csv", 4, "is a directory")
    refused(write(tmp_path, "empty.csv", b""), "auto", 4, "is empty")
    refused(write(tmp_path, "empty.npz", b""), "auto", 4, "is empty")
    if hasattr(os, "mkfifo"):                       # reading a FIFO would block forever
        os.mkfifo(tmp_path / "pipe.csv")
        refused(tmp_path / "pipe.csv", "auto", 4, "is not a regular file")
    readable = write(tmp_path, "locked.csv", "0,1,5\n")

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    for module in (traffic_matrix, traffic_npz):    # where the files are opened
        monkeypatch.setattr(module, "open", denied, raising=False)
    refused(readable, "auto", 4, "cannot be read (permission denied)")
    np.savez(tmp_path / "locked.npz", src=[0], dst=[1], size=[1])
    refused(tmp_path / "locked.npz", "auto", 4, "permission denied")


def test_unknown_format_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="allowed: auto, csv, npz, htsim"):
        load(write(tmp_path, "t.csv", "0,1,5\n"), "xlsx")


CSV_CASES = [
    # (content, expected parts of the message)
    ("# only a comment\n\n", ["contains no flows", "src,dst,bytes[,start]"]),
    ("src,dst,bytes\n", ["only a header, line 1"]),
    ("0,1\n", ["line 1: 2 columns", "src,dst,bytes[,start]"]),
    ("0,1,5\n1,2,5,0,9\n", ["line 2: 5 columns"]),
    ("0,1,5\n1,2,5,0\n", ["line 2: 4 columns", "the same on every line"]),
    ("0;1;5\n", ["line 1: header names unknown column '0;1;5'", "separated by commas"]),
    ("0,1,5\n1;2;5\n", ["line 2: 1 column;", "separated by commas"]),
    ("src,dst,bytes,start\n0,1,5\n", ["line 2: 3 columns", "as the header says"]),
    ("src,dest,bytes\n0,1,5\n", ["line 1: header names unknown column 'dest'",
                                 "allowed: src, dst, bytes (or size), start"]),
    ("src,dst,size,bytes\n", ["line 1: header names column 'bytes' twice"]),
    ("src,bytes\n0,5\n", ["line 1: header lacks column dst"]),
    ("0,1,5\n\n1,x,5\n", ["line 3: dst 'x' is not an integer GPU id", "4 GPUs"]),
    ("0.5,1,5\n", ["line 1: src '0.5' is not an integer"]),
    ("99999999999999999999,1,5\n", ["line 1: src '99999999999999999999' is not a GPU",
                                     "allowed: 0..3"]),
    ("0,1,5\n0,1,lots\n", ["line 2: bytes 'lots' is not a size", "1GiB"]),
    ("0,1,5,soon\n", ["line 1: start 'soon' is not a number", "seconds"]),
    ("0,1,5\n0,1,-5\n", ["line 2: size -5 bytes", "allowed: 1 .. 2^60"]),
    ("0,1,0\n", ["line 1: size 0 bytes"]),
    ("0,1,nan\n", ["line 1: size nan bytes"]),
    ("0,1,inf\n", ["line 1: size inf bytes"]),
    ("0,1,2e18\n", ["line 1: size 2e+18 bytes", "2^60"]),
    ("0,1,5,-1e-6\n", ["line 1: start -1e-06 s", ">= 0"]),
    ("0,1,5,inf\n", ["line 1: start inf s"]),
    ("#\n0,4,5\n", ["line 2: dst 4 is not a GPU of this fabric",
                    "the job has 4 GPUs (ranks), allowed: 0..3"]),
    ("-1,2,5\n", ["line 1: src -1 is not a GPU"]),
    ("0,1,5\n2,2,5\n", ["line 2: src and dst are both GPU 2", "two different GPUs"]),
    (b"0,1,5\n\xff\xfe\x00garbage", ["line 2: byte 0xff is not UTF-8 text", "CSV"]),
    (b"0,1,5\n1,2,3\n\x00\x01\x02", ["line 3: contains a NUL byte"]),
]


@pytest.mark.parametrize("content, parts", CSV_CASES)
def test_bad_csv_is_refused(tmp_path, content, parts):
    refused(write(tmp_path, "bad.csv", content), "auto", 4, *parts)


def test_binary_given_as_csv(tmp_path):
    np.savez(tmp_path / "m.npz", src=[0], dst=[1], size=[5])
    text = refused(tmp_path / "m.npz", "csv", 4, "is not UTF-8 text")
    assert "line " in text


HTSIM_HEAD = "Nodes 4\nConnections 2\n"
HTSIM_CASES = [
    ("Nodes 4\n", ["contains no flows"]),
    ("Nodes 4\nConnections 0\n", ["contains no flows (Connections 0)"]),
    ("Connections 1\n0->1 start 0 size 5\n", ["line 2: no 'Nodes <count>' line"]),
    ("Nodes 8\nConnections 1\n0->1 start 0 size 5\n",
     ["line 1: Nodes 8 but the job has 4 GPUs", "Nodes 1..4"]),
    ("Nodes 2\nConnections 1\n0->3 start 0 size 5\n", ["line 3: dst 3 is not a node",
                                                       "0..1 (Nodes 2)"]),
    (HTSIM_HEAD + "0->1 start 0 size 5\n",
     ["line 2: Connections 2 but the file has 1 connection line;"]),
    (HTSIM_HEAD + "0->1 start 0 size 5\n1->2 start 0 size 5\n2->3 start 0 size 5\n",
     ["line 5: more connections than 'Connections 2'"]),
    (HTSIM_HEAD + "0->1 id 7 start 0 size 5\n1->2 id 7 start 0 size 5\n",
     ["line 4: id 7 already used at line 3"]),
    (HTSIM_HEAD + "0->1 id 0 start 0 size 5\n", ["line 3: id '0' is not an integer >= 1"]),
    (HTSIM_HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 trigger 1 size 5\n",
     ["line 4: flow started by trigger '1'", "not supported"]),
    (HTSIM_HEAD + "failure switch_type TOR switch_id 0 link_id 0\n",
     ["line 3: htsim failure lines are not imported"]),
    (HTSIM_HEAD + "0->1 start 0 size 5 colour red\n", ["line 3: unknown token 'colour'",
                                                       "allowed: start, size"]),
    (HTSIM_HEAD + "0->1 start 0\n", ["line 3: connection has no size"]),
    (HTSIM_HEAD + "0->1 size 5\n", ["line 3: connection has no start"]),
    (HTSIM_HEAD + "0->1 start 0 size\n", ["line 3: size has no value"]),
    (HTSIM_HEAD + "0->1 start 0 start 1 size 5\n", ["line 3: start given twice"]),
    (HTSIM_HEAD + "0-1 start 0 size 5\n", ["line 3: unknown line starting '0-1'"]),
    (HTSIM_HEAD + "0->1 start 0 size 5\nNodes 4\n", ["line 4: Nodes after the first"]),
    # Lines the fast reader would misread: the line-by-line reader must refuse them.
    (HTSIM_HEAD + "0->1 start 0 size 5\n1 ->2 start 0 size 5\n", ["line 4: unknown line "
                                                                   "starting '1'"]),
    (HTSIM_HEAD + "0->1 start 0 size 5\n+1->2 start 0 size 5\n", ["line 4: unknown line "
                                                                   "starting '+1->2'"]),
    (HTSIM_HEAD + "-1->1 start 0 size 5\n1->2 start 0 size 5\n", ["line 3: unknown line "
                                                                   "starting '-1->1'"]),
    (HTSIM_HEAD + "0->1 idx 1 start 0 size 5\n1->2 idx 2 start 0 size 5\n",
     ["line 3: unknown token 'idx'"]),
    ("Nodes 4\nNodes 4\n", ["line 2: Nodes given twice (first at line 1)"]),
    (HTSIM_HEAD + "0->1 start -5 size 5\n", ["line 3: start '-5'", "picoseconds >= 0"]),
    (HTSIM_HEAD + "0->1 start soon size 5\n", ["line 3: start 'soon' is not a number"]),
    (HTSIM_HEAD + "0->1 start 0 size 1.5\n", ["line 3: size '1.5' is not an integer >= 1"]),
    (HTSIM_HEAD + "0->1 start 0 size 0\n", ["line 3: size '0' is not an integer >= 1"]),
    (HTSIM_HEAD + "0->1 start 0 size 2000000000000000000\n", ["line 3: size", "2^60"]),
    (HTSIM_HEAD + "0->1 start 0 size 5\n2->2 start 0 size 5\n",
     ["line 4: src and dst are both GPU 2"]),
    ("Nodes 4\nConnections 1\nTriggers 2\n0->1 start 0 size 5\ntrigger id 1 oneshot\n",
     ["line 3: Triggers 2 but the file has 1 trigger line;"]),
    ("Nodes 4\nConnections 1\n0->1 start 0 size 5\ntrigger id 1\n",
     ["line 4: a trigger needs an id and one type"]),
    ("Nodes x\n", ["line 1: Nodes 'x' is not an integer"]),
    ("Nodes 4 5\n", ["line 1: expected 'Nodes <count>'"]),
    (b"Nodes 4\nConnections 1\n0->1 start 0 size \xc3\x28\n", ["line 3: byte 0xc3",
                                                                  "htsim connection matrix"]),
]


@pytest.mark.parametrize("content, parts", HTSIM_CASES)
def test_bad_htsim_is_refused(tmp_path, content, parts):
    refused(write(tmp_path, "bad.cm", content), "htsim", 4, *parts)


def npz_bytes(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


GOOD = dict(src=np.array([0, 1]), dst=np.array([1, 2]), size=np.array([5.0, 6.0]))
NPZ_CASES = [
    (b"0,1,5\n", ["is not an .npz archive (not a zip file)", "np.savez"]),
    (npz_bytes(**GOOD)[:60], ["is not a readable .npz archive"]),
    (npz_bytes(src=[0], dst=[1]), ["lacks array 'size'",
                                   "required: src, dst, size (or bytes); optional: start"]),
    (npz_bytes(**GOOD, strat=[0, 0]), ["unknown array 'strat'", "allowed keys"]),
    (npz_bytes(**GOOD, bytes=[1, 2]), ["both 'size' and 'bytes'"]),
    (npz_bytes(src=[0, 1], dst=[1, 2], size=[5.0]), ["different lengths",
                                                      "src: 2, dst: 2, size: 1"]),
    (npz_bytes(src=[0.0, 1.0], dst=[1, 2], size=[5, 6]), ["array 'src' has dtype 'float64'",
                                                          "integer array of GPU ids"]),
    (npz_bytes(src=[[0, 1]], dst=[[1, 2]], size=[[5, 6]]), ["shape (1, 2)", "1-D"]),
    (npz_bytes(src=[0, 1], dst=[1, 2], size=["5", "6"]), ["array 'size' has dtype",
                                                          "numeric"]),
    (npz_bytes(src=np.array([0, 2**64 - 1], np.uint64), dst=[1, 2], size=[5, 6]),
     ["flow at index 1: src 18446744073709551615 is not a GPU"]),
    (npz_bytes(src=[0, 1], dst=[1, 9], size=[5, 6]), ["flow at index 1: dst 9"]),
    (npz_bytes(src=[0, 1], dst=[1, 2], size=[5, -6]), ["flow at index 1: size -6 bytes"]),
    (npz_bytes(**GOOD, start=[0, np.nan]), ["flow at index 1: start nan s"]),
    (npz_bytes(src=np.zeros(0, int), dst=np.zeros(0, int), size=np.zeros(0)),
     ["contains no flows"]),
]


@pytest.mark.parametrize("content, parts", NPZ_CASES)
def test_bad_npz_is_refused(tmp_path, content, parts):
    refused(write(tmp_path, "bad.npz", content), "auto", 4, *parts)


def test_npy_given_as_npz(tmp_path):
    np.save(tmp_path / "one.npy", np.arange(3))
    os.replace(tmp_path / "one.npy", tmp_path / "one.npz")
    refused(tmp_path / "one.npz", "auto", 4, "is a single .npy array")


def test_npz_with_forged_shape_is_refused_before_allocating(tmp_path):
    fake = io.BytesIO()
    np.lib.format.write_array_header_1_0(fake, {"descr": "<i8", "fortran_order": False,
                                                "shape": (10**12,)})
    path = tmp_path / "forged.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("src.npy", fake.getvalue() + b"\0" * 16)
        archive.writestr("dst.npy", fake.getvalue())
        archive.writestr("size.npy", fake.getvalue())
    refused(path, "npz", 4, "array 'src' has 1,000,000,000,000 entries")


UNPICKLED = []


class Tripwire:
    """Records being unpickled: loading must never get that far."""

    def __reduce__(self):
        return (UNPICKLED.append, ("unpickled",))


def test_npz_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "evil.npz"
    np.savez(path, src=np.array([Tripwire(), Tripwire()], dtype=object), dst=[1, 2],
             size=[5, 6])
    UNPICKLED.clear()
    refused(path, "auto", 4, "array 'src' has dtype 'object'", "never unpickled")
    assert UNPICKLED == []
