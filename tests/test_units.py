"""`fabricjax.core.units`: sizes (bytes) and rates (Gbit/s) written by people.

Good values parse to a positive finite float in the documented unit; anything else (a sign, zero,
an unknown unit, a boolean, a non-number) raises ValueError whose message shows an example of
what is allowed, so the scenario loader can pass it on to the user unchanged.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricjax.core.units import format_bytes, format_seconds, parse_rate_gbps, parse_size


# --------------------------------------------------------------------------- sizes

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1GiB", 2**30),
        ("4MB", 4e6),
        ("256MiB", 256 * 2**20),
        ("1KiB", 1024),
        ("1kB", 1e3),
        ("4Mb", 5e5),          # b is a bit: 4 megabits are half a megabyte
        ("4Mbit", 5e5),
        ("1Gb", 1.25e8),
        ("8b", 1.0),
        ("3 bytes", 3.0),
        ("1TB", 1e12),
        ("2TiB", 2 * 2**40),
        ("1.5GB", 1.5e9),
        ("0.5GiB", 2**29),
        ("512B", 512),
        ("512", 512),
        ("1e3", 1e3),
        ("  64 MiB  ", 64 * 2**20),
        (1048576, 1048576),
        (1.5, 1.5),
        (2**40, 2**40),
    ],
)
def test_parse_size_good(text, expected):
    value = parse_size(text)
    assert isinstance(value, float)
    assert value == expected


@pytest.mark.parametrize("text", ["4mb", "1kb", "2gb", "1tb", "4mib"])
def test_all_lowercase_sizes_are_ambiguous_and_say_both_readings(text):
    """`4mb` is 4 MB to some and 4 megabits to others: refused, naming both spellings."""
    with pytest.raises(ValueError) as info:
        parse_size(text)
    message = str(info.value)
    assert "ambiguous" in message and "bytes" in message and "bits" in message


@pytest.mark.parametrize(("text", "gbps"), [
    ("100Gb", 100.0), ("100Gbit", 100.0), ("100 Gb/s", 100.0), ("100 Gbit/s", 100.0),
    ("800Gbps", 800.0), ("450 GB/s", 3600.0), ("450GBps", 3600.0), ("400M", 0.4)])
def test_rates_as_engineers_write_them(text, gbps):
    assert parse_rate_gbps(text) == pytest.approx(gbps)


def test_parse_size_large_counts_stay_exact():
    # Byte counts above 2**31 must not wrap (they never pass through int32).
    assert parse_size("8GiB") == 8 * 2**30
    assert parse_size(3 * 2**33) == float(3 * 2**33)


@pytest.mark.parametrize(
    "bad",
    [
        -1, 0, 0.0, -0.5, "-1GiB", "0MB", "0", "-4MB",
        "abc", "", "   ", "GiB", "5XB", "1 2MB", "1GiBs", "1.2.3MB", "0x10",
        True, False, None, [1], {"size": 1}, b"1GB",
        float("nan"), float("inf"), -float("inf"), "nan", "inf", "1e400",
    ],
    ids=repr,
)
def test_parse_size_bad(bad):
    with pytest.raises(ValueError) as info:
        parse_size(bad)
    # The message shows what is allowed.
    assert "1GiB" in str(info.value)


def test_parse_size_huge_integer_is_a_value_error():
    # YAML reads a 400-digit number as a Python int; float() of it raises OverflowError,
    # which pydantic does not turn into a validation error.
    with pytest.raises(ValueError):
        parse_size(10**400)


# --------------------------------------------------------------------------- rates

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100G", 100.0),
        ("800Gbps", 800.0),
        ("1.6T", 1600.0),
        ("1.6Tbps", 1600.0),
        ("400Gb/s", 400.0),
        ("100gbps", 100.0),
        ("100 G", 100.0),
        ("25000M", 25.0),
        ("400", 400.0),
        (100, 100.0),
        (400.0, 400.0),
        (0.5, 0.5),
    ],
)
def test_parse_rate_good(text, expected):
    value = parse_rate_gbps(text)
    assert isinstance(value, float)
    assert value == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        -100, 0, 0.0, "-1G", "0G", "0",
        "abc", "", "G", "5XB", "100Q", "100GB", "1.6 Tera",
        True, False, None, [100], b"100G",
        float("nan"), float("inf"), "inf", "1e400T",
    ],
    ids=repr,
)
def test_parse_rate_bad(bad):
    with pytest.raises(ValueError) as info:
        parse_rate_gbps(bad)
    assert "800Gbps" in str(info.value)


def test_parse_rate_huge_integer_is_a_value_error():
    with pytest.raises(ValueError):
        parse_rate_gbps(10**400)


# --------------------------------------------------------------------------- properties

@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=10**6),
       st.sampled_from([("", 1), ("B", 1), ("KB", 10**3), ("MiB", 2**20), ("GiB", 2**30)]))
def test_parse_size_units_scale(count, unit):
    suffix, scale = unit
    assert parse_size(f"{count}{suffix}") == count * scale


_UNITY = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="0123456789.eE+- kKmMgGtTiIbBps/", max_size=12),
    st.integers(), st.floats(), st.booleans(), st.none(),
)


@settings(max_examples=100, deadline=None)
@given(_UNITY)
def test_parsers_return_positive_finite_or_value_error(value):
    for parse in (parse_size, parse_rate_gbps):
        try:
            out = parse(value)
        except ValueError:
            continue
        assert isinstance(out, float) and math.isfinite(out) and out > 0


# --------------------------------------------------------------------------- formatting

def test_format_bytes():
    assert format_bytes(2**30) == "1 GiB"
    assert format_bytes(4e6) == "4 MB"              # the unit the user wrote, not 3.815 MiB
    assert format_bytes(4 * 2**20) == "4 MiB" and format_bytes(1.5e9) == "1.5 GB"
    assert format_bytes(3_000_001) == "2.861 MiB"   # neither round: binary, 4 digits
    # round in a smaller unit but past 999 of it: the larger unit reads better
    assert format_bytes(5952 * 2**20) == "5.812 GiB"
    # round in both families: the shorter figure (64 kB, not 62.5 KiB)
    assert format_bytes(64_000) == "64 kB" and format_bytes(2000 * 2**40) == "2000 TiB"
    assert format_bytes(512) == "512 B"


def test_format_seconds():
    assert format_seconds(None) == "stalled"
    assert format_seconds(2.0) == "2.000 s"
    assert format_seconds(1.6e-4) == "160.00 µs"
    assert format_seconds(5e-3) == "5.000 ms"
