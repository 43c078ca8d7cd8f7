"""Rectangular systolic arrays (rows != cols, as in PHAZE's space) in both dataflows.

The cycle counts of archplace.cost.gemm against the cycle-by-cycle simulation on both
orientations of each array (so that rows and cols swapped anywhere would be caught), the
vectorised counts (archplace.cost.batched) against the scalar ones, and the cost model on
rectangular designs of the `phaze` space."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from archplace.cost import batched, gemm
from archplace.cost.configs import CoreConfigArray
from archplace.cost.systolic import SystolicCostModel
from archplace.hw.accelerator import ArrayTiming, Dataflow
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase

from .systolic_sim import Matrix, simulate_os, simulate_ws

# (rows, cols): PHAZE's extremes scaled down (2 x 8 .. 8 x 2), and odd sizes
ARRAYS = [(2, 8), (1, 6), (2, 5), (3, 4), (2, 3)]
GEMMS = [(5, 9, 7), (9, 2, 13), (1, 11, 3), (12, 6, 2)]  # (m, k, n): partial folds both ways


def random_matrix(rng: random.Random, rows: int, cols: int) -> Matrix:
    return [[rng.randint(-3, 3) for _ in range(cols)] for _ in range(rows)]


def product(a: Matrix, b: Matrix) -> Matrix:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize(("rows", "cols"), ARRAYS)
def test_both_orientations_match_the_simulation(dataflow: str, rows: int, cols: int) -> None:
    simulate = simulate_os if dataflow == "os" else simulate_ws
    differs = False
    for m, k, n in GEMMS:
        rng = random.Random(rows * 100 + cols * 10 + m)
        a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
        counts = {}
        for r, c in ((rows, cols), (cols, rows)):
            cycles, out = simulate(a, b, r, c)
            assert out == product(a, b)
            assert gemm.matmul_cycles(1, m, k, n, r, c, 1, os=dataflow == "os") == cycles, (m, k, n, r, c)
            counts[(r, c)] = cycles
        differs |= counts[(rows, cols)] != counts[(cols, rows)]
    assert differs  # the orientation matters: a swap of rows and cols would be seen


@pytest.mark.parametrize("timing", list(ArrayTiming))
@pytest.mark.parametrize("os_", [False, True])
def test_vectorised_counts_equal_scalar_ones(timing: ArrayTiming, os_: bool) -> None:
    shapes = [(2, 256), (256, 2), (16, 128), (128, 16), (4, 64), (64, 4), (128, 128)]
    rows = np.array([r for r, _ in shapes], dtype=np.int64)
    cols = np.array([c for _, c in shapes], dtype=np.int64)
    for cores in (1, 8, 512):
        cores_arr = np.full(len(shapes), cores, dtype=np.int64)
        for batch, m, k, n in [(1, 1000, 300, 77), (4, 3, 5000, 129), (2, 257, 255, 1)]:
            single, every = batched.matmul_cycles(batch, m, k, n, rows, cols, cores_arr,
                                                  np.full(len(shapes), os_),
                                                  np.full(len(shapes), timing is ArrayTiming.SCALESIM))
            for i, (r, c) in enumerate(shapes):
                assert single[i] == gemm.matmul_cycles(batch, m, k, n, r, c, 1, os_, timing)
                assert every[i] == gemm.matmul_cycles(batch, m, k, n, r, c, cores, os_, timing)


def matmul(m: int, k: int, n: int) -> Operator:
    return Operator(id=0, name="mm", target="aten.mm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                    batch=1, m=m, k=k, n=n, elements=m * n, flop=2.0 * m * k * n,
                    bytes_read=2.0 * (m * k + k * n), bytes_written=2.0 * m * n)


@pytest.mark.parametrize("dataflow", list(Dataflow))
def test_cost_model_on_rectangular_designs(dataflow: Dataflow) -> None:
    base = replace(load_accelerator("phaze-ref"), dataflow=dataflow)
    tall = replace(base, name="tall", array_rows=256, array_cols=64, vector_lanes=64)
    wide = replace(base, name="wide", array_rows=64, array_cols=256, vector_lanes=256)
    model = SystolicCostModel(cache_size=0)
    op = matmul(4096, 256, 64)  # k = 256 fills a tall WS array's rows; n = 64 fits its cols
    est = {acc.name: model.estimate(op, acc) for acc in (tall, wide)}
    assert tall.peak_flop_per_s == wide.peak_flop_per_s
    assert est["tall"].single_core_s != est["wide"].single_core_s
    many = model.estimate_many(op, CoreConfigArray.from_accelerators([tall, wide]))
    assert list(many.single_core_s) == [est["tall"].single_core_s, est["wide"].single_core_s]
    assert list(many.all_cores_s) == [est["tall"].all_cores_s, est["wide"].all_cores_s]
    if dataflow is Dataflow.WS:  # the 256 x 64 weights: 1 fold on the tall array, 4 on the wide one
        assert gemm.fold_count(256, 64, 256, 64) == 1 and gemm.fold_count(256, 64, 64, 256) == 4
        assert est["tall"].single_core_s < est["wide"].single_core_s
