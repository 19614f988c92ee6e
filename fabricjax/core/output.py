"""Writing output files so that nothing half-written is ever left behind (no JAX import here).

`check_writable` runs before any computing so a bad path fails fast; `write_json_atomic`
writes a temporary file in the target's directory, fsyncs it and renames it over the target.
JSON is written with allow_nan=False: a NaN reaching a report is a bug, not a number.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO, Callable


def check_writable(path: str | Path, *, protect: tuple[str | Path, ...] = ()) -> None:
    """Raise OSError early (before any computing) if `path` cannot be written, names a folder
    (a trailing slash), or is one of the `protect`ed input files."""
    if str(path).endswith(("/", os.sep)):
        raise IsADirectoryError(f"{path} names a folder; give a file name")
    target = Path(path)
    for other in protect:
        if target.exists() and Path(other).exists() and target.resolve() == Path(other).resolve():
            raise FileExistsError(f"{path} is the input scenario; refusing to overwrite it")
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise IsADirectoryError(f"{path} is a directory")
    if not parent.is_dir():
        raise FileNotFoundError(f"directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"directory {parent} is not writable")


def write_atomic(path: str | Path, write: Callable[[IO], None], *, binary: bool = False
                 ) -> Path:
    """Call `write(handle)` on a temporary file in the target's folder, fsync it and rename it
    over `path`: a reader never sees half a file, and a failure leaves nothing behind (the
    temporary file is removed, an earlier file at `path` is untouched)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                               dir=target.parent if str(target.parent) else ".")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)   # mkstemp makes 0600; an output is an ordinary file
        text_mode = {} if binary else {"encoding": "utf-8", "newline": ""}
        with os.fdopen(fd, "wb" if binary else "w", **text_mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def write_text_atomic(text: str, path: str | Path) -> Path:
    return write_atomic(path, lambda handle: handle.write(text))


def write_json_atomic(data: dict, path: str | Path) -> None:
    write_text_atomic(json.dumps(data, indent=2, allow_nan=False) + "\n", path)
