"""Parsing of human-written quantities at the boundary (files, CLI flags).

Inside archplace every quantity is an SI base unit (bytes, seconds, hertz,
bytes/s).  ``"80 GiB"``, ``"1.2 TB/s"`` and ``"1.05 GHz"`` are parsed here,
once, and nowhere else.  Every parser returns a finite number: NaN, infinities
and values that overflow a float once scaled (``"1e400 mm2"``, ``"1e300 PB"``)
are refused; the sign is left to the caller.
"""

from __future__ import annotations

import math
import re

from archplace.base.errors import ConfigError
from archplace.base.limits import shown

_NUMBER_UNIT = re.compile(
    r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*((?:[A-Za-z/µ][A-Za-z0-9/µ]*)?)\s*$")

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}


def _finite(value: float, what: str, text: object) -> float:
    if not math.isfinite(value):
        raise ConfigError(f"{what}: must be finite, got {shown(text)}")
    return value


def _split(text: str | int | float, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ConfigError(f"{what}: expected a number with a unit, got {text!r}")
    if isinstance(text, int | float):
        try:
            return _finite(float(text), what, text), ""
        except OverflowError:  # an int beyond the float range
            raise ConfigError(f"{what}: must be finite, got {shown(text)}") from None
    match = _NUMBER_UNIT.match(str(text))
    if not match:
        raise ConfigError(f"{what}: cannot parse {text!r} as a number with a unit")
    return _finite(float(match.group(1)), what, text), match.group(2)


def _scale(prefix: str, what: str, text: object, allow_binary: bool) -> float:
    if allow_binary and prefix in _BIN:
        return _BIN[prefix]
    if prefix in _SI:
        return _SI[prefix]
    raise ConfigError(f"{what}: unknown unit prefix {prefix!r} in {text!r}")


def parse_bytes(text: str | int | float, what: str = "size") -> float:
    """Parse a byte count: ``"80 GiB"`` -> 85899345920.0, ``"128 MB"`` -> 1.28e8, ``4096`` -> 4096.0.

    Units: B with SI (k, M, G, T) or binary (Ki, Mi, Gi, Ti) prefixes. A bare
    number is bytes.

    Raises:
        ConfigError: unparsable text, an unknown unit, or a value that is not finite.
    """
    value, unit = _split(text, what)
    if unit and not unit.endswith("B"):
        raise ConfigError(f"{what}: expected a byte unit such as 'GiB' or 'MB', got {text!r}")
    return _finite(value * _scale(unit[:-1], what, text, allow_binary=True), what, text)


def parse_bandwidth(text: str | int | float, what: str = "bandwidth") -> float:
    """Parse a bandwidth in bytes/s: ``"1.2 TB/s"`` -> 1.2e12, ``"600 GB/s"`` -> 6e11.

    A bare number is bytes/s. Bits per second (``"200 Gb/s"``) are converted to bytes.

    Raises:
        ConfigError: unparsable text, an unknown unit, or a value that is not finite.
    """
    value, unit = _split(text, what)
    if not unit:
        return value
    if not unit.endswith("/s"):
        raise ConfigError(f"{what}: expected a unit per second such as 'TB/s', got {text!r}")
    base = unit[:-2]
    if base.endswith("B"):
        return _finite(value * _scale(base[:-1], what, text, allow_binary=True), what, text)
    if base.endswith("b"):
        return _finite(value * _scale(base[:-1], what, text, allow_binary=True) / 8.0, what, text)
    raise ConfigError(f"{what}: expected B/s or b/s, got {text!r}")


def parse_frequency(text: str | int | float, what: str = "frequency") -> float:
    """Parse a frequency in hertz: ``"1.05 GHz"`` -> 1.05e9. A bare number is hertz.

    Raises:
        ConfigError: unparsable text, an unknown unit, or a value that is not finite.
    """
    value, unit = _split(text, what)
    if unit and not unit.endswith("Hz"):
        raise ConfigError(f"{what}: expected a unit such as 'GHz', got {text!r}")
    return _finite(value * _scale(unit[:-2] if unit else "", what, text, allow_binary=False), what, text)


def parse_time(text: str | int | float, what: str = "time") -> float:
    """Parse a duration in seconds: ``"2 us"`` -> 2e-6, ``"1.5 ms"`` -> 1.5e-3. A bare number is seconds.

    Raises:
        ConfigError: unparsable text, an unknown unit, or a value that is not finite.
    """
    value, unit = _split(text, what)
    factors = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    if unit not in factors:
        raise ConfigError(f"{what}: expected s, ms, us or ns, got {text!r}")
    return _finite(value * factors[unit], what, text)


def parse_area_mm2(text: str | int | float, what: str = "area") -> float:
    """Parse an area in mm²: ``"280 mm2"``, ``"280 mm²"``, ``280`` -> 280.0.

    Raises:
        ConfigError: unparsable text, another unit, or a value that is not finite.
    """
    cleaned = str(text).replace("mm²", "mm2") if isinstance(text, str) else text
    value, unit = _split(cleaned, what)
    if unit not in ("", "mm2"):
        raise ConfigError(f"{what}: expected mm2, got {text!r}")
    return value


def parse_power_w(text: str | int | float, what: str = "power") -> float:
    """Parse a power in watts: ``"400 W"``, ``"0.4 kW"``, ``400`` -> 400.0.

    Raises:
        ConfigError: unparsable text, another unit, or a value that is not finite.
    """
    value, unit = _split(text, what)
    if unit and not unit.endswith("W"):
        raise ConfigError(f"{what}: expected a unit such as 'W' or 'kW', got {text!r}")
    return _finite(value * _scale(unit[:-1] if unit else "", what, text, allow_binary=False), what, text)


def format_bytes(value_bytes: float) -> str:
    """Human form of a byte count with binary prefixes, e.g. ``91.2 GiB``."""
    value = float(value_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024.0 or unit == "TiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{value:.0f} B"
        value /= 1024.0
    raise AssertionError("unreachable")
