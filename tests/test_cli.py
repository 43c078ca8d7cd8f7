"""The CLI end to end: a real (small) model through every stage, and bad input -> exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run

TINY_GPT = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256,
            "vocab_size": 2048}
SMALL_SPACE = """\
base: tpuv4
tensor_cores: [2, 8]
array_dim: [128]
vector_cores: [2]
buffer: [128 MiB]
hbm: [32 GiB]
area_min_fraction: 0.0
"""


@pytest.fixture()
def model_and_space(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "tiny-gpt" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps(TINY_GPT))
    space = tmp_path / "space.yaml"
    space.write_text(SMALL_SPACE)
    return model, space


def test_search_end_to_end(model_and_space: tuple[Path, Path], tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    model, space = model_and_space
    out = tmp_path / "res" / "out.json"
    code, stdout, _ = run(["search", "--model", str(model), "--space", str(space), "--devices", "16",
                           "--global-batch", "64", "--micro-batch", "1", "--micro-batch", "2",
                           "--out", str(out)], capsys)
    assert code == 0
    assert "tc8-128x128" in stdout and "tc2-128x128" in stdout
    data = json.loads(out.read_text())
    best = data["best"]
    plan = best["plan"]
    assert plan["tp"] * plan["pp"] * plan["dp"] <= 16
    assert plan["micro_batch"] in (1, 2) and plan["recompute"] in ("none", "full")
    stages = plan["stages"]
    assert stages[0][0] == 0 and stages[-1][1] == 4 + 1  # embedding .. head
    assert all(a[1] + 1 == b[0] for a, b in zip(stages, stages[1:], strict=False))
    assert best["throughput_samples_per_s"] == pytest.approx(64 / best["iteration_time_s"])
    assert 0 < best["mfu"] <= 1
    assert len(data["evaluated"]) == 2
    # the design with 4x the MACs and otherwise the same chip must not be slower
    by_cores = {e["accelerator"]["tensor_cores"]: e for e in data["evaluated"]}
    assert by_cores[8]["throughput_samples_per_s"] >= by_cores[2]["throughput_samples_per_s"]
    assert best["accelerator"]["tensor_cores"] == 8
    # CP-SAT layer schedules are never longer than the list schedules: never slower
    # by default the designs shown (here both) are re-evaluated with CP-SAT layer schedules, which
    # are never longer than the list schedules: never slower
    exact = {e["accelerator"]["name"]: e for e in data["exact"]}
    assert set(exact) == {e["accelerator"]["name"] for e in data["evaluated"]}
    for listed in data["evaluated"]:
        found = exact[listed["accelerator"]["name"]]
        assert found["throughput_samples_per_s"] >= listed["throughput_samples_per_s"] * (1 - 1e-12)
        assert f"{found['throughput_samples_per_s']:,.1f}" in stdout
    assert "CP-SAT samples/s" in stdout


@pytest.mark.parametrize("strategy", ["exhaustive", "exhaustive-all", "phaze", "wham", "optuna"])
def test_every_strategy_from_the_cli(strategy: str, model_and_space: tuple[Path, Path], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    model, space = model_and_space
    out = tmp_path / f"{strategy}.json"
    code, stdout, _ = run(["search", "--model", str(model), "--space", str(space), "--devices", "16",
                           "--global-batch", "64", "--micro-batch", "1", "--strategy", strategy,
                           "--trials", "2", "--exact-top", "0", "--out", str(out)], capsys)
    data = json.loads(out.read_text())
    assert code == 0 and f"strategy {strategy}" in stdout
    assert data["strategy"] == strategy and data["considered"] == 2
    assert data["evaluated_count"] + data["pruned"] <= 2
    assert data["best"]["accelerator"]["tensor_cores"] == 8  # 4x the MACs, same chip otherwise


@pytest.mark.slow
def test_pareto_and_several_models(model_and_space: tuple[Path, Path], tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    model, space = model_and_space
    other = tmp_path / "wide-gpt" / "config.json"
    other.parent.mkdir()
    other.write_text(json.dumps({**TINY_GPT, "n_embd": 512, "n_head": 8}))
    common = ["--space", str(space), "--devices", "16", "--global-batch", "64", "--micro-batch", "1",
              "--exact-top", "0"]
    out = tmp_path / "pareto.json"
    code, stdout, _ = run(["search", "--model", str(model), *common, "--objective", "pareto",
                           "--out", str(out)], capsys)
    data = json.loads(out.read_text())
    assert code == 0 and "Pareto front" in stdout
    # the small chip has less area and TDP, the large one more throughput: both on the front
    assert sorted(r["accelerator"]["tensor_cores"] for r in data["front"]) == [2, 8]
    assert data["front"][0]["accelerator"]["tensor_cores"] == 8

    both = tmp_path / "both.json"
    code, table, _ = run(["search", "--model", str(model), "--model", str(other), *common,
                          "--out", str(both)], capsys)
    combined = json.loads(both.read_text())["best"]
    assert code == 0 and len(combined["models"]) == 2
    # the table shows the geometric mean and one plan per model
    assert f"{combined['throughput_samples_per_s']:,.1f}" in table and "geometric means over" in table
    plans = " | ".join(f"{m['plan']['tp']}/{m['plan']['pp']}/{m['plan']['dp']}" for m in combined["models"])
    assert plans in table
    each = tmp_path / "each.json"
    code, _, _ = run(["search", "--model", str(model), "--model", str(other), "--per-model", *common,
                      "--out", str(each)], capsys)
    alone = [r["best"]["throughput_samples_per_s"] for r in json.loads(each.read_text())["per_model"]]
    assert code == 0 and len(alone) == 2
    parts = [m["throughput_samples_per_s"] for m in combined["models"]]
    assert combined["throughput_samples_per_s"] == pytest.approx((parts[0] * parts[1]) ** 0.5)
    assert parts == pytest.approx(alone)  # the same chip wins for both models here


@pytest.mark.slow
def test_search_with_fused_layers(model_and_space: tuple[Path, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    model, space = model_and_space
    common = ["search", "--model", str(model), "--space", str(space), "--devices", "16", "--global-batch",
              "64", "--micro-batch", "1", "--exact-top", "0", "--baseline", "none"]
    figures = {}
    for fuse in ([], ["--fuse"]):
        out = tmp_path / f"fuse{len(fuse)}.json"
        code, stdout, _ = run([*common, *fuse, "--out", str(out)], capsys)
        data = json.loads(out.read_text())
        assert code == 0 and data["fuse"] is bool(fuse) and ("(--fuse)" in stdout) is bool(fuse)
        figures[bool(fuse)] = data["best"]["throughput_samples_per_s"]
    assert figures[True] > figures[False]


@pytest.mark.parametrize("argv, message", [
    (["search", "--model", "gpt5", "--devices", "8", "--global-batch", "8"], "unknown model 'gpt5'"),
    (["search", "--model", "nowhere/config.json", "--devices", "8", "--global-batch", "8"], "not found"),
    (["search", "--model", "gpt2-xl", "--devices", "0", "--global-batch", "8"],
     "devices must be a whole number from 1 to 1,048,576, got 0"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "-4"],
     "--global-batch must be a whole number from 1 to 1,073,741,824, got -4"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--space", "huge"],
     "tiny"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--recompute", "some"],
     "unknown recompute"),
    (["search", "--model", "gpt2-xl", "--devices", "eight", "--global-batch", "8"], "--devices"),
    (["search", "--devices", "8", "--global-batch", "8"], "--model"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--strategy", "random"],
     "unknown strategy 'random'"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--objective", "fast"],
     "unknown objective 'fast'"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--tp", "2"],
     "TP width 2 does not divide the 25 attention heads"),
    (["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8", "--trials", "0"],
     "trials must be a whole number from 1 to 1,000,000, got 0"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_malformed_space_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "bad.yaml"
    space.write_text("base: tpuv4\ntensor_cores: [2, 4\n")
    code, _, err = run(["search", "--model", "gpt2-xl", "--devices", "8", "--global-batch", "8",
                        "--space", str(space)], capsys)
    assert code == 2 and str(space) in err and len(err.strip().splitlines()) == 1


def test_infeasible_search_says_why(model_and_space: tuple[Path, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """llama2-7b cannot train on one 32 GiB chip: exit 2, a reason in numbers, results still written."""
    _, space = model_and_space
    out = tmp_path / "inf.json"
    code, _, err = run(["search", "--model", "llama2-7b", "--space", str(space), "--devices", "1",
                        "--global-batch", "1", "--micro-batch", "1", "--seq-len", "128",
                        "--out", str(out)], capsys)
    assert code == 2 and "GiB" in err and "HBM" in err
    assert len(err.strip().splitlines()) == 1  # the error only: no "wrote FILE" line
    data = json.loads(out.read_text())
    assert data["best"] is None and data["evaluated"][0]["infeasible_reason"]


def test_listings(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["models"], capsys)
    assert code == 0 and all(m in out for m in ("gpt2-xl", "bert-large", "opt-350m", "llama2-7b"))
    code, out, _ = run(["hardware"], capsys)
    assert code == 0 and "tpuv4" in out


def test_help_keeps_bracketed_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["search", "--help"], capsys)
    assert code == 0 and "[the usable CPUs]" in " ".join(out.split())
    code, out, _ = run(["plan", "--help"], capsys)
    assert code == 0 and "Tokens per sample [" in " ".join(out.split())
