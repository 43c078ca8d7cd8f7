"""Measured kernel tables as latency functions (issue #24, item 1): GEMM surfaces and
streaming-bandwidth curves built from :mod:`archplace.cost.measured_tables`.

A preset's ``efficiency.kernel_tables`` names tables (shipped stems or CSV paths); this module
turns them into the two functions :mod:`archplace.cost.efficiency` reads.

**Kernel time of a row.**  A table whose header says ``timing: wall-clock`` (the LLMCompass
rows: ``time.time()`` around one PyTorch call and a ``torch.cuda.synchronize()``) carries the
host overhead of its method; its header gives it as ``host_overhead_s`` (the plateau of the
method's smallest shapes).  A row's kernel time is ``max(latency_s / calls - host_overhead_s,
floor_s)`` with ``floor_s`` the chip's per-kernel floor (``KernelEfficiency.kernel_floor_s``);
a ``timing: kernel`` table (traced kernel times, the XLA and DeepGEMM rows) is used as given,
floored the same way (and never below :data:`MIN_KERNEL_S`, so that logs stay finite).

**GEMM surface** (:class:`GemmSurface`), over ``x = (log b, log m, log n, log k)``:

1. Monotone correction of the rows.  A larger GEMM measured faster than a smaller one (XLA
   picked another kernel, or noise) would make any exact interpolant non-monotone.  Each row's
   log time becomes ``(log lo(p) + log hi(p)) / 2`` with ``lo(p)`` the largest time among rows
   ``q <= p`` (component-wise) and ``hi(p)`` the smallest among rows ``q >= p``.  Both
   envelopes are monotone, so their mean is; a row that violates no order keeps its time
   exactly (``lo = hi``).
2. A rectilinear grid on the distinct coordinates of the rows.  A grid node that is a row takes
   the row's corrected time; any other node takes the achieved throughput of the rows by
   inverse-distance weighting in ``x`` (Shepard's method, power :data:`SHEPARD_POWER`, on
   ``log(FLOP / time)``), but never less than its compulsory bytes (A, B and C once) at the
   fastest streaming rate any row reached (a kernel does not stream faster than its chip did),
   clamped into the rows' envelopes ``[lo(x), hi(x)]`` so that it never contradicts a row, then
   the grid is made monotone the same way as the rows (cumulative max from below, cumulative
   min from above along each axis, mean of the logs); rows are untouched by that step because
   every node value already lies between their envelopes.
3. Inside the grid's box: multilinear interpolation of log time in ``x``.  On a grid whose
   node values are monotone, multilinear interpolation is monotone in each coordinate (the
   derivative along an axis is a non-negative mix of non-negative differences) and exact at
   the nodes, so exact at every (non-violating) row.

Beyond the box.  For a shape at or above the box's lower corner, ``T(x)`` is the interpolated
time at ``min(x, upper corner)`` times the FLOP ratio of ``x`` to that point: a GEMM larger than
every row runs at the throughput of the nearest measured shape (tile and wave quantization of
large GEMMs are a few per cent, and the table already holds its chip's sustained rate).  ``T``
is non-decreasing (inside: the grid's monotone interpolation; along a coordinate beyond the box
only the FLOP ratio grows) and continuous at the box's faces.  The model of
:mod:`archplace.cost.measured_gemm` (tile/wave quantization with split-k, HBM streaming and the
floor) prices the rest, clamped::

    L(x) = T(x)                   where x >= lower corner, else 0
    U(x) = T(max(x, lower corner))
    time = min(max(model, L), U)

so at or above the lower corner the time is ``T``; below it (a smaller m, n, k or batch than any
row) the model, never slower than the nearest measured shape.  ``L``, ``U`` and the model are
non-decreasing in each coordinate and ``L <= U``, so the time is.

**Bandwidth curve** (:class:`BandwidthCurve`), bytes moved -> kernel time: the rows'
kernel times, made monotone in bytes (mean of the two envelopes, as above), interpolated
linearly in ``(log bytes, log time)``; beyond the largest row at that row's achieved
bandwidth (``bytes x time_max / bytes_max``), below the smallest row the chip's streaming
model clamped at the smallest row's time.

Errors: :class:`~archplace.base.errors.ConfigError` for a table that cannot be used (unknown name,
a header value that is not a number, two GEMM tables of one dtype class with nothing in common
is fine -- their rows are merged).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.cost.measured_tables import MeasuredTable, load_table, read_table, shipped_tables

FloatArray = NDArray[np.float64]

__all__ = ["BandwidthCurve", "ChipTables", "GemmSurface", "chip_tables", "dtype_class",
           "kernel_time_s", "resolve_table"]

#: Operand dtypes that run at one tensor-core rate, by class (fp16 and bf16 share the dense
#: 16-bit rate on A100 and H100: NVIDIA A100 and H100 datasheets).
_DTYPE_CLASSES: Mapping[str, str] = MappingProxyType({
    "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
})


#: Exponent of Shepard's inverse-distance weights.  It must exceed the dimension (4: b, m, n, k)
#: for the weights to be local: with a power at or below the dimension the many far rows
#: outweigh the near ones (Shepard 1968, "A two-dimensional interpolation function for
#: irregularly-spaced data", ACM national conference; the usual choice is dimension + 1).
SHEPARD_POWER = 5.0

#: Least kernel time of a row when the chip declares no floor (seconds): 0.1 us, below any
#: measured GPU kernel; it only keeps the logarithms finite.
MIN_KERNEL_S = 1e-7


def dtype_class(dtype: str) -> str:
    """``bf16`` for 16-bit operand dtypes (bf16, fp16), ``fp8`` for FP8; other text as given,
    lower-cased (the first word of a table's dtype column, e.g. ``bf16 (batch 1)`` -> bf16)."""
    word = dtype.strip().lower().split(" ")[0]
    return _DTYPE_CLASSES.get(word, word)


def resolve_table(name_or_path: str) -> MeasuredTable:
    """A shipped table by stem, or a table file by path.

    Raises:
        ConfigError: neither a shipped table nor a readable table file.
    """
    if name_or_path in shipped_tables():
        return load_table(name_or_path)
    path = Path(name_or_path)
    if path.suffix.lower() == ".csv" and path.is_file():
        return read_table(path)
    raise ConfigError(f"efficiency.kernel_tables: {name_or_path!r} is neither a shipped table "
                      f"({', '.join(shipped_tables())}) nor a table file")


def _header_seconds(table: MeasuredTable, key: str) -> float:
    text = table.header.get(key, "0")
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        raise ConfigError(f"measured table {table.name}: header {key} {text!r} "
                          "is not a number of seconds") from None
    if not np.isfinite(value) or value < 0:
        raise ConfigError(f"measured table {table.name}: header {key} {text!r} is not >= 0")
    return value


def kernel_time_s(table: MeasuredTable, floor_s: float) -> FloatArray:
    """Kernel time of one call of each row (module docstring): ``max(latency_s / calls -
    host_overhead_s, floor_s)``, the overhead only for a ``timing: wall-clock`` table."""
    calls = table.sizes["calls"].astype(np.float64) if "calls" in table.sizes else 1.0
    wall_clock = table.header.get("timing") == "wall-clock"
    overhead = _header_seconds(table, "host_overhead_s") if wall_clock else 0.0
    result: FloatArray = np.maximum(table.latency_s / calls - overhead, max(floor_s, MIN_KERNEL_S))
    return result


def _monotone_logs(points: FloatArray, log_t: FloatArray) -> FloatArray:
    """Step 1 of the module docstring on scattered points ``(P, D)``: mean of the log envelopes."""
    below = np.all(points[None, :, :] <= points[:, None, :], axis=2)  # below[i, j]: row j <= row i
    lo = np.where(below, log_t[None, :], -np.inf).max(axis=1)
    hi = np.where(below.T, log_t[None, :], np.inf).min(axis=1)
    result: FloatArray = (lo + hi) / 2.0
    return result


def _log_bytes(x: FloatArray, dtype: str) -> FloatArray:
    """Log compulsory HBM bytes of GEMMs at log shapes ``x`` ``(N, 4)``: ``A``, ``B`` and ``C``
    once, at 1 byte per FP8 element and 2 otherwise (a lower bound for any dtype class)."""
    b, m, n, k = (np.exp(x[:, d]) for d in range(4))
    result: FloatArray = np.log((1.0 if dtype == "fp8" else 2.0) * b * (m * k + k * n + m * n))
    return result


@dataclass(frozen=True, slots=True, eq=False)
class GemmSurface:
    """Kernel time of ``[b, m, k] x [b, k, n]`` GEMMs from measured rows (module docstring).

    Attributes:
        names: the tables it merges.
        dtype: the dtype class (:func:`dtype_class`).
        axes: the grid's coordinates ``(log b, log m, log n, log k)``, each sorted ascending.
        log_time: log kernel seconds at every grid node, shape ``(len(axes[0]), ..., len(axes[3]))``.
    """

    names: tuple[str, ...]
    dtype: str
    axes: tuple[FloatArray, FloatArray, FloatArray, FloatArray]
    log_time: FloatArray

    @classmethod
    def build(cls, tables: tuple[MeasuredTable, ...], dtype: str, floor_s: float) -> GemmSurface:
        """The surface of the rows of ``tables`` whose dtype class is ``dtype``.

        Raises:
            ConfigError: no such rows.
        """
        coords: list[FloatArray] = []
        times: list[FloatArray] = []
        for table in tables:
            keep = np.array([dtype_class(d) == dtype for d in table.dtypes])
            s = table.sizes
            coords.append(np.stack([s["batch"], s["m"], s["n"], s["k"]], axis=1)[keep].astype(np.float64))
            times.append(kernel_time_s(table, floor_s)[keep])
        shapes, log_t = np.log(np.concatenate(coords)), np.log(np.concatenate(times))
        if not len(shapes):
            raise ConfigError(f"kernel tables {', '.join(t.name for t in tables)}: no {dtype} GEMM rows")
        points, inverse = np.unique(shapes, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        mean = np.bincount(inverse, weights=log_t) / np.bincount(inverse)  # repeated shapes: log mean
        rows = _monotone_logs(points, mean)
        axes = tuple(np.unique(points[:, d]) for d in range(4))
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 4)
        flop = np.log(2.0) + grid.sum(axis=1)
        row_flop = np.log(2.0) + points.sum(axis=1)
        dist2 = ((grid[:, None, :] - points[None, :, :]) ** 2).sum(axis=2)
        exact = dist2 == 0.0
        weight = 1.0 / np.where(exact, 1.0, dist2) ** (SHEPARD_POWER / 2.0)
        log_rate = (weight * (row_flop - rows)[None, :]).sum(axis=1) / weight.sum(axis=1)
        fill = np.maximum(flop - log_rate, _log_bytes(grid, dtype) - np.max(_log_bytes(points, dtype) - rows))
        below = np.all(points[None, :, :] <= grid[:, None, :], axis=2)
        above = np.all(points[None, :, :] >= grid[:, None, :], axis=2)
        lo = np.where(below, rows[None, :], -np.inf).max(axis=1)
        hi = np.where(above, rows[None, :], np.inf).min(axis=1)
        at_row = exact.any(axis=1)
        fill = np.where(at_row, (exact * rows[None, :]).sum(axis=1), np.clip(fill, lo, hi))
        values = fill.reshape(tuple(len(a) for a in axes))
        up, down = values.copy(), values.copy()
        for axis in range(4):
            up = np.maximum.accumulate(up, axis=axis)
            down = np.flip(np.minimum.accumulate(np.flip(down, axis=axis), axis=axis), axis=axis)
        names = tuple(t.name for t in tables)
        return cls(names, dtype, (axes[0], axes[1], axes[2], axes[3]), (up + down) / 2.0)

    def _interpolate(self, x: FloatArray) -> float:
        """Multilinear interpolation of log time at ``x`` inside the box (log seconds)."""
        lows, fracs = [], []
        for axis, value in zip(self.axes, x, strict=True):
            if len(axis) == 1:
                lows.append(0)
                fracs.append(0.0)
                continue
            i = int(np.clip(np.searchsorted(axis, value, side="right") - 1, 0, len(axis) - 2))
            lows.append(i)
            fracs.append(float((value - axis[i]) / (axis[i + 1] - axis[i])))
        total = 0.0
        for corner in range(16):
            weight = 1.0
            index = []
            for d in range(4):
                bit = (corner >> d) & 1
                if len(self.axes[d]) == 1 and bit:
                    weight = 0.0
                    break
                weight *= fracs[d] if bit else 1.0 - fracs[d]
                index.append(lows[d] + bit)
            if weight:
                total += weight * float(self.log_time[tuple(index)])
        return total

    def _anchored_s(self, x: FloatArray) -> float:
        """``T(x)`` for ``x`` at or above the box's lower corner (log shape): the interpolated
        time at ``min(x, upper corner)`` times the FLOP ratio of ``x`` to that point (the
        throughput of the nearest measured shape carried beyond the box)."""
        high = np.array([a[-1] for a in self.axes])
        clipped = np.minimum(x, high)
        return float(np.exp(self._interpolate(clipped) + float(np.sum(x - clipped))))

    def bounds_s(self, batch: int, m: int, n: int, k: int) -> tuple[float, float]:
        """``(L, U)`` of the module docstring in seconds: ``L = T(x)`` where ``x`` is at or
        above the box's lower corner (else 0), ``U = T(max(x, lower corner))``; inside the box
        both are the interpolated time."""
        x = np.log(np.array([batch, m, n, k], dtype=np.float64))
        low = np.array([a[0] for a in self.axes])
        upper = self._anchored_s(np.maximum(x, low))
        lower = upper if bool(np.all(x >= low)) else 0.0
        return lower, upper


@dataclass(frozen=True, slots=True, eq=False)
class BandwidthCurve:
    """Kernel time of a streaming kernel by the bytes it moves (module docstring).

    Attributes:
        names: the tables it merges.
        kernel: ``softmax``, ``layernorm`` or ``gelu``.
        log_bytes: log bytes of the rows, ascending, distinct.
        log_time: log kernel seconds of the rows (monotone), same length.
    """

    names: tuple[str, ...]
    kernel: str
    log_bytes: FloatArray
    log_time: FloatArray

    @classmethod
    def build(cls, tables: tuple[MeasuredTable, ...], floor_s: float) -> BandwidthCurve:
        """The curve of ``tables`` (one kernel class).  Bytes moved: the tensor read and written
        once at the row's dtype width (2 bytes for fp16/bf16, 1 for fp8, else 4)."""
        sizes: list[FloatArray] = []
        times: list[FloatArray] = []
        for table in tables:
            s = table.sizes
            elements = (s["elements"] if "elements" in s else s["rows"] * s["cols"]).astype(np.float64)
            width = np.array([{"bf16": 2.0, "fp8": 1.0}.get(dtype_class(d), 4.0) for d in table.dtypes])
            sizes.append(2.0 * width * elements)
            times.append(kernel_time_s(table, floor_s))
        log_b, log_t = np.log(np.concatenate(sizes)), np.log(np.concatenate(times))
        points, inverse = np.unique(log_b, return_inverse=True)
        inverse = inverse.reshape(-1)
        mean = np.bincount(inverse, weights=log_t) / np.bincount(inverse)
        rows = _monotone_logs(points[:, None], mean)
        return cls(tuple(t.name for t in tables), tables[0].kernel, points, rows)

    def time_s(self, hbm_bytes: FloatArray, model_s: FloatArray) -> FloatArray:
        """Kernel seconds for each entry of ``hbm_bytes``: the curve inside its range, the largest
        row's bandwidth above it, ``min(model_s, smallest row's time)`` below it."""
        x = np.log(np.maximum(hbm_bytes, 1.0))
        inside = np.exp(np.interp(x, self.log_bytes, self.log_time))
        beyond = np.exp(self.log_time[-1] + x - self.log_bytes[-1])
        result: FloatArray = np.where(x > self.log_bytes[-1], beyond,
                                      np.where(x < self.log_bytes[0], np.minimum(model_s, inside), inside))
        return result


#: Which curve prices which vector operator kind (archplace.workload.graph.OpKind values):
#: softmax and norms by their own measurements, every other streaming kernel (element-wise,
#: reductions, embeddings) by the element-wise (gelu) curve.
CURVE_OF_KIND: Mapping[str, str] = MappingProxyType({
    "softmax": "softmax", "norm": "layernorm", "elementwise": "gelu", "reduction": "gelu",
    "embedding": "gelu",
})


@dataclass(frozen=True, slots=True, eq=False)
class ChipTables:
    """The measured tables of one chip: GEMM surfaces by dtype class, curves by kernel class."""

    gemm: Mapping[str, GemmSurface]
    curves: Mapping[str, BandwidthCurve]

    def curve_for(self, kind: str) -> BandwidthCurve | None:
        """The curve of an operator kind (:data:`CURVE_OF_KIND`); the element-wise curve when
        the kind's own is missing; None without curves."""
        wanted = CURVE_OF_KIND.get(kind)
        if wanted is None:
            return None
        return self.curves.get(wanted) or self.curves.get("gelu")


@functools.lru_cache(maxsize=32)
def chip_tables(names: tuple[str, ...], floor_s: float) -> ChipTables:
    """The :class:`ChipTables` of tables named by stem or path (cached: the files are read once).

    Raises:
        ConfigError: a name that is neither (:func:`resolve_table`), a malformed table, or a
            table of a kernel class no operator is costed by (``copy``).
    """
    tables = tuple(resolve_table(n) for n in names)
    gemm_tables = [t for t in tables if t.kernel == "gemm"]
    dtypes = sorted({dtype_class(d) for t in gemm_tables for d in t.dtypes})
    gemm = {d: GemmSurface.build(tuple(gemm_tables), d, floor_s) for d in dtypes}
    unused = sorted({t.kernel for t in tables} - {"gemm"} - set(CURVE_OF_KIND.values()))
    if unused:  # e.g. a profiled copy table: no operator is costed by it
        raise ConfigError(f"efficiency.kernel_tables: {', '.join(unused)} tables cost no operator; "
                          f"name gemm or {', '.join(sorted(set(CURVE_OF_KIND.values())))} tables")
    curves = {}
    for kernel in sorted({t.kernel for t in tables} - {"gemm"}):
        curves[kernel] = BandwidthCurve.build(tuple(t for t in tables if t.kernel == kernel), floor_s)
    return ChipTables(MappingProxyType(gemm), MappingProxyType(curves))
