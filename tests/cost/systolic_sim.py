"""Cycle-by-cycle simulations of one systolic array, for checking archplace.cost.gemm.

Both simulations move every value through the PE registers one cycle at a time,
compute the product (checked against a plain triple loop by the tests) and count
the cycles until the last result has left the array.  The controller issues work
on the schedule described in archplace.cost.gemm (period ``max(m, C)`` for WS,
``max(k, R)`` for OS, unless a test passes another period); the simulation
raises :class:`Hazard` whenever that schedule breaks the hardware's rules --
two values in one register or port in one cycle, a PE using a weight that has
not arrived, overwriting a weight or result still needed -- so a test can also
show that a shorter period is illegal.
"""

from __future__ import annotations

Matrix = list[list[int]]


class Hazard(Exception):
    """The schedule broke a rule of the array."""


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise Hazard(what)


def simulate_ws(a: Matrix, b: Matrix, rows: int, cols: int, period: int | None = None,
                lead: int = 1) -> tuple[int, Matrix]:
    """Weight-stationary ``a @ b`` on a ``rows x cols`` array.

    Fold f (a rows x cols tile of ``b``) loads through per-row write ports: PE (r, c)'s
    shadow weight is written at the end of cycle ``L_f + r + c``; row r of the array
    receives input row i of fold f at cycle ``S_f + i + r``, with ``L_f = f·period`` and
    ``S_f = L_f + lead``.  A PE copies its shadow weight into its active weight when
    the first input of a new fold reaches it (start of the cycle), multiplies, adds the
    partial sum from above and passes both on.  Results leave at the bottom edge.

    Returns:
        (cycles until the last result has left, the product).

    Raises:
        Hazard: the schedule breaks a rule of the array.
    """
    m, k, n = len(a), len(b), len(b[0])
    folds = [(k0, n0) for k0 in range(0, k, rows) for n0 in range(0, n, cols)]
    p = max(m, cols) if period is None else period
    load = [f * p for f in range(len(folds))]
    start = [f * p + lead for f in range(len(folds))]

    def weight(f: int, r: int, c: int) -> int:
        k0, n0 = folds[f]
        return b[k0 + r][n0 + c] if k0 + r < k and n0 + c < n else 0

    active: list[list[int | None]] = [[None] * cols for _ in range(rows)]   # fold of active weight
    active_w = [[0] * cols for _ in range(rows)]
    shadow: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
    act: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    psum: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    out = [[0] * n for _ in range(m)]
    last = -1
    end = start[-1] + m + rows + cols + 2
    for t in range(end):
        new_act: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
        new_psum: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
        for r in range(rows):
            for c in range(cols):
                if c == 0:
                    tokens = [(f, t - start[f] - r) for f in range(len(folds))
                              if 0 <= t - start[f] - r < m]
                    _check(len(tokens) <= 1, f"row {r} injector gets two folds at cycle {t}")
                    if tokens:
                        f, i = tokens[0]
                        k0 = folds[f][0]
                        new_act[r][c] = (f, i, a[i][k0 + r] if k0 + r < k else 0)
                else:
                    new_act[r][c] = act[r][c - 1]
                token = new_act[r][c]
                above = psum[r - 1][c] if r > 0 else None
                if token is None:
                    _check(above is None, f"partial sum without input at PE({r},{c}) cycle {t}")
                    continue
                f, i, x = token
                if active[r][c] != f:
                    loaded = shadow[r][c]
                    _check(loaded is not None and loaded[0] == f,
                           f"PE({r},{c}) has no weight of fold {f} at cycle {t}")
                    assert loaded is not None
                    active[r][c], active_w[r][c] = loaded
                    shadow[r][c] = None
                if r > 0:
                    _check(above is not None and above[:2] == (f, i), f"skew broken at PE({r},{c})")
                acc = above[2] if above is not None else 0
                new_psum[r][c] = (f, i, acc + x * active_w[r][c])
        for r in range(rows):  # weight writes at the end of the cycle, one per row port
            writes = [(f, t - load[f] - r) for f in range(len(folds)) if 0 <= t - load[f] - r < cols]
            _check(len(writes) <= 1, f"row {r} write port used twice at cycle {t}")
            for f, c in writes:
                _check(shadow[r][c] is None, f"PE({r},{c}) shadow overwritten at cycle {t}")
                shadow[r][c] = (f, weight(f, r, c))
        act, psum = new_act, new_psum
        for c in range(cols):
            leaving = psum[rows - 1][c]
            if leaving is not None:
                f, i, v = leaving
                if folds[f][1] + c < n:
                    out[i][folds[f][1] + c] += v
                last = t
    return last + 1, out


