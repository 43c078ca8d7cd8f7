"""Accelerator search spaces (archplace.hardware.space)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from archplace.errors import ConfigError
from archplace.hardware.area import area_mm2
from archplace.hardware.presets import load_accelerator
from archplace.hardware.space import SearchSpace, design_name, load_space, space_names

MIB = 2**20
GIB = 2**30


def write(tmp_path: Path, data: Any, name: str = "space.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


SMALL: dict[str, Any] = {
    "base": "tpuv4",
    "tensor_cores": [1, 8],
    "array_dim": [128],
    "vector_cores": [2],
    "buffer": ["8 MiB", "128 MiB"],
    "hbm": ["32 GiB", "64 GiB"],
}


def test_bundled_names() -> None:
    assert space_names() == ["phaze", "tiny"]


def test_tiny_size_and_area_rule() -> None:
    space = load_space("tiny")
    designs = space.designs()
    assert 20 <= len(designs) <= 60
    budget = area_mm2(load_accelerator("tpuv4"))
    assert space.area_budget_mm2 == budget
    assert space.base == "tpuv4"
    for acc in designs:
        area = area_mm2(acc)
        assert area <= budget
        assert area >= 0.3 * budget or acc.tensor_cores == 1


def test_tiny_keeps_exactly_the_designs_the_rule_admits() -> None:
    space = load_space("tiny")
    base = load_accelerator("tpuv4")
    budget = area_mm2(base)
    sram = {32: 46.141, 64: 87.996, 128: 174.814}
    expected = []
    for tc, dim, vc, buf, hbm in itertools.product(
        [2, 4, 8, 16], [64, 128, 256], [1, 2], [32, 64, 128], [32]
    ):
        macs = tc * dim * dim
        area = macs * 786.8e-6 + vc * dim * 8 * 770e-6 + (tc + vc) * 5.8e-3 + sram[buf] + 0.61
        if 0.3 * budget - 1e-6 <= area <= budget + 1e-6:
            expected.append(f"tc{tc}-{dim}x{dim}-vc{vc}-buf{buf}MiB-hbm{hbm}GiB")
    assert [a.name for a in space.designs()] == expected
    assert len(expected) == 43


def test_tiny_contains_the_tpuv4_design() -> None:
    base = load_accelerator("tpuv4")
    by_name = {a.name: a for a in load_space("tiny").designs()}
    acc = by_name["tc8-128x128-vc2-buf128MiB-hbm32GiB"]
    assert acc.peak_flop_per_s == base.peak_flop_per_s
    assert area_mm2(acc) == area_mm2(base)
    assert acc.clock_hz == base.clock_hz
    assert acc.hbm_bandwidth_bytes_per_s == base.hbm_bandwidth_bytes_per_s


def test_designs_are_deterministic_unique_and_lanes_tied() -> None:
    first = load_space("tiny").designs()
    second = load_space("tiny").designs()
    assert first == second
    assert len({a.name for a in first}) == len(first)
    for acc in first:
        assert acc.array_rows == acc.array_cols == acc.vector_lanes // 8  # TPU sublanes


def test_phaze_space_obeys_the_rule() -> None:
    space = load_space("phaze")
    designs = space.designs()
    assert space.base == "phaze-ref"
    assert space.area_budget_mm2 == pytest.approx(278.8, rel=0.002)
    assert all(a.vector_lanes == a.array_cols for a in designs[::53])
    assert space.size_before_area_rule == 13 * 13 * 8 * 7 * 3
    assert 0 < len(designs) < space.size_before_area_rule
    assert all(space.admits(a) for a in designs[::97])


def test_one_core_designs_waive_the_lower_bound(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, SMALL))
    names = [a.name for a in space.designs()]
    # tc1 with 8 MiB is ~21 mm², far below 0.3 x 278.8, but kept (one tensor core).
    assert names == [
        "tc1-128x128-vc2-buf8MiB-hbm32GiB", "tc1-128x128-vc2-buf8MiB-hbm64GiB",
        "tc1-128x128-vc2-buf128MiB-hbm32GiB", "tc1-128x128-vc2-buf128MiB-hbm64GiB",
        "tc8-128x128-vc2-buf8MiB-hbm32GiB", "tc8-128x128-vc2-buf8MiB-hbm64GiB",
        "tc8-128x128-vc2-buf128MiB-hbm32GiB", "tc8-128x128-vc2-buf128MiB-hbm64GiB",
    ]


def test_lower_bound_drops_small_multi_core_designs(tmp_path: Path) -> None:
    data = dict(SMALL, tensor_cores=[2], buffer=["8 MiB", "64 MiB"], hbm=["32 GiB"])
    # tc2 + 8 MiB = 25.2 + 0.8 + 11.0 + 1.7 = 38.7 mm² < 83.6; with 64 MiB: 115.4 mm², kept
    names = [a.name for a in load_space(write(tmp_path, data)).designs()]
    assert names == ["tc2-128x128-vc2-buf64MiB-hbm32GiB"]


def test_explicit_budget(tmp_path: Path) -> None:
    data = dict(SMALL, area_max_mm2=200.0, area_min_fraction=0.0)
    space = load_space(write(tmp_path, data))
    assert space.area_budget_mm2 == 200.0
    assert all(area_mm2(a) <= 200.0 for a in space.designs())
    assert len(space.designs()) == 6  # tc8 + 128 MiB (278.8 mm²) is over budget


def test_base_path_relative_to_space_file(tmp_path: Path) -> None:
    chip = load_accelerator("phaze-ref")  # same chip as slow.yaml below, at another clock
    (tmp_path / "hw").mkdir()
    preset = {
        "accelerator": {
            "name": "slow", "tensor_cores": 8, "array_rows": 128, "array_cols": 128,
            "vector_cores": 2, "vector_lanes": 128, "buffer": "128 MiB", "hbm": "32 GiB",
            "hbm_bandwidth": "1 TB/s", "clock": "500 MHz", "bytes_per_element": 2,
        }
    }
    write(tmp_path / "hw", preset, "slow.yaml")
    space = load_space(write(tmp_path, dict(SMALL, base="hw/slow.yaml")))
    assert all(a.clock_hz == 5e8 for a in space.designs())
    assert space.area_budget_mm2 == area_mm2(chip)
    assert space.base == str(tmp_path / "hw" / "slow.yaml")
    assert load_accelerator(space.base) == space.base_accelerator


def test_path_objects_and_names(tmp_path: Path) -> None:
    file = write(tmp_path, SMALL, "my-space.yaml")
    assert load_space(Path(file)).name == "my-space"
    assert load_space("tiny").name == "tiny"


def test_design_name() -> None:
    assert design_name(8, 128, 2, 128 * MIB, 32 * GIB) == "tc8-128x128-vc2-buf128MiB-hbm32GiB"
    assert design_name(1, 2, 4, 512 * 1024, 1536 * MIB) == "tc1-2x2-vc4-buf512KiB-hbm1536MiB"


def test_unknown_space() -> None:
    with pytest.raises(ConfigError) as info:
        load_space("huge")
    assert str(info.value) == "unknown search space 'huge'; choose from: phaze, tiny"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"base": "tpuv9"}, "space.yaml: base: unknown hardware preset 'tpuv9'"),
        ({"tensor_cores": []}, "tensor_cores: expected a non-empty list"),
        ({"tensor_cores": 8}, "tensor_cores: expected a non-empty list"),
        ({"tensor_cores": [8, -2]}, r"tensor_cores\[1\]: must be positive"),
        ({"array_dim": [128, 128]}, "array_dim has repeated values"),
        ({"buffer": ["-8 MiB"]}, r"buffer\[0\]: must be positive"),
        ({"buffer": ["8 MiBs"]}, r"buffer\[0\]"),
        ({"hbm": ["32 GiB", "32768 MiB"]}, "hbm has repeated values"),
        ({"area_max_mm2": -5}, "area_max_mm2: must be positive"),
        ({"area_max_mm2": "300 mm2"}, "area_max_mm2: expected a bare number"),
        ({"area_min_fraction": 1.5}, r"area_min_fraction: expected a number in \[0, 1\]"),
        ({"vector_lanes": [128]}, "unknown field 'vector_lanes'"),
    ],
)
def test_bad_space(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    file = write(tmp_path, dict(SMALL, **change))
    with pytest.raises(ConfigError, match=message) as info:
        load_space(file)
    assert str(info.value).startswith(file)


def test_missing_field(tmp_path: Path) -> None:
    data = {k: v for k, v in SMALL.items() if k != "hbm"}
    with pytest.raises(ConfigError, match="missing field 'hbm'"):
        load_space(write(tmp_path, data))


def test_malformed_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_space(write(tmp_path, "base: [tpuv4\n"))


def test_vector_lanes_per_col(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, dict(SMALL, vector_lanes_per_col=8)))
    assert space.vector_lanes_per_col == 8
    assert all(a.vector_lanes == 8 * a.array_cols for a in space.designs())
    assert load_space("tiny").vector_lanes_per_col == 8
    with pytest.raises(ConfigError, match="vector_lanes_per_col: must be positive"):
        load_space(write(tmp_path, dict(SMALL, vector_lanes_per_col=0)))
    with pytest.raises(ConfigError, match="vector_lanes_per_col"):
        SearchSpace("s", "tpuv4", load_accelerator("tpuv4"), (1,), (128,), (1,), (MIB,), (GIB,),
                    vector_lanes_per_col=0)


def test_dataclass_checks_values() -> None:
    base = load_accelerator("tpuv4")
    with pytest.raises(ConfigError, match="vector_cores"):
        SearchSpace("s", "tpuv4", base, (1,), (128,), (), (MIB,), (GIB,))
    with pytest.raises(ConfigError, match="area_min_fraction"):
        SearchSpace("s", "tpuv4", base, (1,), (128,), (1,), (MIB,), (GIB,),
                    area_min_fraction=-0.1)
