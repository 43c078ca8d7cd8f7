"""The validation data and harness themselves: the published runs are complete and their
columns agree with each other under the publishers' FLOP formulas; ``evaluate_kwargs`` passes
exactly the keywords ``api.evaluate`` accepts."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest

from archplace.validation.runs import (
    VARIANTS,
    ConfigModel,
    PresetModel,
    Run,
    evaluate_kwargs,
    included,
    korthikanti_mfu,
    load_runs,
    model_argument,
    narayanan_eq3,
)

DATA_FILE = Path(__file__).with_name("published_runs.yaml")
RUNS = load_runs(DATA_FILE)
BY_CASE = {run.case: run for run in RUNS}


def test_at_least_40_included_runs_each_cited() -> None:
    """Issue #24: >= 40 runs inside the thresholds; every run names its source (a paper and
    table, or a repository file at a commit) and every exclusion says why."""
    assert len(included(RUNS)) >= 40
    assert {run.hardware for run in RUNS} == {"a100-80gb", "h100-80gb", "b200-192gb", "h200-141gb"}
    for run in RUNS:
        assert len(run.source) > 20, run.case
        assert any(word in run.source.lower() for word in ("table", "@", "commit")), run.case
    assert {run.plan.precision for run in included(RUNS)} == {"bf16", "fp8"}
    assert any(run.plan.cp > 1 for run in included(RUNS))


def test_groups() -> None:
    groups = {run.group for run in RUNS}
    assert {"narayanan a100-80gb bf16", "mpt a100-80gb bf16", "nemo h100-80gb fp8",
            "mbridge b200-192gb fp8"} <= groups


def test_all_ten_rows_of_narayanan_table_1() -> None:
    """Table 1 of Narayanan et al. 2021: (layers, hidden, GPUs, TFLOP/s) of the ten models."""
    rows = sorted((run.gpt().layers, run.gpt().hidden, run.plan.gpus, run.published.value)
                  for run in RUNS if run.case.startswith("narayanan-"))
    assert rows == [(24, 2304, 32, 137.0), (30, 3072, 64, 138.0), (36, 4096, 128, 142.0),
                    (40, 6144, 256, 135.0), (48, 8192, 512, 138.0), (60, 10240, 1024, 140.0),
                    (80, 12288, 1536, 148.0), (96, 16384, 1920, 155.0), (105, 20480, 2520, 163.0),
                    (128, 25600, 3072, 163.0)]


@pytest.mark.parametrize("run", [r for r in RUNS if r.case.startswith("narayanan-")], ids=lambda r: r.case)
def test_narayanan_parameter_counts_match_the_model_names(run: Run) -> None:
    """Table 1 names each model by P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) (eq. 2),
    rounded to 0.1 billion."""
    m = run.gpt()
    params = 12 * m.layers * m.hidden**2 * (1 + 13 / (12 * m.hidden)
                                              + (m.vocab + m.seq_len) / (12 * m.layers * m.hidden))
    named = float(run.case.removeprefix("narayanan-").removesuffix("b"))
    assert params / 1e9 == pytest.approx(named, abs=0.051)


@pytest.mark.parametrize("run", [r for r in RUNS if r.published.mfu_percent is not None],
                         ids=lambda r: r.case)
def test_korthikanti_iteration_times_agree_with_their_mfu(run: Run) -> None:
    """Table 5's MFU = model FLOP / (time x GPUs x 312 TFLOP/s): ties the transcribed times to
    the Table 3 plans (GPUs, global batch, architecture). Times are rounded to 0.01 s, so the
    tolerance is 1 % (22B: 1.10 s)."""
    pub = run.published
    assert pub.peak_flop_per_s is not None and pub.mfu_percent is not None
    mfu = korthikanti_mfu(run) / (pub.value * run.plan.gpus * pub.peak_flop_per_s)
    assert 100 * mfu == pytest.approx(pub.mfu_percent, rel=0.01)


@pytest.mark.parametrize("run", [r for r in RUNS if r.published.tokens_per_s_per_gpu is not None],
                         ids=lambda r: r.case)
def test_mosaic_mfu_agrees_with_published_tokens_per_second(run: Run) -> None:
    """llm-foundry's MFU column = tokens/s/GPU x (6 N + 12 l h s) / peak, within rounding."""
    pub = run.published
    assert pub.tokens_per_s_per_gpu is not None and pub.params is not None
    assert pub.peak_flop_per_s is not None
    m = run.gpt()
    flop_per_token = 6 * pub.params + 12 * m.layers * m.hidden * m.seq_len
    assert 100 * pub.tokens_per_s_per_gpu * flop_per_token / pub.peak_flop_per_s == pytest.approx(
        pub.value, rel=0.005)


