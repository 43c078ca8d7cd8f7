"""The sustained-clock measurement and the per-table clock header of ``archplace profile``, on a
stand-in torch (no GPU here): the readings, the median of the second half, the trace file, the
snippet, and the refusals."""

from __future__ import annotations

import math
import types
from pathlib import Path
from typing import Any

import pytest

from archplace.base.errors import ConfigError
from archplace.cost.measured_tables import read_table
from archplace.profiling import run as R
from archplace.profiling.grid import grid
from archplace.profiling.sustained import (
    ClockReading,
    SustainedClock,
    measure_sustained_clock,
    nvml_readers,
    trace_text,
)


class _Load:
    """A stand-in torch whose every matmul advances a fake host clock by ``step_s``."""

    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s
        self.calls = 0
        self.syncs = 0
        self.bfloat16, self.float16, self.float32, self.float8_e4m3fn = "bf16", "fp16", "fp32", "fp8"
        self.cuda = types.SimpleNamespace(synchronize=self._sync)

    def _sync(self, device: Any) -> None:
        self.syncs += 1

    def randn(self, *shape: int, device: Any, dtype: Any) -> tuple[int, ...]:
        return shape

    def matmul(self, a: Any, b: Any) -> None:
        self.calls += 1
        self.now += self.step_s


def test_readings_rate_and_the_steady_half() -> None:
    load = _Load(step_s=0.01)  # a chunk of 10 calls takes 0.1 s
    clocks = iter([1980e6, 1900e6, 1700e6, 1600e6, 1650e6, 1500e6])
    result = measure_sustained_clock(load, "cuda", 0.55, read_clock_hz=lambda: next(clocks),
                                     read_power_w=lambda: 700.0, clock=lambda: load.now, size=1000, chunk=10)
    # readings at 0.1 ... 0.6 s: the load stops at the first reading past 0.55 s
    assert [round(r.time_s, 6) for r in result.readings] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert load.calls == 60 and load.syncs == 6 and result.dtype == "bf16"
    # 2 * 1000^3 * 10 FLOP in 0.1 s = 0.2 TFLOP/s
    assert all(r.tflop_per_s == pytest.approx(0.2) for r in result.readings)
    # second half: readings at >= 0.275 s, i.e. 1700, 1600, 1650, 1500 MHz: median 1625
    assert result.sustained_hz == pytest.approx(1625e6)
    assert result.steady_power_w == 700.0


def _reading(time_s: float, mhz: float, tflop: float) -> ClockReading:
    return ClockReading(time_s, mhz * 1e6, 690.0, tflop)


def test_the_clock_the_model_takes_follows_throughput_not_nvml() -> None:
    # the H200 pattern: the first chunk holds cuBLAS's warm-up; the clock falls 1965 -> 1485 MHz
    # while the throughput falls 696 -> 674 TFLOP/s
    readings = (_reading(0.2, 1965, 306.6), _reading(0.3, 1965, 699.4), _reading(0.4, 1965, 693.7),
                _reading(0.5, 1545, 690.7), _reading(1.0, 1485, 674.0), _reading(1.5, 1500, 676.0),
                _reading(2.0, 1455, 672.0))
    result = SustainedClock(2.0, 8192, readings)
    assert result.burst() == readings[1:3]  # not the warm-up chunk, not the 1545 MHz one
    assert result.burst_hz == 1965e6 and result.burst_tflop_per_s == pytest.approx(696.55)
    assert result.sustained_hz == 1485e6 and result.steady_tflop_per_s == 674.0
    assert result.effective_hz == pytest.approx(1965e6 * 674.0 / 696.55)
    words = result.summary()
    assert words.startswith("sustained clock 1.901 GHz throughput-equivalent: bf16 8192^3 GEMMs 697 TFLOP/s")
    assert "674 TFLOP/s at NVML 1485 MHz at 690 W (steady, 3 of 7 readings)" in words
    # never above the burst clock, whatever the noise
    faster = SustainedClock(2.0, 8192, (*readings[:3], _reading(1.5, 1485, 800.0)))
    assert faster.effective_hz == 1965e6


