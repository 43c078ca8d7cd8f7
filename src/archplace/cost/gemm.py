"""Cycle counts of a matmul on weight-stationary systolic arrays (DESIGN.md, Per-operator cost).

Dataflow (weight stationary, as in SCALE-Sim, Samajdar et al.): an R x C array
holds an R x C tile ("fold") of the K x N weight matrix, one weight per PE.  The
M rows of the input enter from the left edge, row ``kk`` of the array skewed by
``kk`` cycles, and move one PE to the right per cycle; partial sums move one PE
down per cycle and leave at the bottom edge.  The last MAC of a fold happens
``(M - 1) + (R - 1) + (C - 1)`` cycles after the first, so a fold takes
``M + R + C - 2`` cycles of fill, streaming and drain.  Loading the next fold's
weights is hidden by double-buffering the weight registers, so folds follow one
another back to back.  An edge fold that does not fill the array (K or N not a
multiple of R or C) is padded with zeros and costs as much as a full one.

All functions are pure and take sizes as positive or zero integers; a GEMM with
a zero dimension has no work and takes 0 cycles.
"""

from __future__ import annotations


def _ceil_div(a: int, b: int) -> int:
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
    return _ceil_div(k, rows) * _ceil_div(n, cols)


def fold_cycles(m: int, rows: int, cols: int) -> int:
    """Cycles of one fold streaming ``m`` input rows: ``m + rows + cols - 2`` (0 if m = 0).

    Raises:
        ValueError: a non-positive array size.
    """
    _check_array(rows, cols)
    if m <= 0:
        return 0
    return m + rows + cols - 2


def matmul_cycles_ws(m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Cycles of one ``[m, k] x [k, n]`` GEMM on one weight-stationary ``rows x cols`` array.

    ``⌈k/rows⌉ · ⌈n/cols⌉ · (m + rows + cols - 2)``; 0 if any of m, k, n is 0.

    Raises:
        ValueError: a non-positive array size.
    """
    if m <= 0:
        _check_array(rows, cols)
        return 0
    return fold_count(k, n, rows, cols) * fold_cycles(m, rows, cols)


def matmul_cycles_single_core(batch: int, m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Cycles of a batched GEMM ``[batch, m, k] x [batch, k, n]`` on ONE array.

    The array runs all ``batch · folds`` fold tasks one after the other.

    Raises:
        ValueError: a non-positive array size.
    """
    if batch <= 0:
        _check_array(rows, cols)
        return 0
    return batch * matmul_cycles_ws(m, k, n, rows, cols)


def matmul_cycles_all_cores(
    batch: int, m: int, k: int, n: int, rows: int, cols: int, cores: int
) -> int:
    """Cycles of a batched GEMM spread over ``cores`` identical arrays.

    The ``tasks = batch · folds`` fold tasks are dealt out in rounds of ``cores``:
    ``⌈tasks / cores⌉ · (m + R + C − 2)``.  When there are fewer tasks than cores,
    each task also gets ``⌊cores / tasks⌋`` cores that split its ``m`` input rows,
    so a round takes ``⌈m / ⌊cores/tasks⌋⌉ + R + C − 2`` cycles (the spare
    ``cores mod tasks`` arrays idle).

    Raises:
        ValueError: a non-positive array size or core count.
    """
    if cores <= 0:
        raise ValueError(f"cores must be positive, got {cores}")
    tasks = max(batch, 0) * fold_count(k, n, rows, cols)
    if tasks == 0 or m <= 0:
        return 0
    if tasks >= cores:
        return _ceil_div(tasks, cores) * fold_cycles(m, rows, cols)
    cores_per_task = cores // tasks
    return fold_cycles(_ceil_div(m, cores_per_task), rows, cols)
