"""Power model (archplace.hw.power): TDP of the presets and monotonicity."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.hw import power
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.power import power_breakdown_w, static_power_w, tdp_w
from archplace.hw.presets import accelerator_preset_names, load_accelerator, preset_datasheet


def test_tpuv4_tdp_close_to_its_datasheet() -> None:
    acc = load_accelerator("tpuv4")
    assert tdp_w(acc) == pytest.approx(preset_datasheet("tpuv4")["tdp_w"], rel=0.10)


@pytest.mark.parametrize("name", ["a100-80gb", "h100-80gb"])
def test_gpu_tdp_within_a_factor_of_two(name: str) -> None:
    sheet = preset_datasheet(name)["tdp_w"]
    assert 0.5 * sheet <= tdp_w(load_accelerator(name)) <= 1.5 * sheet


def test_breakdown_by_hand() -> None:
    acc = load_accelerator("tpuv4")
    parts = power_breakdown_w(acc)
    assert set(parts) == {"tensor", "vector", "local_buffers", "global_buffer", "hbm", "static"}
    assert parts["tensor"] == pytest.approx(131072 * 1.05e9 * 0.8e-12)
    assert parts["hbm"] == pytest.approx(1.2e12 * 31.2e-12)
    assert parts["static"] == pytest.approx(0.1 * area_mm2(acc)) == static_power_w(acc)
    assert sum(parts.values()) == pytest.approx(tdp_w(acc), rel=1e-12)


def test_every_preset_has_a_positive_tdp() -> None:
    for name in accelerator_preset_names():
        assert tdp_w(load_accelerator(name)) > 0


BASE = Accelerator("p", 8, 128, 128, 2, 128, 2.0**27, 2.0**35, 1.2e12, 1.05e9)


@given(tc=st.integers(1, 4096), dim=st.integers(1, 256), vc=st.integers(1, 4096),
       lanes=st.integers(1, 2048), buf_mib=st.integers(1, 256), bw_gbs=st.integers(1, 5000),
       clock_mhz=st.integers(100, 3000),
       which=st.sampled_from(["tc", "rows", "cols", "vc", "lanes", "buf", "bw", "clock"]))
def test_tdp_grows_with_every_resource(tc: int, dim: int, vc: int, lanes: int, buf_mib: int, bw_gbs: int,
                                       clock_mhz: int, which: str) -> None:
    acc = replace(BASE, tensor_cores=tc, array_rows=dim, array_cols=dim, vector_cores=vc,
                  vector_lanes=lanes, buffer_bytes=buf_mib * 2.0**20,
                  hbm_bandwidth_bytes_per_s=bw_gbs * 1e9, clock_hz=clock_mhz * 1e6)
    grown = {
        "tc": replace(acc, tensor_cores=tc + 1), "rows": replace(acc, array_rows=dim + 1),
        "cols": replace(acc, array_cols=dim + 1), "vc": replace(acc, vector_cores=vc + 1),
        "lanes": replace(acc, vector_lanes=lanes + 1),
        "buf": replace(acc, buffer_bytes=(buf_mib + 1) * 2.0**20),
        "bw": replace(acc, hbm_bandwidth_bytes_per_s=(bw_gbs + 1) * 1e9),
        "clock": replace(acc, clock_hz=(clock_mhz + 1) * 1e6),
    }[which]
    assert tdp_w(grown) > tdp_w(acc) > 0


def test_energy_constants() -> None:
    assert pytest.approx(0.8e-12, rel=1e-9, abs=0) == power.MAC_ENERGY_J
    assert pytest.approx(31.2e-12, rel=1e-9, abs=0) == power.HBM_ENERGY_J_PER_BYTE
    assert pytest.approx(5e-12, rel=1e-9, abs=0) == power.GLOBAL_SRAM_ENERGY_J_PER_BYTE
    assert pytest.approx(1e-12, rel=1e-9, abs=0) == power.LOCAL_SRAM_ENERGY_J_PER_BYTE
