"""Accelerator search spaces, as data (docs/commands/search.md, Search spaces).

A space file names a ``base`` preset -- the fields that are not searched (clock,
HBM bandwidth, data type) come from it -- and lists the values of each searched
field::

    source: "..."
    base: tpuv4                 # preset name, or a path (relative to this file)
    tensor_cores: [2, 4, 8, 16]
    array_dim: [64, 128, 256]   # square arrays: rows = cols = array_dim; or, instead,
    # array_rows: [2, 4, 8]     # rectangular arrays: every rows x cols pair
    # array_cols: [2, 4, 8]
    vector_cores: [1, 2]
    buffer: [32 MiB, 64 MiB, 128 MiB]
    hbm: [32 GiB]
    area_max_mm2: null          # optional; default: area of the base preset
    area_min_fraction: 0.3      # optional; default 0.3
    area_floor_waived_for: [tensor_cores]   # optional; default [tensor_cores]
    vector_lanes_per_col: 1     # optional; default 1 (PHAZE)
    array_timing: overlapped    # optional; one value or a list; default: the base preset's
    fp8_speedup: 2              # optional; FP8 GEMM rate / bf16 rate of every design;
                                # default: the base preset's (none: no FP8)

As in PHAZE (Wang et al., ICML 2024): the vector lanes of a vector core are tied
to the array width, ``vector_lanes = array_cols * vector_lanes_per_col`` -- PHAZE
uses 1; a TPU's vector unit has 8 sublanes per lane, so a TPU-faithful space
uses 8 (128 x 8 = 1024 for 128-wide arrays).  A design is kept when
``area_min_fraction * A_max <= area <= A_max``, where ``A_max`` defaults to the
area of the base preset (the TPUv4-like chip) and the lower bound is waived for
designs with a single tensor core -- or, with ``area_floor_waived_for:
[tensor_cores, vector_cores]``, a single tensor core or a single vector core, as PHAZE's
code has it (``Estimator/architecture.py``, ``generate_all_cores_to_explore``:
``area_factor = 0.0 if num_tc == 1 or num_vc == 1``).

``array_timing`` picks the systolic cycle model of every design (``overlapped``, the
default, or ``scalesim``; :class:`~archplace.hw.accelerator.ArrayTiming`); a list
makes it a searched dimension, for comparing the two models on the same space.
Designs timed with SCALE-Sim's count carry ``-scalesim`` at the end of their name.

``fp8_speedup`` gives every design FP8 tensor cores (:mod:`archplace.cost.precision`): its
arrays run a GEMM with 1-byte operands that many times faster than with bf16 ones; without
it the designs have the base preset's (``tpuv4`` and ``phaze-ref`` have none).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.units import parse_bytes
from archplace.hw import _config
from archplace.hw._config import PLAUSIBLE
from archplace.hw.accelerator import Accelerator, ArrayTiming
from archplace.hw.area import area_mm2, area_of_mm2
from archplace.hw.presets import load_accelerator, parse_array_timing, parse_fp8_speedup

_FOLDER = "spaces"
_KIND = "search space"
_LIST_FIELDS = ("tensor_cores", "vector_cores", "buffer", "hbm")
_ARRAY_FIELDS = ("array_dim", "array_rows", "array_cols")
_OPTIONAL_FIELDS = ("source", "description", "area_max_mm2", "area_min_fraction", "fp8_speedup",
                    "vector_lanes_per_col", "array_timing", "area_floor_waived_for", *_ARRAY_FIELDS)

# The fields whose value 1 may waive the area floor (``area_floor_waived_for``).
WAIVER_FIELDS = ("tensor_cores", "vector_cores")

# Relative slack on the area comparisons, so the base design itself is never lost to rounding.
_AREA_RTOL = 1e-9

_KIB_BYTES = 2**10
_MIB_BYTES = 2**20
_GIB_BYTES = 2**30


def _bytes_label(value_bytes: float, units: tuple[tuple[str, int], ...]) -> str:
    """Exact short label: the largest unit of ``units`` that divides the value, else bytes."""
    for unit, size in units:
        if value_bytes >= size and float(value_bytes) % size == 0:
            return f"{int(value_bytes) // size}{unit}"
    if float(value_bytes).is_integer():
        return f"{int(value_bytes)}B"
    return f"{value_bytes!r}B"


def buffer_label(buffer_bytes: float) -> str:
    """``134217728`` -> ``128MiB`` (MiB, else KiB, else bytes)."""
    return _bytes_label(buffer_bytes, (("MiB", _MIB_BYTES), ("KiB", _KIB_BYTES)))


def hbm_label(hbm_bytes: float) -> str:
    """``34359738368`` -> ``32GiB`` (GiB, else MiB, else bytes)."""
    return _bytes_label(hbm_bytes, (("GiB", _GIB_BYTES), ("MiB", _MIB_BYTES)))


def design_name(tensor_cores: int, array_dim: int, vector_cores: int,
                buffer_bytes: float, hbm_bytes: float,
                array_timing: ArrayTiming = ArrayTiming.OVERLAPPED, array_cols: int | None = None) -> str:
    """Readable unique name of a design, e.g. ``tc8-128x128-vc2-buf128MiB-hbm32GiB``
    (``...-hbm32GiB-scalesim`` with SCALE-Sim's array timing).

    ``array_dim`` is the array's rows; its cols are ``array_cols``, or ``array_dim`` again
    (a square array) when None: ``design_name(8, 64, 2, ..., array_cols=256)`` names
    ``tc8-64x256-...``.
    """
    cols = array_dim if array_cols is None else array_cols
    suffix = "" if array_timing is ArrayTiming.OVERLAPPED else f"-{array_timing.value}"
    return (f"tc{tensor_cores}-{array_dim}x{cols}-vc{vector_cores}"
            f"-buf{buffer_label(buffer_bytes)}-hbm{hbm_label(hbm_bytes)}{suffix}")


def _check_values(space: str, field: str, values: tuple[Any, ...], integral: bool) -> None:
    if not values:
        raise ConfigError(f"search space '{space}': {field} needs at least one value")
    for value in values:
        if integral and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"search space '{space}': {field} values must be whole numbers, "
                              f"got {value!r}")
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ConfigError(f"search space '{space}': {field} values must be positive, "
                              f"got {value!r}")
    if len(set(values)) != len(values):
        raise ConfigError(f"search space '{space}': {field} has repeated values {list(values)}")


@dataclass(frozen=True)
class SearchSpace:
    """A set of accelerator designs: the product of the value lists, filtered by area.

    Attributes:
        name: label of the space (the file stem for files).
        base: name (or resolved path) of the base preset; its ``cluster`` section gives the
            default links (``load_cluster(space.base, devices)``).
        base_accelerator: the base design; the unsearched fields (clock, HBM bandwidth,
            data type) of every design come from it.
        tensor_cores: values of ``Accelerator.tensor_cores``.
        array_dims: values of the (square) array size; rows = cols = value, vector lanes =
            value x ``vector_lanes_per_col``.  Empty when ``array_rows`` and ``array_cols``
            are given.
        vector_cores: values of ``Accelerator.vector_cores``.
        buffer_bytes: values of the global-buffer capacity, bytes.
        hbm_bytes: values of the HBM capacity, bytes.
        area_max_mm2: the area budget ``A_max``; ``None`` means the area of the base design.
        area_min_fraction: designs below ``area_min_fraction * A_max`` are dropped unless
            they have one tensor core (PHAZE uses 0.3).
        source: where the value lists come from.
        vector_lanes_per_col: vector lanes per array column (1 in PHAZE, 8 for a TPU's
            sublanes).
        array_timings: values of ``Accelerator.array_timing``; ``None`` means the base
            design's alone.
        array_rows, array_cols: rectangular arrays instead of ``array_dims``: every pair of a
            rows value and a cols value (vector lanes = cols x ``vector_lanes_per_col``);
            ``None`` (both) for square arrays.
        area_floor_waived_for: the fields (``tensor_cores``, ``vector_cores``) whose value 1
            waives the area floor: ``("tensor_cores",)`` by default; PHAZE's code waives it
            for one tensor core or one vector core (both fields).

    Raises:
        ConfigError: an empty list, a repeated, non-positive or (for counts) non-integer
            value, a non-positive ``area_max_mm2``, a fraction outside [0, 1], a
            ``vector_lanes_per_col`` that is not a positive whole number, an empty,
            repeated or unknown array timing, square and rectangular arrays both or neither
            given, or an unknown or repeated waiver field.
    """

    name: str
    base: str
    base_accelerator: Accelerator
    tensor_cores: tuple[int, ...]
    array_dims: tuple[int, ...]
    vector_cores: tuple[int, ...]
    buffer_bytes: tuple[float, ...]
    hbm_bytes: tuple[float, ...]
    area_max_mm2: float | None = None
    area_min_fraction: float = 0.3
    source: str = ""
    vector_lanes_per_col: int = 1
    array_timings: tuple[ArrayTiming, ...] | None = None
    array_rows: tuple[int, ...] | None = None
    array_cols: tuple[int, ...] | None = None
    area_floor_waived_for: tuple[str, ...] = ("tensor_cores",)

    def __post_init__(self) -> None:
        if (isinstance(self.vector_lanes_per_col, bool) or not isinstance(self.vector_lanes_per_col, int)
                or self.vector_lanes_per_col < 1):
            raise ConfigError(f"search space '{self.name}': vector_lanes_per_col must be a positive "
                              f"whole number, got {self.vector_lanes_per_col!r}")
        _check_values(self.name, "tensor_cores", self.tensor_cores, integral=True)
        self._check_arrays()
        _check_values(self.name, "vector_cores", self.vector_cores, integral=True)
        _check_values(self.name, "buffer", self.buffer_bytes, integral=False)
        _check_values(self.name, "hbm", self.hbm_bytes, integral=False)
        if self.area_max_mm2 is not None and not (
            isinstance(self.area_max_mm2, int | float) and math.isfinite(self.area_max_mm2)
            and self.area_max_mm2 > 0
        ):
            raise ConfigError(f"search space '{self.name}': area_max_mm2 must be positive, "
                              f"got {self.area_max_mm2!r}")
        if self.array_timings is not None:
            if not self.array_timings or not all(isinstance(t, ArrayTiming) for t in self.array_timings):
                raise ConfigError(f"search space '{self.name}': array_timing values must be some of "
                                  f"{', '.join(t.value for t in ArrayTiming)}, got {self.array_timings!r}")
            if len(set(self.array_timings)) != len(self.array_timings):
                raise ConfigError(f"search space '{self.name}': array_timing has repeated values "
                                  f"{[t.value for t in self.array_timings]}")
        if not (isinstance(self.area_min_fraction, int | float)
                and 0.0 <= self.area_min_fraction <= 1.0):
            raise ConfigError(f"search space '{self.name}': area_min_fraction must be in "
                              f"[0, 1], got {self.area_min_fraction!r}")
        waived = self.area_floor_waived_for
        if (not isinstance(waived, tuple) or any(f not in WAIVER_FIELDS for f in waived)
                or len(set(waived)) != len(waived)):
            raise ConfigError(f"search space '{self.name}': area_floor_waived_for must list some of "
                              f"{', '.join(WAIVER_FIELDS)} once each, got {waived!r}")

    def _check_arrays(self) -> None:
        rectangular = (self.array_rows, self.array_cols)
        if all(v is None for v in rectangular):
            _check_values(self.name, "array_dim", self.array_dims, integral=True)
            return
        if any(v is None for v in rectangular) or self.array_dims:
            raise ConfigError(f"search space '{self.name}': give either array_dim (square arrays) "
                              f"or both array_rows and array_cols (rectangular arrays)")
        _check_values(self.name, "array_rows", tuple(self.array_rows or ()), integral=True)
        _check_values(self.name, "array_cols", tuple(self.array_cols or ()), integral=True)

    @property
    def array_shapes(self) -> tuple[tuple[int, int], ...]:
        """The ``(rows, cols)`` of the arrays, in enumeration order: ``(d, d)`` for each
        ``array_dims`` value, else every ``array_rows`` x ``array_cols`` pair (rows outer)."""
        if self.array_rows is None or self.array_cols is None:
            return tuple((d, d) for d in self.array_dims)
        return tuple(itertools.product(self.array_rows, self.array_cols))

    @property
    def area_budget_mm2(self) -> float:
        """``A_max`` in mm²: ``area_max_mm2`` if given, else the area of the base design."""
        if self.area_max_mm2 is not None:
            return self.area_max_mm2
        return area_mm2(self.base_accelerator)

    @property
    def area_floor_mm2(self) -> float:
        """``area_min_fraction * A_max`` in mm² (waived for one-tensor-core designs)."""
        return self.area_min_fraction * self.area_budget_mm2

    @property
    def timings(self) -> tuple[ArrayTiming, ...]:
        """The array timings of the designs: ``array_timings``, else the base design's."""
        if self.array_timings is None:
            return (self.base_accelerator.array_timing,)
        return self.array_timings

    @property
    def size_before_area_rule(self) -> int:
        """Number of value combinations before the area rule."""
        return (len(self.tensor_cores) * len(self.array_shapes) * len(self.vector_cores)
                * len(self.buffer_bytes) * len(self.hbm_bytes) * len(self.timings))

    def _floor_waived(self, tensor_cores: int, vector_cores: int) -> bool:
        counts = {"tensor_cores": tensor_cores, "vector_cores": vector_cores}
        return any(counts[field] == 1 for field in self.area_floor_waived_for)

    def admits(self, acc: Accelerator) -> bool:
        """Whether ``acc`` satisfies the area rule of this space."""
        return _admits(area_mm2(acc), self._floor_waived(acc.tensor_cores, acc.vector_cores),
                       self.area_budget_mm2, self.area_floor_mm2)

    def core_configurations(self) -> tuple[tuple[int, int, int, int, float, float], ...]:
        """The core configurations the area rule admits, HBM and array timing left out.

        Returns:
            ``(tensor_cores, array_rows, array_cols, vector_cores, buffer_bytes, area_mm2)``
            tuples, in the order of :meth:`designs` (vector lanes are ``array_cols x
            vector_lanes_per_col``).  HBM adds no die area, so each of them is a design at
            every HBM capacity and array timing of the space.
        """
        budget, floor = self.area_budget_mm2, self.area_floor_mm2
        lanes_per_col = self.vector_lanes_per_col
        out = []
        for tc, (rows, cols), vc, buf in itertools.product(
            self.tensor_cores, self.array_shapes, self.vector_cores, self.buffer_bytes,
        ):
            area = area_of_mm2(tc, rows, cols, vc, cols * lanes_per_col, buf)
            if _admits(area, self._floor_waived(tc, vc), budget, floor):
                out.append((tc, rows, cols, vc, buf, area))
        return tuple(out)

    def designs(self) -> tuple[Accelerator, ...]:
        """Every design of the space that satisfies the area rule.

        Order: nested loops over tensor_cores, the array shapes (:attr:`array_shapes`),
        vector_cores, buffer, hbm and array timing, each in the order of its list
        (deterministic).  Each design is named by :func:`design_name`; the unsearched fields
        (clock, HBM bandwidth, data type, dataflow) are those of ``base_accelerator``.
        """
        out: list[Accelerator] = []
        for tc, rows, cols, vc, buf, _ in self.core_configurations():
            for hbm, timing in itertools.product(self.hbm_bytes, self.timings):
                out.append(replace(
                    self.base_accelerator, name=design_name(tc, rows, vc, buf, hbm, timing, cols),
                    tensor_cores=tc, array_rows=rows, array_cols=cols, vector_cores=vc,
                    vector_lanes=cols * self.vector_lanes_per_col,
                    buffer_bytes=buf, hbm_bytes=hbm, array_timing=timing,
                    efficiency=None,  # designs keep the cycle model
                ))
        return tuple(out)


def _admits(area: float, floor_waived: bool, budget: float, floor: float) -> bool:
    if area > budget * (1.0 + _AREA_RTOL):
        return False
    return floor_waived or area >= floor * (1.0 - _AREA_RTOL)


def _plain_number(value: str | int | float, what: str) -> float:
    if isinstance(value, str):
        raise ConfigError(f"{what}: expected a bare number (mm²), got {value!r}")
    return float(value)


def space_names() -> list[str]:
    """Names of the bundled search spaces, sorted (``["phaze", "phaze-square", "tiny"]``)."""
    return _config.bundled_names(_FOLDER)


def _base_argument(raw: Any, config: _config.ConfigFile) -> str:
    base = _config.text_field(raw, f"{config.label}: base")
    if isinstance(config.location, Path) and ("/" in base or base.endswith((".yaml", ".yml"))):
        path = Path(base)
        if not path.is_absolute():
            return str(config.location.parent / path)
    return base


def _int_list(raw: Any, where: str, field: str) -> tuple[int, ...]:
    """A list of counts, each within the plausibility range of ``field`` (:data:`PLAUSIBLE`)."""
    values = _config.value_list(raw, where)
    return tuple(_config.positive_int(v, f"{where}[{i}]", PLAUSIBLE[field]) for i, v in enumerate(values))


def _bytes_list(raw: Any, where: str, field: str) -> tuple[float, ...]:
    """A list of sizes, each within the plausibility range of ``field`` (:data:`PLAUSIBLE`)."""
    values = _config.value_list(raw, where)
    return tuple(_config.quantity(v, parse_bytes, f"{where}[{i}]", plausible=PLAUSIBLE[field])
                 for i, v in enumerate(values))


def _waiver_list(raw: Any, where: str) -> tuple[str, ...]:
    """The ``area_floor_waived_for`` list: some of ``tensor_cores``, ``vector_cores`` (may be empty)."""
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: expected a list of some of {', '.join(WAIVER_FIELDS)}, got {raw!r}")
    for i, value in enumerate(raw):
        if value not in WAIVER_FIELDS:
            raise ConfigError(f"{where}[{i}]: expected one of {', '.join(WAIVER_FIELDS)}, got {value!r}")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"{where}: repeated values {raw}")
    return tuple(raw)