def test_one_reading_is_its_own_burst_and_steady_state_and_power_may_be_unknown() -> None:
    one = SustainedClock(10.0, 8192, (ClockReading(1.0, 1.5e9, math.nan, 600.0),))
    assert one.sustained_hz == one.burst_hz == one.effective_hz == 1.5e9 and math.isnan(one.steady_power_w)
    assert " W " not in one.summary()
    assert one.trace_rows() == [{"time_s": "1.000", "sm_clock_mhz": "1500", "power_w": "-",
                                 "tflop_per_s": "600.0"}]


@pytest.mark.parametrize("seconds, size, chunk", [(0.0, 8, 1), (math.inf, 8, 1), (1.0, 0, 1), (1.0, 8, 0)])
def test_bad_arguments_are_refused(seconds: float, size: int, chunk: int) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        measure_sustained_clock(_Load(0.1), "cuda", seconds, read_clock_hz=lambda: 1.0,
                                read_power_w=lambda: 1.0, size=size, chunk=chunk)


def test_nvml_readers_convert_units_and_say_why_they_cannot_read() -> None:
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(clock_rate=lambda d: 1755,
                                                             power_draw=lambda d: 654321))
    read_hz, read_w = nvml_readers(torch, "cuda")
    assert read_hz() == 1755e6 and read_w() == pytest.approx(654.321)

    def no_nvml(device: Any) -> int:
        raise ModuleNotFoundError("No module named 'pynvml'")

    torch.cuda.power_draw = no_nvml
    assert math.isnan(nvml_readers(torch, "cuda")[1]())
    torch.cuda.clock_rate = no_nvml
    with pytest.raises(ConfigError, match="cannot read the SM clock through NVML.*pynvml"):
        nvml_readers(torch, "cuda")


def test_trace_file_reads_back(tmp_path: Path) -> None:
    result = SustainedClock(2.0, 8192, (ClockReading(0.5, 1.98e9, 500.0, 700.0),
                                        ClockReading(2.0, 1.6e9, 699.5, 610.0)))
    text = trace_text(result, {"gpu": "Stand-in H200", "made_by": "archplace profile --sustained 2"})
    lines = text.splitlines()
    assert lines[0] == "# kernel: sustained"
    assert any(line.startswith("# sustained_clock: sustained clock 1.6 GHz throughput-equivalent")
               for line in lines)
    assert lines[-3:] == ["time_s,sm_clock_mhz,power_w,tflop_per_s", "0.500,1980,500.0,700.0",
                          "2.000,1600,699.5,610.0"]


def test_the_gemm_header_states_the_median_clock_and_the_clock_model_reads_it(tmp_path: Path) -> None:
    from archplace.cost.clock import table_clock_hz
    from archplace.profiling.tables import Row, table_text

    head = R.header("gemm", device_name="NVIDIA H200", preset="h200-141gb", dtype="bf16",
                    torch_version="2.11.0", cuda_version="13.0", date="2026-11-30T00:00:00Z",
                    made_by="archplace profile", the_grid=grid("quick"), cuda=True,
                    clocks_mhz=(1980.0, 1965.0, 1755.0))
    assert head["clock"].startswith("1.965 GHz (median SM clock of 3 NVML readings")
    assert "1755 to 1980 MHz" in head["clock"]
    path = tmp_path / "gemm_t.csv"
    path.write_text(table_text("gemm", head, [Row("-", {"batch": 1, "m": 8, "n": 8, "k": 8, "calls": 1},
                                                 "bf16", 1e-5)]))
    assert table_clock_hz(read_table(path)) == pytest.approx(1.965e9)
    no_clock = R.header("gemm", device_name="x", preset="-", dtype="bf16", torch_version="t",
                        cuda_version="-", date="d", made_by="m", the_grid=grid("quick"), cuda=True)
    assert "clock" not in no_clock


def test_cudnn_attention_header_names_its_family_and_backend() -> None:
    head = R.header("attention", device_name="NVIDIA H200", preset="h200-141gb", dtype="bf16",
                    torch_version="2.11.0", cuda_version="13.0", date="d", made_by="m",
                    the_grid=grid("quick"), cuda=True, attention="cudnn")
    assert head["family"] == "cudnn" and "CUDNN_ATTENTION backend only" in head["library"]


