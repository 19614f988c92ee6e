"""The persistent compilation cache: XLA programs compiled by one run, loaded by the next.

Most of a one-off question's wall time is XLA compiling the phase programs (seconds each on a
CPU); with the programs on disk a second run of the same shapes skips that and is left with
tracing and running. The cache is on by default for the command line, in a per-user folder:

- where: `--cache-dir DIR`, else the environment variable FABRICJAX_CACHE_DIR, else
  $XDG_CACHE_HOME/fabricjax/xla (~/.cache/fabricjax/xla when XDG_CACHE_HOME is unset);
- off: `--cache-dir off` or FABRICJAX_CACHE_DIR=off;
- size: at most FABRICJAX_CACHE_MAX_BYTES (default 2 GiB); past it JAX evicts the least
  recently used programs. Size-bounded, JAX guards every read and write with a file lock, so
  two runs (or a sweep's processes) share one folder safely;
- clearing: `fabricjax cache --clear`, or delete the folder.

The same folder holds the engine's compiled executables (`core.executables`: what lets a
warm process skip tracing and lowering too), under the same size bound and lock.

Programs that compiled in under MIN_COMPILE_SECONDS are not written (they cost more to look
up than to rebuild). A program's key covers its code, shapes, JAX/jaxlib versions, backend and
XLA flags, so a stale entry is never used for a different program. `enable_compile_cache`
must run before the first compilation; `cache_record` is what the report's `versions` says.
Imports JAX inside functions only: error paths of the command line never load it.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_DIR = "FABRICJAX_CACHE_DIR"
ENV_MAX_BYTES = "FABRICJAX_CACHE_MAX_BYTES"
OFF_WORDS = ("off", "none", "false", "0")
DEFAULT_MAX_BYTES = 2 * 2**30
MIN_COMPILE_SECONDS = 0.05
SUFFIX = "-cache"             # how JAX names an entry's file (and -atime its access stamp)

_record: dict = {"compile_cache": "off"}


class CacheError(ValueError):
    """The cache folder or size cannot be used (a user-fixable option error)."""


def default_dir() -> Path:
    """$XDG_CACHE_HOME/fabricjax/xla, or ~/.cache/fabricjax/xla."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fabricjax" / "xla"


def cache_dir(option: str | None = None) -> Path | None:
    """The folder in use: `option` (e.g. `--cache-dir`), else FABRICJAX_CACHE_DIR, else the
    default; None when the chosen value is `off`."""
    value = option if option is not None else os.environ.get(ENV_DIR)
    if value is None:
        return default_dir()
    if value.strip().lower() in OFF_WORDS or not value.strip():
        return None
    return Path(value).expanduser()


def max_bytes() -> int:
    """FABRICJAX_CACHE_MAX_BYTES (a positive integer), else DEFAULT_MAX_BYTES."""
    text = os.environ.get(ENV_MAX_BYTES)
    if text is None:
        return DEFAULT_MAX_BYTES
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise CacheError(f"{ENV_MAX_BYTES} must be a positive number of bytes, got {text!r}")
    return value


def enable_compile_cache(option: str | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at `cache_dir(option)` (created if missing),
    bounded by `max_bytes()`, or switch it off. Returns the folder (None: off). Raises
    CacheError when the folder cannot be created or written."""
    import jax

    path = cache_dir(option)
    limit = max_bytes()
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        _record.update(compile_cache="off")
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CacheError(f"cannot use {path} as the compilation cache "
                         f"({error.strerror or error}); allowed: a writable folder, or off"
                         ) from None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_compilation_cache_max_size", limit)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    _record.update(compile_cache=str(path))
    return path


def cache_record() -> dict:
    """{"compile_cache": folder or "off"}: what the report's `versions` records."""
    return dict(_record)


def cache_usage(path: Path) -> tuple[int, int]:
    """(programs, bytes) stored in the cache folder `path` (0, 0 when it does not exist)."""
    if not path.is_dir():
        return 0, 0
    entries = [p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIX)]
    return len(entries), sum(p.stat().st_size for p in entries)


def clear_cache(path: Path) -> int:
    """Delete every program (and its access stamp) from the cache folder `path`; returns the
    number of programs deleted. Leaves the folder and anything else in it."""
    if not path.is_dir():
        return 0
    removed = 0
    for entry in path.iterdir():
        if entry.is_file() and entry.name.endswith((SUFFIX, "-atime")):
            removed += entry.name.endswith(SUFFIX)
            entry.unlink(missing_ok=True)
    return removed