def _array_lists(data: dict[str, Any], label: str) -> tuple[tuple[int, ...], tuple[int, ...] | None,
                                                            tuple[int, ...] | None]:
    """``(array_dims, array_rows, array_cols)`` of a space file: ``array_dim`` alone (square
    arrays) or ``array_rows`` and ``array_cols`` together (rectangular arrays)."""
    given = [f for f in _ARRAY_FIELDS if f in data]
    if given == ["array_dim"]:
        return _int_list(data["array_dim"], f"{label}: array_dim", "array_dim"), None, None
    if given == ["array_rows", "array_cols"]:
        return ((), _int_list(data["array_rows"], f"{label}: array_rows", "array_rows"),
                _int_list(data["array_cols"], f"{label}: array_cols", "array_cols"))
    raise ConfigError(f"{label}: give either array_dim (square arrays) or both array_rows and "
                      f"array_cols (rectangular arrays), got {', '.join(given) or 'none of them'}")


def _timing_list(raw: Any, where: str) -> tuple[ArrayTiming, ...]:
    """One array timing or a list of them (``scalesim`` or ``[overlapped, scalesim]``)."""
    if not isinstance(raw, list):
        return (parse_array_timing(raw, where),)
    values = _config.value_list(raw, where)
    return tuple(parse_array_timing(v, f"{where}[{i}]") for i, v in enumerate(values))


