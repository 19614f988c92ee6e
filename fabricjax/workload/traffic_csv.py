"""CSV traffic files: ``src,dst,bytes[,start]`` per line, in and out (see `traffic` for the
format as users write it). `parse_csv` returns the flows' arrays or raises through `fail`;
`write_csv` writes what it reads back identically.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from fabricjax.core.errors import short_repr
from fabricjax.core.units import SIZE_HELP, parse_size
from fabricjax.workload.traffic_matrix import (MAX_FLOWS, Fail, INT_RE, TrafficMatrix,
                                               atomic_write, check_writable, count, exact,
                                               gpus_text, is_number)

CSV_COLUMNS = "src,dst,bytes[,start]"
_CSV_NAMES = {"src": "src", "dst": "dst", "bytes": "bytes", "size": "bytes", "start": "start"}


def _clean(line: str) -> str:
    """A CSV line without its comment, double quotes and surrounding whitespace."""
    if "#" in line:
        line = line[: line.index("#")]
    if '"' in line:
        line = line.replace('"', "")
    return line.strip()


def parse_csv(text: str, num_gpus: int, fail: Fail):
    """Fast path: numpy's C reader parses a well-formed file (about 1 s per 10^6 lines);
    whatever it refuses goes to `_parse_csv_lines`, which names the first bad line, or reads
    what only it understands (sizes with units)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if _clean(line)), None)
    if first is None:
        return _parse_csv_lines(text, num_gpus, fail)
    fields = _clean(lines[first]).split(",")
    if is_number(fields[0]):
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


def _parse_csv_lines(text: str, num_gpus: int, fail: Fail):
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
    has_header = not is_number(rows[0][0])
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
        raise fail(f"line {numbers[i]}: {count(int(lengths[i]), 'column')}; allowed: "
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
        if INT_RE.fullmatch(text) is None:
            raise fail(f"{where(i)}: {name} {short_repr(text)} is not an integer GPU id; "
                       f"{gpus_text(num_gpus)}")
        if not -2**63 <= int(text) < 2**63:
            raise fail(f"{where(i)}: {name} {short_repr(text)} is not a GPU of this fabric; "
                       f"{gpus_text(num_gpus)}")
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


def write_csv(path: Path, matrix: TrafficMatrix, *, field: str = "") -> None:
    """Write ``src,dst,bytes,start`` (header row, start in seconds) so that `load_traffic`
    reads back identical arrays (floats are written in their shortest exact form)."""
    path = Path(path)
    check_writable(matrix, path, field)
    lines = ["src,dst,bytes,start"]
    lines += [f"{s},{d},{exact(b)},{exact(t)}" for s, d, b, t in
              zip(matrix.src.tolist(), matrix.dst.tolist(), matrix.size.tolist(),
                  matrix.start.tolist())]
    atomic_write(path, "\n".join(lines) + "\n", field)


