"""Parsing of human-written quantities (archplace.base.units)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.base.units import (
    format_bytes,
    parse_area_mm2,
    parse_bandwidth,
    parse_bytes,
    parse_frequency,
    parse_power_w,
    parse_time,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80 GiB", 80 * 2**30),
        ("128 MiB", 128 * 2**20),
        ("128MiB", 128 * 2**20),
        ("4 KiB", 4096),
        ("1 TiB", 2**40),
        ("128 MB", 128e6),
        ("2 kB", 2000),
        ("1.5 GB", 1.5e9),
        ("512 B", 512),
        ("4096", 4096),
        (4096, 4096),
        (2.5, 2.5),
        ("1e3 B", 1000),
        ("  7 GiB  ", 7 * 2**30),
    ],
)
def test_parse_bytes(text: str | int | float, expected: float) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80 Gb", "80 GiHz", "eighty GiB", "80 XiB", "", "GiB", True])
def test_parse_bytes_rejects(text: str | bool) -> None:
    with pytest.raises(ConfigError):
        parse_bytes(text)


def test_parse_bytes_names_the_field_in_the_message() -> None:
    with pytest.raises(ConfigError, match="accelerator.hbm"):
        parse_bytes("lots", "accelerator.hbm")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.2 TB/s", 1.2e12),
        ("600 GB/s", 6e11),
        ("200 Gb/s", 25e9),
        ("1 GiB/s", 2**30),
        ("100 MB/s", 1e8),
        ("5e9", 5e9),
        (1e9, 1e9),
    ],
)
def test_parse_bandwidth(text: str | float, expected: float) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["1.2 TB", "1.2 TB/h", "1.2 T/s", "fast"])
def test_parse_bandwidth_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_bandwidth(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.05 GHz", 1.05e9), ("940 MHz", 9.4e8), ("100 kHz", 1e5), ("7 Hz", 7.0), (2e9, 2e9)],
)
def test_parse_frequency(text: str | float, expected: float) -> None:
    assert parse_frequency(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["1.05 GiHz", "1 GB", "1.05 G"])
def test_parse_frequency_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_frequency(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1 us", 1e-6), ("2 µs", 2e-6), ("1.5 ms", 1.5e-3), ("3 ns", 3e-9), ("4 s", 4.0),
     ("0.25", 0.25), (0, 0.0)],
)
def test_parse_time(text: str | int, expected: float) -> None:
    assert parse_time(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["1 min", "1 h", "1 GHz", "soon"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_time(text)


@given(st.integers(min_value=0, max_value=2**20), st.sampled_from(["KiB", "MiB", "GiB"]))
def test_binary_prefixes_are_powers_of_1024(count: int, unit: str) -> None:
    power = {"KiB": 10, "MiB": 20, "GiB": 30}[unit]
    assert parse_bytes(f"{count} {unit}") == count * 2**power


@pytest.mark.parametrize(
    ("value", "text"),
    [(512, "512 B"), (2048, "2.0 KiB"), (128 * 2**20, "128.0 MiB"), (80 * 2**30, "80.0 GiB"),
     (3 * 2**40, "3.0 TiB"), (5000 * 2**40, "5000.0 TiB")],
)
def test_format_bytes(value: float, text: str) -> None:
    assert format_bytes(value) == text


PARSERS = {parse_bytes: "B", parse_bandwidth: "B/s", parse_frequency: "Hz", parse_time: "s",
           parse_area_mm2: "mm2", parse_power_w: "W"}


@pytest.mark.parametrize("parser", list(PARSERS))
@pytest.mark.parametrize("text", ["1e400", "-1e400", "1e308 P{unit}", 10**400, float("inf"), float("nan"),
                                  -float("inf")])
def test_quantities_that_are_not_finite_are_refused(parser, text: str | float) -> None:
    if isinstance(text, str):
        unit = PARSERS[parser]
        if "{unit}" in text:  # time and area have no prefixes: there the number itself overflows
            text = "1e400 " + unit if parser in (parse_time, parse_area_mm2) else text.format(unit=unit)
    with pytest.raises(ConfigError, match=r"^field: must be finite, got "):
        parser(text, "field")


def test_a_huge_integer_is_shown_by_its_size() -> None:
    with pytest.raises(ConfigError, match=r"^hbm: must be finite, got a number of about 400 digits$"):
        parse_bytes(10**400, "hbm")


@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["", "k", "M", "G", "T", "P"]))
def test_parsers_return_finite_numbers_or_refuse(number: float, prefix: str) -> None:
    for parser, unit in ((parse_bytes, "B"), (parse_frequency, "Hz"), (parse_power_w, "W"),
                         (parse_bandwidth, "B/s")):
        try:
            value = parser(f"{number!r} {prefix}{unit}")
        except ConfigError as exc:
            assert "must be finite" in str(exc) or "cannot parse" in str(exc)
            continue
        assert math.isfinite(value)