def load_space(name_or_path: str | os.PathLike[str]) -> SearchSpace:
    """The search space of a bundled name (``tiny``, ``phaze``, ``phaze-square``) or of a YAML file.

    Raises:
        ConfigError: unknown name (listing the bundled ones), missing file, malformed YAML,
            a missing/unknown field, a bad value or one outside its plausibility range
            (:data:`archplace.hw._config.PLAUSIBLE`), or a base preset that cannot be loaded.
    """
    config = _config.resolve(name_or_path, _FOLDER, _KIND)
    data = _config.read_mapping(config)
    label = config.label
    _config.check_keys(data, label, required=("base", *_LIST_FIELDS), optional=_OPTIONAL_FIELDS)
    base = _base_argument(data["base"], config)
    try:
        base_accelerator = load_accelerator(base)
    except ConfigError as exc:
        if base == label:  # the space names its own file as base: the error names that file already
            raise
        raise ConfigError(f"{label}: base: {exc}") from None
    if "fp8_speedup" in data:
        speedup = parse_fp8_speedup(data["fp8_speedup"], f"{label}: fp8_speedup")
        base_accelerator = replace(base_accelerator, fp8_speedup=speedup)
    area_max = data.get("area_max_mm2")
    if area_max is not None:
        area_max = _config.quantity(area_max, _plain_number, f"{label}: area_max_mm2",
                                    plausible=PLAUSIBLE["area_max_mm2"])
    fraction = data.get("area_min_fraction", 0.3)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not (
        0.0 <= fraction <= 1.0
    ):
        raise ConfigError(f"{label}: area_min_fraction: expected a number in [0, 1], "
                          f"got {fraction!r}")
    source = _config.text_field(data["source"], f"{label}: source") if "source" in data else ""
    lanes_per_col = (_config.positive_int(data["vector_lanes_per_col"], f"{label}: vector_lanes_per_col",
                                          PLAUSIBLE["vector_lanes_per_col"])
                     if "vector_lanes_per_col" in data else 1)
    timings = _timing_list(data["array_timing"], f"{label}: array_timing") if "array_timing" in data else None
    stem = Path(config.label).stem
    # the fields are read first: their errors name the file and the field already
    tensor_cores = _int_list(data["tensor_cores"], f"{label}: tensor_cores", "tensor_cores")
    array_dims, array_rows, array_cols = _array_lists(data, label)
    waived = (_waiver_list(data["area_floor_waived_for"], f"{label}: area_floor_waived_for")
              if "area_floor_waived_for" in data else ("tensor_cores",))
    vector_cores = _int_list(data["vector_cores"], f"{label}: vector_cores", "vector_cores")
    buffer_bytes = _bytes_list(data["buffer"], f"{label}: buffer", "buffer")
    hbm_bytes = _bytes_list(data["hbm"], f"{label}: hbm", "hbm")
    try:  # the space's own checks name the space, not the file
        return SearchSpace(
            name=stem,
            base=base,
            base_accelerator=base_accelerator,
            tensor_cores=tensor_cores,
            array_dims=array_dims,
            vector_cores=vector_cores,
            buffer_bytes=buffer_bytes,
            hbm_bytes=hbm_bytes,
            area_max_mm2=area_max,
            area_min_fraction=float(fraction),
            source=source,
            vector_lanes_per_col=lanes_per_col,
            array_timings=timings,
            array_rows=array_rows,
            array_cols=array_cols,
            area_floor_waived_for=waived,
        )
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
