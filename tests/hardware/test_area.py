"""Die-area model (archplace.hardware.area)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.hardware import area
from archplace.hardware.accelerator import Accelerator
from archplace.hardware.area import area_breakdown_mm2, area_mm2

MIB = 2**20

# PHAZE's reference design: 8 tensor cores of 128x128, 2 vector cores of 128 lanes, 128 MiB.
PHAZE_REFERENCE = Accelerator(
    name="phaze-reference", tensor_cores=8, array_rows=128, array_cols=128, vector_cores=2,
    vector_lanes=128, buffer_bytes=128 * MIB, hbm_bytes=32 * 2**30,
    hbm_bandwidth_bytes_per_s=1.2e12, clock_hz=1.05e9,
)
PHAZE_REPORTED_AREA_MM2 = 278.8


def test_phaze_reference_area_within_two_percent() -> None:
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(PHAZE_REPORTED_AREA_MM2, rel=0.02)


def test_phaze_reference_area_exact_by_hand() -> None:
    # 131072 MACs x 770 µm² + 256 lanes x 3080 µm² + 128 MiB x 1.37 mm²/MiB + 1.726 mm²
    expected = 100.92544 + 0.78848 + 175.36 + 1.726
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(expected, rel=1e-12)
    assert area_mm2(PHAZE_REFERENCE) == pytest.approx(PHAZE_REPORTED_AREA_MM2, abs=0.01)


def test_component_constants_are_phazes() -> None:
    assert abs(area.MAC_AREA_MM2 - 770e-6) < 1e-15
    assert abs(area.SRAM_AREA_MM2_PER_MIB - 1.37) < 1e-15


def test_breakdown_sums_to_total() -> None:
    parts = area_breakdown_mm2(PHAZE_REFERENCE)
    assert set(parts) == {"tensor", "vector", "buffer", "uncore"}
    assert sum(parts.values()) == pytest.approx(area_mm2(PHAZE_REFERENCE), rel=1e-12)
    assert parts["buffer"] == pytest.approx(128 * 1.37)


def test_hbm_capacity_adds_no_area() -> None:
    bigger = replace(PHAZE_REFERENCE, hbm_bytes=80 * 2**30)
    assert area_mm2(bigger) == area_mm2(PHAZE_REFERENCE)


def test_doubling_the_tensor_cores_adds_their_mac_area() -> None:
    doubled = replace(PHAZE_REFERENCE, tensor_cores=16)
    added = area_mm2(doubled) - area_mm2(PHAZE_REFERENCE)
    assert added == pytest.approx(8 * 128 * 128 * 770e-6, rel=1e-9)


sizes = st.integers(min_value=1, max_value=4096)


@given(tc=sizes, dim=st.integers(1, 256), vc=sizes, lanes=st.integers(1, 256),
       buf_mib=st.integers(1, 256), which=st.sampled_from(["tc", "dim", "vc", "lanes", "buf"]))
def test_area_grows_with_every_component(
    tc: int, dim: int, vc: int, lanes: int, buf_mib: int, which: str
) -> None:
    acc = replace(PHAZE_REFERENCE, tensor_cores=tc, array_rows=dim, array_cols=dim,
                  vector_cores=vc, vector_lanes=lanes, buffer_bytes=buf_mib * MIB)
    grown = {
        "tc": replace(acc, tensor_cores=tc + 1),
        "dim": replace(acc, array_rows=dim + 1, array_cols=dim + 1),
        "vc": replace(acc, vector_cores=vc + 1),
        "lanes": replace(acc, vector_lanes=lanes + 1),
        "buf": replace(acc, buffer_bytes=(buf_mib + 1) * MIB),
    }[which]
    assert area_mm2(grown) > area_mm2(acc) > area.UNCORE_AREA_MM2
