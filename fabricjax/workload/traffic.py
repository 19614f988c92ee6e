"""Traffic matrices from files: CSV, NumPy .npz or htsim's connection matrix, in and out.

`load_traffic` returns a `TrafficMatrix` (F flows: GPU ids, bytes, start seconds) or raises one
`ScenarioError(field, ...)` whose one-line message names the file, the line (text formats) or
the array index (.npz), and what is allowed. Formats:

- csv: ``src,dst,bytes[,start]`` per line; ids are GPU ids 0..N-1 (the job's ranks), bytes a
  number (``1e6``) or a size with a unit (``4MB``, ``1GiB``), start in seconds (0 if absent).
  An optional header row (first field not a number) names the columns in any order:
  ``src``, ``dst``, ``bytes`` (or ``size``), ``start``. ``#`` starts a comment; blank lines
  and double quotes are ignored.
- npz: 1-D arrays ``src``, ``dst`` (integers), ``size`` (or ``bytes``), optional ``start``
  (seconds); no other keys. Read without unpickling (object arrays are refused).
- htsim: csg-htsim's connection matrix (``Nodes N``, ``Connections C``, then lines
  ``S->D [id I] start T size B``, start in picoseconds); see `_parse_htsim` for what is
  accepted, ignored and refused.
- auto: by suffix (.csv, .npz); otherwise sniffed: a zip archive is npz, a first line that
  is an htsim header or ``S->D`` connection is htsim, anything else csv.

Every flow needs 1 <= bytes <= 2^60, a finite start >= 0, and src != dst. `write_csv` and
`write_htsim` export a matrix with `core.output.write_output` (a file atomically, a FIFO or a
device straight into, never renamed over).
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
import stat
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.core.output import write_text
from fabricjax.core.units import SIZE_HELP, parse_size

FORMATS = ("auto", "csv", "npz", "htsim")
# Same bound as scenario.MAX_SIZE_BYTES (not imported: scenario's loader imports this module).
MAX_SIZE_BYTES = 2.0**60
# Same bound as workload.MAX_PHASE_FLOWS: flow-by-flow arrays beyond this are refused.
MAX_FLOWS = 2**26
# Text formats are read whole into memory; larger matrices belong in .npz.
MAX_FILE_BYTES = 2**31
# csg-htsim stores a connection's size in a C int (read with std::stoi).
HTSIM_MAX_SIZE = 2**31 - 1
PS_PER_SECOND = 1e12

CSV_COLUMNS = "src,dst,bytes[,start]"
_CSV_NAMES = {"src": "src", "dst": "dst", "bytes": "bytes", "size": "bytes", "start": "start"}
_NPZ_KEYS = "required: src, dst, size (or bytes); optional: start"
_HTSIM_HEADERS = ("Nodes", "Connections", "Triggers", "Failures")
_HTSIM_CONN = "S->D [id I] start T_ps size BYTES"
_HTSIM_KEYS = ("start", "size", "id", "prio", "send_done_trigger", "recv_done_trigger",
               "trigger", "addon")
_ARROW = re.compile(r"(\d+)->(\d+)")
# Text that the fast path's numpy reader would read differently from the line-by-line path.
_HTSIM_NOT_PLAIN = (" ->", "\t->", "-> ", "->\t", "->-", "+")
_HTSIM_HEAD = re.compile(r"[ \t]*(Nodes|Connections)[ \t]+(\d+)[ \t]*")
_INT = re.compile(r"[+-]?\d+")
_ZIP_MAGIC = b"PK\x03\x04"
_NPY_MAGIC = b"\x93NUMPY"


@dataclasses.dataclass(frozen=True, eq=False)
class TrafficMatrix:
    """F flows read from a traffic file (host-side numpy, read-only arrays).

    src, dst: int64[F] GPU ids (the job's ranks), 0 <= id < num_gpus, src != dst.
    size: float64[F] bytes, 1 .. 2^60. start: float64[F] seconds >= 0 (0 where the file
    gives none). source: the file's name, for reports.
    """

    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    start: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        for name, dtype in (("src", np.int64), ("dst", np.int64), ("size", np.float64),
                            ("start", np.float64)):
            array = np.array(getattr(self, name), dtype=dtype)   # a private copy
            if array.ndim != 1 or array.shape != np.shape(self.src):
                raise ValueError(f"TrafficMatrix.{name} must be 1-D with the shape of src, "
                                 f"got {array.shape}")
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def num_flows(self) -> int:
        return int(self.src.shape[0])


# --------------------------------------------------------------------------------- loading

def load_traffic(path: Path, fmt: str, num_gpus: int, field: str) -> TrafficMatrix:
    """Read a traffic file in format `fmt` ("auto", "csv", "npz" or "htsim") for a job of
    `num_gpus` GPUs; every problem is a `ScenarioError(field, ...)` naming the file."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ScenarioError(field, f"unknown traffic format {short_repr(fmt)}; allowed: "
                            f"{', '.join(FORMATS)}")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, np.integer)) \
            or num_gpus < 1:
        raise ValueError(f"num_gpus must be a positive integer, got {num_gpus!r}")
    num_gpus = int(num_gpus)
    name = str(path)

    def fail(message: str) -> ScenarioError:
        return ScenarioError(field, f"{name}: {message}")

    _check_regular_file(path, fail)
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".csv": "csv", ".npz": "npz"}.get(suffix) or _sniff(path, fail)
    if fmt == "npz":
        src, dst, size, start, where = _load_npz(path, num_gpus, fail)
    else:
        text = _read_text(path, fmt, fail)
        if fmt == "csv":
            src, dst, size, start, where = _parse_csv(text, num_gpus, fail)
        else:
            src, dst, size, start, where = _parse_htsim(text, num_gpus, fail)
    _validate(src, dst, size, start, num_gpus, where, fail)
    return TrafficMatrix(src, dst, size, start, source=path.name)


