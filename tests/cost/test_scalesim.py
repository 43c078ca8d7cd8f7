"""archplace's SCALE-Sim array timing against SCALE-Sim itself (the ``scalesim`` 2.0.2 package).

Each case writes a SCALE-Sim config (array shape, dataflow, SRAMs far larger than
the operands, bandwidth-estimation mode so that no memory stall can occur) and a
one-GEMM topology in ``tmp_path``, runs the simulator through its Python API and
reads its ``COMPUTE_REPORT.csv``.  SCALE-Sim's "Total Cycles" is the 0-based index
of the last cycle of its demand matrices, so it is one less than the number of
cycles the GEMM occupies the array, which is what archplace returns; both that
number and the demand matrices' length are compared exactly.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

import pytest
from scalesim.scale_sim import scalesim

from archplace.cost import gemm
from archplace.hardware.accelerator import ArrayTiming

# Large enough that every operand of every case fits (kB; SCALE-Sim's word is 1 byte here).
_SRAM_KB = 65536


def _config_text(rows: int, cols: int, dataflow: str) -> str:
    return "\n".join([
        "[general]", "run_name = archplace_case", "",
        "[architecture_presets]",
        f"ArrayHeight: {rows}", f"ArrayWidth: {cols}",
        f"IfmapSramSzkB: {_SRAM_KB}", f"FilterSramSzkB: {_SRAM_KB}", f"OfmapSramSzkB: {_SRAM_KB}",
        "IfmapOffset: 0", "FilterOffset: 10000000", "OfmapOffset: 20000000",
        f"Dataflow: {dataflow}", "Bandwidth: 10", "",
        "[run_presets]", "InterfaceBandwidth: CALC", "",
    ])


def run_scalesim(tmp: Path, gemms: list[tuple[int, int, int]], rows: int, cols: int,
                 dataflow: str) -> list[tuple[int, int, int]]:
    """Run SCALE-Sim on ``gemms`` ([m, k] x [k, n] each, one topology layer each).

    Returns:
        per layer (reported Total Cycles, reported Stall Cycles, rows of the demand matrices).
    """
    config, topology = tmp / "array.cfg", tmp / "gemms.csv"
    config.write_text(_config_text(rows, cols, dataflow))
    # SCALE-Sim's GEMM topology columns are: name, M, N, K (each row ends with a comma).
    lines = ["Layer, M, N, K,"] + [f"g{i}, {m}, {n}, {k}," for i, (m, k, n) in enumerate(gemms)]
    topology.write_text("\n".join(lines) + "\n")
    sim = scalesim(save_disk_space=True, verbose=False, config=str(config), topology=str(topology),
                   input_type_gemm=True)
    sim.run_scale(top_path=str(tmp))
    with (tmp / "archplace_case" / "COMPUTE_REPORT.csv").open() as handle:
        report = list(csv.reader(handle, skipinitialspace=True))[1:]
    layers = sim.runner.single_layer_sim_object_list
    assert len(report) == len(layers) == len(gemms)
    out = []
    for row, layer in zip(report, layers, strict=True):
        demand_rows = layer.compute_system.get_ofmap_demand_mat().shape[0]
        out.append((int(row[1]), int(row[2]), demand_rows))
    return out


def archplace_cycles(m: int, k: int, n: int, rows: int, cols: int, dataflow: str) -> int:
    """archplace's SCALE-Sim timing of one GEMM on one array."""
    if dataflow == "is":
        return gemm.is_cycles_scalesim(m, k, n, rows, cols)
    return gemm.matmul_cycles(1, m, k, n, rows, cols, 1, dataflow == "os", ArrayTiming.SCALESIM)


def generated_cases(count: int, seed: int) -> list[tuple[int, int, int, int, int, str]]:
    """``count`` (m, k, n, rows, cols, dataflow) cases: arrays 4x4..32x32 (some rectangular),
    dimensions from 1 to a few times the array (most not multiples of it), WS and OS alternating."""
    rng = random.Random(seed)
    shapes = [(4, 4), (8, 8), (16, 16), (32, 32), (4, 8), (8, 4), (16, 8), (8, 32), (32, 16), (4, 16)]
    cases = []
    for i in range(count):
        rows, cols = shapes[i % len(shapes)]
        m = rng.randint(1, 3 * max(rows, cols) + 5)
        k = rng.randint(1, 3 * rows + 3)
        n = rng.randint(1, 3 * cols + 3)
        cases.append((m, k, n, rows, cols, "ws" if i % 2 == 0 else "os"))
    return cases


def check(tmp: Path, case: tuple[int, int, int, int, int, str]) -> None:
    m, k, n, rows, cols, dataflow = case
    ((total, stalls, demand_rows),) = run_scalesim(tmp, [(m, k, n)], rows, cols, dataflow)
    ours = archplace_cycles(m, k, n, rows, cols, dataflow)
    assert stalls == 0, case
    assert demand_rows == ours, case
    assert total == ours - 1, case


# Hand-picked: a multiple of the array, everything smaller than it, a rectangular array.
FAST_CASES = [(64, 64, 64, 16, 16, "ws"), (10, 7, 13, 4, 4, "os"), (33, 20, 9, 8, 4, "ws")]


@pytest.mark.parametrize("case", FAST_CASES)
def test_scalesim_matches_fast(tmp_path: Path, case: tuple[int, int, int, int, int, str]) -> None:
    check(tmp_path, case)


def test_scalesim_matches_40_generated_cases(tmp_path: Path) -> None:
    cases = generated_cases(40, seed=20200823)
    assert {c[5] for c in cases} == {"ws", "os"}
    assert any(c[3] != c[4] for c in cases)  # rectangular arrays
    assert any(c[0] % c[3] and c[1] % c[3] for c in cases)  # non-multiples of the array
    for i, case in enumerate(cases):
        where = tmp_path / str(i)
        where.mkdir()
        check(where, case)


def test_input_stationary_matches(tmp_path: Path) -> None:
    for i, (m, k, n, rows, cols) in enumerate([(9, 10, 11, 4, 4), (5, 40, 3, 4, 8), (20, 7, 30, 8, 4)]):
        where = tmp_path / str(i)
        where.mkdir()
        check(where, (m, k, n, rows, cols, "is"))


def test_batch_runs_folds_back_to_back(tmp_path: Path) -> None:
    # A batch of 3 GEMMs occupies the array for the sum of 3 one-GEMM runs (3 topology layers).
    layers = run_scalesim(tmp_path, [(12, 9, 7)] * 3, 8, 4, "ws")
    assert gemm.matmul_cycles(3, 12, 9, 7, 8, 4, 1, False, ArrayTiming.SCALESIM) == sum(
        total + 1 for total, _, _ in layers)
