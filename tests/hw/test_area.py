"""Die-area model (archplace.hw.area) against PHAZE's published area table.

Every entry of that table is checked in tests/hw/test_phaze_space.py; here a sample of
it, the reference design, the formula by hand and the model's invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.hw import area
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import (
    area_breakdown_mm2,
    area_mm2,
    area_of_mm2,
    core_buffer_area_mm2,
    sram_area_mm2,
)
from archplace.hw.presets import load_accelerator

MIB = 2**20

# PHAZE's reference design: 8 tensor cores of 128x128, 2 vector cores of 128 lanes, 128 MiB.
PHAZE_REFERENCE = Accelerator(
    name="phaze-reference", tensor_cores=8, array_rows=128, array_cols=128, vector_cores=2,
    vector_lanes=128, buffer_bytes=128 * MIB, hbm_bytes=32 * 2**30,
    hbm_bandwidth_bytes_per_s=1.2e12, clock_hz=1.05e9,
)
PHAZE_REPORTED_AREA_MM2 = 278.8

# Designs of PHAZE's area table (github.com/msr-fiddle/phaze, Estimator/arch_configs/cores.json):
# (tensor cores, vector cores, array width = vector lanes, array depth, buffer MiB, area mm²).
PHAZE_TABLE = [
    (1, 1, 2, 2, 2, 3.355048), (1, 1, 2, 2, 16, 23.762028), (1, 1, 2, 2, 128, 175.439828),
    (1, 1, 8, 8, 2, 3.405209), (1, 256, 64, 4, 2, 17.564654), (1, 256, 128, 128, 2, 43.246809),
    (1, 256, 256, 2, 2, 56.773605), (1, 256, 64, 64, 128, 192.670961),
    (4096, 4096, 16, 2, 32, 246.416425), (4096, 4096, 2, 2, 16, 92.671759),
    (4096, 2048, 8, 2, 128, 275.369199), (4, 16, 256, 256, 2, 212.429036),
    (4, 16, 128, 128, 128, 228.707426), (4, 16, 64, 64, 64, 102.396737),
    (8, 8, 128, 128, 64, 192.642412), (8, 8, 128, 128, 2, 107.374932), (8, 1, 64, 64, 2, 29.222651),
    (8, 16, 8, 8, 128, 176.056614), (8, 1, 64, 256, 128, 278.670427),
]


def design(tc: int, vc: int, width: int, depth: int, buf_mib: int) -> Accelerator:
    return replace(PHAZE_REFERENCE, tensor_cores=tc, vector_cores=vc, array_cols=width,
                   array_rows=depth, vector_lanes=width, buffer_bytes=buf_mib * MIB)


def test_phaze_reference_area() -> None:
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(PHAZE_REPORTED_AREA_MM2, abs=0.05)
    assert area_mm2(load_accelerator("phaze-ref")) == area_mm2(PHAZE_REFERENCE)


@pytest.mark.parametrize(("tc", "vc", "width", "depth", "buf_mib", "phaze_mm2"), PHAZE_TABLE)
def test_reproduces_phazes_table(tc: int, vc: int, width: int, depth: int, buf_mib: int,
                                 phaze_mm2: float) -> None:
    # the table gives µm² to 3 decimals; 6 decimals in mm² here
    assert area_mm2(design(tc, vc, width, depth, buf_mib)) == pytest.approx(phaze_mm2, abs=2e-6)


def test_phaze_reference_by_hand() -> None:
    # a PE is PHAZE's 45-nm MAC (3632 µm²) + register file (0.104 µm² per word: 16 words in a
    # tensor core, 6 in a vector core), scaled to 22 nm; core buffers: 128x128 PEs -> 256 KiB,
    # 128 lanes -> 2 KiB; global buffer: 128 MiB
    tensor_pe = (3632 + 16 * 0.104) * 0.2091666666666667
    vector_pe = (3632 + 6 * 0.104) * 0.2091666666666667
    expected_um2 = (8 * (128 * 128 * tensor_pe + 446565.0) + 2 * (128 * vector_pe + 8248.43)
                    + 175423000.0)
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(expected_um2 / 1e6, rel=1e-12)


def test_rows_and_cols_enter_as_their_product_but_lanes_follow_the_cols() -> None:
    tall, wide = design(8, 2, 64, 256, 32), design(8, 2, 256, 64, 32)
    assert tall.array_rows == wide.array_cols == 256
    assert tall.macs == wide.macs
    # the vector lanes (tied to the width) differ, nothing else
    lanes_part = area_of_mm2(1, 1, 1, 2, 256, 0) - area_of_mm2(1, 1, 1, 2, 64, 0)
    assert area_mm2(wide) - area_mm2(tall) == pytest.approx(lanes_part, rel=1e-12)
    assert area_of_mm2(8, 64, 256, 2, 64, 32 * MIB) == area_of_mm2(8, 256, 64, 2, 64, 32 * MIB)


def test_sram_tables() -> None:
    assert sram_area_mm2(0) == 0.0
    assert sram_area_mm2(2 * MIB) == pytest.approx(3.33822)
    assert sram_area_mm2(MIB) == pytest.approx(3.33822 / 2)
    assert sram_area_mm2(24 * MIB) == pytest.approx((23.7452 + 46.7509) / 2)
    assert sram_area_mm2(256 * MIB) == pytest.approx(175.423 + 128 * (175.423 - 88.6057) / 64)
    with pytest.raises(ValueError):
        sram_area_mm2(-1)
    # core buffers: 16 B per PE, at least 1 KiB
    assert core_buffer_area_mm2(1) == core_buffer_area_mm2(64) == pytest.approx(6133.98e-6)
    assert core_buffer_area_mm2(128) == pytest.approx(8248.43e-6)
    assert core_buffer_area_mm2(96) == pytest.approx((6133.98e-6 + 8248.43e-6) / 2)
    assert core_buffer_area_mm2(2 * 65536) == pytest.approx(1.63413 + (1.63413 - 0.89789) * 2)
    with pytest.raises(ValueError):
        core_buffer_area_mm2(0)


def test_breakdown_sums_to_total() -> None:
    parts = area_breakdown_mm2(PHAZE_REFERENCE)
    assert set(parts) == {"tensor", "vector", "core_buffers", "buffer"}
    assert sum(parts.values()) == pytest.approx(area_mm2(PHAZE_REFERENCE), rel=1e-12)


def test_hbm_capacity_adds_no_area() -> None:
    assert area_mm2(replace(PHAZE_REFERENCE, hbm_bytes=80 * 2**30)) == area_mm2(PHAZE_REFERENCE)


def test_doubling_the_tensor_cores_adds_their_area() -> None:
    added = area_mm2(replace(PHAZE_REFERENCE, tensor_cores=16)) - area_mm2(PHAZE_REFERENCE)
    one_core = 128 * 128 * area.TENSOR_PE_AREA_UM2 / 1e6 + core_buffer_area_mm2(128 * 128)
    assert added == pytest.approx(8 * one_core, rel=1e-9)


sizes = st.integers(min_value=1, max_value=4096)


@given(tc=sizes, rows=st.integers(1, 256), cols=st.integers(1, 256), vc=sizes, lanes=st.integers(1, 2048),
       buf_kib=st.integers(1, 512 * 1024),
       which=st.sampled_from(["tc", "rows", "cols", "vc", "lanes", "buf"]))
def test_area_grows_with_every_component(tc: int, rows: int, cols: int, vc: int, lanes: int,
                                         buf_kib: int, which: str) -> None:
    acc = replace(PHAZE_REFERENCE, tensor_cores=tc, array_rows=rows, array_cols=cols,
                  vector_cores=vc, vector_lanes=lanes, buffer_bytes=buf_kib * 1024.0)
    grown = {
        "tc": replace(acc, tensor_cores=tc + 1),
        "rows": replace(acc, array_rows=rows + 1),
        "cols": replace(acc, array_cols=cols + 1),
        "vc": replace(acc, vector_cores=vc + 1),
        "lanes": replace(acc, vector_lanes=lanes + 1),
        "buf": replace(acc, buffer_bytes=(buf_kib + 1) * 1024.0),
    }[which]
    assert area_mm2(grown) > area_mm2(acc) > sram_area_mm2(acc.buffer_bytes)
