"""Matmul on systolic arrays: cycles, HBM traffic and operand feed (docs/model.md, Matmul on systolic arrays).

A GEMM ``[batch, m, k] x [batch, k, n]`` runs on arrays of ``R = rows`` x ``C = cols``
processing elements (PEs).  Cycle counts are exact for the array organisations
below; ``tests/cost/test_gemm.py`` checks them against a cycle-by-cycle simulation.

**Weight stationary (WS)** (as in the TPU MXU; SCALE-Sim, Samajdar et al., 2018):
the K x N weights are cut into ``folds = ⌈k/R⌉·⌈n/C⌉`` tiles of R x C; a fold's
weights sit one per PE while the m input rows stream in from the left edge (row
``r`` of the array skewed by ``r`` cycles), partial sums flow down and leave at the
bottom edge.  Weights are double-buffered: each PE has a shadow register, loaded
by a per-row write port that writes PE (r, c) at cycle ``L + r + c`` (one weight
per row per cycle, so a fold loads in C cycles), and a PE switches to the shadow
weight when the first input of the next fold reaches it.  The next fold can start
once the previous fold's inputs have entered (m cycles) and its weights are loaded
(C cycles after the previous load), so folds start every ``max(m, C)`` cycles; the
first fold starts 1 cycle after its load begins, and the last one drains in
``m + R + C - 2`` cycles::

    ws_cycles(F, m) = 1 + (F - 1)·max(m, C) + m + R + C - 2        (F folds, m >= 1)

**Output stationary (OS)**: each PE accumulates one element of an R x C output
tile; row r of A enters from the left and column c of B from the top, both skewed,
for k cycles.  A PE hands its result to a shadow register, which leaves after r
cycles down a per-column output chain, so each column's R results leave the bottom
edge one per cycle; tiles (``⌈m/R⌉·⌈n/C⌉`` per GEMM) start every ``max(k, R)``
cycles::

    os_cycles(T, k) = (T - 1)·max(k, R) + k + 2R + C - 2             (T tiles, k >= 1)

**SCALE-Sim timing** (``ArrayTiming.SCALESIM``; Samajdar et al., ISPASS 2020, and the
``scalesim`` 2.0.2 package, ``compute/systolic_compute_{ws,os,is}.py``): SCALE-Sim
builds, per fold, the cycle-by-cycle demand of each array edge and concatenates the
folds with no overlap.  A WS fold spends R cycles shifting its weights in, m cycles
streaming inputs, C - 1 cycles for the last input to cross the array and R - 1
cycles of skew before the last partial sum leaves the bottom row; an OS tile
streams k operand pairs with R - 1 + C - 1 cycles of skew (its outputs are read
out in the skew); IS is WS with the input tile stationary (m and n swapped)::

    ws_cycles_scalesim(F, m) = F · (2R + C + m - 2)
    os_cycles_scalesim(T, k) = T · (k + R + C - 2)
    is_cycles_scalesim(m, k, n) = ⌈k/R⌉·⌈m/C⌉ · (2R + C + n - 2)

These are the lengths (in cycles) of SCALE-Sim's demand matrices; its compute report's
"Total Cycles" is the 0-based index of the last of them, one less (with no memory
stall; ``tests/cost/test_scalesim.py`` runs SCALE-Sim itself).  Against the
overlapped WS count, a fold costs ``2R + C + m - 2`` instead of ``max(m, C)``: the
ratio tends to ``1 + (2R + C - 2)/m`` for many folds (m >= C).

**All cores** (P arrays): WS splits the m rows into ``p`` groups (``p`` a power of
two or P itself, ``p <= m``) and deals the folds round-robin to the ``P // p``
arrays of each group, keeping the best split; OS deals whole tiles to the arrays
(splitting k would need a reduction of partial sums).

**HBM traffic** (buffer-aware tiling): half of the global buffer holds the tiles
being worked on and half the next ones (double buffering), so ``cap =
⌊buffer_bytes / (2·bytes_per_element)⌋`` elements.  Per GEMM, the traffic is the
compulsory ``mk + kn + mn`` elements when everything fits, or when one whole
operand fits beside a row (column) block of the others; otherwise output tiles of
Tm x Tn stay on chip while k streams in slices of ``Tk = min(k, R)``
(``Tm·Tn + Tk·(Tm + Tn) <= cap``), costing ``mn + mk·⌈n/Tn⌉ + kn·⌈m/Tm⌉`` (the
classic blocked-GEMM count; Hong and Kung 1981 give the matching lower bound of
order ``mnk/√cap``), with the largest square tile and both orientations of a
clipped tile tried.

All sizes are Python integers; a GEMM with a zero dimension takes 0 cycles and
moves nothing.
"""

