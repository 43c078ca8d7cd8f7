"""Min-max dynamic programs over splits of a layer chain into a fixed number of segments.

A problem has s positions (segments 0..s-1 in chain order). ``block(c, rows, cols)`` returns,
for position c, the values of the segments [i, e] for i in ``rows`` and e in ``cols`` (slices of
layer indices): the segment's value as segment c, or +inf when it is not allowed there (does
not fit, exceeds a threshold, or lies below the diagonal). The DP runs over suffixes
(Narayanan et al., PipeDream, SOSP 2019; Tarnawski et al., Piper, NeurIPS 2021, for the
prefix/downset form): best[c][i] is the smallest possible maximum value of the segments c..s-1
when they cover layers i..n-1, so best[0][0] is the optimum over all splits. Segment c can only
start and end in [c, n - s + c] (every segment is non-empty), so position c asks for one
(n - s + 1)^2 block and the whole DP costs O(s (n - s + 1)^2), vectorised per position.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Block = Callable[[int, slice, slice], FloatArray]


def suffix_min_max(block: Block, n: int, s: int) -> list[FloatArray]:
    """best[c] (c = 0..s) as length-(n + 1) arrays; best[s] is -inf at n and +inf elsewhere."""
    best: list[FloatArray] = [np.empty(0)] * (s + 1)
    end = np.full(n + 1, np.inf)
    end[n] = -np.inf
    best[s] = end
    for c in range(s - 1, -1, -1):
        lo, hi = c, n - s + c
        out = np.full(n + 1, np.inf)
        if c == s - 1:
            out[lo:hi + 1] = block(c, slice(lo, hi + 1), slice(n - 1, n))[:, 0]
        else:
            sub = block(c, slice(lo, hi + 1), slice(lo, hi + 1))
            out[lo:hi + 1] = np.maximum(sub, best[c + 1][lo + 1:hi + 2][None, :]).min(axis=1)
        best[c] = out
    return best


def min_max(block: Block, n: int, s: int) -> float:
    """The smallest possible maximum over all splits (inf when no split is allowed)."""
    return float(suffix_min_max(block, n, s)[0][0])


def first_split(block: Block, n: int, s: int, cap: float) -> tuple[tuple[int, int], ...]:
    """The lexicographically smallest split (shortest first segment, then shortest second, ...)
    whose segments all have value <= ``cap``.

    Raises:
        ValueError: no such split exists.
    """
    def allowed(c: int, rows: slice, cols: slice) -> FloatArray:
        return np.where(block(c, rows, cols) <= cap, 0.0, np.inf)

    best = suffix_min_max(allowed, n, s)
    if not best[0][0] == 0.0:
        raise ValueError("no split within the cap")
    stages = []
    i = 0
    for c in range(s - 1):
        hi = n - s + c
        row = allowed(c, slice(i, i + 1), slice(i, hi + 1))[0]
        ok = (row == 0.0) & (best[c + 1][i + 1:hi + 2] == 0.0)
        e = i + int(np.flatnonzero(ok)[0])
        stages.append((i, e))
        i = e + 1
    stages.append((i, n - 1))
    return tuple(stages)


def fits_greedily(column: Callable[[int, int, int], FloatArray], n: int, s: int,
                  cap: float) -> bool:
    """Whether the chain splits into s segments whose values are all <= ``cap``, when
    ``column(c, lo, x)`` gives the values of the segments [i, x - 1], i = lo..x-1, as segment c,
    non-increasing in i (a shorter segment is never worse), and a segment that is allowed at
    some position is allowed at every later one (in-flight counts never grow along the pipeline:
    1F1B, GPipe).

    Exact: giving each segment, from the last one backwards, as many layers as it can take
    (leaving one layer for every earlier segment) never loses a split (exchange argument).
    """
    x = n  # layers 0..x-1 are left for positions 0..c
    for c in range(s - 1, -1, -1):
        values = column(c, c, x)
        start = int(np.searchsorted(-values, -cap, side="left"))  # first i with value <= cap
        if start == len(values):
            return False
        x = c + start
    return x == 0
