"""Shared reading and checking of the hardware YAML files (presets and search spaces).

Every problem is reported as one :class:`ConfigError` line that names the file
and the field, e.g. ``my.yaml: accelerator.hbm: must be positive, got -32 GiB``.

A numeric field may be written bare (``hbm: 32 GiB``) or with its source
(``hbm: {value: 32 GiB, source: "Jouppi et al., ISCA 2023, Table 1"}``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from archplace import inputs
from archplace.errors import ConfigError, MissingSectionError


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A YAML file to read: where it is, how to name it in messages, and what it is
    (``hardware preset``, ``search space``)."""

    label: str
    location: Traversable | Path
    kind: str = "hardware file"


def bundled_dir(folder: str) -> Traversable:
    """The package-data folder ``archplace/hardware/<folder>``."""
    return files("archplace.hardware").joinpath(folder)


def bundled_names(folder: str) -> list[str]:
    """Names (file stems) of the ``*.yaml`` files bundled in ``archplace/hardware/<folder>``."""
    directory = bundled_dir(folder)
    if not directory.is_dir():
        return []
    return sorted(
        entry.name[: -len(".yaml")]
        for entry in directory.iterdir()
        if entry.is_file() and entry.name.endswith(".yaml")
    )


def _looks_like_path(text: str) -> bool:
    return "/" in text or os.sep in text or text.endswith((".yaml", ".yml"))


def _exists(path: Path) -> bool:
    """``path.exists()``, False for a name the OS refuses (too long, a NUL character)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def resolve(name_or_path: str | os.PathLike[str], folder: str, kind: str) -> ConfigFile:
    """Find a bundled file by name, or a user file by path.

    Args:
        name_or_path: a bundled name such as ``tpuv4``, or the path of a YAML file.
        folder: package-data folder of the bundled files (``presets`` or ``spaces``).
        kind: what is looked up, for messages (``hardware preset``, ``search space``).

    Raises:
        ConfigError: an unknown name (listing the known ones). A path is not opened here: a
            missing or unreadable file is reported by :func:`read_mapping`.
    """
    if isinstance(name_or_path, os.PathLike):
        name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ConfigError(f"{kind}: expected a name or a file path, got {name_or_path!r}")
    names = bundled_names(folder)
    if name_or_path in names:
        return ConfigFile(f"{name_or_path}.yaml", bundled_dir(folder).joinpath(f"{name_or_path}.yaml"), kind)
    path = Path(name_or_path)
    if _looks_like_path(name_or_path) or _exists(path):  # read_mapping says what is wrong with it
        return ConfigFile(name_or_path, path, kind)
    raise ConfigError(f"unknown {kind} '{name_or_path}'; choose from: {', '.join(names)}")


def read_mapping(config: ConfigFile) -> dict[str, Any]:
    """Parse the YAML file into a mapping with string keys (:func:`archplace.inputs.read_mapping`).

    Raises:
        ConfigError: a missing, unreadable, oversized, binary or malformed file, or a top
            level that is not a mapping.
    """
    return inputs.read_mapping(config.location, config.kind, syntax="yaml", label=config.label)


def section(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """The sub-mapping ``data[key]``.

    Raises:
        ConfigError: missing, or not a mapping.
    """
    if key not in data:
        raise MissingSectionError(f"{where}: missing section '{key}'", key)
    value = data[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{where}.{key}: expected a mapping of fields")
    return value


def check_keys(
    data: Mapping[str, Any], where: str, required: Iterable[str], optional: Iterable[str] = ()
) -> None:
    """Every ``required`` key is present and no key outside ``required | optional`` is.

    Raises:
        ConfigError: naming the first missing or unknown field.
    """
    required = list(required)
    allowed = set(required) | set(optional)
    for key in required:
        if key not in data:
            raise ConfigError(f"{where}: missing field '{key}'")
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown field '{key}'; expected: {', '.join(sorted(allowed))}"
            )


def unwrap(raw: Any, where: str) -> tuple[Any, str | None]:
    """Split a field into (value, source): bare ``x`` or ``{value: x, source: "..."}``.

    Raises:
        ConfigError: a mapping without ``value`` or with other keys, or a non-text source.
    """
    if not isinstance(raw, dict):
        return raw, None
    check_keys(raw, where, required=["value"], optional=["source"])
    source = raw.get("source")
    if source is not None and not isinstance(source, str):
        raise ConfigError(f"{where}.source: expected text, got {source!r}")
    return raw["value"], source


def text_field(raw: Any, where: str) -> str:
    """A non-empty string.

    Raises:
        ConfigError: anything else.
    """
    value, _ = unwrap(raw, where)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected non-empty text, got {value!r}")
    return value


def positive_int(raw: Any, where: str) -> int:
    """A positive integer (a bare YAML integer, not a float, text or boolean).

    Raises:
        ConfigError: anything else.
    """
    value, _ = unwrap(raw, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{where}: must be positive, got {value}")
    return value


def quantity(
    raw: Any, parser: Callable[[str | int | float, str], float], where: str, allow_zero: bool = False
) -> float:
    """A finite quantity parsed with one of the :mod:`archplace.units` parsers.

    Args:
        raw: ``"32 GiB"``, a bare number, or ``{value: ..., source: ...}``.
        parser: e.g. :func:`archplace.units.parse_bytes`.
        where: ``file: section.field`` for messages.
        allow_zero: accept 0 (latencies); otherwise the value must be > 0.

    Raises:
        ConfigError: unparsable, unknown unit, infinite, negative, or zero when not allowed.
    """
    value, _ = unwrap(raw, where)
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: expected a number with a unit, got {value!r}")
    parsed = parser(value, where)
    if not math.isfinite(parsed):
        raise ConfigError(f"{where}: must be finite, got {value!r}")
    if parsed < 0 or (parsed == 0 and not allow_zero):
        bound = "must be >= 0" if allow_zero else "must be positive"
        raise ConfigError(f"{where}: {bound}, got {value!r}")
    return parsed


def value_list(raw: Any, where: str) -> list[Any]:
    """A non-empty YAML list, as given.

    Raises:
        ConfigError: not a list, or empty.
    """
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a non-empty list of values, got {raw!r}")
    return raw

