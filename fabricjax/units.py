"""Parsing of human-written sizes (bytes) and rates (Gbit/s).

Sizes: an integer number of bytes, or a number with a unit: B, KB/MB/GB/TB (powers of 1000),
KiB/MiB/GiB/TiB (powers of 1024). Rates: a number in Gbit/s, or a number with a unit:
M/G/T, optionally followed by ``bps`` or ``b/s`` (``100G``, ``800Gbps``, ``1.6T``).
"""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_RATE_UNITS = {"": 1.0, "m": 1e-3, "g": 1.0, "t": 1e3}

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([a-zA-Z]*)\s*$")
_RATE_RE = re.compile(rf"^\s*{_NUMBER}\s*([mMgGtT]?)(?:bps|b/s|bit/s)?\s*$")

SIZE_HELP = "a byte count such as 1048576, '4MB', '256MiB' or '1GiB'"
RATE_HELP = "a rate in Gbit/s such as 100, '100G', '800Gbps' or '1.6T'"


def _to_float(value: int | float) -> float:
    """float(value), with integers too large for a double read as infinity (rejected later)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def parse_size(value: object) -> float:
    """Bytes as a float (byte counts above 2^31 must not pass through int32)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    if isinstance(value, (int, float)):
        number = _to_float(value)
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
        number = float(match.group(1)) * _SIZE_UNITS[unit]
    else:
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a positive size ({SIZE_HELP}), got {_short(value)}")
    return number


def parse_rate_gbps(value: object) -> float:
    """Gbit/s as a float."""
    if isinstance(value, bool):
        raise ValueError(f"expected {RATE_HELP}, got {value!r}")
    if isinstance(value, (int, float)):
        number = _to_float(value)
    elif isinstance(value, str):
        match = _RATE_RE.match(value)
        if match is None:
            raise ValueError(f"expected {RATE_HELP}, got {value!r}")
        number = float(match.group(1)) * _RATE_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"expected {RATE_HELP}, got {value!r}")
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a positive rate ({RATE_HELP}), got {_short(value)}")
    return number


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def format_bytes(num_bytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.4g} {unit}"
    return f"{num_bytes:.0f} B"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "stalled"
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} µs"
