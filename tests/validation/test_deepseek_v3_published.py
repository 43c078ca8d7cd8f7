"""`evaluate` of DeepSeek-V3's published training plan (issue #26, "Done when").

Source: DeepSeek-AI, "DeepSeek-V3 Technical Report" (arXiv:2412.19437):

* the plan (sec. 3.2 and 3.2.1): 2,048 H800 GPUs, 16-way pipeline parallelism with DualPipe,
  64-way expert parallelism over 8 nodes, ZeRO-1 data parallelism, no tensor parallelism; FP8
  mixed precision (sec. 3.3); sequence 4,096 and a batch of 15,360 sequences after the batch
  ramp (sec. 4.2); recomputation of every RMSNorm and of the MLA up-projections (sec. 3.2.3),
  and the SwiGLU of the MoE experts cached in FP8 and recomputed in the backward pass (sec.
  3.3.3): Megatron-Core's recompute modules ``layernorm, mla_up_proj, moe_act``; AdamW's
  moments kept in BF16 (sec. 3.3.3, "low-precision optimizer states"): ``adam-bf16``; the SwiGLU
  inputs cached in FP8 (sec. 3.3.3): ``swiglu_fp8_input``;
* the throughput (Table 1): pre-training on 14.8 T tokens took 2,664 K H800 GPU-hours, i.e.
  14.8e12 / (2.664e6 x 3,600 s) = 1,543 tokens/s per GPU, 3.16 M tokens/s on 2,048 GPUs. The
  GPU-hours are the whole pre-training's: the batch ramp from 3,072 sequences over the first
  469 B tokens (smaller batches, sec. 4.2), evaluation and checkpoints, and whatever was lost
  to failures (the report's "remarkably stable" run had no irrecoverable loss spike or
  rollback); so the steady-state throughput was at least this.

archplace's plan: ``--tp 1 --pp 16 --dp 128 --ep 64 --micro-batch 1 --zero-stage 1 --dp-overlap
--precision fp8 --schedule dualpipe --ep-comm-overlap --recompute selective --recompute-modules
layernorm,mla_up_proj,moe_act --optimizer adam-bf16 --swiglu-fp8-input`` on the h800-80gb preset
(m = 15,360 / 128 = 120 micro-batches, even and >= 2 pp), Megatron-LM's even split of the 61
blocks.
"""

from __future__ import annotations

import pytest
from tests.helpers.roomy import roomy_preset

from archplace.base.errors import InfeasibleError
from archplace.front import api
from archplace.placement.result import PlanResult

GPUS = 2048
PUBLISHED_TOKENS_PER_S = 14.8e12 / (2.664e6 * 3600) * GPUS
TOLERANCE = 0.15  # issue #26: within 15 % of the published GPU-hours' throughput
PLAN = {"model": "deepseek-v3", "devices": GPUS, "global_batch": 15_360, "seq_len": 4096, "tp": 1, "pp": 16,
        "dp": 128, "ep": 64, "micro_batch": 1, "zero_stage": 1, "dp_overlap": True, "precision": "fp8",
        "schedule": "dualpipe", "ep_comm_overlap": True, "recompute": "selective",
        "recompute_modules": ("layernorm", "mla_up_proj", "moe_act"), "optimizer": "adam-bf16",
        "swiglu_fp8_input": True}


@pytest.fixture(scope="module")
def roomy_h800(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The h800-80gb preset with 1 TiB of HBM: the plan's time is reported although archplace's
    memory model puts it over 80 GiB (the capacity only gates the memory check)."""
    return roomy_preset(tmp_path_factory.mktemp("hardware"), "h800-80gb")


@pytest.fixture(scope="module")
def as_run(roomy_h800: str) -> PlanResult:
    return api.evaluate(**PLAN, hardware=roomy_h800)


@pytest.mark.slow
def test_throughput_within_15_percent_of_the_gpu_hours(as_run: PlanResult) -> None:
    """3.09 M tokens/s predicted against the 3.16 M the GPU-hours imply (-2 %); without DualPipe
    and the all-to-all overlap the same plan runs at 1.86 M (1F1B, everything exposed)."""
    error = as_run.tokens_per_s / PUBLISHED_TOKENS_PER_S - 1
    print(f"\ndeepseek-v3 as run: {as_run.iteration_time_s:.2f} s, {as_run.tokens_per_s / 1e6:.2f} M "
          f"tokens/s (published {PUBLISHED_TOKENS_PER_S / 1e6:.2f} M): {error:+.1%}")
    assert abs(error) <= TOLERANCE
    assert as_run.comm_s["ep"]["hidden"] > 0.5 * as_run.comm_s["ep"]["total"]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=InfeasibleError, reason=(
    "archplace's memory model puts the plan as run at 110.0 GiB a device (DualPipe's two stages' "
    "state and PP + 1 micro-batches of activations; 85.8 GiB with 1F1B), over the H800's 80 GiB. "
    "With the routing weights applied to the experts' activation (expert_weighting activation, "
    "Megatron-Core's order; the report does not say DeepSeek's) it needs 83.0 GiB on the device "
    "that holds the embedding and the head and 80.3 GiB on the middle ones (61.1 GiB with 1F1B); "
    "a bf16 router input and what else DeepSeek's framework keeps smaller are not modelled"))
def test_the_plan_as_run_fits_in_80_gib() -> None:
    api.evaluate(**PLAN, hardware="h800-80gb")
