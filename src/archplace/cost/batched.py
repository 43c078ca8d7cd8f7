"""NumPy versions of the formulas of :mod:`archplace.cost.gemm` and :mod:`archplace.cost.vector`.

One operator (Python integers) against U core configurations (int64 / float64
arrays of length U).  Every function returns exactly what its scalar counterpart
returns for each configuration -- ``tests/cost/test_batched.py`` checks it -- so
the scalar path (``SystolicCostModel.estimate``) and the vectorised path
(``SystolicCostModel.estimate_many``) agree bit for bit.  Integer counts stay in
int64 (exact below 2**63); square roots use IEEE double as the scalar code does.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from archplace.cost.gemm import UNBOUNDED_ELEMENTS

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]


def ceil_div(a: IntArray | int, b: IntArray | int) -> IntArray:
    """⌈a / b⌉ elementwise for integers, b > 0."""
    return -(-np.asarray(a, dtype=np.int64) // b)


def ws_cycles(folds: IntArray, m: IntArray | int, rows: IntArray, cols: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.ws_cycles` elementwise."""
    m_arr = np.asarray(m, dtype=np.int64)
    cycles = 1 + (folds - 1) * np.maximum(m_arr, cols) + m_arr + rows + cols - 2
    return np.where((folds > 0) & (m_arr > 0), cycles, 0)


