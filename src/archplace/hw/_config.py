"""Shared reading and checking of the hardware YAML files (presets and search spaces).

Every problem is reported as one :class:`ConfigError` line that names the file
and the field, e.g. ``my.yaml: accelerator.hbm: must be positive, got -32 GiB``.

A numeric field may be written bare (``hbm: 32 GiB``) or with its source
(``hbm: {value: 32 GiB, source: "Jouppi et al., ISCA 2023, Table 1"}``).

Every numeric field must also lie in its *plausibility range*, :data:`PLAUSIBLE` (one table,
with the reference point of each range): a value outside is physically impossible or far beyond
any chip or cluster built, almost always a typo or a wrong unit (``1e-30 TB/s``, ``1 Hz``), and
is refused in one line naming the field, the value with its unit and the range, e.g.
``chip.yaml: accelerator.clock: 1 Hz is outside the plausible range 50 MHz to 10 GHz (...)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any

from archplace.base import inputs
from archplace.base.errors import ConfigError, MissingSectionError

_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"),
             (1e-9, "n"))
_BINARY = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def shown(value: float, unit: str) -> str:
    """``value`` (SI base unit) with ``unit`` for a message: bytes with binary prefixes
    (``16 MiB``), other units with SI prefixes (``1.5 GHz``, ``3 µs``), counts bare (``4,096``)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".rstrip()
    if unit == "B":
        for size, name in _BINARY:
            if abs(value) >= size:
                return f"{value / size:.4g} {name}"
        return f"{value:.4g} B"
    if unit in ("", "x", "mm²", "TFLOP/s"):
        number = f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"
        return f"{number} {unit}".rstrip()
    for size, prefix in _PREFIXES:
        if abs(value) >= size:
            return f"{value / size:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


@dataclass(frozen=True, slots=True)
class Plausible:
    """The plausibility range of a numeric hardware field: ``low <= value <= high`` (``low <
    value`` with ``low_open``), in SI base units (bytes, B/s, Hz, s, W; mm²; TFLOP/s).

    Attributes:
        low, high: the bounds.
        unit: ``B``, ``B/s``, ``Hz``, ``s``, ``W``, ``mm²``, ``TFLOP/s``, ``x`` (a ratio) or
            ``""`` (a count), for messages.
        reference: why the range is where it is (a reference point from the presets or a
            published figure), quoted in the message.
        low_open: exclude ``low`` itself (fractions in (0, 1]).
    """

    low: float
    high: float
    unit: str
    reference: str
    low_open: bool = False

    def text(self) -> str:
        """``50 MHz to 10 GHz`` (``above 0 to 1`` when the low end is open)."""
        low = shown(self.low, self.unit)
        return f"{'above ' if self.low_open else ''}{low} to {shown(self.high, self.unit)}"

    def check(self, value: float, where: str) -> float:
        """``value`` when it lies in the range.

        Raises:
            ConfigError: ``"<where>: <value unit> is outside the plausible range <low> to <high>
                (<reference>)"``.
        """
        if value > self.high or value < self.low or (self.low_open and value == self.low):
            raise ConfigError(f"{where}: {shown(value, self.unit)} is outside the plausible range "
                              f"{self.text()} ({self.reference})")
        return value


_ARRAY = Plausible(1, 4096, "", "TPUv4's MXU is 128x128 and the bundled spaces reach 256; 4,096 is 16x that")
_LINK = Plausible(1e6, 1e13, "B/s", "the presets' links run from phaze-paper's 4.3 GB/s (PCIe 3.0) to "
                  "NVLink 5's 900 GB/s per direction (b200-192gb); 10 TB/s is 11x NVLink 5")
_LATENCY = Plausible(0.0, 1e-3, "s", "the presets' links take 1-6 µs, phaze-paper's 0; 1 ms is longer "
                     "than a TCP round trip across a data centre")
_FRACTION = Plausible(0.0, 1.0, "", "a sustained fraction of a peak rate", low_open=True)

