"""`evaluate` of a mixture-of-experts plan against a published Megatron-Core measurement (issue 14).

Source: NVIDIA's Megatron-MoE-ModelZoo, ``best_practice/Qwen3/readme.md``, table "Performance
Results" (256 H100 SXM GPUs, NVLink 4, InfiniBand 8 x 50 GB/s, BF16, sequence 4,096, global
batch 2,048), row "235B | A2A": Qwen3-235B-A22B with the plain all-to-all token dispatcher,
TP 2, CP 1, EP 8, PP 32, EDP 1, ETP 1, VPP 3, DP 4, MBS 1, recompute "norm, act", step time
24.2 s, 200 TFLOP/s per GPU. The run's flags (``model_configs/benchmarking/Qwen3-235B-A22B.yaml``
of that repository): distributed optimizer (ZeRO-1), overlapped gradient reduce and parameter
gather, sequence parallelism, FlashAttention, Transformer Engine, grouped GEMM, and the embedding
and the loss each counted as one layer of the pipeline split (so 94 blocks + 2 = 96 = PP 32 x
VPP 3 virtual stages of one layer each). The solution's launch line
(``examples/qwen3/run_235b.sh`` @ 8017e1120f5d35ee57cb68507ec993f7cd9bdd8f, "Intra-node EP +
large PP solution") passes ``--moe-router-force-load-balancing``: the routing was forced to
balance, which is archplace's balanced cost (``expert_load_imbalance`` 1.0). Megatron-LM
overlaps the interleaved schedule's pipeline sends unless told not to
(``--no-overlap-p2p-communication`` in ``megatron/training/arguments.py``), so the plan has
``pp_comm_overlap``.
The DeepEP rows of the table use another dispatcher (fused dispatch/combine kernels, and in one
row the all-to-all overlapped with another micro-batch's compute) and other plans; archplace
does not model the dispatcher implementation, so only the A2A row is evaluated.

archplace's plan: tp 2 with SP, ep 8, etp 1, pp 32, dp 4, micro-batch 1, interleaved
with 3 chunks over one-layer stages (embedding, 94 blocks, head), ZeRO-1 with overlapped
gradient reduction, overlapped pipeline sends, Megatron-Core's rank order (tp-cp-ep-dp-pp).
Recompute: the ModelZoo's "norm, act" is Megatron-Core's ``--recompute-granularity selective
--recompute-modules layernorm moe_act``: it recomputes the RMSNorm outputs and the experts'
SwiGLU and frees their activations; archplace evaluates it as ``recompute selective`` with
``recompute_modules (layernorm, moe_act)`` (:mod:`archplace.workload.recompute_regions`).
Megatron-Core's grouped experts scale the activation by the routing weight, so the plan has
``expert_weighting activation`` (:class:`archplace.workload.options.ExpertWeighting`). It
fits in 80 GiB (60.9 GiB on the fullest device; ``none`` 74.6 GiB, 90.2 GiB in Hugging Face's
order of the weights); ``full`` fits too and recomputes every layer's forward pass.

The published TFLOP/s are Megatron-LM's model FLOP (``num_floating_point_operations``: 6 x the
parameters of the linear layers a token uses, the attention core with the causal half only,
the logits; no router, norms or recomputation) over the step time;
:func:`megatron_flop_per_iteration` reproduces them from the table's step times.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests.helpers.roomy import roomy_preset

from archplace.base.errors import InfeasibleError
from archplace.front import api
from archplace.placement.result import PlanResult

GPUS = 256
GLOBAL_BATCH = 2048
SEQ_LEN = 4096
PUBLISHED_STEP_S = 24.2
PUBLISHED_TFLOP_PER_GPU = 200.0
TOLERANCE = 0.15
"""Issue #12's per-run bound (max |error| <= 15 %) on the predicted throughput."""

# Qwen3-235B-A22B (the qwen3-235b-a22b preset; the run's --num-layers ... flags agree).
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 94, 4096, 64, 4, 128
EXPERT_FFN, TOP_K, VOCAB = 1536, 8, 151_936  # vocabulary padded to a multiple of 1187 x tp: unchanged


def megatron_flop_per_iteration(global_batch: int = GLOBAL_BATCH, seq_len: int = SEQ_LEN) -> float:
    """Model FLOP of one iteration as Megatron-LM counts them for this model (its
    ``num_floating_point_operations``, transformer path): per token 3 (forward + backward) x 2
    (FLOP per multiply-add) x [per layer: the q/k/v and output projections, the attention core
    over the causal half (q_proj x s / 2 for QK^T and again for PV), the top-k experts' three
    SwiGLU GEMMs; plus the logits]."""
    q_proj = HEADS * HEAD_DIM
    kv_proj = 2 * KV_HEADS * HEAD_DIM
    attention = HIDDEN * (q_proj + kv_proj) + q_proj * seq_len + q_proj * HIDDEN
    experts = 3 * HIDDEN * EXPERT_FFN * TOP_K
    per_token = 6.0 * (LAYERS * (attention + experts) + HIDDEN * VOCAB)
    return per_token * global_batch * seq_len


