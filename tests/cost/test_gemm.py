"""Systolic matmul cycles (archplace.cost.gemm) against a cycle-by-cycle simulation, and tiling."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.cost import gemm
from archplace.cost.gemm import (
    buffer_elements,
    fold_count,
    matmul_cycles,
    matmul_cycles_all_cores,
    matmul_cycles_os,
    matmul_cycles_single_core,
    matmul_cycles_ws,
    matmul_hbm_elements,
    os_cycles,
    os_cycles_scalesim,
    ws_cycles,
    ws_cycles_scalesim,
)
from archplace.hw.accelerator import ArrayTiming

from .systolic_sim import Hazard, Matrix, simulate_os, simulate_ws


def reference_product(a: Matrix, b: Matrix) -> Matrix:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def random_matrix(rng: random.Random, rows: int, cols: int) -> Matrix:
    return [[rng.randint(-3, 3) for _ in range(cols)] for _ in range(rows)]


SHAPES = [  # (m, k, n, rows, cols): square, tall, wide, partial folds, m < C, k < R, 1-wide
    (1, 1, 1, 1, 1), (4, 4, 4, 2, 2), (3, 5, 7, 2, 3), (6, 2, 9, 4, 4), (2, 8, 1, 3, 1),
    (7, 3, 3, 1, 5), (1, 6, 6, 3, 3), (9, 4, 5, 2, 4), (5, 7, 2, 4, 2), (2, 2, 11, 3, 4),
]


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols"), SHAPES)
def test_ws_simulation_matches_formula_exactly(m: int, k: int, n: int, rows: int, cols: int) -> None:
    rng = random.Random(m * 1000 + k * 100 + n)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    cycles, out = simulate_ws(a, b, rows, cols)
    assert out == reference_product(a, b)
    assert matmul_cycles_ws(m, k, n, rows, cols) == cycles
    assert matmul_cycles(1, m, k, n, rows, cols, 1, os=False) == cycles


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols"), SHAPES)
def test_os_simulation_matches_formula_exactly(m: int, k: int, n: int, rows: int, cols: int) -> None:
    rng = random.Random(m * 1000 + k * 100 + n + 7)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    cycles, out = simulate_os(a, b, rows, cols)
    assert out == reference_product(a, b)
    assert matmul_cycles_os(m, k, n, rows, cols) == cycles
    assert matmul_cycles(1, m, k, n, rows, cols, 1, os=True) == cycles


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 6), k=st.integers(1, 7), n=st.integers(1, 7), rows=st.integers(1, 4),
       cols=st.integers(1, 4), seed=st.integers(0, 2**16), os_=st.booleans())
def test_simulation_matches_formula_random(m: int, k: int, n: int, rows: int, cols: int, seed: int,
                                           os_: bool) -> None:
    rng = random.Random(seed)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    cycles, out = (simulate_os if os_ else simulate_ws)(a, b, rows, cols)
    assert out == reference_product(a, b)
    assert matmul_cycles(1, m, k, n, rows, cols, 1, os=os_) == cycles


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols"),
                         [(4, 6, 6, 3, 3), (2, 4, 8, 2, 4), (5, 4, 6, 2, 3), (1, 4, 4, 2, 2)])
def test_ws_schedule_is_tight(m: int, k: int, n: int, rows: int, cols: int) -> None:
    """One cycle less between folds, or no lead for the first weights, breaks the array."""
    rng = random.Random(1)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    assert fold_count(k, n, rows, cols) > 1
    with pytest.raises(Hazard):
        simulate_ws(a, b, rows, cols, period=max(m, cols) - 1)
    with pytest.raises(Hazard):
        simulate_ws(a, b, rows, cols, lead=0)


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols"),
                         [(6, 5, 3, 3, 3), (4, 2, 4, 2, 2), (6, 1, 2, 3, 2), (4, 7, 4, 2, 2)])
def test_os_schedule_is_tight(m: int, k: int, n: int, rows: int, cols: int) -> None:
    rng = random.Random(2)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    assert gemm.tile_count(m, n, rows, cols) > 1
    with pytest.raises(Hazard):
        simulate_os(a, b, rows, cols, period=max(k, rows) - 1)


def test_hand_counts() -> None:
    # 1024^3 on 128x128 WS: 64 folds every 1024 cycles, +1 lead, last drains 1024 + 254
    assert matmul_cycles_ws(1024, 1024, 1024, 128, 128) == 1 + 63 * 1024 + 1024 + 254
    # m = 1: folds are limited by the C = 128 cycles of weight loading
    assert matmul_cycles_ws(1, 256, 256, 128, 128) == 1 + 3 * 128 + 1 + 254
    # OS: 64 tiles every max(k, R) = 1024 cycles, the last drains k + 2R + C - 2
    assert matmul_cycles_os(1024, 1024, 1024, 128, 128) == 63 * 1024 + 1024 + 256 + 126
    assert ws_cycles(0, 5, 4, 4) == 0 and os_cycles(3, 0, 4, 4) == 0
    assert fold_count(129, 257, 128, 128) == 2 * 3


def test_all_cores_hand_counts() -> None:
    # 3 batches x 2 folds = 6 tasks on 4 cores, m = 10 < C: best is 2 folds per core
    assert matmul_cycles_all_cores(3, 10, 128, 256, 128, 128, 4) == ws_cycles(2, 10, 128, 128)
    # 4 folds on 8 cores: 2 row groups of 50 rows, 1 fold each
    assert matmul_cycles_all_cores(1, 100, 256, 256, 128, 128, 8) == ws_cycles(1, 50, 128, 128)
    # single core: every fold in turn
    assert matmul_cycles_single_core(3, 10, 128, 256, 128, 128) == ws_cycles(6, 10, 128, 128)
    # OS deals whole tiles: 6 tiles on 4 cores -> 2 each
    assert matmul_cycles_all_cores(1, 30, 7, 40, 10, 20, 4, os=True) == os_cycles(2, 7, 10, 20)


def test_scalesim_hand_counts() -> None:
    # 1024^3 on 128x128 WS: 64 folds, each loads (128), streams (1024), crosses (127), skews (127)
    assert matmul_cycles(1, 1024, 1024, 1024, 128, 128, 1, False, ArrayTiming.SCALESIM) == 64 * (
        128 + 1024 + 127 + 127)
    # OS: 64 tiles of k = 1024 operand pairs plus 127 + 127 cycles of skew each
    assert matmul_cycles(1, 1024, 1024, 1024, 128, 128, 1, True, ArrayTiming.SCALESIM) == 64 * (
        1024 + 254)
    # IS on 4x8: ceil(10/4) * ceil(9/8) = 6 folds of 2*4 + 8 + 11 - 2 = 25 cycles
    assert gemm.is_cycles_scalesim(9, 10, 11, 4, 8) == 6 * 25
    # all cores: 4 folds on 8 cores -> 2 row groups of 50 rows, 1 fold each (the WS mapping)
    assert matmul_cycles(1, 100, 256, 256, 128, 128, 8, False, ArrayTiming.SCALESIM) == (
        ws_cycles_scalesim(1, 50, 128, 128))
    assert ws_cycles_scalesim(0, 5, 4, 4) == 0 and os_cycles_scalesim(3, 0, 4, 4) == 0
    assert gemm.is_cycles_scalesim(0, 5, 5, 4, 4) == 0
    with pytest.raises(ValueError):
        ws_cycles_scalesim(1, 1, 0, 4)


@given(folds=st.integers(1, 10**4), m=st.integers(1, 10**5), rows=st.integers(1, 512),
       cols=st.integers(1, 512))
def test_scalesim_ws_never_faster_than_overlapped(folds: int, m: int, rows: int, cols: int) -> None:
    # SCALE-Sim serialises what double-buffered weights overlap: at least R - 1 more per fold
    # set, and the ratio of a long run tends to (2R + C + m - 2) / max(m, C).
    scalesim = ws_cycles_scalesim(folds, m, rows, cols)
    overlapped = ws_cycles(folds, m, rows, cols)
    assert scalesim >= overlapped + rows - 1
    assert scalesim == folds * (2 * rows + cols + m - 2)


dims = st.integers(0, 3000)


@given(batch=st.integers(0, 64), m=dims, k=dims, n=dims, rows=st.sampled_from([1, 2, 8, 128]),
       cols=st.sampled_from([1, 4, 16, 256]), cores=st.integers(1, 4096), os_=st.booleans(),
       timing=st.sampled_from(ArrayTiming))
def test_all_cores_bounds(batch: int, m: int, k: int, n: int, rows: int, cols: int, cores: int,
                          os_: bool, timing: ArrayTiming) -> None:
    single = matmul_cycles(batch, m, k, n, rows, cols, 1, os_, timing)
    parallel = matmul_cycles(batch, m, k, n, rows, cols, cores, os_, timing)
    assert parallel <= single
    assert parallel * cores >= single  # no more total work than one core does
    assert matmul_cycles(batch, m, k, n, rows, cols, cores + 1, os_, timing) <= parallel
    if batch and m and k and n:
        assert single * rows * cols >= batch * m * k * n  # never faster than every MAC busy


def test_bad_array_or_cores() -> None:
    with pytest.raises(ValueError):
        matmul_cycles(1, 4, 4, 4, 0, 4)
    with pytest.raises(ValueError):
        matmul_cycles(1, 4, 4, 4, 4, 4, 0)


# ----------------------------------------------------------------------------- HBM traffic
def test_compulsory_traffic_when_everything_fits() -> None:
    assert matmul_hbm_elements(3, 64, 32, 16, 8, 8, 10**6) == 3 * (64 * 32 + 32 * 16 + 64 * 16)
    assert matmul_hbm_elements(1, 0, 32, 16, 8, 8, 10) == 0


def test_weight_resident_is_compulsory() -> None:
    # k x n = 64 x 64 = 4096 weights fit with one 8-row block of inputs and outputs
    cap = 64 * 64 + 8 * 128
    assert matmul_hbm_elements(1, 10_000, 64, 64, 8, 8, cap) == 10_000 * 64 + 64 * 64 + 10_000 * 64


def test_tiled_traffic_by_hand() -> None:
    # m = k = n = 1000, cap = 10_000 elements, Tk = min(k, R) = 10:
    # t = floor(sqrt(100 + 10000) - 10) = 90; Tm = 90, Tn = (10000 - 900) // 100 = 91
    million = 1000 * 1000
    expected = million + million * gemm.ceil_div(1000, 91) + million * gemm.ceil_div(1000, 90)
    assert matmul_hbm_elements(1, 1000, 1000, 1000, 10, 10, 10_000) == expected


@given(m=st.integers(1, 5000), k=st.integers(1, 5000), n=st.integers(1, 5000),
       rows=st.sampled_from([2, 16, 128]), cap=st.integers(64, 10**8))
def test_traffic_bounds(m: int, k: int, n: int, rows: int, cap: int) -> None:
    traffic = matmul_hbm_elements(1, m, k, n, rows, rows, cap)
    assert traffic >= m * k + k * n + m * n
    assert matmul_hbm_elements(1, m, k, n, rows, rows, cap * 4) <= traffic
    assert matmul_hbm_elements(1, m, k, n, rows, rows, gemm.UNBOUNDED_ELEMENTS) == m * k + k * n + m * n


def test_buffer_elements() -> None:
    assert buffer_elements(128 * 2**20, 2) == 32 * 2**20
    assert buffer_elements(float("inf"), 2) == gemm.UNBOUNDED_ELEMENTS