def _check_regular_file(path: Path, fail: Callable[[str], ScenarioError]) -> None:
    try:
        info = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise fail("file not found (a traffic file path is relative to the scenario's "
                   "folder)") from None
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror or type(err).__name__})") from None
    if stat.S_ISDIR(info.st_mode):
        raise fail("is a directory; allowed: a traffic file (.csv, .npz or htsim .cm)")
    if not stat.S_ISREG(info.st_mode):
        raise fail("is not a regular file; allowed: a traffic file (.csv, .npz or htsim .cm)")
    if info.st_size == 0:
        raise fail("is empty; allowed: a traffic file with at least one flow")
    if info.st_size > MAX_FILE_BYTES:
        raise fail(f"is {info.st_size:,} bytes; allowed: up to {MAX_FILE_BYTES:,} bytes "
                   "(use .npz for larger matrices)")


def _read_bytes(path: Path, fail: Callable[[str], ScenarioError], limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except IsADirectoryError:
        raise fail("is a directory; allowed: a traffic file (.csv, .npz or htsim .cm)") \
            from None
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror or type(err).__name__})") from None
    if not data:
        raise fail("is empty; allowed: a traffic file with at least one flow")
    return data


def _sniff(path: Path, fail: Callable[[str], ScenarioError]) -> str:
    head = _read_bytes(path, fail, 64 * 1024)
    if head.startswith(_ZIP_MAGIC):
        return "npz"
    text = head.decode("utf-8", errors="replace")
    for line in text.replace("\r", "\n").split("\n"):
        tokens = line.split("#", 1)[0].split()
        if tokens:
            return "htsim" if tokens[0] in _HTSIM_HEADERS or "->" in tokens[0] else "csv"
    return "csv"