def test_published_time_and_error_by_hand() -> None:
    """1.7B: eq. (3) = 96·512·2048·24·2304²·(1 + 2048/13824 + 51200/884736) FLOP at 137 TFLOP/s
    on 32 GPUs; a prediction twice as fast is a +100 % throughput error and doubles the figure."""
    run = BY_CASE["narayanan-1.7b"]
    flop = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / 13824 + 51200 / 884736)
    assert narayanan_eq3(run) == pytest.approx(flop, rel=1e-12)
    time_s = flop / (137e12 * 32)
    assert run.published_iteration_time_s() == pytest.approx(time_s, rel=1e-12)
    assert run.error_of(time_s / 2) == pytest.approx(1.0)
    assert run.figure_of(time_s / 2) == pytest.approx(274.0)
    timed = BY_CASE["korthikanti-175b"]
    assert timed.published_iteration_time_s() == 13.75
    assert timed.error_of(13.75 * 1.25) == pytest.approx(-0.2)
    assert timed.figure_of(20.0) == 20.0


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_evaluate_kwargs(variant: str) -> None:
    run = BY_CASE["mpt-7b-h100"]
    kwargs = evaluate_kwargs(run, "m.json", variant)
    expected = {"attention": run.plan.attention, "kernels": run.plan.kernels, **VARIANTS[variant]}
    assert (kwargs["attention"], kwargs["kernels"]) == (expected["attention"], expected["kernels"])
    assert kwargs["zero_stage"] == 3 and "grad_reduce_dtype" not in kwargs  # not stated: API default
    stated = dataclasses.replace(run, plan=dataclasses.replace(run.plan, grad_reduce_dtype="bf16"))
    assert evaluate_kwargs(stated, "m.json", variant)["grad_reduce_dtype"] == "bf16"
    megatron = evaluate_kwargs(BY_CASE["narayanan-76.1b"], "m.json", variant)
    assert megatron["zero_stage"] == 0 and "grad_reduce_dtype" not in megatron
    if variant == "as-trained":  # Megatron-LM 2021: fused scale-mask-softmax, not FlashAttention
        assert (megatron["attention"], megatron["kernels"]) == ("eager", "fused")
        assert (kwargs["attention"], kwargs["kernels"]) == ("flash", "fused")
    assert (megatron["schedule"], megatron["chunks"], megatron["dp"]) == ("interleaved", 3, 32)


def test_evaluate_kwargs_match_the_current_api() -> None:
    """Read from the real signature, every keyword built is one ``api.evaluate`` takes."""
    from archplace.front import api

    accepted = set(inspect.signature(api.evaluate).parameters)
    for run in RUNS:
        for variant in VARIANTS:
            assert set(evaluate_kwargs(run, "m.json", variant)) <= accepted


def test_malformed_runs_are_refused(tmp_path: Path) -> None:
    entry = {"case": "x", "source": "s", "hardware": "a100-80gb",
             "model": dataclasses.asdict(RUNS[0].gpt()), "plan": dataclasses.asdict(RUNS[0].plan),
             "published": {"value": 1.0, "unit": "mfu_percent", "flop_formula": "narayanan_eq3"}}
    path = tmp_path / "runs.yaml"
    path.write_text(json.dumps({"runs": [entry]}))
    with pytest.raises(ValueError, match="peak_flop_per_s"):
        load_runs(path)
    path.write_text(json.dumps({"runs": [{**entry, "published": {**entry["published"],
                                                                  "unit": "tflop_per_gpu"}}] * 2}))
    with pytest.raises(ValueError, match="duplicate"):
        load_runs(path)


def test_paper_flop_formula_matches_traced_graphs(tmp_path: Path) -> None:
    """Eq. (3) counts forward + recomputed forward + backward (2x) = 4 forward passes of the
    matmuls; the traced graphs of the 1.7B model must give the same count within 2 % (eager
    attention: eq. (3) counts the full s x s scores as matmuls, as Megatron-LM ran them)."""
    from archplace.workload.extract import ExtractOptions, extract_chain
    from archplace.workload.options import Attention
    from archplace.workload.zoo import load_model

    run = BY_CASE["narayanan-1.7b"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(run.gpt().hf_config()))
    options = ExtractOptions.of(1, run.gpt().seq_len, attention=Attention.EAGER)
    chain = extract_chain(load_model(str(path)), options)
    fwd_matmul = sum(layer.fwd.matmul_flop() for layer in chain.layers)
    assert narayanan_eq3(run) == pytest.approx(4 * fwd_matmul * run.plan.global_batch, rel=0.02)


@pytest.mark.parametrize("run", [r for r in RUNS if r.published.model_tflop_per_gpu is not None
                                 and r.case.startswith("nemo2407-llama2")], ids=lambda r: r.case)
