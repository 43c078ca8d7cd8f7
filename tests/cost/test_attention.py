"""Cost of the fused attention operator (FlashAttention on the systolic template)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.cost import attention
from archplace.cost.attention import BLOCK, attention_flop, computed_area, hbm_traffic_bytes
from archplace.cost.configs import CoreConfigArray
from archplace.cost.model import RooflineCostModel, SystolicCostModel, array_flop
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase


def op(b: int, s_q: int, d: int, s_kv: int, *, backward: bool = False, causal: bool = True,
       skip: bool = True) -> Operator:
    target = "archplace.attention_backward.default" if backward else "archplace.attention.default"
    return Operator(id=0, name="attention", target=target, kind=OpKind.ATTENTION,
                    phase=Phase.BWD if backward else Phase.FWD, batch=b, m=s_q, k=d, n=s_kv,
                    elements=b * s_q * d, flop=0.0, bytes_read=0.0, bytes_written=0.0,
                    causal=causal, skip_masked_blocks=skip, dtype_bytes=2)


def brute_area(s_q: int, s_kv: int, br: int, bc: int) -> tuple[int, int]:
    """Score elements and blocks of the blocks holding a visible (key <= query) element."""
    offset = s_kv - s_q
    area = count = 0
    for r0 in range(0, s_q, br):
        for c0 in range(0, s_kv, bc):
            rows, cols = range(r0, min(r0 + br, s_q)), range(c0, min(c0 + bc, s_kv))
            if any(j <= i + offset for i in rows for j in cols):
                area += len(rows) * len(cols)
                count += 1
    return area, count


@given(st.integers(1, 300), st.integers(0, 200))
def test_causal_area_matches_brute_force(s_q: int, extra: int):
    s_kv = s_q + extra
    br, bc = attention.blocks(s_q, s_kv)
    assert computed_area(s_q, s_kv, True, True) == brute_area(s_q, s_kv, br, bc)


def test_flop_by_hand():
    # non-causal or SDPA: 4·B·d·s²; FLASH causal on T = 4 blocks of 128: T(T+1)/2 = 10 blocks
    s, d, b = 4 * BLOCK, 64, 3
    assert attention_flop(op(b, s, d, s, causal=False)) == 4 * b * d * s * s
    assert attention_flop(op(b, s, d, s, skip=False)) == 4 * b * d * s * s
    assert attention_flop(op(b, s, d, s)) == 4 * b * d * 10 * BLOCK * BLOCK
    assert attention_flop(op(b, s, d, s, backward=True)) == 2.5 * 4 * b * d * 10 * BLOCK * BLOCK
    # halved in the limit (Dao 2023 sec. 4.1): (T + 1) / (2T) of the full count
    long = 64 * BLOCK
    ratio = attention_flop(op(1, long, d, long)) / attention_flop(op(1, long, d, long, skip=False))
    assert ratio == pytest.approx(65 / 128)


def test_traffic_follows_theorem_2():
    """Forward HBM bytes e·B·(2·s·d + T_r·2·s·d) + 4·B·s with T_r = ⌈s / Br⌉, Br = min(⌈M/4d⌉, d)."""
    s, d, b, e = 1024, 64, 2, 2
    forward = op(b, s, d, s, causal=False)
    sram = np.array([4 * d * 16 * e, 4 * d * 32 * e, math.inf])  # Br = 16, 32, all in SRAM
    got = hbm_traffic_bytes(forward, sram, 1.0)
    for value, passes in zip(got, (s // 16, s // 32, 1), strict=True):
        assert value == e * b * (2 * s * d + passes * 2 * s * d) + 4 * b * s
    # the re-read term scales as N² d² / M: doubling M halves it
    assert (got[0] - got[2]) == pytest.approx(2 * (got[1] - got[2]), rel=0.02)
    backward = op(b, s, d, s, causal=False, backward=True)
    bwd = hbm_traffic_bytes(backward, np.array([4 * d * 16 * e]), 1.0)[0]
    assert bwd == e * b * (4 * s * d + (s // 16) * 4 * s * d) + 8 * b * s * (s // 16)


def designs():
    base = load_accelerator("a100-80gb")
    return [base, load_accelerator("tpuv4"), load_accelerator("phaze-ref"),
            dataclasses.replace(base, buffer_bytes=math.inf),
            dataclasses.replace(base, tensor_cores=3, array_rows=7, array_cols=5, vector_lanes=3)]


@pytest.mark.parametrize("operator", [op(16, 2048, 128, 2048), op(16, 2048, 128, 2048, backward=True),
                                      op(5, 100, 64, 100, skip=False), op(2, 300, 80, 300, causal=False),
                                      op(7, 129, 64, 257, backward=True)])
def test_vectorised_path_equals_scalar_path(operator: Operator):
    model, accs = SystolicCostModel(), designs()
    many = model.estimate_many(operator, CoreConfigArray.from_accelerators(accs))
    for i, acc in enumerate(accs):
        one = model.estimate(operator, acc)
        assert (one.single_core_s, one.all_cores_s, one.memory_s, one.hbm_bytes, one.energy_j) == (
            many.single_core_s[i], many.all_cores_s[i], many.memory_s[i], many.hbm_bytes[i],
            many.energy_j[i])
        assert one.all_cores_s <= one.single_core_s
        assert one.all_cores_s >= one.memory_s > 0


def test_skipping_blocks_saves_time_and_sdpa_costs_more():
    acc = load_accelerator("a100-80gb")
    model = SystolicCostModel()
    flash = model.estimate(op(32, 4096, 128, 4096), acc)
    sdpa = model.estimate(op(32, 4096, 128, 4096, skip=False), acc)
    assert flash.all_cores_s < sdpa.all_cores_s < 2.1 * flash.all_cores_s
    bwd = model.estimate(op(32, 4096, 128, 4096, backward=True), acc)
    assert bwd.all_cores_s > 2 * flash.all_cores_s  # five block GEMMs against two


def test_mfu_numerator_and_roofline_count_the_attention_gemms():
    forward = op(4, 512, 64, 512)
    assert array_flop([forward]) == attention_flop(forward)
    est = RooflineCostModel().estimate(forward, load_accelerator("a100-80gb"))
    assert est.all_cores_s > 0 and est.single_core_s >= est.all_cores_s
