"""`archplace plan` / `archplace evaluate` end to end on a small real model."""

from __future__ import annotations

import json

import pytest

from archplace.front import api
from cli_helpers import run

GPT = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 8, "n_positions": 256,
       "vocab_size": 4096}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("m") / "config.json"
    path.write_text(json.dumps(GPT))
    return str(path)


def common(model: str) -> list[str]:
    return ["--model", model, "--hardware", "a100-80gb", "--devices", "16", "--global-batch", "32"]


@pytest.mark.parametrize("fuse", [[], pytest.param(["--fuse"], marks=pytest.mark.slow)])
def test_plan_json_and_evaluate_of_its_plan_agree(model: str, fuse: list[str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", *common(model), "--tp", "1", "--tp", "2", "--micro-batch", "1",
                        "--micro-batch", "2", "--top", "3", "--json", *fuse], capsys)
    assert code == 0
    data = json.loads(out)
    plan = data["plan"]
    assert set(data) >= {"plan", "iteration_time_s", "throughput_samples_per_s", "tokens_per_s", "mfu",
                         "breakdown_s", "memory_per_device_bytes", "plans"}
    assert set(data["breakdown_s"]) == {"compute", "bubble", "recompute", "tp_comm", "cp_comm", "ep_comm",
                                        "pp_comm", "dp_comm", "overlap_slowdown", "optimizer"}
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["iteration_time_s"], rel=1e-9)
    assert plan["tp"] * plan["pp"] * plan["dp"] <= 16 and plan["tp"] in (1, 2)
    times = [p["iteration_time_s"] for p in data["plans"]]
    assert times == sorted(times) and len(times) == 3
    flags = ["--tp", str(plan["tp"]), "--pp", str(plan["pp"]), "--dp", str(plan["dp"]),
             "--micro-batch", str(plan["micro_batch"]), "--recompute", plan["recompute"],
             "--schedule", plan["schedule"], "--chunks", str(plan["chunks"]),
             "--stages", ",".join(f"{a}-{b}" for a, b in plan["stages"])]
    flags += ["--zero-stage", str(plan["zero_stage"])]
    flags += [flag for flag, on in (("--sp", plan["sp"]),
                                    ("--dp-overlap", plan["dp_overlap"])) if on]
    code, out, _ = run(["evaluate", *common(model), *flags, "--json", *fuse], capsys)
    assert code == 0
    evaluated = json.loads(out)
    assert evaluated["iteration_time_s"] == pytest.approx(data["iteration_time_s"], rel=1e-12)
    assert evaluated["memory_per_device_bytes"] == data["memory_per_device_bytes"]


