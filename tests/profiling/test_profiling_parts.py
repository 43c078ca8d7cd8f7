"""The parts of archplace profile that a CPU run does not reach: the full and quick grids,
the CUDA-event timer and the device checks (with a stand-in torch), the FLOP and byte counts,
the table writer, and points that fail on the device."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from archplace.base.errors import ConfigError
from archplace.profiling import kernels as K
from archplace.profiling import run as R
from archplace.profiling.grid import FA2_HIDDEN, FA2_TOKENS, AttentionPoint, GemmPoint, grid
from archplace.profiling.tables import Row, table_text
from archplace.profiling.timer import time_call

GIB = 2**30


def test_full_grid() -> None:
    full = grid("full")
    assert len(full.gemm) == 8**3
    assert sorted({p.m for p in full.gemm}) == [2**i for i in range(7, 15)]
    assert len(full.attention) == 6 * 2 * 2 * 2  # seq 512..16k, head dim 64/128, causal or not, fwd/bwd
    assert sorted({p.seq for p in full.attention}) == [512, 1024, 2048, 4096, 8192, 16384]
    for point in full.attention:  # FlashAttention-2 sec. 4.1: 16k tokens, hidden 2048
        assert point.batch * point.seq == FA2_TOKENS and point.heads * point.head_dim == FA2_HIDDEN
    assert full.copy_bytes == tuple(2**i for i in range(16, 31))  # 64 KiB .. 1 GiB
    assert full.elements == tuple(2**i // 2 for i in range(16, 31))
    assert {p.rows * p.cols * 2 for p in full.rowwise} == set(full.copy_bytes)
    assert full.points("softmax") == full.points("layernorm") == 2 * 15


def test_quick_grid_is_a_small_part_of_the_full_one() -> None:
    quick, full = grid("quick"), grid("full")
    assert set(quick.gemm) <= set(full.gemm) and len(quick.gemm) == 64
    assert set(quick.attention) <= set(full.attention) and len(quick.attention) == 12
    assert quick.copy_bytes == (2**16, 2**18, 2**20, 2**22, 2**24, 2**26, 2**28, 2**30)
    assert sum(quick.points(k) for k in R.KERNELS) < sum(full.points(k) for k in R.KERNELS) / 5


def test_fp32_elementwise_sizes_are_in_bytes() -> None:
    assert grid("full", element_bytes=4).elements[-1] == GIB // 4


def test_grid_refusals() -> None:
    with pytest.raises(ConfigError, match="unknown grid 'big'"):
        grid("big")
    with pytest.raises(ConfigError, match="element_bytes 0"):
        grid("full", element_bytes=0)
    with pytest.raises(ConfigError, match="unknown kernel class 'conv'"):
        grid("smoke").shapes("conv")


def test_counts() -> None:
    # FlashAttention-2 sec. 4.1: forward 4 seq^2 d h b, causal halves it, backward 2.5x the forward
    point = AttentionPoint(batch=1, heads=1, seq=2, head_dim=3, causal=False, direction="fwd")
    assert R.attention_flop(point) == 48.0
    assert R.attention_flop(AttentionPoint(1, 1, 2, 3, True, "fwd")) == 24.0
    assert R.attention_flop(AttentionPoint(1, 1, 2, 3, False, "bwd")) == 120.0
    assert R.rate("gemm", GemmPoint(2, 3, 4), "bf16", 0.5) == (96.0, "FLOP/s")
    assert R.rate("copy", 1000, "bf16", 2.0) == (1000.0, "B/s")  # read once, written once
    assert R.rate("gelu", 1000, "bf16", 2.0) == (2000.0, "B/s")  # 2-byte elements
    row = R.row_of("attention", point, "bf16", 48e-12)  # 48 FLOP in 48 ps: 1 TFLOP/s
    assert float(row.sizes["tflop_per_s"]) == pytest.approx(1.0, rel=1e-15)
    assert (row.sizes["seq_len"], row.sizes["causal"], row.sizes["direction"]) == (2, 0, "fwd")


class _Clock:
    """Device time of the stand-in CUDA events: each kernel call advances it by the next step."""

    def __init__(self, steps_ms: list[float]) -> None:
        self.now = 0.0
        self.steps = iter(steps_ms)
        self.log: list[str] = []


def _fake_torch(clock: _Clock, *, available: bool = True, cuda_version: str | None = "12.4",
                count: int = 1, capability: tuple[int, int] = (9, 0)) -> Any:
    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing
            self.at = -1.0

        def record(self) -> None:
            self.at = clock.now
            clock.log.append("record")

        def elapsed_time(self, end: Event) -> float:
            return end.at - self.at

    cuda = types.SimpleNamespace(
        Event=Event, synchronize=lambda device=None: clock.log.append("sync"),
        is_available=lambda: available, current_device=lambda: 0, device_count=lambda: count,
        get_device_capability=lambda device=None: capability,
        get_device_name=lambda device=None: "Stand-in H100")

    def device(kind: str, index: int | None = None) -> Any:
        name, _, given = kind.partition(":")
        return types.SimpleNamespace(type=name, index=index if index is not None else
                                     (int(given) if given else None))

    return types.SimpleNamespace(cuda=cuda, device=device, version=types.SimpleNamespace(cuda=cuda_version),
                                 __version__="2.13.0")


def test_cuda_timer_uses_events_flushes_l2_and_takes_the_median() -> None:
    clock = _Clock([9.0, 9.0, 1.0, 3.0, 2.0])  # two warm-up calls, then three timed ones (ms)
    torch = _fake_torch(clock)

    def call() -> None:
        clock.now += next(clock.steps)
        clock.log.append("call")

    flush = types.SimpleNamespace(zero_=lambda: clock.log.append("flush"))
    latency = time_call(torch, torch.device("cuda"), call, warmup=2, repeats=3, flush=flush)
    assert latency == pytest.approx(2e-3)  # median of 1, 3, 2 ms, in seconds
    timed = ["flush", "record", "call", "record"]
    assert clock.log == ["call", "call", "sync", *timed * 3, "sync"]


def test_timer_refuses_no_repeats() -> None:
    with pytest.raises(ConfigError, match="repeats 0"):
        time_call(None, types.SimpleNamespace(type="cpu"), lambda: None, warmup=0, repeats=0)


def test_cpu_timer_is_positive() -> None:
    assert time_call(None, types.SimpleNamespace(type="cpu"), lambda: None, warmup=0, repeats=3) > 0


def test_device_checks() -> None:
    clock = _Clock([])
    device, name = R._device(_fake_torch(clock), "cuda", "fp8")
    assert (device.type, device.index, name) == ("cuda", 0, "Stand-in H100")
    with pytest.raises(ConfigError, match="built without CUDA"):
        R._device(_fake_torch(clock, available=False, cuda_version=None), "cuda", "bf16")
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        R._device(_fake_torch(clock, available=False), "cuda:0", "bf16")
    with pytest.raises(ConfigError, match="there are 2 CUDA devices"):
        R._device(_fake_torch(clock, count=2), "cuda:2", "bf16")
    with pytest.raises(ConfigError, match=r"fp8 needs compute capability 8.9 or later; 'cuda' has \(8, 0\)"):
        R._device(_fake_torch(clock, capability=(8, 0)), "cuda", "fp8")


def test_cuda_header() -> None:
    head = R.header("gemm", device_name="NVIDIA H100 80GB HBM3", preset="h100-80gb", dtype="bf16",
                    torch_version="2.13.0+cu128", cuda_version="12.8", date="2026-01-01T00:00:00Z",
                    made_by="archplace profile -o t", the_grid=grid("quick"), cuda=True)
    assert head["library"] == "PyTorch 2.13.0+cu128 torch.matmul (cuBLAS)"
    assert "CUDA events" in head["measured"] and "L2 cache flushed" in head["measured"]
    assert head["gpu"] == head["device"] == "NVIDIA H100 80GB HBM3" and head["cuda"] == "12.8"
    assert (head["warmup"], head["repeats"], head["preset"]) == ("3", "10", "h100-80gb")


def test_fp8_dtype_rule() -> None:
    assert K.kernel_dtype("gemm", "fp8") == "fp8" and K.kernel_dtype("softmax", "fp8") == "bf16"
    assert K.kernel_dtype("softmax", "fp16") == "fp16" and K.kernel_dtype("softmax", "fp32") == "fp32"
    # FlashAttention-2 has 16-bit kernels only
    assert K.kernel_dtype("attention", "fp32") == K.kernel_dtype("attention", "fp8") == "bf16"
    assert K.kernel_dtype("attention", "fp16") == "fp16"


def test_table_text_reads_back_exactly_and_on_one_line(tmp_path: Path) -> None:
    from archplace.cost.measured_tables import read_table

    latency = 1.2345678901234567e-05
    header = {"source_repo": "local", "source_path": "-", "source_commit": "-", "gpu": "a\nb",
              "preset": "-", "dtype": "bf16", "library": "x", "measured": "y", "units": "s",
              "made_by": "archplace profile", "date": ""}
    text = table_text("copy", header, [Row("-", {"bytes": 64}, "bf16", latency)])
    (tmp_path / "t.csv").write_text(text)
    table = read_table(tmp_path / "t.csv")
    assert table.latency_s[0] == latency and table.header["gpu"] == "a b" and table.header["date"] == "-"
    with pytest.raises(ConfigError, match="no copy rows"):
        table_text("copy", header, [])
    with pytest.raises(ConfigError, match="lacks bytes"):
        table_text("copy", header, [Row("-", {"elements": 64}, "bf16", latency)])


def test_command_line_names_only_what_differs_from_the_defaults() -> None:
    assert R.command_line("out dir", grid="quick", device="cuda", dtype="bf16", max_seconds=None,
                          kernels=R.KERNELS, tag="profiled", preset="-") == \
        "archplace profile --out-dir 'out dir' --grid quick --device cuda --dtype bf16"
    assert R.command_line("o", grid="full", device="cuda:1", dtype="fp8", max_seconds=600.0,
                          kernels=("gemm",), tag="h100", preset="h100-80gb") == (
        "archplace profile --out-dir o --grid full --device cuda:1 --dtype fp8 --max-seconds 600 "
        "--kernel gemm --tag h100 --preset h100-80gb")


def test_a_failing_point_is_skipped_and_the_rest_kept(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    real = K.gelu_call

    def first_fails(torch: Any, device: Any, elements: int, dtype: str) -> K.Call:
        if elements == grid("smoke").elements[0]:
            raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")
        return real(torch, device, elements, dtype)

    monkeypatch.setattr(K, "gelu_call", first_fails)
    result = R.profile(tmp_path, grid="smoke", device="cpu", kernels=("gelu",))
    assert result.measured == 1 and result.planned == 2 and len(result.tables) == 1
    assert result.skipped == ("gelu 2048: CUDA out of memory. Tried to allocate 2 GiB",)
