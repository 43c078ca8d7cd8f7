"""Accelerator search spaces (archplace.hw.space)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from archplace.base.errors import ConfigError
from archplace.hw.area import area_mm2, area_of_mm2
from archplace.hw.presets import load_accelerator
from archplace.hw.space import SearchSpace, design_name, load_space, space_names

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
    assert space_names() == ["phaze", "phaze-square", "tiny"]


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
    expected = []
    for tc, dim, vc, buf, hbm in itertools.product(
        [2, 4, 8, 16], [64, 128, 256], [1, 2], [32, 64, 128], [32]
    ):
        area = area_of_mm2(tc, dim, dim, vc, dim * 8, buf * MIB)
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


def test_phaze_square_space_obeys_the_rule() -> None:
    # the square-array part of PHAZE's space (the `phaze` space before PHAZE's rectangular
    # arrays, its exact areas and its one-vector-core waiver: 3,159 core configurations then)
    space = load_space("phaze-square")
    designs = space.designs()
    assert space.base == "phaze-ref"
    assert space.area_budget_mm2 == pytest.approx(278.8, rel=0.002)
    assert all(a.vector_lanes == a.array_cols == a.array_rows for a in designs[::53])
    assert space.size_before_area_rule == 13 * 13 * 8 * 7 * 3
    assert len(designs) == 3 * 3434
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
    # tc2 + 8 MiB = 24.9 + 0.9 + 12.0 + 0.2 = 38.0 mm² < 84.1; with 64 MiB: 114.7 mm², kept
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
    assert str(info.value) == "unknown search space 'huge'; choose from: phaze, phaze-square, tiny"


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
        ({"array_rows": [2, 4]}, "give either array_dim .* got array_dim, array_rows"),
        ({"area_floor_waived_for": ["hbm"]}, r"area_floor_waived_for\[0\]: expected one of"),
        ({"area_floor_waived_for": "tensor_cores"}, "area_floor_waived_for: expected a list"),
        ({"area_floor_waived_for": ["vector_cores", "vector_cores"]}, "repeated values"),
    ],
)
def test_bad_space(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    file = write(tmp_path, dict(SMALL, **change))
    with pytest.raises(ConfigError, match=message) as info:
        load_space(file)
    assert str(info.value).startswith(file)


def test_rectangular_arrays(tmp_path: Path) -> None:
    data = {k: v for k, v in SMALL.items() if k != "array_dim"}
    data.update(array_rows=[64, 128], array_cols=[128, 256], tensor_cores=[8], buffer=["128 MiB"],
                hbm=["32 GiB"], area_min_fraction=0.0)
    space = load_space(write(tmp_path, data))
    assert space.array_dims == ()
    assert space.array_shapes == ((64, 128), (64, 256), (128, 128), (128, 256))
    assert space.size_before_area_rule == 4
    names = [a.name for a in space.designs()]
    # 8 x 128x256 is 199 mm² of PEs + 175 mm² of buffer: over the 280 mm² budget
    assert names == ["tc8-64x128-vc2-buf128MiB-hbm32GiB", "tc8-64x256-vc2-buf128MiB-hbm32GiB",
                     "tc8-128x128-vc2-buf128MiB-hbm32GiB"]
    for acc in space.designs():
        assert acc.vector_lanes == acc.array_cols  # tied to the width, as in PHAZE
    assert design_name(8, 64, 2, 128 * MIB, 32 * GIB, array_cols=256) == names[1]
    data_missing = {k: v for k, v in data.items() if k != "array_cols"}
    with pytest.raises(ConfigError, match="got array_rows$"):
        load_space(write(tmp_path, data_missing))
    with pytest.raises(ConfigError, match="got none of them"):
        load_space(write(tmp_path, {k: v for k, v in data_missing.items() if k != "array_rows"}))


def test_area_floor_waiver(tmp_path: Path) -> None:
    # one vector core and 2 tensor cores: below the floor, kept only when vector_cores waives it
    data = dict(SMALL, tensor_cores=[2], vector_cores=[1, 2], buffer=["8 MiB"], hbm=["32 GiB"])
    assert load_space(write(tmp_path, data)).designs() == ()
    both = load_space(write(tmp_path, dict(data, area_floor_waived_for=["tensor_cores", "vector_cores"])))
    assert [a.name for a in both.designs()] == ["tc2-128x128-vc1-buf8MiB-hbm32GiB"]
    none = load_space(write(tmp_path, dict(data, tensor_cores=[1], area_floor_waived_for=[])))
    assert none.designs() == ()
    with pytest.raises(ConfigError, match="area_floor_waived_for"):
        SearchSpace("s", "tpuv4", load_accelerator("tpuv4"), (1,), (128,), (1,), (MIB,), (GIB,),
                    area_floor_waived_for=("hbm",))
    with pytest.raises(ConfigError, match="give either array_dim"):
        SearchSpace("s", "tpuv4", load_accelerator("tpuv4"), (1,), (128,), (1,), (MIB,), (GIB,),
                    array_rows=(2,), array_cols=(4,))


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