@pytest.mark.parametrize("options, says", [
    ({"attention": "flash3"}, "attention 'flash3': choose from flash2, cudnn"),
    ({"attention": "cudnn", "device": "cpu"}, "attention cudnn: a CUDA backend"),
    ({"sustained_s": -1.0}, "sustained -1.0 must be a number of seconds >= 0"),
    ({"sustained_s": math.nan}, "sustained nan must be"),
    ({"sustained_s": 30.0, "device": "cpu"}, "not measured on the CPU"),
])
def test_refusals_before_torch(options: dict[str, Any], says: str) -> None:
    given = {"grid": "smoke", "device": "cuda", "dtype": "bf16", "max_seconds": None, **options}
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        R.check_options(**given)


def test_command_line_and_outputs_name_the_new_options(tmp_path: Path) -> None:
    assert R.command_line("o", grid="full", device="cuda", dtype="bf16", max_seconds=None,
                          kernels=("attention",), tag="h200", preset="-", attention="cudnn",
                          sustained_s=60.0) == (
        "archplace profile --out-dir o --grid full --device cuda --dtype bf16 --kernel attention "
        "--attention cudnn --sustained 60 --tag h200")
    paths = R.output_paths(tmp_path, ("gemm",), "h200", sustained=True)
    assert paths["sustained"] == tmp_path / "sustained_h200.csv"
    assert "sustained" not in R.output_paths(tmp_path, ("gemm",), "h200")


def test_snippet_carries_the_sustained_clock(tmp_path: Path) -> None:
    import yaml

    result = SustainedClock(60.0, 8192, (ClockReading(0.5, 1.98e9, 300.0, 100.0),
                                         ClockReading(1.0, 1.98e9, 400.0, 700.0),
                                         ClockReading(40.0, 1.5e9, 700.0, 630.0)))
    text = R.snippet_text([], "NVIDIA H200", "2026-11-30", "archplace profile --sustained 60",
                          sustained=result, trace=tmp_path / "sustained_h200.csv")
    entry = yaml.safe_load(text)["efficiency"]["sustained_clock"]
    assert entry["value"] == "1.782 GHz"  # 1.98 GHz x 630 / 700
    assert "sustained_h200.csv" in entry["source"] and "NVIDIA H200" in entry["source"]


def test_the_run_s_gemm_table_is_the_reference(tmp_path: Path) -> None:
    from archplace.profiling.tables import Row, table_text

    head = R.header("gemm", device_name="NVIDIA H200", preset="-", dtype="bf16", torch_version="t",
                    cuda_version="-", date="d", made_by="m", the_grid=grid("quick"), cuda=True,
                    clocks_mhz=(1980.0,))
    size = 1000
    path = tmp_path / "gemm_t.csv"  # 2e9 FLOP in 2.5 us: 800 TFLOP/s at the table's 1.98 GHz
    path.write_text(table_text("gemm", head, [Row("-", {"batch": 1, "m": size, "n": size, "k": size,
                                                      "calls": 1}, "bf16", 2.5e-6)]))
    listed = R.ProfiledTable("gemm", str(path), 1, 8e14, "FLOP/s", 2.5e-6)
    measured = SustainedClock(2.0, size, (_reading(0.1, 1965, 100.0), _reading(0.2, 1965, 700.0),
                                          _reading(1.5, 1485, 680.0)))
    against = R._against_gemm_table(measured, [listed])
    assert against.reference == "gemm_t.csv" and against.reference_tflop_per_s == pytest.approx(800.0)
    assert against.effective_hz == pytest.approx(1.98e9 * 680.0 / 800.0)
    assert "reference gemm_t.csv: 800 TFLOP/s at 1980 MHz" in against.summary()
    # without a GEMM table of this run: the burst readings are the reference
    assert R._against_gemm_table(measured, []) is measured
    assert measured.effective_hz == pytest.approx(1965e6 * 680.0 / 700.0)


def test_a_failed_clock_reading_is_left_out() -> None:
    # a reading NVML did not give is NaN: out of the medians, '-' in the trace
    readings = (_reading(0.2, 1965, 300.0), _reading(0.3, 1965, 700.0), _reading(0.4, math.nan, 690.0),
                _reading(1.5, 1485, 670.0), _reading(1.8, math.nan, 668.0))
    result = SustainedClock(2.0, 8192, readings)
    assert result.burst() == readings[1:2] and result.burst_hz == 1965e6
    assert result.sustained_hz == 1485e6
    assert result.trace_rows()[2]["sm_clock_mhz"] == "-"
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(clock_rate=lambda d: 1 / 0))
    from archplace.profiling.sustained import sm_clock_hz
    assert math.isnan(sm_clock_hz(torch, "cuda"))