from __future__ import annotations

import math

from archplace.hw.accelerator import ArrayTiming

# The buffer capacity, in elements, that stands for "unbounded" (every GEMM fits).
UNBOUNDED_ELEMENTS = 2**62


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for integers, b > 0."""
    return -(-a // b)


def _check_array(rows: int, cols: int) -> None:
    if rows <= 0 or cols <= 0:
        raise ValueError(f"array must have positive rows and cols, got {rows} x {cols}")


def fold_count(k: int, n: int, rows: int, cols: int) -> int:
    """Weight tiles of a ``k x n`` weight matrix on a ``rows x cols`` array: ⌈k/R⌉·⌈n/C⌉.

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if k <= 0 or n <= 0:
        return 0
    return ceil_div(k, rows) * ceil_div(n, cols)


def tile_count(m: int, n: int, rows: int, cols: int) -> int:
    """Output tiles of an ``m x n`` output on a ``rows x cols`` array: ⌈m/R⌉·⌈n/C⌉.

    Raises:
        ValueError: a non-positive array size.
    """
    return fold_count(m, n, rows, cols)


def ws_cycles(folds: int, m: int, rows: int, cols: int) -> int:
    """Cycles of ``folds`` weight-stationary folds streaming ``m`` rows each (module docstring).

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if folds <= 0 or m <= 0:
        return 0
    return 1 + (folds - 1) * max(m, cols) + m + rows + cols - 2


def os_cycles(tiles: int, k: int, rows: int, cols: int) -> int:
    """Cycles of ``tiles`` output-stationary tiles reducing over ``k`` each (module docstring).

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if tiles <= 0 or k <= 0:
        return 0
    return (tiles - 1) * max(k, rows) + k + 2 * rows + cols - 2


def ws_cycles_scalesim(folds: int, m: int, rows: int, cols: int) -> int:
    """SCALE-Sim's cycles of ``folds`` weight-stationary folds of ``m`` rows each (docstring).

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if folds <= 0 or m <= 0:
        return 0
    return folds * (2 * rows + cols + m - 2)


def os_cycles_scalesim(tiles: int, k: int, rows: int, cols: int) -> int:
    """SCALE-Sim's cycles of ``tiles`` output-stationary tiles reducing over ``k`` (docstring).

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if tiles <= 0 or k <= 0:
        return 0
    return tiles * (k + rows + cols - 2)


