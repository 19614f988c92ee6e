"""Writing output files without ever destroying what a path points at (no JAX import here).

One writer, `write_output`, for every output of the tool (reports, sweep CSV and JSON, traffic
exports, plots), by what the path names:
  * a regular file, or a new path: a temporary file beside it, fsynced and renamed over it, so
    a reader sees the old file or the whole new one and a failure leaves nothing behind (an
    existing file keeps its permission bits);
  * a symlink: the same, beside its *target* (the link stays a link; the target gets the new
    content atomically);
  * ``-``: standard output;
  * a FIFO or a character device (``/dev/null``, a terminal): written straight into, never
    renamed over, since a rename would replace the pipe or the device node with a file.
A failed write (ENOSPC on ``/dev/full``, a reader that left a pipe) raises `OutputError`, an
OSError whose text is one line naming the path. `check_writable` runs before any computing so
a bad path fails fast. JSON is written with allow_nan=False: a NaN in a report is a bug.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Callable

STDOUT = "-"


class OutputError(OSError):
    """An output could not be written: one line naming the path and the reason."""

    def __init__(self, path: str | Path, error: BaseException | str):
        reason = error if isinstance(error, str) else (
            getattr(error, "strerror", None) or str(error) or type(error).__name__)
        super().__init__(f"{path}: cannot write ({reason})")
        self.path = str(path)
        self.errno = getattr(error, "errno", None)


def output_kind(path: str | Path) -> str:
    """What `path` names, for writing: "stdout" (``-``), "file" (a regular file, a symlink to
    one, or a path that does not exist yet, a dangling symlink included), "stream" (a FIFO or
    a character device: written straight into), or "other" (a folder, a block device, a
    socket: never written)."""
    if str(path) == STDOUT:
        return "stdout"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "file"
    except NotADirectoryError:
        return "file"          # a parent is a file: `check_writable` says so
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return "stream"
    return "other"


def resolved(path: str | Path) -> Path:
    """The file a write to `path` lands in: symlinks followed (also a dangling one's target)."""
    return Path(os.path.realpath(path))


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_writable(path: str | Path, *, protect: tuple[str | Path, ...] = ()) -> None:
    """Raise OSError early (before any computing) if `path` cannot be written: it names a
    folder (or ends in a slash), a block device or a socket, is one of the `protect`ed input
    files (through any symlink), or its folder (a symlink's target's folder) is missing or not
    writable. ``-``, FIFOs and character devices are accepted (they are written straight
    into; a FIFO is not opened here, since opening one waits for a reader)."""
    text = str(path)
    if text == STDOUT:
        return
    if text.endswith(("/", os.sep)):
        raise IsADirectoryError(f"{path} names a folder; give a file name")
    target = resolved(path)
    for other in protect:
        if Path(other).exists() and target == resolved(other):
            raise FileExistsError(f"{path} is the input scenario; refusing to overwrite it")
    kind = output_kind(path)
    if kind == "other":
        raise IsADirectoryError(f"{path} is {_describe(os.stat(path).st_mode)}; allowed: a "
                                "regular file, a symlink to one, a FIFO, a character device "
                                "or - (standard output)")
    if kind == "stream":
        if not os.access(path, os.W_OK):
            raise PermissionError(f"{path} is not writable")
        return
    parent = target.parent
    if not parent.is_dir():
        shown = Path(path).parent if str(Path(path).parent) else Path(".")
        raise FileNotFoundError(f"directory {parent if Path(path).is_symlink() else shown} "
                                "does not exist")
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"directory {parent} is not writable")


def _fsync(handle: IO) -> None:
    try:
        os.fsync(handle.fileno())
    except OSError as error:        # a pipe or a terminal: nothing to sync
        if error.errno not in (22, 95):       # EINVAL, EOPNOTSUPP
            raise


def write_output(path: str | Path, write: Callable[[IO], None], *, binary: bool = False
                 ) -> str | Path:
    """Call `write(handle)` on the right handle for `path` (see the module docstring) and
    return `path`. Raises `OutputError` when the writing fails (nothing is left behind for a
    file; an earlier file at `path` is untouched), and OSError from `check_writable`'s checks
    for a path that can never be written."""
    kind = output_kind(path)
    text_mode = {} if binary else {"encoding": "utf-8", "newline": ""}
    if kind == "stdout":
        handle = sys.stdout.buffer if binary else sys.stdout
        try:
            write(handle)
            handle.flush()
        except BrokenPipeError:
            raise                                  # the CLI treats a closed reader as done
        except OSError as error:
            raise OutputError("standard output", error) from None
        return path
    if kind == "other":
        check_writable(path)                        # raises, naming what it is
    if kind == "stream":
        try:
            fd = os.open(path, os.O_WRONLY)          # no O_CREAT, no O_TRUNC: the node stays
            with os.fdopen(fd, "wb" if binary else "w", **text_mode) as handle:
                write(handle)
                handle.flush()
        except OSError as error:
            raise OutputError(path, error) from None
        return path
    target = resolved(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as error:
        raise OutputError(path, error) from None
    try:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)   # an existing file keeps its bits
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask      # mkstemp makes 0600; an output is an ordinary file
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb" if binary else "w", **text_mode) as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(error, OSError) and not isinstance(error, OutputError):
            raise OutputError(path, error) from None
        raise
    return path


def write_text(text: str, path: str | Path) -> str | Path:
    return write_output(path, lambda handle: handle.write(text))


def json_text(data: dict) -> str:
    """The tool's JSON layout (indent 2, no NaN: a NaN reaching a report is a bug)."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def write_json(data: dict, path: str | Path) -> str | Path:
    """`data` as the tool's JSON at `path`; gzip-compressed when the name ends in ``.gz``
    (reproducibly: no timestamp in the header, so equal reports give equal bytes)."""
    text = json_text(data)
    if str(path).endswith(".gz") and output_kind(path) == "file":
        packed = gzip.compress(text.encode("utf-8"), mtime=0)
        return write_output(path, lambda handle: handle.write(packed), binary=True)
    return write_text(text, path)
