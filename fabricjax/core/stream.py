"""Streams of JSON Lines (and CSV rows) that survive a kill: what a long run has finished is on
disk, line by line, and a rerun with `--resume` picks it up (no JAX import here).

Contract: a stream's first line is a header record (`header`: the stream's kind, the
fabricjax version, the validated scenario, its SHA-256 and the options that change results);
every other line is one finished record. `StreamWriter` appends whole lines with one write,
flush and fsync per call, so after a kill (even SIGKILL) a line is whole or cut short at the
end of the file. `read_stream` ignores a last line that is cut short (no newline, or not
JSON) and truncates the file back to its last whole line; `check_header` refuses a stream
that another scenario, version or option set wrote, with one line naming what differs.
Regular files (and symlinks to them) are created through `output.write_output` (a temporary
file renamed over the target), then appended to; FIFOs, character devices and ``-`` are
written straight into and cannot be resumed from.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import IO, Any, Iterable

from fabricjax.core.errors import one_line, short_repr
from fabricjax.core.output import OutputError, output_kind, write_text
from fabricjax.core.version import __version__

KIND_KEY = "fabricjax_stream"


class StreamError(ValueError):
    """A stream that cannot be resumed from (another scenario, version or options, or a line
    in its middle that is not JSON): one line for the user."""


def canonical(data: Any) -> str:
    """`data` as canonical JSON (sorted keys, no spaces): the text its SHA-256 is taken of."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)


def digest(data: Any) -> str:
    return hashlib.sha256(canonical(data).encode("utf-8")).hexdigest()


def header(kind: str, config: dict, options: dict) -> dict:
    """The first record of a stream: what its records belong to. `config`: the validated
    scenario as JSON data (`Scenario.model_dump(mode="json")`, with the digests of the files
    it reads); `options`: the command-line options that change results."""
    config = json.loads(canonical(config))         # JSON types only, as read back
    return {KIND_KEY: kind, "fabricjax": __version__, "config_sha256": digest(config),
            "config": config, "options": json.loads(canonical(options))}


def record_line(record: dict) -> str:
    return json.dumps(record, allow_nan=False) + "\n"


