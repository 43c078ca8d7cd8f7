"""Measured attention kernel tables (archplace.cost.attention_tables) and their selection."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from archplace.base.errors import ConfigError
from archplace.cost import attention_tables as at
from archplace.cost.efficiency import ChipColumns, op_times
from archplace.front import app
from archplace.front.specs import HardwareSpec
from archplace.hw.presets import load_accelerator
from archplace.workload.graph import Operator, OpKind, Phase
from cli_helpers import run

NAMES = at.attention_table_names()
A100 = load_accelerator("a100-80gb")
H100 = load_accelerator("h100-80gb")


def attention(*, s: int = 2048, d: int = 128, heads: int = 64, causal: bool = True,
              backward: bool = False, skip: bool = True) -> Operator:
    target = "archplace.attention_backward" if backward else "archplace.attention"
    return Operator(id=0, name="attn", target=target,
                    kind=OpKind.ATTENTION, phase=Phase.BWD if backward else Phase.FWD, batch=heads, m=s, k=d,
                    n=s, elements=heads * s * d, flop=0.0, bytes_read=0.0, bytes_written=0.0, causal=causal,
                    skip_masked_blocks=skip, dtype_bytes=2)


@pytest.mark.parametrize("name", NAMES)
def test_every_table_loads_with_its_source(name: str) -> None:
    table = at.load_attention_table(name)
    assert name == f"attention_{table.family}_{name.split('_')[2]}_{name.split('_')[3]}"
    assert re.fullmatch(r"[0-9a-f]{40}", table.header["source_commit"])
    assert table.preset in ("a100-80gb", "h100-80gb", "h200-141gb") and table.use in at.USES
    assert np.all(table.batch * table.seq_len == 16384)  # the papers' setup: batch x seq = 16k
    assert np.all(table.flop_per_s > 1e13) and np.all(table.flop_per_s < 1e15)
    assert not table.flop_per_s.flags.writeable


def test_published_values_survive_the_reading() -> None:
    a100 = at.load_attention_table("attention_flash2_a100_fa2paper")  # Fig. 4 (d): 189 at 16k, d 128, causal
    i = int(np.flatnonzero((a100.seq_len == 16384) & (a100.head_dim == 128) & a100.causal)[0])
    assert a100.flop_per_s[i] == 189e12 and a100.directions[i] == "fwd+bwd"
    pr = at.load_attention_table("attention_flash3_h100_pytorch-benchmark")  # the commit's 620.73
    assert pr.flop_per_s[-1] == pytest.approx(620.73e12) and pr.use == "check"
    assert set(at.model_tables()) == {("flash2", "a100-80gb"), ("triton-flash1", "a100-80gb"),
                                      ("flash2", "h100-80gb"), ("flash3", "h100-80gb"),
                                      ("cudnn", "h100-80gb"), ("flash2", "h200-141gb"),
                                      ("cudnn", "h200-141gb")}
    h200 = at.load_attention_table("attention_flash2_h200_profiled")  # archplace profile's row, 16k d 128
    i = int(np.flatnonzero((h200.seq_len == 16384) & (h200.head_dim == 128) & (h200.causal == 0)
                           & (np.array(h200.directions) == "fwd"))[0])
    assert h200.flop_per_s[i] == pytest.approx(357.17076236113286e12)


@pytest.mark.parametrize("name", NAMES)
def test_lookup_is_exact_at_every_table_point(name: str) -> None:
    table = at.load_attention_table(name)
    for i in range(len(table)):
        direction = table.directions[i]
        for backward in ((False, True) if direction == "fwd+bwd" else (direction == "bwd",)):
            same_mask = table.causal == table.causal[i]
            own = (np.array(table.directions) == ("bwd" if backward else "fwd")) & same_mask
            if direction == "fwd+bwd" and own.any():
                continue  # a direction's own rows answer first
            got = at.attention_throughput_flop_per_s(table, seq_len=int(table.seq_len[i]),
                                                     head_dim=int(table.head_dim[i]),
                                                     causal=bool(table.causal[i]), backward=backward)
            assert got == pytest.approx(table.flop_per_s[i], rel=1e-12)


def test_interpolation_and_clamping_by_hand() -> None:
    table = at.table_for("flash2", "a100-80gb")  # causal, d 64: 88 @ 512, 119 @ 1k, 171 @ 16k

    def rate(s: int, d: int = 64) -> float:
        rate = at.attention_throughput_flop_per_s(table, seq_len=s, head_dim=d, causal=True, backward=False)
        return rate / 1e12

    assert rate(724) == pytest.approx(88 * (119 / 88) ** (math.log(724 / 512) / math.log(2)), rel=1e-12)
    assert rate(1 << 20) == 171  # flat above the longest sequence
    slope = math.log(119 / 88) / math.log(2)  # below 512: the first segment's power law
    assert rate(128) == pytest.approx(88 * 0.25 ** slope, rel=1e-12)
    # head dim 90 between 64 and 128, linear in log d: at 512, 88 (d 64) and 99 (d 128)
    t = math.log(90 / 64) / math.log(2)
    assert rate(512, 90) == pytest.approx(math.exp((1 - t) * math.log(88) + t * math.log(99)), rel=1e-12)
    assert rate(512, 32) == 88 and rate(512, 256) == 99  # the nearest head dim outside


def test_rate_rises_with_sequence_and_work_never_shrinks_time() -> None:
    for family, preset in at.model_tables():
        table = at.table_for(family, preset)
        for causal in (False, True):
            for backward in (False, True):
                seqs = [64, 128, 256, 512, 700, 1024, 3000, 4096, 10000, 16384, 65536]
                rates = [at.attention_throughput_flop_per_s(table, seq_len=s, head_dim=128, causal=causal,
                                                            backward=backward) for s in seqs]
                below = [r for s, r in zip(seqs, rates, strict=True) if s <= 512]
                assert below == sorted(below)  # the extrapolation never rises as s shrinks
                per_head = [s * s / r for s, r in zip(seqs, rates, strict=True)]
                assert per_head == sorted(per_head)  # a longer sequence never takes less time


def test_missing_direction_uses_the_other_directions_causal_ratio() -> None:
    table = at.table_for("flash3", "h100-80gb")  # Fig. 6: backward without the mask only
    got = at.attention_throughput_flop_per_s(table, seq_len=2048, head_dim=128, causal=True, backward=True)
    assert got == pytest.approx(501e12 * 521 / 625, rel=1e-12)
    a100 = at.table_for("flash2", "a100-80gb")  # fwd+bwd only: the combined rate both ways
    for backward in (False, True):
        assert at.attention_throughput_flop_per_s(a100, seq_len=2048, head_dim=128, causal=True,
                                                  backward=backward) == 155e12


def test_kernel_time_and_op_times_by_hand() -> None:
    fwd, bwd = attention(), attention(backward=True)
    flop = 4.0 * 64 * 2048 * 2048 * 128 / 2  # the papers' causal count
    assert at.kernel_time_s(fwd, "flash2/a100-80gb") == pytest.approx(flop / 155e12, rel=1e-12)
    assert at.kernel_time_s(bwd, "flash2/a100-80gb") == pytest.approx(2.5 * flop / 155e12, rel=1e-12)
    sdpa = attention(skip=False)  # every block computed: counted and looked up as non-causal
    assert at.kernel_time_s(sdpa, "flash2/a100-80gb") == pytest.approx(2 * flop / 187e12, rel=1e-12)
    assert A100.efficiency is not None
    boost = replace(A100.efficiency, sustained_clock_hz=0.0)  # the table's times as measured
    single, every, _ = op_times(fwd, boost, ChipColumns.of([A100, A100]), np.zeros(2))
    assert every.tolist() == [flop / 155e12] * 2 and single.tolist() == [flop / 155e12 * 432] * 2
    # at the preset's sustained clock (archplace.cost.clock): x 1.41 / 1.228 GHz
    _, every, _ = op_times(fwd, A100.efficiency, ChipColumns.of([A100]), np.zeros(1))
    assert every[0] == pytest.approx(flop / 155e12 * 1.41 / 1.228, rel=1e-12)
    plain = replace(boost, attention_kernel=None)  # no table: the declared fraction
    _, every, _ = op_times(fwd, plain, ChipColumns.of([A100]), np.zeros(1))
    assert every[0] == pytest.approx(4.0 * 64 * 128 * 2048 * 2048 * 0.53125 / (A100.peak_flop_per_s * 0.73))


def test_selection_at_the_front_door() -> None:
    assert A100.efficiency is not None and A100.efficiency.attention_kernel == "flash2/a100-80gb"
    chip = app.accelerator(HardwareSpec("h100-80gb", attention_kernel="flash3"))
    assert chip.efficiency is not None and chip.efficiency.attention_kernel == "flash3/h100-80gb"
    with pytest.raises(ConfigError, match=r"'triton-flash1'.*h100-80gb: cudnn, flash2, flash3"):
        app.accelerator(HardwareSpec("h100-80gb", attention_kernel="triton-flash1"))
    with pytest.raises(ConfigError, match="no efficiency section"):
        app.accelerator(HardwareSpec("tpuv4", attention_kernel="flash2"))
    with pytest.raises(ConfigError, match="FAMILY/PRESET"):
        replace(A100.efficiency, attention_kernel="flash2")


def test_a_malformed_table_is_one_config_error(tmp_path: Path) -> None:
    good = (at.MEASURED_DIR / "attention_flash2_a100_fa2paper.csv").read_text(encoding="utf-8")
    for bad, match in ((good.replace("# use: model", "# use: maybe"), "use 'maybe'"),
                       (good.replace(",fwd+bwd,", ",sideways,", 1), "direction 'sideways'"),
                       (good.replace("fp16,132", "fp16,-1", 1), "not positive"),
                       (good.replace("# family: flash2\n", ""), "header lacks family"),
                       (good + good.splitlines()[-1] + "\n", "repeats seq_len")):
        path = tmp_path / "attention_x.csv"
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(ConfigError, match=match):
            at.read_attention_table(path)


@pytest.mark.parametrize("command", ["evaluate", "plan"])
def test_cli_refuses_a_family_without_a_table_in_one_line(command: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fixed = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1"] if command == "evaluate" else []
    status, out, err = run([command, "--model", "llama2-7b", "--hardware", "a100-80gb", "--devices", "8",
                            "--global-batch", "8", *fixed, "--attention-kernel", "flash3"], capsys)
    lines = err.strip().splitlines()
    assert status == 2 and out == "" and len(lines) == 1
    assert "--attention-kernel" in lines[0] and "a100-80gb: flash2, triton-flash1" in lines[0]