def os_cycles(tiles: IntArray, k: int, rows: IntArray, cols: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.os_cycles` elementwise."""
    cycles = (tiles - 1) * np.maximum(k, rows) + k + 2 * rows + cols - 2
    return np.where((tiles > 0) & (k > 0), cycles, 0)


def ws_cycles_scalesim(folds: IntArray, m: IntArray | int, rows: IntArray, cols: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.ws_cycles_scalesim` elementwise."""
    m_arr = np.asarray(m, dtype=np.int64)
    cycles = folds * (2 * rows + cols + m_arr - 2)
    return np.where((folds > 0) & (m_arr > 0), cycles, 0)


def os_cycles_scalesim(tiles: IntArray, k: int, rows: IntArray, cols: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.os_cycles_scalesim` elementwise."""
    cycles = tiles * (k + rows + cols - 2)
    return np.where((tiles > 0) & (k > 0), cycles, 0)


def _ws(folds: IntArray, m: IntArray | int, rows: IntArray, cols: IntArray,
        scalesim: BoolArray) -> IntArray:
    """WS cycles under each configuration's array timing."""
    return np.where(scalesim, ws_cycles_scalesim(folds, m, rows, cols), ws_cycles(folds, m, rows, cols))


def _os(tiles: IntArray, k: int, rows: IntArray, cols: IntArray, scalesim: BoolArray) -> IntArray:
    """OS cycles under each configuration's array timing."""
    return np.where(scalesim, os_cycles_scalesim(tiles, k, rows, cols), os_cycles(tiles, k, rows, cols))


def matmul_cycles(batch: int, m: int, k: int, n: int, rows: IntArray, cols: IntArray,
                  cores: IntArray, output_stationary: BoolArray,
                  scalesim: BoolArray | None = None) -> tuple[IntArray, IntArray]:
    """(single-core, all-cores) cycles of a batched GEMM: :func:`archplace.cost.gemm.matmul_cycles`
    with one core and with ``cores`` cores, for each configuration.

    ``scalesim[i]`` selects SCALE-Sim's timing (``ArrayTiming.SCALESIM``) for configuration
    ``i``; ``None`` means the overlapped timing everywhere."""
    zeros = np.zeros(len(rows), dtype=np.int64)
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return zeros, zeros
    ss = np.zeros(len(rows), dtype=np.bool_) if scalesim is None else scalesim
    folds = batch * ceil_div(k, rows) * ceil_div(n, cols)
    tiles = batch * ceil_div(m, rows) * ceil_div(n, cols)
    ws_single = _ws(folds, m, rows, cols, ss)
    ws_all = _ws(ceil_div(folds, cores), m, rows, cols, ss)  # p = 1
    p = 2
    max_cores = int(cores.max())
    while p <= max_cores and p <= m:
        candidate = _ws(ceil_div(folds, np.maximum(cores // p, 1)), -(-m // p), rows, cols, ss)
        ws_all = np.where(cores >= p, np.minimum(ws_all, candidate), ws_all)
        p *= 2
    widest = np.minimum(cores, m)  # p = min(cores, m): every core (or row) its own group
    whole = _ws(ceil_div(folds, np.maximum(cores // widest, 1)), ceil_div(m, widest), rows, cols, ss)
    ws_all = np.where(widest > 1, np.minimum(ws_all, whole), ws_all)
    os_single = _os(tiles, k, rows, cols, ss)
    os_all = _os(ceil_div(tiles, cores), k, rows, cols, ss)
    return (np.where(output_stationary, os_single, ws_single),
            np.where(output_stationary, os_all, ws_all))


def buffer_elements(buffer_bytes: FloatArray, bytes_per_element: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.buffer_elements` elementwise."""
    finite = np.isfinite(buffer_bytes)
    half = np.where(finite, buffer_bytes, 0.0) // (2 * bytes_per_element)
    return np.where(finite, half.astype(np.int64), UNBOUNDED_ELEMENTS)


def _tiled(m: int, k: int, n: int, tk: IntArray, cap: IntArray, first_m: bool) -> IntArray:
    t = (np.sqrt((tk * tk + cap).astype(np.float64)) - tk).astype(np.int64)
    if first_m:
        tm = np.maximum(1, np.minimum(m, t))
        tn = np.maximum(1, np.minimum(n, (cap - tk * tm) // (tm + tk)))
    else:
        tn = np.maximum(1, np.minimum(n, t))
        tm = np.maximum(1, np.minimum(m, (cap - tk * tn) // (tn + tk)))
    result: IntArray = m * n + m * k * ceil_div(n, tn) + k * n * ceil_div(m, tm)
    return result


def matmul_hbm_elements(batch: int, m: int, k: int, n: int, rows: IntArray, cols: IntArray,
                        cap: IntArray) -> IntArray:
    """:func:`archplace.cost.gemm.matmul_hbm_elements` elementwise."""
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return np.zeros(len(rows), dtype=np.int64)
    compulsory = m * k + k * n + m * n
    fits = ((compulsory <= cap) | (k * n + np.minimum(m, rows) * (k + n) <= cap)
            | (m * k + np.minimum(n, cols) * (k + m) <= cap))
    tk = np.minimum(k, rows)
    tiled = np.minimum(_tiled(m, k, n, tk, cap, True), _tiled(m, k, n, tk, cap, False))
    result: IntArray = batch * np.where(fits, compulsory, tiled)
    return result


def matmul_feed_elements(batch: int, m: int, k: int, n: int, rows: IntArray, cols: IntArray,
                         output_stationary: BoolArray) -> IntArray:
    """:func:`archplace.cost.gemm.matmul_feed_elements` elementwise."""
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return np.zeros(len(rows), dtype=np.int64)
    inputs = m * k * ceil_div(n, cols)
    os_feed = inputs + k * n * ceil_div(m, rows) + m * n
    ws_feed = inputs + k * n + m * n * (2 * ceil_div(k, rows) - 1)
    result: IntArray = batch * np.where(output_stationary, os_feed, ws_feed)
    return result


def exposed_elements(m: int, k: int, n: int, rows: IntArray, cols: IntArray,
                     output_stationary: BoolArray) -> IntArray:
    """:func:`archplace.cost.gemm.exposed_elements` elementwise."""
    if m <= 0 or k <= 0 or n <= 0:
        return np.zeros(len(rows), dtype=np.int64)
    stationary = np.where(output_stationary, np.minimum(m, rows), np.minimum(k, rows))
    result: IntArray = stationary * np.minimum(n, cols)
    return result


def task_count(batch: int, m: int, k: int, n: int, rows: IntArray, cols: IntArray,
               output_stationary: BoolArray) -> IntArray:
    """Folds (WS) or output tiles (OS) of a batched GEMM, per configuration."""
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return np.zeros(len(rows), dtype=np.int64)
    folds = batch * ceil_div(k, rows) * ceil_div(n, cols)
    tiles = batch * ceil_div(m, rows) * ceil_div(n, cols)
    result: IntArray = np.where(output_stationary, tiles, folds)
    return result


def vector_cycles(elements: int, lanes: IntArray, cores: IntArray | int, cycles_per_elem: int) -> IntArray:
    """:func:`archplace.cost.vector.vector_cycles` elementwise."""
    if elements <= 0:
        return np.zeros(len(lanes), dtype=np.int64)
    result: IntArray = ceil_div(elements, lanes * cores) * cycles_per_elem
    return result