def test_nemo_tflops_agree_with_tokens_per_second(run: Run) -> None:
    """NeMo 24.07's two columns for Llama 2: model TFLOP/s = tokens/s x NeMo's llama2 count per
    token, L h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(L h)) with the full (not causal-halved)
    s^2 term (NVIDIA/NeMo nemo/utils/flops_formulas.py, llama2, less the later 0.5 factor), the
    preset's sizes (h 4096/5120/8192, f 11008/13824/28672, L 32/40/80, g/a 1/1/0.125) and
    V = 32,000. Ties the tokens/s compared to the plan's model and sequence length."""
    sizes = {"llama2-7b": (32, 4096, 11008, 1.0), "llama2-13b": (40, 5120, 13824, 1.0),
             "llama2-70b": (80, 8192, 28672, 0.125)}
    assert isinstance(run.model, PresetModel)
    layers, h, ffn, groups = sizes[run.model.preset]
    s = run.model.seq_len
    per_token = layers * h * h * (12 + 12 * groups + 18 * ffn / h + 12 * s / h + 6 * 32000 / (layers * h))
    pub = run.published
    assert pub.model_tflop_per_gpu is not None
    assert pub.value * per_token / 1e12 == pytest.approx(pub.model_tflop_per_gpu, rel=0.01)


def test_tokens_per_second_time_by_hand() -> None:
    """LLAMA2-7B: 128 x 4096 tokens per iteration at 16,934 tokens/s on each of 8 GPUs."""
    run = BY_CASE["nemo2407-llama2-7b"]
    assert run.published_iteration_time_s() == pytest.approx(128 * 4096 / (16934 * 8), rel=1e-12)


def test_new_plan_fields_reach_evaluate(tmp_path: Path) -> None:
    cp = evaluate_kwargs(BY_CASE["mbridge2511-llama3.1-405b-h100"], "llama3.1-405b")
    assert (cp["cp"], cp["dp"], cp["precision"], cp["grad_reduce_dtype"]) == (2, 8, "fp8", "bf16")
    assert cp["stages"].startswith("0-1,2-3,") and cp["stages"].endswith(",126-127")
    assert model_argument(BY_CASE["nemo2407-llama2-7b"], tmp_path) == "llama2-7b"
    nemotron = BY_CASE["nemo2407-nemotron-8b"]
    assert isinstance(nemotron.model, ConfigModel)
    written = json.loads(Path(model_argument(nemotron, tmp_path)).read_text())
    assert written["model_type"] == "nemotron" and written["hidden_act"] == "relu2"
    with pytest.raises(ValueError, match="GPT-style"):
        BY_CASE["nemo2407-llama2-7b"].gpt()


def test_moe_plan_fields_reach_evaluate() -> None:
    """The MoE rows' ep_comm_overlap and recompute_modules reach ``api.evaluate``; a row that
    gives neither leaves the API's defaults."""
    overlap = evaluate_kwargs(BY_CASE["modelzoo-qwen3-235b-a22b-deepep-ep32-a2a-overlap-h100"], "m")
    assert overlap["ep_comm_overlap"] is True and overlap["recompute_modules"] == ("layernorm", "moe_act")
    plain = evaluate_kwargs(BY_CASE["mbridge2604-qwen3-30b-a3b-h100"], "m")
    assert "ep_comm_overlap" not in plain and "recompute_modules" not in plain and "grad_sync" not in plain
    assert BY_CASE["mbridge2604-qwen3-30b-a3b-h100"].moe and not BY_CASE["nemo2407-llama2-7b"].moe


@pytest.mark.parametrize(("change", "message"), [
    ({"plan": {"cp": 3}}, "not whole"),
    ({"plan": {"recompute_modules": []}}, "recompute_modules must be a list"),
    ({"plan": {"ep_comm_overlap": "yes"}}, "ep_comm_overlap must be true or false"),
    ({"plan": {"precision": "fp4"}}, "precision"),
    ({"plan": {"tp": 0}}, "tp must be"),
    ({"plan": {"ep": 3}}, "ep etp"),
    ({"published": {"value": 100.0, "unit": "tflop_per_gpu", "flop_formula": "narayanan_eq3"}}, "GPT-style"),
    ({"published": {"value": 100.0, "unit": "tflop_per_gpu"}}, "needs a published.flop_formula"),
    ({"excluded_reason": " "}, "say why"),
    ({"plan": {"cpu": 2}}, "cpu"),
])
def test_malformed_new_format_runs_are_refused(tmp_path: Path, change: dict, message: str) -> None:
    entry = {"case": "x", "source": "s", "hardware": "h100-80gb",
             "model": {"preset": "llama2-7b", "seq_len": 4096},
             "plan": {"gpus": 8, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 8,
                      "recompute": "none", "schedule": "1f1b", "chunks": 1, "sp": False,
                      "zero_stage": 1, "dp_overlap": True},
             "published": {"value": 1000.0, "unit": "tokens_per_s_per_gpu"}}
    path = tmp_path / "runs.yaml"
    path.write_text(json.dumps({"runs": [entry]}))
    assert load_runs(path)[0].plan.dp == 8
    for key, value in change.items():
        entry[key] = {**entry[key], **value} if isinstance(value, dict) and key != "published" else value
    path.write_text(json.dumps({"runs": [entry]}))
    with pytest.raises(ValueError, match=message):
        load_runs(path)
