"""`evaluate` against published Megatron-LM measurements (Narayanan et al., SC 2021, Table 1).

Each run is evaluated as trained: its TP and PP sizes, DP over the rest of the GPUs, full
recomputation, the micro-batch size, pipeline schedule (1F1B, or interleaved for 76.1B) and
gradient-reduction overlap of the paper's artifact script (see ``MegatronRun``), Megatron's
even split of the blocks, on the `a100-80gb` preset. The error of the achieved teraFLOP/s per
GPU is printed (pytest -s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace import api
from archplace.placement.megatron import TABLE_1, MegatronRun

TOLERANCE = 0.15
# Rows over-predicted beyond the tolerance, kept visible as strict expected failures (a fix makes
# them fail loudly). The error grows with the hidden size: every GEMM runs at the full 312 TFLOP/s
# of the 16x16-array template (no kernel-efficiency loss), while the traced HF GPT-2 graph runs
# the element-wise ops unfused (Megatron-LM fuses them, paper section 4.2). The two errors cancel
# for small hidden sizes, where element-wise traffic weighs most, and not for large ones.
OVER_PREDICTED = {"18.4B": 0.18, "76.1B": 0.20}
# Traced as HF's eager code runs (explicit attention, unfused element-wise ops), as when the
# figures above were measured: with FlashAttention and fused kernels (the defaults) and GEMMs
# still at the template's peak, every row is over-predicted by 38-90 % until kernel
# efficiencies (issue #12) land; then these runs should switch to the defaults.
AS_TRACED = {"attention": "eager", "kernels": "unfused"}


def predicted_tflop_per_gpu(run: MegatronRun, tmp_path: Path) -> float:
    path = tmp_path / f"gpt-{run.name}" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(run.hf_config()))
    result = api.evaluate(str(path), "a100-80gb", devices=run.gpus, global_batch=run.global_batch,
                          tp=run.tp, pp=run.pp, dp=run.dp, micro_batch=run.micro_batch, recompute="full",
                          schedule=run.schedule, chunks=run.chunks, dp_overlap=run.dp_overlap,
                          **AS_TRACED)
    return run.tflop_per_gpu_of(result.iteration_time_s)


@pytest.mark.parametrize("run", [
    pytest.param(run, id=run.name, marks=pytest.mark.xfail(
        strict=True, reason=f"over-predicted by about {OVER_PREDICTED[run.name]:.0%}"))
    if run.name in OVER_PREDICTED else pytest.param(run, id=run.name)
    for run in TABLE_1
])
def test_evaluate_matches_megatron(run: MegatronRun, tmp_path: Path) -> None:
    ours = predicted_tflop_per_gpu(run, tmp_path)
    error = (ours - run.tflop_per_gpu) / run.tflop_per_gpu
    print(f"Megatron-LM {run.name} (t={run.tp}, p={run.pp}, d={run.dp}, {run.gpus} GPUs): "
          f"ours {ours:.1f} vs published {run.tflop_per_gpu:.0f} TFLOP/s per GPU, error {error:+.1%}")
    assert abs(error) < TOLERANCE


def test_paper_flop_formula_matches_traced_graphs(tmp_path: Path) -> None:
    """Eq. (3) counts forward + recomputed forward + backward (2x) = 4 forward passes of the
    matmuls; the traced graphs of the 1.7B model must give the same count within 2 %."""
    from archplace.workload.extract import ExtractOptions, extract_chain
    from archplace.workload.zoo import load_model

    run = TABLE_1[0]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(run.hf_config()))
    # eager: the attention GEMMs are matmul operators, counted in full as eq. (3) does
    chain = extract_chain(load_model(str(path)), ExtractOptions(1, run.seq_len, **AS_TRACED))
    fwd_matmul = sum(layer.fwd.matmul_flop() for layer in chain.layers)
    assert run.flop_per_iteration() == pytest.approx(4 * fwd_matmul * run.global_batch, rel=0.02)
