"""Traffic matrices, whatever file they came from: the `TrafficMatrix` container, the bounds
every format shares, and the helpers the format modules (`traffic_csv`, `traffic_npz`,
`traffic_htsim`) use to read files safely, check flows and write files atomically.

Contract: every problem is a `ScenarioError` built by the caller's `fail(message)` (naming the
file) or naming `field`; nothing here knows a file format.
"""

from __future__ import annotations

import dataclasses
import re
import stat
from pathlib import Path
from typing import Callable

import numpy as np

from fabricjax.core.errors import ScenarioError
from fabricjax.core.output import write_text

# Same bound as scenario.MAX_SIZE_BYTES (not imported: scenario's loader imports this module).
MAX_SIZE_BYTES = 2.0**60
# Same bound as workload.MAX_PHASE_FLOWS: flow-by-flow arrays beyond this are refused.
MAX_FLOWS = 2**26
# Text formats are read whole into memory; larger matrices belong in .npz.
MAX_FILE_BYTES = 2**31
INT_RE = re.compile(r"[+-]?\d+")
Fail = Callable[[str], ScenarioError]


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



# ------------------------------------------------------------------------------- files

def check_regular_file(path: Path, fail: Fail) -> None:
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


def read_bytes(path: Path, fail: Fail, limit: int) -> bytes:
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


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------- validation

def validate(src: np.ndarray, dst: np.ndarray, size: np.ndarray, start: np.ndarray,
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
    gpus = gpus_text(num_gpus)
    if checks[0][i]:
        raise fail(f"{at}: src {int(src[i])} is not a GPU of this fabric; {gpus}")
    if checks[1][i]:
        raise fail(f"{at}: dst {int(dst[i])} is not a GPU of this fabric; {gpus}")
    if checks[2][i]:
        raise fail(f"{at}: src and dst are both GPU {int(src[i])}; allowed: two different GPUs")
    if checks[3][i]:
        raise fail(f"{at}: size {size[i]:g} bytes; allowed: 1 .. 2^60 bytes, finite")
    raise fail(f"{at}: start {start[i]:g} s; allowed: a finite number of seconds >= 0")


def gpus_text(num_gpus: int) -> str:
    return f"the job has {num_gpus} GPUs (ranks), allowed: 0..{num_gpus - 1}"


# -------------------------------------------------------------------------------- writing

def exact(value: float) -> str:
    """The shortest text that reads back as exactly `value` (integers without '.0')."""
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


def check_writable(matrix: TrafficMatrix, path: Path, field: str) -> None:
    if matrix.num_flows == 0:
        raise ScenarioError(field, f"{path}: no flows to write; allowed: at least one flow")
    if not (np.isfinite(matrix.size).all() and np.isfinite(matrix.start).all()
            and (matrix.size > 0).all() and (matrix.start >= 0).all()
            and (matrix.src >= 0).all() and (matrix.dst >= 0).all()):
        raise ScenarioError(field, f"{path}: cannot write these flows; allowed: GPU ids >= 0, "
                            "finite sizes > 0 and finite start times >= 0")


def atomic_write(path: Path, text: str, field: str) -> None:
    """Write `text` with `core.output.write_output`: a file (or a symlink's target) gets a new
    file beside it renamed over it, so a reader sees the old file or the whole new one and a
    failed write leaves no partial file; a FIFO, a character device or ``-`` is written
    straight into."""
    try:
        write_text(text, path)
    except OSError as err:
        raise ScenarioError(field, str(err) if err.strerror is None else
                            f"{path}: cannot write ({err.strerror})") from None
