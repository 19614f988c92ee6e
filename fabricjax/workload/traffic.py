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
  ``S->D [id I] start T size B``, start in picoseconds); see `traffic_htsim.parse_htsim` for what is
  accepted, ignored and refused.
- auto: by suffix (.csv, .npz); otherwise sniffed: a zip archive is npz, a first line that
  is an htsim header or ``S->D`` connection is htsim, anything else csv.

Every flow needs 1 <= bytes <= 2^60, a finite start >= 0, and src != dst. `write_csv` and
`write_htsim` export a matrix with `core.output.write_output` (a file atomically, a FIFO or a
device straight into, never renamed over). Each format is its own module (`traffic_csv`,
`traffic_npz`, `traffic_htsim`; what they share is `traffic_matrix`); this one picks the
format and re-exports what callers use.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fabricjax.core.errors import ScenarioError, short_repr
from fabricjax.workload.traffic_matrix import (MAX_FILE_BYTES, MAX_FLOWS, MAX_SIZE_BYTES, Fail,
                                               TrafficMatrix, check_regular_file, read_bytes,
                                               validate)
from fabricjax.workload.traffic_csv import CSV_COLUMNS, parse_csv, write_csv
from fabricjax.workload.traffic_npz import ZIP_MAGIC, load_npz
from fabricjax.workload.traffic_htsim import (HTSIM_HEADERS, HTSIM_MAX_SIZE, PS_PER_SECOND,
                                              parse_htsim, write_htsim)

FORMATS = ("auto", "csv", "npz", "htsim")


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

    check_regular_file(path, fail)
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".csv": "csv", ".npz": "npz"}.get(suffix) or _sniff(path, fail)
    if fmt == "npz":
        src, dst, size, start, where = load_npz(path, num_gpus, fail)
    else:
        text = _read_text(path, fmt, fail)
        if fmt == "csv":
            src, dst, size, start, where = parse_csv(text, num_gpus, fail)
        else:
            src, dst, size, start, where = parse_htsim(text, num_gpus, fail)
    validate(src, dst, size, start, num_gpus, where, fail)
    return TrafficMatrix(src, dst, size, start, source=path.name)


def _sniff(path: Path, fail: Fail) -> str:
    head = read_bytes(path, fail, 64 * 1024)
    if head.startswith(ZIP_MAGIC):
        return "npz"
    text = head.decode("utf-8", errors="replace")
    for line in text.replace("\r", "\n").split("\n"):
        tokens = line.split("#", 1)[0].split()
        if tokens:
            return "htsim" if tokens[0] in HTSIM_HEADERS or "->" in tokens[0] else "csv"
    return "csv"


def _read_text(path: Path, fmt: str, fail: Fail) -> str:
    data = read_bytes(path, fail, MAX_FILE_BYTES)
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


__all__ = ["CSV_COLUMNS", "FORMATS", "HTSIM_MAX_SIZE", "MAX_FILE_BYTES", "MAX_FLOWS",
           "MAX_SIZE_BYTES", "PS_PER_SECOND", "TrafficMatrix", "load_traffic", "write_csv",
           "write_htsim"]
