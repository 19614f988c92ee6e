"""Parsing of human-written sizes (bytes) and rates (Gbit/s), as network engineers write them.

Sizes: a number of bytes, or a number with a unit. `B` is a byte and `b` a bit: B, kB/KB, MB,
GB, TB, PB (powers of 1000), KiB, MiB, GiB, TiB (powers of 1024); b or bit, Kb/kbit, Mb/Mbit,
Gb/Gbit, Tb/Tbit (bits: / 8); `byte` and `bytes` spelled out too. An all-lowercase unit such
as `mb` or `gb` is refused as ambiguous (the error shows both readings).
Rates: a number in Gbit/s, or a number with a unit: M/G/T, optionally followed by `b`, `bit`,
`bps`, `b/s` or `bit/s` (`100G`, `100Gb`, `100Gbit`, `100 Gb/s`, `800Gbps`, `1.6T`), or bytes
per second, `B/s` or `Bps` (`450 GB/s` is 3,600 Gbit/s, as NVLink is quoted). A byte unit
without `/s` (`100GB`) is a size, not a rate, and is refused.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from fabricjax.core.errors import short_repr

_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BINARY = {"": 1, "K": 2**10, "k": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)"
_QUANTITY_RE = re.compile(rf"^\s*{_NUMBER}\s*(\S*(?:\s*/\s*s)?)\s*$")
# a size unit: prefix, binary "i", then B / byte(s) for bytes or b / bit(s) for bits
_SIZE_UNIT_RE = re.compile(r"^(?P<prefix>[kKMGTP]?)(?P<binary>i?)"
                           r"(?P<kind>B|bytes?|b|bits?)$")
# a rate unit: prefix, then nothing, a bit unit (optionally per second) or bytes per second
_RATE_UNIT_RE = re.compile(r"^(?P<prefix>[mMkKgGtT]?)(?:(?P<bits>b|bit|bits)?(?P<per>ps|/s)?|"
                           r"(?P<bytes>B)(?P<bytes_per>ps|/s))$")
_RATE_PREFIX = {"": 1.0, "m": 1e-3, "M": 1e-3, "k": 1e-6, "K": 1e-6, "g": 1.0, "G": 1.0,
                "t": 1e3, "T": 1e3}

SIZE_HELP = ("a size such as 1048576 (bytes), '4MB', '256MiB', '1GiB' or '4Mb' (B: bytes, "
             "b or bit: bits)")
RATE_HELP = ("a rate in Gbit/s such as 100, '100G', '100Gb/s', '800Gbps', '1.6T' or "
             "'450GB/s' (bytes per second)")


def _to_float(value: int | float) -> float:
    """float(value), with integers too large for a double read as infinity (rejected later)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _checked(number: float, value: object, what: str, help_text: str) -> float:
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a positive {what} ({help_text}), got {_short(value)}")
    return number


def _split(value: object, help_text: str) -> tuple[float, str] | float:
    """A number (int or float) as it is, or (number, unit text) of a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"expected {help_text}, got {value!r}")
    if not isinstance(value, str):
        return _to_float(value)
    match = _QUANTITY_RE.match(value)
    if match is None:
        raise ValueError(f"expected {help_text}, got {value!r}")
    return float(match.group(1)), re.sub(r"\s+", "", match.group(2))


def parse_size(value: object) -> float:
    """Bytes as a float (byte counts above 2^31 must not pass through int32)."""
    parts = _split(value, SIZE_HELP)
    if isinstance(parts, float):
        return _checked(parts, value, "size", SIZE_HELP)
    number, unit = parts
    if unit == "":
        return _checked(number, value, "size", SIZE_HELP)
    match = _SIZE_UNIT_RE.match(unit)
    if match is None or (match["prefix"] == "k" and match["kind"] == "b"):
        # all lowercase (4mb, 1gb, 2kb): bytes to some, bits to the SI; say both
        if unit in ("kb", "mb", "gb", "tb", "pb", "kib", "mib", "gib", "tib"):
            byte_unit = unit[0].upper() + unit[1:-1] + "B"
            number = match_number(value)
            raise ValueError(f"{value!r} is ambiguous: write {number}{byte_unit} for bytes or "
                             f"{number}{byte_unit[:-1]}b / {number}{byte_unit[:-1]}bit for bits")
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    if match["binary"] and not match["prefix"]:
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    scale = (_BINARY if match["binary"] else _DECIMAL)[match["prefix"]]
    bits = match["kind"] in ("b", "bit", "bits")
    return _checked(number * scale / (8 if bits else 1), value, "size", SIZE_HELP)


def match_number(value: object) -> str:
    """The number part of a size or rate as the user wrote it."""
    match = _QUANTITY_RE.match(str(value))
    return match.group(1) if match else str(value)


def parse_rate_gbps(value: object) -> float:
    """Gbit/s as a float."""
    parts = _split(value, RATE_HELP)
    if isinstance(parts, float):
        return _checked(parts, value, "rate", RATE_HELP)
    number, unit = parts
    match = _RATE_UNIT_RE.match(unit)
    if match is None:
        if re.match(r"^[mMkKgGtT]?(B|bytes?)$", unit):
            raise ValueError(f"{value!r} is a size, not a rate; write "
                             f"{match_number(value)}{unit[:-1] if unit.endswith('B') else ''}"
                             f"b/s for bits per second or {match_number(value)}"
                             f"{unit}/s for bytes per second ({RATE_HELP})")
        raise ValueError(f"expected {RATE_HELP}, got {value!r}")
    scale = _RATE_PREFIX[match["prefix"]]
    if match["bytes"]:
        scale *= 8
    return _checked(number * scale, value, "rate", RATE_HELP)


def _short(value: object) -> str:
    return short_repr(value, 40)


def _round_in(num_bytes: float, scale: float, largest: bool = False) -> bool:
    """Whether `num_bytes` is one to 999 `scale`s (any number of the largest unit) and a
    number of them that four significant digits show exactly (4 MB is; 4 MiB is not a round
    number of MB: 4.194304; 5,952 MiB reads better as 5.812 GiB)."""
    value = num_bytes / scale
    return (value >= 1 and (largest or value < 1000)
            and abs(float(f"{value:.4g}") - value) <= 1e-12 * value)


def format_bytes(num_bytes: float) -> str:
    """A size in the unit family the user most likely wrote it in: decimal (4 MB) when it is
    a round number of powers of 1000, binary (4 MiB) when of powers of 1024, binary with four
    significant digits otherwise."""
    for (dec, dec_scale), (binary, bin_scale) in (
            (("TB", 1e12), ("TiB", 2**40)), (("GB", 1e9), ("GiB", 2**30)),
            (("MB", 1e6), ("MiB", 2**20)), (("kB", 1e3), ("KiB", 2**10))):
        shown = [f"{num_bytes / scale:.4g} {unit}"
                 for unit, scale in ((binary, bin_scale), (dec, dec_scale))
                 if _round_in(num_bytes, scale, unit in ("TiB", "TB"))]
        if shown:   # both round (64,000 B: 62.5 KiB, 64 kB): the shorter figure
            return min(shown, key=len)
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
