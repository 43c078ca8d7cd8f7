"""Die-area model (archplace.hardware.area) against PHAZE's published area table."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.hardware import area
from archplace.hardware.accelerator import Accelerator
from archplace.hardware.area import area_breakdown_mm2, area_mm2, sram_area_mm2
from archplace.hardware.presets import load_accelerator

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
    (1, 1, 8, 8, 2, 3.405209), (1, 256, 64, 2, 2, 17.564654), (1, 256, 128, 128, 2, 43.246809),
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


def test_phaze_reference_area_within_two_percent() -> None:
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(PHAZE_REPORTED_AREA_MM2, rel=0.02)
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(PHAZE_REPORTED_AREA_MM2, abs=0.05)
    assert area_mm2(load_accelerator("phaze-ref")) == area_mm2(PHAZE_REFERENCE)


@pytest.mark.parametrize(("tc", "vc", "width", "depth", "buf_mib", "phaze_mm2"), PHAZE_TABLE)
def test_scales_as_phazes_table(tc: int, vc: int, width: int, depth: int, buf_mib: int,
                                phaze_mm2: float) -> None:
    assert area_mm2(design(tc, vc, width, depth, buf_mib)) == pytest.approx(phaze_mm2, rel=0.03)


def test_phaze_reference_by_hand() -> None:
    # 131072 MACs x 786.8 µm² + 256 lanes x 770 µm² + 10 cores x 5.8e-3 + SRAM(128 MiB) + 0.61
    expected = 131072 * 786.8e-6 + 256 * 770e-6 + 10 * 5.8e-3 + 174.814 + 0.61
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(expected, rel=1e-12)


def test_sram_table() -> None:
    assert sram_area_mm2(0) == 0.0
    assert sram_area_mm2(2 * MIB) == pytest.approx(2.729)
    assert sram_area_mm2(MIB) == pytest.approx(2.729 / 2)
    assert sram_area_mm2(24 * MIB) == pytest.approx((23.136 + 46.141) / 2)
    assert sram_area_mm2(256 * MIB) == pytest.approx(174.814 + 128 * (174.814 - 87.996) / 64)
    with pytest.raises(ValueError):
        sram_area_mm2(-1)


def test_breakdown_sums_to_total() -> None:
    parts = area_breakdown_mm2(PHAZE_REFERENCE)
    assert set(parts) == {"tensor", "vector", "cores", "buffer", "uncore"}
    assert sum(parts.values()) == pytest.approx(area_mm2(PHAZE_REFERENCE), rel=1e-12)


def test_hbm_capacity_adds_no_area() -> None:
    assert area_mm2(replace(PHAZE_REFERENCE, hbm_bytes=80 * 2**30)) == area_mm2(PHAZE_REFERENCE)


def test_doubling_the_tensor_cores_adds_their_area() -> None:
    added = area_mm2(replace(PHAZE_REFERENCE, tensor_cores=16)) - area_mm2(PHAZE_REFERENCE)
    assert added == pytest.approx(8 * (128 * 128 * area.MAC_AREA_MM2 + area.CORE_AREA_MM2), rel=1e-9)


sizes = st.integers(min_value=1, max_value=4096)


@given(tc=sizes, dim=st.integers(1, 256), vc=sizes, lanes=st.integers(1, 2048),
       buf_kib=st.integers(1, 512 * 1024), which=st.sampled_from(["tc", "dim", "vc", "lanes", "buf"]))
def test_area_grows_with_every_component(tc: int, dim: int, vc: int, lanes: int, buf_kib: int,
                                         which: str) -> None:
    acc = replace(PHAZE_REFERENCE, tensor_cores=tc, array_rows=dim, array_cols=dim,
                  vector_cores=vc, vector_lanes=lanes, buffer_bytes=buf_kib * 1024.0)
    grown = {
        "tc": replace(acc, tensor_cores=tc + 1),
        "dim": replace(acc, array_rows=dim + 1, array_cols=dim + 1),
        "vc": replace(acc, vector_cores=vc + 1),
        "lanes": replace(acc, vector_lanes=lanes + 1),
        "buf": replace(acc, buffer_bytes=(buf_kib + 1) * 1024.0),
    }[which]
    assert area_mm2(grown) > area_mm2(acc) > area.UNCORE_AREA_MM2