NORM_ACT = ("layernorm", "moe_act")
"""The run's recompute modules ("norm, act")."""


def plan_kwargs(hardware: str, recompute: str) -> dict[str, Any]:
    """``api.evaluate`` arguments of the A2A row's plan on ``hardware`` with ``recompute``
    (``selective``: the run's "norm, act" modules)."""
    one_layer_stages = ",".join(f"{i}-{i}" for i in range(LAYERS + 2))
    return {"model": "qwen3-235b-a22b", "hardware": hardware, "devices": GPUS,
            "global_batch": GLOBAL_BATCH, "seq_len": SEQ_LEN, "tp": 2, "sp": True, "ep": 8, "etp": 1,
            "pp": 32, "dp": 4, "micro_batch": 1, "schedule": "interleaved", "chunks": 3,
            "stages": one_layer_stages, "zero_stage": 1, "dp_overlap": True,
            "rank_order": "tp-cp-ep-dp-pp", "recompute": recompute, "pp_comm_overlap": True,
            "recompute_modules": NORM_ACT if recompute == "selective" else ("core_attn",),
            "expert_weighting": "activation"}


def error_of(iteration_time_s: float) -> float:
    """Relative error of the predicted throughput (> 0: predicted too fast)."""
    return PUBLISHED_STEP_S / iteration_time_s - 1.0


def tflop_per_gpu(iteration_time_s: float) -> float:
    """Per-GPU TFLOP/s by Megatron-LM's count at ``iteration_time_s``."""
    return megatron_flop_per_iteration() / (iteration_time_s * GPUS) / 1e12


@pytest.fixture(scope="module")
def roomy_h100(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The h100-80gb preset with 96 GiB of HBM, so that a plan's time is reported when it needs
    more than 80 GiB (the capacity only gates the memory check; see
    ``test_hbm_capacity_does_not_change_the_time``)."""
    return roomy_preset(tmp_path_factory.mktemp("hardware"), "h100-80gb", "96 GiB")


@pytest.fixture(scope="module")
def full() -> PlanResult:
    return api.evaluate(**plan_kwargs("h100-80gb", "full"))


@pytest.fixture(scope="module")
def no_recompute(roomy_h100: str) -> PlanResult:
    return api.evaluate(**plan_kwargs(roomy_h100, "none"))


def _line(label: str, result: PlanResult) -> str:
    t = result.iteration_time_s
    return (f"qwen3-235b-a22b A2A {label:<28} predicted {t:.2f} s, {tflop_per_gpu(t):.0f} TFLOP/s/GPU "
            f"(published {PUBLISHED_STEP_S} s, {PUBLISHED_TFLOP_PER_GPU:.0f}): error {error_of(t):+.1%}")


@pytest.mark.parametrize(("step_s", "tflop"), [(19.7, 245), (17.6, 276), (24.2, 200), (29.0, 167)])
def test_megatron_flop_count_reproduces_the_published_tflops(step_s: float, tflop: float) -> None:
    """Every Qwen3-235B row of the table (GBS 2048, seq 4096): FLOP / (256 x step time) is the
    published per-GPU figure within 1 % (the figures are rounded; 19.7 s gives 246 for 245)."""
    assert megatron_flop_per_iteration() / (GPUS * step_s) / 1e12 == pytest.approx(tflop, rel=0.01)


@pytest.mark.slow
def test_megatron_count_is_six_times_active_linear_params_plus_causal_attention() -> None:
    """Cross-check with the preset's traced active parameters: Megatron's count is 6 x (active
    parameters less the input embedding, router and norms, which it leaves out) per token plus
    the causal attention core."""
    from archplace.workload.extract import ExtractOptions, extract_chain
    from archplace.workload.zoo import load_model

    chain = extract_chain(load_model("qwen3-235b-a22b"), ExtractOptions.of(micro_batch=1, seq_len=64))
    embedding = VOCAB * HIDDEN
    router_and_norms = LAYERS * (HIDDEN * 128 + 2 * HIDDEN + 2 * HEAD_DIM) + HIDDEN
    linear = chain.active_params - embedding - router_and_norms
    tokens = GLOBAL_BATCH * SEQ_LEN
    causal_core = 6.0 * LAYERS * HEADS * HEAD_DIM * SEQ_LEN * tokens
    assert megatron_flop_per_iteration() == pytest.approx(6.0 * linear * tokens + causal_core, rel=1e-9)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "archplace's MoE blocks run too fast here: with each interleaved device paced by the mean of "
    "its one-layer chunks (not its slowest, the LM head's, in every slot) even full recompute "
    "(23.32 s) is below the published 24.2 s, and no recompute (16.64 s) is 45 % too fast. The "
    "routing was forced to balance, as costed; the alltoall dispatcher's NCCL all-to-all and token "
    "permutation run slower than priced"))
def test_published_step_is_bracketed_by_no_and_full_recompute(full: PlanResult,
                                                              no_recompute: PlanResult) -> None:
    """"norm, act" recomputes more than ``none`` and less than ``full``, so the measured step
    lies between archplace's two predictions."""
    print("\n" + _line("recompute full (80 GiB)", full))
    print(_line("recompute none (96 GiB HBM)", no_recompute))
    assert no_recompute.iteration_time_s < PUBLISHED_STEP_S < full.iteration_time_s


@pytest.mark.slow
def test_full_recompute_plan_within_tolerance(full: PlanResult) -> None:
    """The closest plan archplace can run on 80 GiB (full recompute) within issue #12's 15 %:
    +3.8 % (23.32 s against 24.2 s) since the loss runs as Megatron-LM's unfused vocab-parallel
    cross-entropy, the ModelZoo configuration's (archplace.workload.loss_traffic: 52 bytes a logit
    of a 151,936-token vocabulary, its forward rerun by full recompute); +23.2 % (19.65 s) before,
    at the measured Hopper clocks; +8.9 % (22.22 s) at NVML's 1.575 GHz (+1.3 % before the plan
    took Megatron-LM's default overlapped pipeline sends, -19.9 % before interleaved devices were
    paced by the mean of their chunks).
    Two errors of opposite sign meet here: full recompute redoes every layer's forward pass where
    "norm, act" redoes the norms and SwiGLU only, and the MoE blocks run too fast (see the
    bracketing test)."""
    assert abs(error_of(full.iteration_time_s)) <= TOLERANCE, _line("recompute full", full)


@pytest.fixture(scope="module")
def as_run() -> PlanResult:
    """The plan as run: "norm, act" recompute on the 80 GiB H100."""
    return api.evaluate(**plan_kwargs("h100-80gb", "selective"))


@pytest.mark.slow
def test_plan_as_run_fits_with_its_recompute_modules(as_run: PlanResult) -> None:
    """Issue #26: the plan as run fits in 80 GiB with "norm, act" (60.9 GiB), keeps less than
    without recomputation (74.6 GiB), and recomputes far less than full recompute does. With
    Hugging Face's order of the routing weights (the experts' outputs kept for the backward
    pass) the plan without recomputation would need 90.2 GiB and not fit."""
    none = api.evaluate(**plan_kwargs("h100-80gb", "none"))
    peak = {name: max(stage.total for stage in result.memory) for name, result in (("as run", as_run),
                                                                                   ("none", none))}
    assert peak["as run"] < peak["none"] <= 80 * 2**30
    with pytest.raises(InfeasibleError, match=r"needs 9\d\.\d GiB > 80\.0 GiB"):
        api.evaluate(**{**plan_kwargs("h100-80gb", "none"), "expert_weighting": "output"})
    full = api.evaluate(**plan_kwargs("h100-80gb", "full"))
    assert 0 < as_run.breakdown_s["recompute"] < 0.1 * full.breakdown_s["recompute"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "predicted 45 % too fast with the run's own recompute (16.75 s against 24.2 s), as without "
    "recompute (16.63 s): the routing was forced to balance, as costed; the alltoall dispatcher's "
    "NCCL all-to-all and token permutation run slower than priced (the Megatron-Bridge Qwen3-235B "
    "rows of test_moe_validation.py are too fast the same way)"))