def test_fused_layers_are_faster(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Fusing the element-wise operators into their matmul removes their HBM round trips: the
    same plan runs faster, with the same FLOP and memory per device."""
    flags = [*common(model), "--tp", "2", "--pp", "2", "--dp", "4", "--micro-batch", "2", "--json"]
    figures = []
    for fuse in ([], ["--fuse"]):
        code, out, _ = run(["evaluate", *flags, *fuse], capsys)
        assert code == 0
        figures.append(json.loads(out))
    eager, fused = figures
    assert fused["iteration_time_s"] < eager["iteration_time_s"]
    assert fused["breakdown_s"]["compute"] < eager["breakdown_s"]["compute"]
    assert fused["mfu"] > eager["mfu"]
    assert fused["memory_per_device_bytes"][0]["weights"] == eager["memory_per_device_bytes"][0]["weights"]


def test_evaluate_even_split_table(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["evaluate", *common(model), "--tp", "2", "--pp", "2", "--dp", "4",
                        "--micro-batch", "1", "--recompute", "selective", "--sp"], capsys)
    assert code == 0 and "iteration time breakdown" in out and "memory per device" in out
    assert "time per micro-batch of each stage" in out
    code, out, _ = run(["evaluate", *common(model), "--tp", "2", "--pp", "2", "--dp", "4",
                        "--micro-batch", "1", "--json"], capsys)
    data = json.loads(out)
    assert data["plan"]["stages"] == [[0, 2], [3, 5]]  # embedding + 2 blocks | 2 blocks + head
    times = data["stage_times_s"]
    # both sides of the one boundary pay its send and receive (activation and gradient)
    assert [t["segment"] for t in times] == [0, 1] and times[1]["p2p"] == times[0]["p2p"] > 0.0
    assert data["breakdown_s"]["pp_comm"] > 0.0
    slowest = max(t["total"] for t in times)  # the pipeline's pace: the bubble is (pp - 1) slots of it
    assert data["breakdown_s"]["bubble"] == pytest.approx(slowest, rel=1e-12)


@pytest.mark.parametrize("extra, message", [
    (["--tp", "3", "--pp", "1", "--dp", "1", "--micro-batch", "1"], "TP width 3 does not divide"),
    (["--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--schedule", "zigzag"],
     "unknown schedule 'zigzag'"),
    (["--tp", "1", "--pp", "1", "--dp", "0", "--micro-batch", "1"],
     "dp must be a whole number from 1 to 1,048,576, got 0"),
    (["--tp", "1", "--pp", "8", "--dp", "1", "--micro-batch", "1"], "cannot split 4 blocks into 8"),
    (["--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--stages", "0-x"], "--stages"),
    (["--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--sp"], "--sp needs --tp > 1"),
])
def test_evaluate_bad_input(model: str, extra: list[str], message: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", *common(model), *extra], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_plan_that_cannot_fit_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["plan", "--model", "llama2-70b", "--hardware", "a100-80gb", "--devices", "2",
                        "--global-batch", "2", "--seq-len", "256", "--micro-batch", "1", "--tp", "1",
                        "--tp", "2"], capsys)
    assert code == 2 and "GiB" in err and len(err.strip().splitlines()) == 1


def test_evaluate_zero_stages_and_what_the_time_is_made_of(model: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    plan = ["--tp", "1", "--pp", "2", "--dp", "8", "--micro-batch", "1"]
    results = {}
    for stage in range(4):
        code, out, _ = run(["evaluate", *common(model), *plan, "--zero-stage", str(stage), "--json"], capsys)
        assert code == 0
        results[stage] = json.loads(out)
    # the deprecated --zero is stage 1
    code, out, _ = run(["evaluate", *common(model), *plan, "--zero", "--json"], capsys)
    assert code == 0 and json.loads(out) == results[1]
    states = [sum(m["weights"] + m["gradients"] + m["optimizer"]
                  for m in results[s]["memory_per_device_bytes"]) for s in range(4)]
    assert states[0] > states[1] > states[2] > states[3]  # each stage shards more
    gathered = [results[s]["memory_per_device_bytes"][0]["gathered"] for s in range(4)]
    assert gathered[3] > 0 and gathered[:3] == [0.0, 0.0, 0.0]
    for data in results.values():
        assert data["breakdown_s"]["pp_comm"] > 0  # pp = 2: both stages pay the boundary
        assert set(data["comm_s"]) == {"tp", "cp", "ep", "pp", "dp"}
        for parts in data["comm_s"].values():
            assert 0.0 <= parts["exposed"] <= parts["total"] * (1 + 1e-12)
        assert data["comm_s"]["dp"]["exposed"] == pytest.approx(data["breakdown_s"]["dp_comm"], rel=1e-12)
        assert data["hfu"] == data["mfu"]  # no recomputation
        # achieved model FLOP/s per device = MFU x the chip's peak (the same for every stage)
        assert data["model_flop_per_s_per_device"] / data["mfu"] == pytest.approx(
            results[0]["model_flop_per_s_per_device"] / results[0]["mfu"], rel=1e-12)
    code, out, _ = run(["evaluate", *common(model), *plan, "--zero-stage", "3", "--recompute", "full",
                        "--grad-reduce-dtype", "bf16", "--dp-overlap"], capsys)
    assert code == 0 and "HFU" in out and "communication per iteration" in out and "gathered" in out
    assert "zero3 overlap" in out


@pytest.mark.parametrize("argv, message", [
    (["evaluate", "--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--zero-stage", "4"],
     "--zero-stage must be 0, 1, 2 or 3, got 4"),
    (["evaluate", "--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--zero", "--zero-stage", "2"],
     "contradicts zero_stage=2"),
    (["evaluate", "--tp", "1", "--pp", "1", "--dp", "1", "--micro-batch", "1", "--grad-reduce-dtype", "fp8"],
     "unknown grad_reduce_dtype 'fp8'"),
    (["plan", "--zero-stage", "1,x"], "zero_stage must be 0, 1, 2, 3 or all, got 'x'"),
    (["plan", "--zero-stage", "1", "--no-zero"], "give --no-zero or --zero-stage, not both"),
])
def test_zero_options_are_checked(model: str, argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run([argv[0], *common(model), *argv[1:]], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_plan_searches_the_zero_stages_asked_for(model: str, capsys: pytest.CaptureFixture[str]) -> None:
    best: dict[str, float] = {}
    for stages, allowed in (("0,3", {0, 3}), ("2", {2}), ("0", {0}), ("1", {1}), ("3", {3}),
                            ("all", {0, 1, 2, 3})):
        code, out, _ = run(["plan", *common(model), "--tp", "1", "--micro-batch", "1", "--zero-stage", stages,
                            "--top", "6", "--json"], capsys)
        assert code == 0
        plans = json.loads(out)["plans"]
        assert {p["plan"]["zero_stage"] for p in plans} <= allowed
        best[stages] = plans[0]["iteration_time_s"]
    # "all" searches the union: its best is the best of the single stages
    assert best["all"] == min(best[s] for s in ("0", "1", "2", "3"))


def test_infeasible_plan_names_the_zero_stages(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", "--model", "llama2-13b", "--hardware", "a100-80gb", "--devices", "8",
                        "--global-batch", "8", "--seq-len", "256", "--tp", "1", "--pp", "1", "--dp", "8",
                        "--micro-batch", "1", "--zero-stage", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "HBM with zero_stage=1" in err and "zero_stage=3 would need" in err


@pytest.mark.slow
def test_opt_175b_as_trained_with_fsdp_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """OPT-175B (Zhang et al. 2022, sec. 2.4): 992 A100-80GB, FSDP with tensor parallelism 8;
    a 2M-token batch of 2048-token sequences, here 992 of them (124 replicas x 8)."""
    code, out, _ = run(["evaluate", "--model", "gpt3-175b", "--hardware", "a100-80gb", "--devices", "992",
                        "--global-batch", "992", "--tp", "8", "--pp", "1", "--dp", "124",
                        "--micro-batch", "8", "--zero-stage", "3", "--recompute", "full", "--dp-overlap",
                        "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    (memory,) = data["memory_per_device_bytes"]
    assert memory["total"] < 80 * 2**30 and memory["gathered"] > 0
    assert 0.3 < data["mfu"] < 0.7 and data["hfu"] > data["mfu"]


def test_zero_stages_of_the_wrong_type_are_refused_in_one_line() -> None:
    from archplace.base.errors import ConfigError

    for bad in (2.0, object()):
        with pytest.raises(ConfigError, match="zero_stages must be 0, 1, 2, 3, all or a list"):
            api.parse_zero_stages(bad)  # type: ignore[arg-type]
