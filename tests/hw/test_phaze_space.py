"""The `phaze` space against PHAZE's own enumeration (tests/data/phaze_cores.json.gz).

The file is PHAZE's ``Estimator/arch_configs/cores.json`` (msr-fiddle/phaze @ fed7cde, MIT
licence: tests/data/PHAZE-LICENSE.txt): the 29,360 core configurations PHAZE keeps under its
area rule, each ``{num_tc, num_vc, width, depth, width_vc, GLB_Buffer (bytes), area (µm²)}``.
PHAZE's ``width`` is archplace's ``array_cols`` (the vector lanes are tied to it), its
``depth`` the ``array_rows``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from archplace.hw.area import area_mm2
from archplace.hw.presets import load_accelerator
from archplace.hw.space import SearchSpace, load_space

PHAZE_CORES = Path(__file__).resolve().parents[1] / "data" / "phaze_cores.json.gz"

# (tensor cores, rows, cols, vector cores, buffer bytes)
CoreKey = tuple[int, int, int, int, int]


@pytest.fixture(scope="module")
def phaze_areas_um2() -> dict[CoreKey, float]:
    """PHAZE's core configurations and their areas (µm²)."""
    with gzip.open(PHAZE_CORES, "rt") as handle:
        entries = json.load(handle)
    assert len(entries) == 29360
    out = {}
    for e in entries:
        assert e["width_vc"] == e["width"]
        out[(e["num_tc"], e["depth"], e["width"], e["num_vc"], e["GLB_Buffer"])] = e["area"]
    assert len(out) == len(entries)  # no configuration twice
    return out


@pytest.fixture(scope="module")
def phaze() -> SearchSpace:
    return load_space("phaze")


def core_key(tc: int, rows: int, cols: int, vc: int, buf: float) -> CoreKey:
    assert float(buf).is_integer()
    return (tc, rows, cols, vc, int(buf))


def test_same_core_configurations_and_areas(phaze: SearchSpace,
                                            phaze_areas_um2: dict[CoreKey, float]) -> None:
    ours = {core_key(*c[:5]): c[5] for c in phaze.core_configurations()}
    assert len(ours) == 29360
    assert set(ours) == set(phaze_areas_um2)
    worst = max(abs(ours[k] * 1e6 - area) / area for k, area in phaze_areas_um2.items())
    assert worst < 1e-8  # 0.1 % asked; PHAZE's tables reproduce every area to 1e-9


def test_every_design_at_every_hbm_size(phaze: SearchSpace, phaze_areas_um2: dict[CoreKey, float]) -> None:
    designs = phaze.designs()
    assert len(designs) == 88080 == 3 * len(phaze_areas_um2)
    assert len({a.name for a in designs}) == len(designs)
    assert {a.hbm_bytes for a in designs} == {32 * 2**30, 64 * 2**30, 80 * 2**30}
    assert sum(a.array_rows != a.array_cols for a in designs) == 3 * (29360 - 3434)
    for acc in designs[::97]:  # a sample: area_mm2 of the Accelerator itself
        key = core_key(acc.tensor_cores, acc.array_rows, acc.array_cols, acc.vector_cores, acc.buffer_bytes)
        assert area_mm2(acc) * 1e6 == pytest.approx(phaze_areas_um2[key], rel=1e-8)
        assert acc.vector_lanes == acc.array_cols
        assert acc.efficiency is None
    assert designs[0].name == "tc1-2x2-vc1-buf2MiB-hbm32GiB"
    assert designs[-1].name == "tc4096-32x2-vc4096-buf8MiB-hbm80GiB"


def test_budget_and_rule(phaze: SearchSpace) -> None:
    base = load_accelerator("phaze-ref")
    assert phaze.base_accelerator == base
    assert phaze.area_budget_mm2 == area_mm2(base) == pytest.approx(278.8, abs=0.05)
    assert phaze.area_floor_waived_for == ("tensor_cores", "vector_cores")
    assert phaze.size_before_area_rule == 13 * 8 * 8 * 13 * 7 * 3
    floor = 0.3 * phaze.area_budget_mm2
    small = [c for c in phaze.core_configurations() if c[5] < floor]
    assert small and all(c[0] == 1 or c[3] == 1 for c in small)  # only one-core designs


def test_phaze_square_is_the_square_part(phaze: SearchSpace) -> None:
    square = load_space("phaze-square")
    assert square.core_configurations() == tuple(c for c in phaze.core_configurations() if c[1] == c[2])
    assert len(square.core_configurations()) == 3434
