"""Weight-stationary matmul cycle counts (archplace.cost.gemm) and matmul latency (cost.model).

The cycle formula is checked against a cycle-by-cycle simulation of a
weight-stationary systolic array written here, which also checks that the
array computes the right product.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.cost.gemm import (
    fold_count,
    fold_cycles,
    matmul_cycles_all_cores,
    matmul_cycles_single_core,
    matmul_cycles_ws,
)
from archplace.cost.model import CostModel, OpLatency, SystolicCostModel, matmul_latency
from archplace.hardware.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase

Matrix = list[list[int]]


def simulate_fold(a: Matrix, w: Matrix, rows: int, cols: int) -> tuple[int, Matrix]:
    """Run one weight-stationary fold cycle by cycle.

    ``a`` is M x k' (k' <= rows), ``w`` is k' x n' (n' <= cols), preloaded one weight per
    PE and zero-padded to rows x cols.  Each cycle, PE (r, c) takes the activation from its
    left neighbour (row r of the array is fed a[i][r] at cycle i + r), adds activation x
    weight to the partial sum from the PE above, and passes both on.  Partial sums leave
    at the bottom.  Returns (cycles until the last partial sum leaves, M x n' product).
    """
    m, kp, np_ = len(a), len(w), len(w[0])
    weights = [[w[r][c] if r < kp and c < np_ else 0 for c in range(cols)] for r in range(rows)]
    act: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
    psum: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
    out: dict[tuple[int, int], int] = {}
    cycle, last = 0, -1
    while len(out) < m * cols:
        assert cycle < 10 * (m + rows + cols), "simulation does not terminate"
        new_act: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
        new_psum: list[list[tuple[int, int] | None]] = [[None] * cols for _ in range(rows)]
        for r in range(rows):
            for c in range(cols):
                if c == 0:
                    i = cycle - r
                    value = a[i][r] if 0 <= i < m and r < kp else 0
                    new_act[r][c] = (i, value) if 0 <= i < m else None
                else:
                    new_act[r][c] = act[r][c - 1]
                x = new_act[r][c]
                above = psum[r - 1][c] if r > 0 else None
                if x is None:
                    assert above is None, "partial sum arrived without its activation"
                    continue
                i, value = x
                if r > 0:
                    assert above is not None and above[0] == i, "skew misaligned"
                acc = above[1] if above is not None else 0
                new_psum[r][c] = (i, acc + value * weights[r][c])
        act, psum = new_act, new_psum
        for c in range(cols):
            leaving = psum[rows - 1][c]
            if leaving is not None:
                out[(leaving[0], c)] = leaving[1]
                last = cycle
        cycle += 1
    return last + 1, [[out[(i, c)] for c in range(np_)] for i in range(m)]


def simulate_matmul(a: Matrix, b: Matrix, rows: int, cols: int) -> tuple[int, Matrix]:
    """[M, K] x [K, N] on one array: fold over K and N tiles, back to back; sum the K tiles."""
    m, k, n = len(a), len(b), len(b[0])
    result = [[0] * n for _ in range(m)]
    cycles = 0
    for k0 in range(0, k, rows):
        for n0 in range(0, n, cols):
            a_tile = [row[k0:k0 + rows] for row in a]
            w_tile = [row[n0:n0 + cols] for row in b[k0:k0 + rows]]
            fold, partial = simulate_fold(a_tile, w_tile, rows, cols)
            cycles += fold
            for i in range(m):
                for j, v in enumerate(partial[i]):
                    result[i][n0 + j] += v
    return cycles, result


def reference_product(a: Matrix, b: Matrix) -> Matrix:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def random_matrix(rng: random.Random, rows: int, cols: int) -> Matrix:
    return [[rng.randint(-3, 3) for _ in range(cols)] for _ in range(rows)]


def test_single_fold_takes_m_plus_r_plus_c_minus_2() -> None:
    rng = random.Random(0)
    a, w = random_matrix(rng, 5, 3), random_matrix(rng, 3, 4)
    cycles, out = simulate_fold(a, w, 3, 4)
    assert cycles == 5 + 3 + 4 - 2
    assert out == reference_product(a, w)


@pytest.mark.parametrize(("m", "k", "n", "rows", "cols"),
                         [(1, 1, 1, 1, 1), (4, 4, 4, 2, 2), (3, 5, 7, 2, 3), (6, 2, 9, 4, 4),
                          (2, 8, 1, 3, 1), (7, 3, 3, 1, 5)])
def test_simulation_matches_formula(m: int, k: int, n: int, rows: int, cols: int) -> None:
    rng = random.Random(m * 1000 + k * 100 + n)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    cycles, out = simulate_matmul(a, b, rows, cols)
    assert out == reference_product(a, b)
    assert matmul_cycles_ws(m, k, n, rows, cols) == cycles


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 5), k=st.integers(1, 7), n=st.integers(1, 7),
       rows=st.integers(1, 4), cols=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_simulation_matches_formula_random(m: int, k: int, n: int, rows: int, cols: int,
                                           seed: int) -> None:
    rng = random.Random(seed)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    cycles, out = simulate_matmul(a, b, rows, cols)
    assert out == reference_product(a, b)
    assert matmul_cycles_ws(m, k, n, rows, cols) == cycles


def test_hand_counts() -> None:
    # 1024^3 on 128x128: 8 x 8 folds of 1024 + 254 cycles
    assert matmul_cycles_ws(1024, 1024, 1024, 128, 128) == 64 * 1278
    # partial folds cost as much as full ones: K = 129 needs 2 row folds
    assert matmul_cycles_ws(10, 129, 128, 128, 128) == 2 * (10 + 254)
    assert fold_count(129, 257, 128, 128) == 2 * 3
    assert fold_cycles(1, 4, 4) == 7


@pytest.mark.parametrize(("m", "k", "n"), [(0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_zero_dimension_costs_nothing(m: int, k: int, n: int) -> None:
    assert matmul_cycles_ws(m, k, n, 4, 4) == 0
    assert matmul_cycles_all_cores(3, m, k, n, 4, 4, 8) == 0
    assert matmul_cycles_single_core(0, 4, 4, 4, 4, 4) == 0


def test_bad_array_raises() -> None:
    with pytest.raises(ValueError):
        matmul_cycles_ws(4, 4, 4, 0, 4)
    with pytest.raises(ValueError):
        matmul_cycles_all_cores(1, 4, 4, 4, 4, 4, 0)


def test_all_cores_hand_counts() -> None:
    # 3 batches x 2 folds = 6 tasks on 4 cores: 2 rounds of (10 + 254)
    assert matmul_cycles_all_cores(3, 10, 128, 256, 128, 128, 4) == 2 * 264
    # 4 tasks on 8 cores: 2 cores per task split M = 100 into 50 rows each
    assert matmul_cycles_all_cores(1, 100, 256, 256, 128, 128, 8) == 50 + 254
    # 3 tasks on 8 cores: 2 cores per task (2 idle), M = 7 -> 4 rows
    assert matmul_cycles_all_cores(3, 7, 4, 4, 4, 4, 8) == 4 + 6
    # 1 task on 16 cores, M = 5: at most one row per core
    assert matmul_cycles_all_cores(1, 5, 4, 4, 4, 4, 16) == 1 + 6
    # single core: every task in turn
    assert matmul_cycles_single_core(3, 10, 128, 256, 128, 128) == 6 * 264


dims = st.integers(0, 3000)


@given(batch=st.integers(0, 64), m=dims, k=dims, n=dims, rows=st.sampled_from([1, 2, 8, 128]),
       cols=st.sampled_from([1, 4, 16, 256]), cores=st.integers(1, 4096))
def test_all_cores_bounds(batch: int, m: int, k: int, n: int, rows: int, cols: int,
                          cores: int) -> None:
    single = matmul_cycles_single_core(batch, m, k, n, rows, cols)
    parallel = matmul_cycles_all_cores(batch, m, k, n, rows, cols, cores)
    assert parallel <= single
    assert parallel * cores >= single  # no more total work than one core does
    assert matmul_cycles_all_cores(batch, m, k, n, rows, cols, 1) == single
    assert matmul_cycles_all_cores(batch, m, k, n, rows, cols, cores + 1) <= parallel


def matmul_op(batch: int, m: int, k: int, n: int, bytes_moved: float) -> Operator:
    return Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL,
                    phase=Phase.FWD, batch=batch, m=m, k=k, n=n, elements=batch * m * n,
                    flop=2.0 * batch * m * k * n, bytes_read=bytes_moved * 2 / 3,
                    bytes_written=bytes_moved / 3)


def test_latency_compute_bound_on_tpuv4() -> None:
    acc = load_accelerator("tpuv4")
    bytes_moved = 3 * 1024 * 1024 * 2.0
    lat = SystolicCostModel().latency(matmul_op(1, 1024, 1024, 1024, bytes_moved), acc)
    assert lat.single_core_s == pytest.approx(64 * 1278 / 1.05e9, rel=1e-12)
    assert lat.all_cores_s == pytest.approx(8 * 1278 / 1.05e9, rel=1e-12)


def test_latency_memory_bound() -> None:
    acc = load_accelerator("tpuv4")
    # 1 x 128 x 128 on 128x128: 256 cycles = 0.24 us; 1.2 MB over 1.2 TB/s = 1 us
    lat = SystolicCostModel().latency(matmul_op(1, 2, 128, 128, 1.2e6), acc)
    assert lat.single_core_s == pytest.approx(1e-6, rel=1e-12)
    assert lat.all_cores_s == pytest.approx(1e-6, rel=1e-12)


def test_zero_work_matmul_costs_nothing() -> None:
    acc = load_accelerator("tpuv4")
    assert SystolicCostModel().latency(matmul_op(1, 0, 128, 128, 1e6), acc) == OpLatency(0, 0)


def test_cache_is_per_instance_and_shared_across_hbm_sizes() -> None:
    from dataclasses import replace

    acc = load_accelerator("tpuv4")
    model, other = SystolicCostModel(), SystolicCostModel()
    op = matmul_op(2, 64, 256, 512, 1e6)
    first = model.latency(op, acc)
    assert model.latency(op, replace(acc, hbm_bytes=80 * 2**30, name="x")) == first
    assert model.cache_info()["matmul"].hits == 1
    assert other.cache_info()["matmul"].currsize == 0
    model.cache_clear()
    assert model.cache_info()["matmul"].currsize == 0


def test_cost_model_protocol() -> None:
    assert isinstance(SystolicCostModel(), CostModel)


def test_matmul_latency_pure_function() -> None:
    lat = matmul_latency(1, 10, 4, 4, 0.0, 2, 4, 4, 1e9, 1e12)
    assert lat.single_core_s == pytest.approx(16e-9)
    assert lat.all_cores_s == pytest.approx(11e-9)  # 2 cores split M: 5 + 6 cycles