def _read_text(path: Path, fmt: str, fail: Callable[[str], ScenarioError]) -> str:
    data = _read_bytes(path, fail, MAX_FILE_BYTES)
    what = "a CSV traffic file" if fmt == "csv" else "an htsim connection matrix"
    if data.startswith(b"\xef\xbb\xbf"):      # a UTF-8 byte-order mark (spreadsheet exports)
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise fail(f"line {line}: byte 0x{data[err.start]:02x} is not UTF-8 text (a binary "
                   f"file?); allowed: {what}, which is text") from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise fail(f"line {line}: contains a NUL byte (a binary file?); allowed: {what}, "
                   "which is text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


# ------------------------------------------------------------------------------------ CSV

def _clean(line: str) -> str:
    """A CSV line without its comment, double quotes and surrounding whitespace."""
    if "#" in line:
        line = line[: line.index("#")]
    if '"' in line:
        line = line.replace('"', "")
    return line.strip()


def _parse_csv(text: str, num_gpus: int, fail: Callable[[str], ScenarioError]):
    """Fast path: numpy's C reader parses a well-formed file (about 1 s per 10^6 lines);
    whatever it refuses goes to `_parse_csv_lines`, which names the first bad line, or reads
    what only it understands (sizes with units)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if _clean(line)), None)
    if first is None:
        return _parse_csv_lines(text, num_gpus, fail)
    fields = _clean(lines[first]).split(",")
    if _is_number(fields[0]):
        if not 3 <= len(fields) <= 4:
            return _parse_csv_lines(text, num_gpus, fail)
        columns, body = ["src", "dst", "bytes", "start"][: len(fields)], first
    else:
        columns, body = _csv_header(fields, first + 1, fail), first + 1
    dtype = [(name, np.int64 if name in ("src", "dst") else np.float64) for name in columns]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")           # "input contained no data"
            table = np.loadtxt(lines[body:], delimiter=",", comments="#", quotechar='"',
                               dtype=dtype, ndmin=1)
    except (ValueError, OverflowError):
        return _parse_csv_lines(text, num_gpus, fail)
    if table.shape[0] == 0:
        return _parse_csv_lines(text, num_gpus, fail)
    numbers: list[int] = []

    def where(i: int) -> str:
        # Line numbers are only needed for an error message: found then, by the same rule.
        if not numbers:
            numbers.extend(n for n, line in enumerate(lines[body:], body + 1) if _clean(line))
        return f"line {numbers[i]}"

    start = table["start"] if "start" in columns else np.zeros(table.shape[0])
    return table["src"], table["dst"], table["bytes"], start, where


def _parse_csv_lines(text: str, num_gpus: int, fail: Callable[[str], ScenarioError]):
    """The reference CSV reader: line by line, naming a line it cannot read (checking
    column counts, then each column in turn)."""
    lines, numbers = [], []
    for number, line in enumerate(text.split("\n"), 1):
        line = _clean(line)
        if line:
            lines.append(line)
            numbers.append(number)
    if not lines:
        raise fail(f"contains no flows; allowed: lines {CSV_COLUMNS}")
    rows = [line.split(",") for line in lines]

    columns = ["src", "dst", "bytes", "start"]
    has_header = not _is_number(rows[0][0])
    if has_header:
        columns = _csv_header(rows[0], numbers[0], fail)
        if len(rows) == 1:
            raise fail(f"contains no flows (only a header, line {numbers[0]}); allowed: "
                       f"lines {CSV_COLUMNS}")
        lines, rows, numbers = lines[1:], rows[1:], numbers[1:]
    if len(rows) > MAX_FLOWS:
        raise fail(f"has {len(rows):,} flows; allowed: up to {MAX_FLOWS:,}")
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    width = len(columns) if has_header else int(lengths[0])
    bad = lengths != width
    if not has_header:
        bad |= (lengths < 3) | (lengths > 4)
    if bad.any():
        i = int(np.argmax(bad))
        expected = (f"{width} comma-separated columns ({','.join(columns)}) as the header "
                    f"says" if has_header else
                    f"3 or 4 comma-separated columns {CSV_COLUMNS}, the same on every line")
        hint = ""
        if lengths[i] == 1 and any(sep in lines[i] for sep in (";", "\t", " ")):
            hint = " (columns are separated by commas)"
        raise fail(f"line {numbers[i]}: {_count(int(lengths[i]), 'column')}; allowed: "
                   f"{expected}{hint}")

    table = np.array(rows, dtype=str)
    line_numbers = np.asarray(numbers, dtype=np.int64)
    column = {name: table[:, j] for j, name in enumerate(columns[:width])}

    def where(i: int) -> str:
        return f"line {int(line_numbers[i])}"

    src = _csv_ints(column["src"], "src", num_gpus, where, fail)
    dst = _csv_ints(column["dst"], "dst", num_gpus, where, fail)
    size = _csv_sizes(column["bytes"], where, fail)
    if "start" in column:
        start = _csv_floats(column["start"], "start", "seconds", where, fail)
    else:
        start = np.zeros(len(rows))
    return src, dst, size, start, where


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _csv_header(fields: list[str], number: int, fail) -> list[str]:
    names = []
    allowed = "src, dst, bytes (or size), start"
    for raw in fields:
        name = _CSV_NAMES.get(raw.strip().lower())
        if name is None:
            hint = ""
            if len(fields) == 1 and any(sep in raw for sep in (";", "\t", " ")):
                hint = " (columns are separated by commas)"
            raise fail(f"line {number}: header names unknown column {short_repr(raw.strip())}; "
                       f"allowed: {allowed} (or no header: {CSV_COLUMNS}){hint}")
        if name in names:
            raise fail(f"line {number}: header names column {name!r} twice; allowed: "
                       f"{allowed}, each once")
        names.append(name)
    missing = [n for n in ("src", "dst", "bytes") if n not in names]
    if missing:
        raise fail(f"line {number}: header lacks column {', '.join(missing)}; required: src, "
                   f"dst, bytes (or size); optional: start")
    return names


def _csv_ints(values: np.ndarray, name: str, num_gpus: int, where, fail) -> np.ndarray:
    try:
        return values.astype(np.int64)
    except (ValueError, OverflowError):
        pass
    for i, value in enumerate(values.tolist()):     # slow path: find the first bad value
        text = value.strip()
        if _INT.fullmatch(text) is None:
            raise fail(f"{where(i)}: {name} {short_repr(text)} is not an integer GPU id; "
                       f"{_gpus(num_gpus)}")
        if not -2**63 <= int(text) < 2**63:
            raise fail(f"{where(i)}: {name} {short_repr(text)} is not a GPU of this fabric; "
                       f"{_gpus(num_gpus)}")
    raise AssertionError("unreachable: numpy refused an all-integer column")


def _csv_floats(values: np.ndarray, name: str, unit: str, where, fail) -> np.ndarray:
    try:
        return values.astype(np.float64)
    except ValueError:
        pass
    for i, value in enumerate(values.tolist()):
        try:
            float(value)
        except ValueError:
            raise fail(f"{where(i)}: {name} {short_repr(value.strip())} is not a number; "
                       f"allowed: a number of {unit} >= 0") from None
    raise AssertionError("unreachable: numpy refused an all-number column")


def _csv_sizes(values: np.ndarray, where, fail) -> np.ndarray:
    try:
        return values.astype(np.float64)
    except ValueError:
        pass
    # Slow path, only when some size is not a plain number: units such as 4MB or 1GiB.
    out = np.empty(values.shape[0], dtype=np.float64)
    for i, value in enumerate(values.tolist()):
        try:
            out[i] = float(value)
        except ValueError:
            try:
                out[i] = parse_size(value.strip())
            except ValueError:
                raise fail(f"{where(i)}: bytes {short_repr(value.strip())} is not a size; "
                           f"allowed: {SIZE_HELP}") from None
    return out


# ------------------------------------------------------------------------------------ npz

def _load_npz(path: Path, num_gpus: int, fail):
    """The arrays of an .npz, read member by member with numpy's format reader and
    allow_pickle=False; each header is checked before its data is read, so an object array
    is refused unread and a forged shape cannot make us allocate more than the archive holds.
    """
    try:
        handle = open(path, "rb")
    except PermissionError:
        raise fail("cannot be read (permission denied)") from None
    except OSError as err:
        raise fail(f"cannot be read ({err.strerror or type(err).__name__})") from None
    with handle:
        magic = handle.read(len(_NPY_MAGIC))
        if magic.startswith(_NPY_MAGIC):
            raise fail("is a single .npy array, not an .npz archive; allowed: np.savez(path, "
                       "src=..., dst=..., size=...[, start=...])")
        if not magic.startswith(_ZIP_MAGIC[:2]):
            raise fail("is not an .npz archive (not a zip file); allowed: np.savez(path, "
                       "src=..., dst=..., size=...[, start=...])")
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                arrays = _npz_arrays(archive, fail)
        except ScenarioError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as err:
            raise fail(f"is not a readable .npz archive ({_reason(err)}); allowed: "
                       "np.savez(path, src=..., dst=..., size=...[, start=...])") from None

    lengths = {key: array.shape[0] for key, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{key}: {n}" for key, n in lengths.items())
        raise fail(f"arrays have different lengths ({listed}); allowed: one entry per flow "
                   "in every array")

    def where(i: int) -> str:
        return f"flow at index {i}"

    ids = {}
    for key in ("src", "dst"):
        array = arrays[key]
        if array.dtype.kind == "u" and array.size and int(array.max()) >= 2**63:
            i = int(np.argmax(array >= 2**63))
            raise fail(f"{where(i)}: {key} {int(array[i])} is not a GPU of this fabric; "
                       f"{_gpus(num_gpus)}")
        ids[key] = array.astype(np.int64)
    size = arrays["size"].astype(np.float64)
    start = arrays["start"].astype(np.float64) if "start" in arrays else \
        np.zeros(size.shape[0])
    return ids["src"], ids["dst"], size, start, where


def _reason(err: BaseException) -> str:
    text = str(err).split("\n", 1)[0][:80]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _npz_arrays(archive: zipfile.ZipFile, fail) -> dict[str, np.ndarray]:
    members = {}
    for info in archive.infolist():
        key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        members[key] = info
    unknown = [k for k in members if k not in ("src", "dst", "size", "bytes", "start")]
    if unknown:
        raise fail(f"has unknown array {short_repr(unknown[0])}; allowed keys: {_NPZ_KEYS}")
    if "size" in members and "bytes" in members:
        raise fail(f"has both 'size' and 'bytes' (aliases); allowed keys: {_NPZ_KEYS}")
    if "bytes" in members:
        members["size"] = members.pop("bytes")
    missing = [k for k in ("src", "dst", "size") if k not in members]
    if missing:
        raise fail(f"lacks array {', '.join(repr(k) for k in missing)}; allowed keys: "
                   f"{_NPZ_KEYS}")
    arrays = {}
    for key, info in members.items():
        arrays[key] = _npz_member(archive, info, key, fail)
    return arrays


def _npz_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, fail) -> np.ndarray:
    if info.flag_bits & 0x1:
        raise fail(f"array {key!r} is encrypted; allowed: a plain np.savez archive")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise fail(f"array {key!r} uses zip compression method {info.compress_type}; allowed: "
                   "np.savez or np.savez_compressed archives")
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(member)
        elif version == (2, 0):
            shape, _, dtype = np.lib.format.read_array_header_2_0(member)
        else:
            raise fail(f"array {key!r} is in .npy format version {version}; allowed: plain "
                       "numeric arrays (versions 1.0 and 2.0)")
    ids = key in ("src", "dst")
    kinds = "iu" if ids else "iuf"
    if dtype.hasobject or dtype.kind not in kinds:
        allowed = "an integer array of GPU ids" if ids else "a numeric (integer or float) array"
        never = " (object arrays are never unpickled)" if dtype.hasobject else ""
        raise fail(f"array {key!r} has dtype {short_repr(str(dtype))}; allowed: {allowed}{never}")
    if len(shape) != 1:
        raise fail(f"array {key!r} has shape {shape}; allowed: a 1-D array, one entry per flow")
    if shape[0] > MAX_FLOWS:
        raise fail(f"array {key!r} has {shape[0]:,} entries; allowed: up to {MAX_FLOWS:,} flows")
    if shape[0] * dtype.itemsize > info.file_size:
        raise fail(f"array {key!r} is truncated (its header promises {shape[0]:,} entries); "
                   "allowed: an intact np.savez archive")
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)


# ---------------------------------------------------------------------------------- htsim

def _parse_htsim(text: str, num_gpus: int, fail):
    """Fast path for a plain file (a header of Nodes and Connections, then only lines
    ``S->D [id I] start T size B``), read by numpy's C reader and checked as a whole; any
    other file, or any doubt, goes to `_parse_htsim_lines`, which names the problem."""
    head = text.split("\n", 8)[:8]         # the header: Nodes, Connections (and blank lines)
    header: dict[str, int] = {}
    body = -1
    for i, line in enumerate(head):
        match = _HTSIM_HEAD.fullmatch(line)
        if match is not None and match[1] not in header:
            header[match[1]] = int(match[2])
        elif line.strip():
            body = i
            break
    nodes, count = header.get("Nodes", 0), header.get("Connections", -1)
    if not 1 <= nodes <= num_gpus or not 1 <= count <= MAX_FLOWS or body < 0:
        return _parse_htsim_lines(text, num_gpus, fail)
    text_flows = text.split("\n", body)[-1] if body else text
    # Each flow line holds one "->" with digits on both sides (the slow path's S->D rule).
    if text_flows.count("->") != count or any(bad in text_flows for bad in _HTSIM_NOT_PLAIN):
        return _parse_htsim_lines(text, num_gpus, fail)
    keyword = "U8"
    with_id = [("src", "i8"), ("dst", "i8"), ("k1", keyword), ("id", "i8"), ("k2", keyword),
               ("start", "f8"), ("k3", keyword), ("size", "i8")]
    table = None
    for dtype in (with_id, with_id[:2] + with_id[4:]):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                table = np.loadtxt(io.StringIO(text_flows.replace("->", " ")), dtype=dtype,
                                   ndmin=1)
            break
        except (ValueError, OverflowError):
            continue
    if table is None or table.shape[0] != count:
        return _parse_htsim_lines(text, num_gpus, fail)
    src, dst, size, start = table["src"], table["dst"], table["size"], table["start"]
    names = table.dtype.names
    ok = ((table["k2"] == "start").all() and (table["k3"] == "size").all()
          and ((src >= 0) & (src < nodes) & (dst >= 0) & (dst < nodes)).all()
          and ((size >= 1) & (size <= MAX_SIZE_BYTES)).all()
          and (np.isfinite(start) & (start >= 0)).all())
    if ok and "id" in names:
        ordered = np.sort(table["id"])
        ok = ((table["k1"] == "id").all() and ordered[0] >= 1
              and (ordered[1:] != ordered[:-1]).all())
    if not ok:
        return _parse_htsim_lines(text, num_gpus, fail)
    line_numbers: list[int] = []

    def where(i: int) -> str:
        if not line_numbers:
            line_numbers.extend(n for n, line in enumerate(text_flows.split("\n"), body + 1)
                                if line.strip())
        return f"line {line_numbers[i]}"

    return (src.astype(np.int64), dst.astype(np.int64), size.astype(np.float64),
            start / PS_PER_SECOND, where)


def _parse_htsim_lines(text: str, num_gpus: int, fail):
    """csg-htsim's connection matrix, as read by ConnectionMatrix::load (datacenter/
    connection_matrix.cpp, github.com/Broadcom/csg-htsim; generators in
    datacenter/connection_matrices/gen_*.py).

    Header lines ``Nodes N``, ``Connections C``, ``Triggers T``, ``Failures F`` come first,
    then one line per connection: ``S->D`` followed by keyword/value pairs in any order:
    ``start T`` (picoseconds: htsim stores it unconverted as its picosecond clock; the
    generators write microseconds x 10^6), ``size B`` (bytes, an integer), ``id I`` (flow id,
    nonzero, unique here), ``prio P``, ``send_done_trigger T``, ``recv_done_trigger T``,
    ``trigger T`` and the flag ``addon``; and ``trigger id I oneshot|multishot|barrier
    [count K]`` lines. Differences from htsim, all stricter except the first two: tokens are
    split on any whitespace (htsim: single spaces); ``#`` starts a comment anywhere (htsim:
    only before the first connection); ``Nodes`` and ``Connections`` are required, must
    precede the connections and may appear once; ``size`` and ``start`` are required on every
    connection; numbers must be whole tokens (htsim's stoi reads ``12abc`` as 12); start
    must be >= 0. Start is read as a double (htsim uses stof, a float: above 2^24 ps, about
    17 us, htsim itself rounds start times to a few picoseconds).

    Refused: flows started by ``trigger`` (they start when other flows finish, which a
    traffic matrix with start times cannot express) and ``failure`` lines (fabric failures
    come from the scenario's failures section). Ignored after a syntax check: ``prio``,
    ``addon``, ``send_done_trigger``, ``recv_done_trigger`` and ``trigger`` definitions;
    with no triggered flow they start nothing, so the flows and their times are htsim's.
    """
    header: dict[str, tuple[int, int]] = {}       # keyword -> (value, line number)
    src, dst, size, start, numbers = [], [], [], [], []
    flow_ids: dict[int, int] = {}
    triggers = 0
    in_body = False
    nodes = 0

    def integer(token: str, what: str, number: int, low: int = 0) -> int:
        if _INT.fullmatch(token) is None or int(token) < low:
            raise fail(f"line {number}: {what} {short_repr(token)} is not an integer >= {low}")
        return int(token)

    for number, line in enumerate(text.split("\n"), 1):
        if "#" in line:
            line = line[: line.index("#")]
        tokens = line.split()
        if not tokens:
            continue
        head = tokens[0]
        if head in _HTSIM_HEADERS:
            if in_body:
                raise fail(f"line {number}: {head} after the first connection; allowed: "
                           f"header lines ({', '.join(_HTSIM_HEADERS)}) before the connections")
            if head in header:
                raise fail(f"line {number}: {head} given twice (first at line "
                           f"{header[head][1]}); allowed: once")
            if len(tokens) != 2:
                raise fail(f"line {number}: expected '{head} <count>', got "
                           f"{short_repr(line.strip())}")
            value = integer(tokens[1], head, number)
            if head == "Nodes":
                if value < 1:
                    raise fail(f"line {number}: Nodes 0; allowed: 1..{num_gpus}")
                if value > num_gpus:
                    raise fail(f"line {number}: Nodes {value} but the job has {num_gpus} "
                               f"GPUs; allowed: Nodes 1..{num_gpus}")
                nodes = value
            elif head == "Connections" and value > MAX_FLOWS:
                raise fail(f"line {number}: Connections {value:,}; allowed: up to "
                           f"{MAX_FLOWS:,} flows")
            header[head] = (value, number)
            continue
        if not in_body:
            for needed in ("Nodes", "Connections"):
                if needed not in header:
                    raise fail(f"line {number}: no '{needed} <count>' line before the first "
                               f"connection; allowed: an htsim connection matrix (Nodes N, "
                               f"Connections C, then {_HTSIM_CONN} lines)")
            in_body = True
        if head == "trigger":
            _htsim_trigger(tokens, number, integer, fail)
            triggers += 1
            continue
        if head == "failure":
            raise fail(f"line {number}: htsim failure lines are not imported; allowed: "
                       "connections only (give failures in the scenario's failures section)")
        match = _ARROW.fullmatch(head)
        if match is None:
            raise fail(f"line {number}: unknown line starting {short_repr(head)}; allowed: "
                       f"{_HTSIM_CONN}, 'trigger id I oneshot|multishot|barrier', or a "
                       f"header ({', '.join(_HTSIM_HEADERS)})")
        if len(src) >= header["Connections"][0]:
            raise fail(f"line {number}: more connections than 'Connections "
                       f"{header['Connections'][0]}' (line {header['Connections'][1]}) says")
        s, d = int(match.group(1)), int(match.group(2))
        for name, gpu in (("src", s), ("dst", d)):
            if gpu >= nodes:
                raise fail(f"line {number}: {name} {gpu} is not a node of this matrix; "
                           f"allowed: 0..{nodes - 1} (Nodes {nodes})")
        seen: dict[str, str] = {}
        i = 1
        while i < len(tokens):
            key = tokens[i]
            if key not in _HTSIM_KEYS:
                raise fail(f"line {number}: unknown token {short_repr(key)}; allowed: "
                           f"{', '.join(_HTSIM_KEYS)}")
            if key in seen:
                raise fail(f"line {number}: {key} given twice; allowed: once per connection")
            if key == "addon":
                seen[key] = ""
                i += 1
                continue
            if i + 1 >= len(tokens):
                raise fail(f"line {number}: {key} has no value; allowed: {_HTSIM_CONN}")
            seen[key] = tokens[i + 1]
            i += 2
        if "trigger" in seen:
            raise fail(f"line {number}: flow started by trigger {short_repr(seen['trigger'])} "
                       "(when other flows finish) is not supported; allowed: flows with "
                       "'start <picoseconds>'")
        for key in ("size", "start"):
            if key not in seen:
                raise fail(f"line {number}: connection has no {key}; allowed: {_HTSIM_CONN}")
        for key in ("prio", "send_done_trigger", "recv_done_trigger"):
            if key in seen:
                integer(seen[key], key, number)
        if "id" in seen:
            flow_id = integer(seen["id"], "id", number, low=1)
            if flow_id in flow_ids:
                raise fail(f"line {number}: id {flow_id} already used at line "
                           f"{flow_ids[flow_id]}; allowed: unique flow ids")
            flow_ids[flow_id] = number
        flow_bytes = integer(seen["size"], "size", number, low=1)
        if flow_bytes > MAX_SIZE_BYTES:
            raise fail(f"line {number}: size {flow_bytes} bytes; allowed: 1 .. 2^60 bytes")
        try:
            start_ps = float(seen["start"])
        except ValueError:
            raise fail(f"line {number}: start {short_repr(seen['start'])} is not a number; "
                       "allowed: picoseconds >= 0") from None
        if not math.isfinite(start_ps) or start_ps < 0:
            raise fail(f"line {number}: start {short_repr(seen['start'])}; allowed: a finite "
                       "number of picoseconds >= 0")
        src.append(s)
        dst.append(d)
        size.append(flow_bytes)
        start.append(start_ps)
        numbers.append(number)

    if "Nodes" not in header or "Connections" not in header:
        raise fail(f"contains no flows; allowed: an htsim connection matrix (Nodes N, "
                   f"Connections C, then {_HTSIM_CONN} lines)")
    declared, declared_at = header["Connections"]
    if len(src) != declared:
        raise fail(f"line {declared_at}: Connections {declared} but the file has "
                   f"{_count(len(src), 'connection line')}; allowed: the exact count")
    declared_triggers, triggers_at = header.get("Triggers", (0, 0))
    if triggers != declared_triggers:
        where = f"line {triggers_at}: " if triggers_at else ""
        raise fail(f"{where}Triggers {declared_triggers} but the file has "
                   f"{_count(triggers, 'trigger line')}; allowed: the exact count")
    if not src:
        raise fail(f"contains no flows (Connections 0); allowed: at least one {_HTSIM_CONN}")
    line_numbers = np.asarray(numbers, dtype=np.int64)

    def where(i: int) -> str:
        return f"line {int(line_numbers[i])}"

    return (np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64),
            np.asarray(size, dtype=np.float64),
            np.asarray(start, dtype=np.float64) / PS_PER_SECOND, where)


def _htsim_trigger(tokens: list[str], number: int, integer, fail) -> None:
    """Check a ``trigger id I oneshot|multishot|barrier [count K]`` line (then ignored)."""
    kinds = [t for t in tokens[1:] if t in ("oneshot", "multishot", "barrier")]
    i, has_id = 1, False
    while i < len(tokens):
        key = tokens[i]
        if key in ("oneshot", "multishot", "barrier"):
            i += 1
            continue
        if key not in ("id", "count") or i + 1 >= len(tokens):
            raise fail(f"line {number}: bad trigger line; allowed: 'trigger id I "
                       "oneshot|multishot|barrier [count K]'")
        integer(tokens[i + 1], f"trigger {key}", number, low=1 if key == "id" else 0)
        has_id = has_id or key == "id"
        i += 2
    if not has_id or len(kinds) != 1:
        raise fail(f"line {number}: a trigger needs an id and one type; allowed: 'trigger id I "
                   "oneshot|multishot|barrier [count K]'")


# ----------------------------------------------------------------------------- validation

def _validate(src: np.ndarray, dst: np.ndarray, size: np.ndarray, start: np.ndarray,
              num_gpus: int, where: Callable[[int], str], fail) -> None:
    """Raise for the earliest flow with any problem (ids, sizes, starts), naming its line."""
    if src.shape[0] == 0:
        raise fail("contains no flows; allowed: at least one flow")
    if src.shape[0] > MAX_FLOWS:
        raise fail(f"has {src.shape[0]:,} flows; allowed: up to {MAX_FLOWS:,}")
    with np.errstate(invalid="ignore"):
        checks = [
            (src < 0) | (src >= num_gpus),
            (dst < 0) | (dst >= num_gpus),
            src == dst,
            ~np.isfinite(size) | (size < 1) | (size > MAX_SIZE_BYTES),
            ~np.isfinite(start) | (start < 0),
        ]
    bad = np.logical_or.reduce(checks)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    at = where(i)
    gpus = _gpus(num_gpus)
    if checks[0][i]:
        raise fail(f"{at}: src {int(src[i])} is not a GPU of this fabric; {gpus}")
    if checks[1][i]:
        raise fail(f"{at}: dst {int(dst[i])} is not a GPU of this fabric; {gpus}")
    if checks[2][i]:
        raise fail(f"{at}: src and dst are both GPU {int(src[i])}; allowed: two different GPUs")
    if checks[3][i]:
        raise fail(f"{at}: size {size[i]:g} bytes; allowed: 1 .. 2^60 bytes, finite")
    raise fail(f"{at}: start {start[i]:g} s; allowed: a finite number of seconds >= 0")


def _gpus(num_gpus: int) -> str:
    return f"the job has {num_gpus} GPUs (ranks), allowed: 0..{num_gpus - 1}"


# -------------------------------------------------------------------------------- writing

def write_csv(path: Path, matrix: TrafficMatrix, *, field: str = "") -> None:
    """Write ``src,dst,bytes,start`` (header row, start in seconds) so that `load_traffic`
    reads back identical arrays (floats are written in their shortest exact form)."""
    path = Path(path)
    _check_writable(matrix, path, field)
    lines = ["src,dst,bytes,start"]
    lines += [f"{s},{d},{_exact(b)},{_exact(t)}" for s, d, b, t in
              zip(matrix.src.tolist(), matrix.dst.tolist(), matrix.size.tolist(),
                  matrix.start.tolist())]
    _atomic_write(path, "\n".join(lines) + "\n", field)


def write_htsim(path: Path, matrix: TrafficMatrix, nodes: int, *, field: str = "") -> None:
    """Write an htsim connection matrix: ``Nodes``, ``Connections``, then
    ``S->D id I start T size B`` with ids 1..F, start rounded to whole picoseconds (htsim's
    clock) and sizes rounded up to whole bytes. Sizes above 2^31-1 bytes are refused (htsim
    reads sizes into a C int); use `write_csv` for those."""
    path = Path(path)
    _check_writable(matrix, path, field)
    top = int(max(matrix.src.max(), matrix.dst.max()))
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes <= top:
        raise ScenarioError(field, f"{path}: cannot write Nodes {nodes!r}: the matrix uses GPU "
                            f"{top}; allowed: nodes >= {top + 1}")
    size = np.ceil(matrix.size)
    if size.max() > HTSIM_MAX_SIZE:
        i = int(np.argmax(size > HTSIM_MAX_SIZE))
        raise ScenarioError(field, f"{path}: flow {i} has {size[i]:.0f} bytes; allowed in "
                            f"htsim: up to {HTSIM_MAX_SIZE} bytes (it reads sizes into a C "
                            "int); write CSV instead")
    start_ps = np.rint(matrix.start * PS_PER_SECOND)
    lines = [f"Nodes {int(nodes)}", f"Connections {matrix.num_flows}"]
    lines += [f"{s}->{d} id {i} start {t} size {b}" for i, (s, d, t, b) in enumerate(
        zip(matrix.src.tolist(), matrix.dst.tolist(), map(int, start_ps.tolist()),
            map(int, size.tolist())), 1)]
    _atomic_write(path, "\n".join(lines) + "\n", field)


def _exact(value: float) -> str:
    """The shortest text that reads back as exactly `value` (integers without '.0')."""
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def _check_writable(matrix: TrafficMatrix, path: Path, field: str) -> None:
    if matrix.num_flows == 0:
        raise ScenarioError(field, f"{path}: no flows to write; allowed: at least one flow")
    if not (np.isfinite(matrix.size).all() and np.isfinite(matrix.start).all()
            and (matrix.size > 0).all() and (matrix.start >= 0).all()
            and (matrix.src >= 0).all() and (matrix.dst >= 0).all()):
        raise ScenarioError(field, f"{path}: cannot write these flows; allowed: GPU ids >= 0, "
                            "finite sizes > 0 and finite start times >= 0")


def _atomic_write(path: Path, text: str, field: str) -> None:
    """Write `text` with `core.output.write_output`: a file (or a symlink's target) gets a new
    file beside it renamed over it, so a reader sees the old file or the whole new one and a
    failed write leaves no partial file; a FIFO, a character device or ``-`` is written
    straight into."""
    try:
        write_text(text, path)
    except OSError as err:
        raise ScenarioError(field, str(err) if err.strerror is None else
                            f"{path}: cannot write ({err.strerror})") from None
