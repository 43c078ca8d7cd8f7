"""The vectorised cost model equals the scalar one, design by design (archplace.cost.batched)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cost import batched, gemm
from archplace.cost.configs import CoreConfigArray
from archplace.cost.model import SystolicCostModel
from archplace.hw.accelerator import Accelerator, ArrayTiming, Dataflow
from archplace.hw.space import load_space
from archplace.workload.graph import Operator, OpKind, Phase

ROWS = np.array([1, 2, 3, 16, 128, 32], dtype=np.int64)
COLS = np.array([1, 5, 3, 16, 128, 16], dtype=np.int64)
CORES = np.array([1, 3, 4096, 432, 8, 7], dtype=np.int64)
OS = np.array([False, True, False, True, False, False])
SCALESIM = np.array([True, True, False, False, True, False])


@settings(max_examples=150, deadline=None)
@given(batch=st.integers(0, 40), m=st.integers(0, 5000), k=st.integers(0, 5000), n=st.integers(0, 5000),
       cap=st.integers(1, 10**9))
def test_formulas_match_scalar(batch: int, m: int, k: int, n: int, cap: int) -> None:
    caps = np.array([cap, 7, gemm.UNBOUNDED_ELEMENTS, cap // 3 + 1, 10**6, 123456], dtype=np.int64)
    single, every = batched.matmul_cycles(batch, m, k, n, ROWS, COLS, CORES, OS)
    single_ss, every_ss = batched.matmul_cycles(batch, m, k, n, ROWS, COLS, CORES, OS, SCALESIM)
    traffic = batched.matmul_hbm_elements(batch, m, k, n, ROWS, COLS, caps)
    feed = batched.matmul_feed_elements(batch, m, k, n, ROWS, COLS, OS)
    exposed = batched.exposed_elements(m, k, n, ROWS, COLS, OS)
    for i in range(len(ROWS)):
        r, c, p, o = int(ROWS[i]), int(COLS[i]), int(CORES[i]), bool(OS[i])
        assert single[i] == gemm.matmul_cycles(batch, m, k, n, r, c, 1, o)
        assert every[i] == gemm.matmul_cycles(batch, m, k, n, r, c, p, o)
        timing = ArrayTiming.SCALESIM if SCALESIM[i] else ArrayTiming.OVERLAPPED
        assert single_ss[i] == gemm.matmul_cycles(batch, m, k, n, r, c, 1, o, timing)
        assert every_ss[i] == gemm.matmul_cycles(batch, m, k, n, r, c, p, o, timing)
        assert traffic[i] == gemm.matmul_hbm_elements(batch, m, k, n, r, c, int(caps[i]))
        assert feed[i] == gemm.matmul_feed_elements(batch, m, k, n, r, c, o)
        assert exposed[i] == gemm.exposed_elements(m, k, n, r, c, o)


@settings(max_examples=100, deadline=None)
@given(folds=st.lists(st.integers(0, 10**5), min_size=6, max_size=6), m=st.integers(0, 10**5),
       k=st.integers(0, 10**5))
def test_scalesim_cycles_match_scalar(folds: list[int], m: int, k: int) -> None:
    counts = np.array(folds, dtype=np.int64)
    ws = batched.ws_cycles_scalesim(counts, m, ROWS, COLS)
    os_ = batched.os_cycles_scalesim(counts, k, ROWS, COLS)
    for i, f in enumerate(folds):
        assert ws[i] == gemm.ws_cycles_scalesim(f, m, int(ROWS[i]), int(COLS[i]))
        assert os_[i] == gemm.os_cycles_scalesim(f, k, int(ROWS[i]), int(COLS[i]))


def test_buffer_elements_match_scalar() -> None:
    buffers = np.array([2.0**21, 3e6, math.inf, 1.0])
    e = np.array([2, 2, 2, 4], dtype=np.int64)
    got = batched.buffer_elements(buffers, e)
    assert list(got) == [gemm.buffer_elements(float(b), int(x)) for b, x in zip(buffers, e, strict=True)]


def operators() -> list[Operator]:
    def op(kind: OpKind, target: str, **dims: int) -> Operator:
        b, m, k, n = dims.get("batch", 0), dims.get("m", 0), dims.get("k", 0), dims.get("n", 0)
        elements = dims.get("elements", b * m * n)
        read = 2.0 * (b * (m * k + k * n) if kind is OpKind.MATMUL else elements) + dims.get("extra", 0)
        return Operator(id=0, name=target, target=target, kind=kind, phase=Phase.FWD, batch=b, m=m, k=k,
                        n=n, elements=elements, flop=2.0 * b * m * k * n, bytes_read=read,
                        bytes_written=2.0 * elements, fused_elements=dims.get("fused", 0))

    return [
        op(OpKind.MATMUL, "aten.mm.default", batch=1, m=4096, k=4096, n=11008),
        op(OpKind.MATMUL, "aten.bmm.default", batch=32, m=4096, k=128, n=4096),
        op(OpKind.MATMUL, "aten.mm.default", batch=1, m=1, k=4096, n=4096),
        op(OpKind.MATMUL, "aten.addmm.default", batch=1, m=1024, k=1600, n=6400, extra=12800,
           fused=1024 * 6400),
        op(OpKind.ELEMENTWISE, "aten.add.Tensor", elements=3_000_001),
        op(OpKind.SOFTMAX, "aten._softmax.default", elements=26_214_400),
        op(OpKind.ELEMENTWISE, "aten.empty_like.default", elements=1000),
        op(OpKind.NORM, "aten.native_layer_norm_backward.default", elements=1_638_400),
    ]


def test_model_many_equals_scalar_on_phaze_space() -> None:
    # ~230 of the 88,080 designs (the space had 9,477 square-array designs when this took
    # every 41st); most of them rectangular
    designs = list(load_space("phaze").designs()[::383])
    assert sum(acc.array_rows != acc.array_cols for acc in designs) > len(designs) // 2
    designs.append(replace(designs[0], dataflow=Dataflow.OS, name="os"))
    designs.append(replace(designs[-2], buffer_bytes=math.inf, name="inf"))
    designs += [replace(acc, array_timing=ArrayTiming.SCALESIM, name=f"{acc.name}-scalesim")
                for acc in designs[::3]]
    configs = CoreConfigArray.from_accelerators(designs)
    vectorised, scalar = SystolicCostModel(), SystolicCostModel(cache_size=0)
    for op in operators():
        many = vectorised.estimate_many(op, configs)
        single_s, all_s = vectorised.latency_many(op, configs)
        assert np.array_equal(single_s, many.single_core_s)
        for i, acc in enumerate(designs):
            est = scalar.estimate(op, acc)
            assert many.single_core_s[i] == est.single_core_s
            assert many.all_cores_s[i] == est.all_cores_s
            assert many.hbm_bytes[i] == est.hbm_bytes
            assert many.memory_s[i] == est.memory_s
            assert many.energy_j[i] == est.energy_j


def test_many_cache_and_dedup() -> None:
    designs = load_space("tiny").designs()
    configs = CoreConfigArray.from_accelerators(designs)
    assert configs.tensor_side.distinct < len(designs)
    assert configs.vector_side.distinct <= 6
    model = SystolicCostModel()
    op = operators()[0]
    first = model.estimate_many(op, configs)
    again = model.estimate_many(op, CoreConfigArray.from_accelerators(designs))
    assert again is first
    assert model.cache_info()["hits"] == 1


def test_config_array_errors() -> None:
    with pytest.raises(ConfigError):
        CoreConfigArray.from_accelerators([])
    acc = Accelerator("a", 1, 2, 2, 1, 2, 1.0, 1.0, 1.0, 1.0)
    configs = CoreConfigArray.from_accelerators([acc])
    with pytest.raises(ConfigError, match="different lengths"):
        replace(configs, tensor_cores=np.array([1, 2], dtype=np.int64))
