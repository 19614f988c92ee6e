"""Parsing of human-written sizes (bytes) and rates (Gbit/s).

Sizes: an integer number of bytes, or a number with a unit: B, KB/MB/GB/TB (powers of 1000),
KiB/MiB/GiB/TiB (powers of 1024). Rates: a number in Gbit/s, or a number with a unit:
M/G/T, optionally followed by ``bps`` or ``b/s`` (``100G``, ``800Gbps``, ``1.6T``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from fabricjax.core.errors import short_repr

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


def _parse_quantity(value: object, pattern: re.Pattern, units: dict, what: str,
                    help_text: str) -> float:
    """A positive finite number, or number-with-unit text matched by `pattern` (group 1 the
    number, group 2 the unit, looked up case-insensitively in `units`)."""
    if isinstance(value, bool):
        raise ValueError(f"expected {help_text}, got {value!r}")
    if isinstance(value, (int, float)):
        number = _to_float(value)
    elif isinstance(value, str):
        match = pattern.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in units:
            raise ValueError(f"expected {help_text}, got {value!r}")
        number = float(match.group(1)) * units[unit]
    else:
        raise ValueError(f"expected {help_text}, got {value!r}")
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a positive {what} ({help_text}), got {_short(value)}")
    return number


def parse_size(value: object) -> float:
    """Bytes as a float (byte counts above 2^31 must not pass through int32)."""
    return _parse_quantity(value, _SIZE_RE, _SIZE_UNITS, "size", SIZE_HELP)


def parse_rate_gbps(value: object) -> float:
    """Gbit/s as a float."""
    return _parse_quantity(value, _RATE_RE, _RATE_UNITS, "rate", RATE_HELP)


def _short(value: object) -> str:
    return short_repr(value, 40)


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


def value_text(value: Any) -> str:
    """A scenario value as a user would type it again (YAML spelling of true, false, null,
    lists and maps): what sweeps print, plot and put in CSV cells."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return str(value)