def test_plan_as_run_within_tolerance(as_run: PlanResult) -> None:
    assert abs(error_of(as_run.iteration_time_s)) <= TOLERANCE, _line('"norm, act"', as_run)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "predicted 46 % too fast without recompute (16.63 s against 24.2 s): the alltoall dispatcher's "
    "NCCL all-to-all and token permutation run slower than priced; +5.6 % before interleaved "
    "devices were paced by the mean of their chunks, when every chunk slot was charged at the "
    "LM-head chunk's time"))
def test_no_recompute_time_within_tolerance(no_recompute: PlanResult) -> None:
    """The recompute closest in work to "norm, act" (none, on a roomier H100)."""
    assert abs(error_of(no_recompute.iteration_time_s)) <= TOLERANCE, _line("recompute none", no_recompute)


@pytest.mark.slow
def test_hbm_capacity_does_not_change_the_time(full: PlanResult, roomy_h100: str) -> None:
    roomy = api.evaluate(**plan_kwargs(roomy_h100, "full"))
    assert roomy.iteration_time_s == full.iteration_time_s
    assert roomy.breakdown_s == full.breakdown_s


@pytest.mark.slow
def test_the_prediction_follows_the_expert_load_imbalance(full: PlanResult) -> None:
    """Issue #26: an MoE validation run must exercise the MoE costs. The busiest expert-parallel
    rank receiving 1.5x the mean tokens (dropless routing) makes its expert GEMMs and all-to-all
    1.5x larger, so the step and its expert all-to-all share grow (were the iteration paced by a
    chunk without experts, as the LM head's once was, neither would move)."""
    skewed = api.evaluate(**plan_kwargs("h100-80gb", "full"), expert_load_imbalance=1.5)
    assert full.breakdown_s["ep_comm"] > 0.5  # seconds of exposed dispatch and combine per step
    assert skewed.breakdown_s["ep_comm"] == pytest.approx(1.5 * full.breakdown_s["ep_comm"], rel=0.05)
    assert skewed.iteration_time_s > 1.05 * full.iteration_time_s