def simulate_os(a: Matrix, b: Matrix, rows: int, cols: int, period: int | None = None) -> tuple[int, Matrix]:
    """Output-stationary ``a @ b`` on a ``rows x cols`` array.

    Tile t (rows x cols outputs at (m0, n0)) starts at ``S_t = t·period``: row r of the
    array receives ``a[m0 + r][kk]`` and column c receives ``b[kk][n0 + c]`` at cycle
    ``S_t + kk + r`` (resp. ``+ c``); operands move right (a) and down (b).  A PE
    multiplies and accumulates; after its last product it puts the result in a shadow
    register, which enters the column's output chain ``r`` cycles later; the chain moves
    one PE down per cycle and results leave at the bottom edge.

    Returns:
        (cycles until the last result has left, the product).

    Raises:
        Hazard: the schedule breaks a rule of the array.
    """
    m, k, n = len(a), len(b), len(b[0])
    tiles = [(m0, n0) for m0 in range(0, m, rows) for n0 in range(0, n, cols)]
    p = max(k, rows) if period is None else period
    start = [t * p for t in range(len(tiles))]
    a_reg: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    b_reg: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    accum: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
    shadow: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    chain: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
    out = [[0] * n for _ in range(m)]
    last = -1
    end = start[-1] + k + 2 * rows + cols + 2
    for t in range(end):
        new_chain: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
        for c in range(cols):  # the output chain moves down; the bottom value leaves
            leaving = chain[rows - 1][c]
            if leaving is not None:
                tile, r, v = leaving
                m0, n0 = tiles[tile]
                if m0 + r < m and n0 + c < n:
                    out[m0 + r][n0 + c] = v
                last = t - 1
            for r in range(1, rows):
                new_chain[r][c] = chain[r - 1][c]
        for r in range(rows):  # shadows whose wait is over enter the chain
            for c in range(cols):
                held = shadow[r][c]
                if held is not None and held[2] == t:
                    _check(new_chain[r][c] is None, f"output chain collision at ({r},{c}) cycle {t}")
                    new_chain[r][c] = (held[0], r, held[1])
                    shadow[r][c] = None
        chain = new_chain
        new_a: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
        new_b: list[list[tuple[int, int, int] | None]] = [[None] * cols for _ in range(rows)]
        for r in range(rows):
            for c in range(cols):
                if c == 0:
                    toks = [(s, t - start[s] - r) for s in range(len(tiles)) if 0 <= t - start[s] - r < k]
                    _check(len(toks) <= 1, f"row {r} injector gets two tiles at cycle {t}")
                    if toks:
                        s, kk = toks[0]
                        m0 = tiles[s][0]
                        new_a[r][c] = (s, kk, a[m0 + r][kk] if m0 + r < m else 0)
                else:
                    new_a[r][c] = a_reg[r][c - 1]
                if r == 0:
                    toks = [(s, t - start[s] - c) for s in range(len(tiles)) if 0 <= t - start[s] - c < k]
                    _check(len(toks) <= 1, f"column {c} injector gets two tiles at cycle {t}")
                    if toks:
                        s, kk = toks[0]
                        n0 = tiles[s][1]
                        new_b[r][c] = (s, kk, b[kk][n0 + c] if n0 + c < n else 0)
                else:
                    new_b[r][c] = b_reg[r - 1][c]
                x, y = new_a[r][c], new_b[r][c]
                _check((x is None) == (y is None), f"operands out of step at PE({r},{c}) cycle {t}")
                if x is None or y is None:
                    continue
                _check(x[:2] == y[:2], f"operands of different steps at PE({r},{c}) cycle {t}")
                s, kk = x[0], x[1]
                if kk == 0:
                    _check(accum[r][c] is None, f"PE({r},{c}) accumulator busy at cycle {t}")
                    accum[r][c] = (s, 0)
                held_acc = accum[r][c]
                assert held_acc is not None and held_acc[0] == s
                accum[r][c] = (s, held_acc[1] + x[2] * y[2])
                if kk == k - 1:
                    _check(shadow[r][c] is None, f"PE({r},{c}) result shadow busy at cycle {t}")
                    value = accum[r][c]
                    assert value is not None
                    shadow[r][c] = (s, value[1], t + 1 + r)
                    accum[r][c] = None
        a_reg, b_reg = new_a, new_b
    return last + 1, out