def _first_difference(there: Any, here: Any, where: str = "") -> tuple[str, Any, Any] | None:
    if isinstance(there, dict) and isinstance(here, dict):
        for key in list(here) + [k for k in there if k not in here]:
            if key not in there or key not in here:
                return (f"{where}.{key}" if where else str(key),
                        there.get(key, "(absent)"), here.get(key, "(absent)"))
            found = _first_difference(there[key], here[key], f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    if isinstance(there, list) and isinstance(here, list) and len(there) == len(here):
        for i, (a, b) in enumerate(zip(there, here)):
            found = _first_difference(a, b, f"{where}[{i}]")
            if found is not None:
                return found
        return None
    return None if there == here else (where or "<root>", there, here)


def check_header(found: dict | None, expected: dict, path: str | Path) -> None:
    """Raise StreamError (one line) unless `found` is `expected`: the first of kind, version,
    scenario and options that differs is named, with its value there and here."""
    name = one_line(str(path))
    if not isinstance(found, dict) or found.get(KIND_KEY) is None:
        raise StreamError(f"{name} is not a fabricjax stream (its first line is not a stream "
                          "header); allowed: a file that this command wrote")
    if found[KIND_KEY] != expected[KIND_KEY]:
        raise StreamError(f"{name} is a stream of {short_repr(found[KIND_KEY])}, not of "
                          f"{expected[KIND_KEY]}")
    if found.get("fabricjax") != expected["fabricjax"]:
        raise StreamError(f"{name} was written by fabricjax {short_repr(found.get('fabricjax'))}"
                          f", this is {expected['fabricjax']}; results may differ between "
                          "versions, so it cannot be resumed")
    for section, what in (("config", "the scenario"), ("options", "the options")):
        diff = _first_difference(found.get(section), expected[section])
        if diff is not None or (section == "config" and
                                found.get("config_sha256") != expected["config_sha256"]):
            field, there, here = diff or ("config_sha256", found.get("config_sha256"),
                                          expected["config_sha256"])
            raise StreamError(f"{name} was written for other inputs: in {what}, {field} is "
                              f"{short_repr(there)} there and {short_repr(here)} here")


def read_stream(path: str | Path, expected: dict | None = None
                ) -> tuple[dict | None, list[dict]]:
    """(header, records) of the stream at `path`; (None, []) when there is no file. With
    `expected`, the header is checked first (`check_header`; StreamError when it differs, and
    the file is left as it was). A last line cut short by a kill (no newline, or not JSON) is
    ignored, and the file is then truncated to its last whole line, so that appending goes on
    cleanly. A line that is not JSON anywhere else raises StreamError."""
    if not os.path.exists(path):
        return None, []
    name = one_line(str(path))
    if output_kind(path) != "file":
        raise StreamError(f"{name} is not a regular file; only a file can be resumed from")
    head, records, whole = None, [], 0
    with open(path, "rb") as handle:
        number = 0
        for line in handle:
            number += 1
            if not line.endswith(b"\n"):
                break                                 # cut short at the end: ignored
            try:
                value = json.loads(line)
            except ValueError:
                if handle.read(1) == b"":            # the last line: cut short mid-record
                    break
                raise StreamError(f"{name}: line {number} is not JSON; allowed: a file that "
                                  "this command wrote") from None
            if not isinstance(value, dict):
                raise StreamError(f"{name}: line {number} is not a record; allowed: a file "
                                  "that this command wrote")
            whole += len(line)
            if head is None:
                head = value
                if expected is not None:
                    check_header(head, expected, path)
            else:
                records.append(value)
    if head is None and expected is not None:
        check_header(None, expected, path)
    if whole != os.path.getsize(path):
        with open(path, "r+b") as handle:             # drop the partial line for good
            handle.truncate(whole)
            handle.flush()
            os.fsync(handle.fileno())
    return head, records


class StreamWriter:
    """Appends whole lines to an output (a file, a symlink's target, a FIFO, a character
    device or standard output): each `write` is one write, one flush and, for a file, one
    fsync, so that what it reported written survives a kill of the process."""

    def __init__(self, path: str | Path, handle: IO, *, sync: bool):
        self.path = path
        self._handle = handle
        self._sync = sync

    @classmethod
    def create(cls, path: str | Path, first: str) -> "StreamWriter":
        """A fresh stream whose first text is `first` (a header line, a CSV header). A file
        gets it atomically (replacing an earlier file at once, never leaving half of it)."""
        kind = output_kind(path)
        if kind == "stdout":
            writer = cls(path, sys.stdout, sync=False)
            writer.write(first)
            return writer
        if kind == "file":
            write_text(first, path)
            return cls.append(path)
        try:
            handle = os.fdopen(os.open(path, os.O_WRONLY), "w", encoding="utf-8", newline="")
        except OSError as error:
            raise OutputError(path, error) from None
        writer = cls(path, handle, sync=False)
        writer.write(first)
        return writer

    @classmethod
    def append(cls, path: str | Path) -> "StreamWriter":
        """Go on appending to the file at `path` (after `read_stream` checked and trimmed it)."""
        try:
            handle = open(path, "a", encoding="utf-8", newline="")
        except OSError as error:
            raise OutputError(path, error) from None
        return cls(path, handle, sync=True)

    def write(self, text: str) -> None:
        if not text:
            return
        try:
            self._handle.write(text)
            self._handle.flush()
            if self._sync:
                os.fsync(self._handle.fileno())
        except BrokenPipeError:
            raise
        except OSError as error:
            raise OutputError("standard output" if self.path == "-" else self.path,
                              error) from None

    def write_records(self, records: Iterable[dict]) -> None:
        self.write("".join(record_line(r) for r in records))

    def close(self) -> None:
        if self._handle is not sys.stdout:
            try:
                self._handle.close()
            except OSError as error:
                raise OutputError(self.path, error) from None


def beside(path: str | Path) -> str | None:
    """The stream file that goes beside the output `path`, in the same folder as the name
    given (``out.json``, ``out.json.gz`` or ``out.csv`` -> ``out.jsonl``; any other name gets ``.jsonl``
    added), or None when `path` is not a file (``-``, a FIFO, a character device): nothing
    can be written beside those."""
    if output_kind(path) != "file":
        return None
    text = str(path)
    for suffix in (".json.gz", ".json", ".csv"):
        if text.endswith(suffix) and len(text) > len(suffix) and not text.endswith(
                "/" + suffix):
            return text[: -len(suffix)] + ".jsonl"
    return text + ".jsonl"