def is_cycles_scalesim(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """SCALE-Sim's cycles of ``[m, k] x [k, n]`` input stationary on one array (docstring).

    Input stationary is not an :class:`~archplace.hw.accelerator.Dataflow` of the
    cost model; the count is kept to check SCALE-Sim's third dataflow.

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if m <= 0 or k <= 0 or n <= 0:
        return 0
    return ceil_div(k, rows) * ceil_div(m, cols) * (2 * rows + cols + n - 2)


def matmul_cycles_ws(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Cycles of one ``[m, k] x [k, n]`` GEMM on one weight-stationary array.

    Raises:
        ValueError: a non-positive array size.
    """
    return ws_cycles(fold_count(k, n, rows, cols), m, rows, cols)


def matmul_cycles_os(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Cycles of one ``[m, k] x [k, n]`` GEMM on one output-stationary array.

    Raises:
        ValueError: a non-positive array size.
    """
    return os_cycles(tile_count(m, n, rows, cols), k, rows, cols)


def m_splits(cores: int, m: int) -> list[int]:
    """Row-group counts the WS all-cores mapping tries: 1, powers of two <= min(cores, m),
    and min(cores, m) itself (every core its own rows, or every row its own core group) —
    so adding a core never makes the best mapping slower."""
    out = [1]
    p = 2
    while p <= cores and p <= m:
        out.append(p)
        p *= 2
    widest = min(cores, m)
    if widest > 1 and widest not in out:
        out.append(widest)
    return out


def matmul_cycles(
    batch: int, m: int, k: int, n: int, rows: int, cols: int, cores: int = 1, os: bool = False,
    timing: ArrayTiming = ArrayTiming.OVERLAPPED,
) -> int:
    """Cycles of ``[batch, m, k] x [batch, k, n]`` on ``cores`` arrays (module docstring).

    With ``cores = 1`` this is the single-core count; the batch's folds (WS) or tiles
    (OS) run back to back.  ``timing`` picks the per-array count (:func:`ws_cycles` /
    :func:`os_cycles`, or SCALE-Sim's :func:`ws_cycles_scalesim` /
    :func:`os_cycles_scalesim`); the mapping onto the arrays is the same for both.

    Raises:
        ValueError: a non-positive array size or core count.
    """
    _check_array(rows, cols)
    if cores <= 0:
        raise ValueError(f"cores must be positive, got {cores}")
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return 0
    scalesim = timing is ArrayTiming.SCALESIM
    if os:
        tiles = batch * tile_count(m, n, rows, cols)
        os_count = os_cycles_scalesim if scalesim else os_cycles
        return os_count(ceil_div(tiles, cores), k, rows, cols)
    tasks = batch * fold_count(k, n, rows, cols)
    ws_count = ws_cycles_scalesim if scalesim else ws_cycles
    return min(ws_count(ceil_div(tasks, cores // p), ceil_div(m, p), rows, cols)
               for p in m_splits(cores, m))


def matmul_cycles_single_core(batch: int, m: int, k: int, n: int, rows: int, cols: int,
                              os: bool = False, timing: ArrayTiming = ArrayTiming.OVERLAPPED) -> int:
    """Cycles of a batched GEMM on ONE array (:func:`matmul_cycles` with one core)."""
    return matmul_cycles(batch, m, k, n, rows, cols, 1, os, timing)


def matmul_cycles_all_cores(batch: int, m: int, k: int, n: int, rows: int, cols: int, cores: int,
                            os: bool = False, timing: ArrayTiming = ArrayTiming.OVERLAPPED) -> int:
    """Cycles of a batched GEMM spread over ``cores`` arrays (:func:`matmul_cycles`)."""
    return matmul_cycles(batch, m, k, n, rows, cols, cores, os, timing)


def buffer_elements(buffer_bytes: float, bytes_per_element: int) -> int:
    """Elements of one half of a double-buffered global buffer, ⌊bytes / (2·e)⌋;
    :data:`UNBOUNDED_ELEMENTS` for an infinite buffer."""
    if math.isinf(buffer_bytes):
        return UNBOUNDED_ELEMENTS
    return int(buffer_bytes // (2 * bytes_per_element))


def _tiled(m: int, k: int, n: int, tk: int, cap: int, first_m: bool) -> int:
    """Blocked traffic with the largest square output tile, clipped to m (or n) first."""
    t = int(math.sqrt(float(tk * tk + cap)) - tk)
    if first_m:
        tm = max(1, min(m, t))
        tn = max(1, min(n, (cap - tk * tm) // (tm + tk)))
    else:
        tn = max(1, min(n, t))
        tm = max(1, min(m, (cap - tk * tn) // (tn + tk)))
    return m * n + m * k * ceil_div(n, tn) + k * n * ceil_div(m, tm)


def matmul_hbm_elements(batch: int, m: int, k: int, n: int, rows: int, cols: int, cap: int) -> int:
    """Elements a batched GEMM moves between HBM and a buffer of ``cap`` elements (docstring).

    Args:
        cap: usable buffer elements (:func:`buffer_elements`).

    Returns:
        ``batch`` x the per-GEMM traffic; 0 when a dimension is 0.
    """
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return 0
    compulsory = m * k + k * n + m * n
    if (compulsory <= cap or k * n + min(m, rows) * (k + n) <= cap
            or m * k + min(n, cols) * (k + m) <= cap):
        return batch * compulsory
    tk = min(k, rows)
    return batch * min(_tiled(m, k, n, tk, cap, True), _tiled(m, k, n, tk, cap, False))


def matmul_feed_elements(batch: int, m: int, k: int, n: int, rows: int, cols: int, os: bool) -> int:
    """Elements moved between the arrays and their local buffers (for energy).

    WS: inputs ``mk·⌈n/C⌉``, weights ``kn``, partial sums written and read back
    ``mn·(2⌈k/R⌉ - 1)``.  OS: A ``mk·⌈n/C⌉``, B ``kn·⌈m/R⌉``, outputs ``mn``.  Times ``batch``.
    """
    if batch <= 0 or m <= 0 or k <= 0 or n <= 0:
        return 0
    if os:
        per = m * k * ceil_div(n, cols) + k * n * ceil_div(m, rows) + m * n
    else:
        per = m * k * ceil_div(n, cols) + k * n + m * n * (2 * ceil_div(k, rows) - 1)
    return batch * per


def exposed_elements(m: int, k: int, n: int, rows: int, cols: int, os: bool) -> int:
    """Elements one array must move before (WS: its first weight tile) or after (OS: its
    last output tile) computing -- the HBM transfer compute cannot hide."""
    if m <= 0 or k <= 0 or n <= 0:
        return 0
    if os:
        return min(m, rows) * min(n, cols)
    return min(k, rows) * min(n, cols)