PLAUSIBLE: Mapping[str, Plausible] = MappingProxyType({
    # accelerator (presets and the value lists of search spaces)
    "tensor_cores": Plausible(1, 65_536, "", "the presets have 8-592 arrays (B200: 148 SMs x 4), the "
                              "phaze space up to 4,096"),
    "array_rows": _ARRAY,
    "array_cols": _ARRAY,
    "array_dim": _ARRAY,
    "vector_cores": Plausible(1, 65_536, "", "the presets have 2-148 (one per SM), the phaze space up "
                              "to 4,096"),
    "vector_lanes": Plausible(1, 65_536, "", "TPUv4: 128 lanes x 8 sublanes = 1,024 per core, the "
                              "presets' widest"),
    "vector_lanes_per_col": Plausible(1, 64, "", "a TPU's vector unit has 8 sublanes per lane"),
    "buffer": Plausible(2.0**10, 2.0**36, "B", "the presets hold 40-128 MiB; Cerebras WSE-3, the "
                        "largest on-chip SRAM shipped, 44 GB"),
    "hbm": Plausible(2.0**20, 2.0**44, "B", "the presets hold 32-192 GiB (B200: 192 GB HBM3e)"),
    "hbm_bandwidth": Plausible(1e9, 1e14, "B/s", "B200's datasheet gives 8 TB/s, the presets' fastest"),
    "clock": Plausible(5e7, 1e10, "Hz", "every chip in presets/ runs at 1.05-2.062 GHz; 10 GHz is "
                       "beyond any shipped CMOS logic clock"),
    "bytes_per_element": Plausible(1, 8, "", "FP8 (1 byte) to FP64 (8 bytes); the presets train in "
                                   "bf16 (2)"),
    "fp8_speedup": Plausible(1, 16, "x", "H100 and B200: 2 (1,979 dense FP8 TFLOP/s against 989 "
                             "bf16); FP8 GEMMs are not slower than bf16 ones"),
    # datasheet
    "peak_tflop_per_s": Plausible(1e-3, 1e6, "TFLOP/s", "GB200's datasheet gives 2,500 dense bf16 "
                                  "TFLOP/s per GPU, the presets' highest"),
    "tdp_w": Plausible(0.1, 3e4, "W", "TPUv4 192 W and B200 1,000 W; a Cerebras CS-2, one "
                       "wafer-scale chip, is rated about 23 kW"),
    # efficiency (known chips)
    "sms": Plausible(1, 65_536, "", "A100 108, H100 132, B200 148 SMs"),
    "gemm_tiles": Plausible(1, 4096, "", "the presets' cuBLAS tiles are 128-256 a side"),
    "kernel_floor": Plausible(0.0, 1e-3, "s", "the smallest traced GEMM kernel in OpenXLA's H100 "
                              "table takes 5.2 us; 1 ms is a large GEMM"),
    "gemm_sustained": _FRACTION,
    "hbm_fraction": _FRACTION,
    "attention_fwd": _FRACTION,
    "attention_bwd": _FRACTION,
    "intra_node_collective": _FRACTION,
    "inter_node_collective": _FRACTION,
    # cluster
    "devices_per_node": Plausible(1, 65_536, "", "8 in a DGX node, 72 in a GB200 NVL72 rack; a TPU "
                                  "v5p pod joins 8,960 chips by ICI"),
    "intra_node_bandwidth": _LINK,
    "inter_node_bandwidth": _LINK,
    "intra_node_latency": _LATENCY,
    "inter_node_latency": _LATENCY,
    # search space
    "area_max_mm2": Plausible(0.01, 1e5, "mm²", "the presets' model areas are 153-672 mm²; Cerebras "
                              "WSE-3, the largest chip built, is 46,225 mm²"),
})
"""Plausibility range of every numeric field of a hardware preset (``accelerator``,
``datasheet``, ``efficiency``, ``cluster``) and of a search space file, by field name (the
``efficiency`` section's ``hbm`` is ``hbm_fraction`` here).  Each range admits every bundled
preset and space with a wide margin; its reference point says where it comes from
(docs/commands/hardware.md, Plausibility ranges)."""


def check_plausible(field: str, value: float, where: str) -> float:
    """``value`` of the hardware field ``field`` (a key of :data:`PLAUSIBLE`) when it lies in the
    field's plausibility range: for values given elsewhere than in a file (``estimate matmul``'s
    ``--clock``, ``--buffer``, ``--hbm-bandwidth``, ``--array``, ``--cores``).

    Raises:
        ConfigError: outside the range, naming ``where`` (:meth:`Plausible.check`).
        KeyError: ``field`` has no range (a programming error).
    """
    return PLAUSIBLE[field].check(value, where)


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A YAML file to read: where it is, how to name it in messages, and what it is
    (``hardware preset``, ``search space``)."""

    label: str
    location: Traversable | Path
    kind: str = "hardware file"


def bundled_dir(folder: str) -> Traversable:
    """The package-data folder ``archplace/hw/<folder>``."""
    return files("archplace.hw").joinpath(folder)


def bundled_names(folder: str) -> list[str]:
    """Names (file stems) of the ``*.yaml`` files bundled in ``archplace/hw/<folder>``."""
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
    """Parse the YAML file into a mapping with string keys (:func:`archplace.base.inputs.read_mapping`).

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


def positive_int(raw: Any, where: str, plausible: Plausible | None = None) -> int:
    """A positive integer (a bare YAML integer, not a float, text or boolean), within
    ``plausible`` when given.

    Raises:
        ConfigError: anything else, or a value outside the plausibility range.
    """
    value, _ = unwrap(raw, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{where}: must be positive, got {value}")
    if plausible is not None:
        plausible.check(value, where)
    return value


def quantity(
    raw: Any, parser: Callable[[str | int | float, str], float], where: str, allow_zero: bool = False,
    plausible: Plausible | None = None,
) -> float:
    """A finite quantity parsed with one of the :mod:`archplace.base.units` parsers.

    Args:
        raw: ``"32 GiB"``, a bare number, or ``{value: ..., source: ...}``.
        parser: e.g. :func:`archplace.base.units.parse_bytes`.
        where: ``file: section.field`` for messages.
        allow_zero: accept 0 (latencies); otherwise the value must be > 0.
        plausible: the field's plausibility range (:data:`PLAUSIBLE`), or None.

    Raises:
        ConfigError: unparsable, unknown unit, infinite, negative, zero when not allowed, or
            outside ``plausible``.
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
    if plausible is not None:
        plausible.check(parsed, where)
    return parsed


def value_list(raw: Any, where: str) -> list[Any]:
    """A non-empty YAML list, as given.

    Raises:
        ConfigError: not a list, or empty.
    """
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: expected a non-empty list of values, got {raw!r}")
    return raw

