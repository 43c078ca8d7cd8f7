"""Where a mixture-of-experts layer applies the routing weights (``expert_weighting``,
archplace.workload.experts_op): Hugging Face's order keeps the experts' outputs for the backward
pass, Megatron-Core's (the weight scaling the gated activation) does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.small_moe import DEEPSEEK, MIXTRAL, QWEN3

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.front import api
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.options import ExpertWeighting
from archplace.workload.zoo import load_model

SEQ = 64


def _layers(config: dict[str, Any], tmp_path: Path, weighting: str) -> list[Any]:
    path = tmp_path / f"{config['model_type']}.json"
    path.write_text(json.dumps(config))
    return list(extract_chain(load_model(str(path)), ExtractOptions.of(
        micro_batch=1, seq_len=SEQ, expert_weighting=weighting)).layers)


@pytest.mark.parametrize("config", [QWEN3, MIXTRAL, DEEPSEEK], ids=lambda c: c["model_type"])
def test_the_activation_order_does_not_keep_the_expert_outputs(config: dict[str, Any],
                                                              tmp_path: Path) -> None:
    """Per MoE block, the ``[T k, h]`` bf16 outputs (T = 64 tokens, top k, h = 128) are not
    kept; what else differs is the routing weights' copies, at most T k fp32 values. Dense
    blocks, the embedding and the head are the same; the matmuls are the same (the scaling is
    element-wise)."""
    output = _layers(config, tmp_path, "output")
    activation = _layers(config, tmp_path, "activation")
    routed = SEQ * config["num_experts_per_tok"]
    outputs_bytes = routed * config["hidden_size"] * 2
    moe_blocks = 0
    for a, b in zip(output, activation, strict=True):
        saved = a.activation_bytes - b.activation_bytes
        if a.experts:
            moe_blocks += 1
            assert abs(saved - outputs_bytes) <= routed * 4, (a.name, saved, outputs_bytes)
        else:
            assert saved == 0, a.name
        assert abs(a.fwd_flop - b.fwd_flop) <= 0.01 * a.fwd_flop
    assert moe_blocks >= 1


def test_the_option_is_checked_and_reaches_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "qwen3.json"
    path.write_text(json.dumps(QWEN3))
    with pytest.raises(ConfigError, match="expert_weighting"):
        ExtractOptions.of(micro_batch=1, seq_len=SEQ, expert_weighting="input")
    assert ExtractOptions.of(micro_batch=1, seq_len=SEQ).expert_weighting is ExpertWeighting.OUTPUT
    summary = {w: api.graph(str(path), seq_len=SEQ, expert_weighting=w) for w in ("output", "activation")}
    assert summary["activation"]["expert_weighting"] == "activation"
    kept = {w: sum(layer["activation_bytes"] for layer in s["layers"]) for w, s in summary.items()}
    assert kept["activation"] < kept["output"]
    with pytest.raises(SystemExit) as exc:
        main(["graph", "--model", str(path), "--seq-len", str(SEQ), "--expert-weighting", "activation",
              "--json"])
    assert exc.value.code in (0, None)
    assert json.loads(capsys.readouterr().out)["expert_weighting"] == "activation"
    with pytest.raises(SystemExit) as exc:
        main(["graph", "--model", str(path), "--expert-weighting", "inputs"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_evaluate_of_a_plan_keeps_less_with_megatrons_order(tmp_path: Path) -> None:
    path = tmp_path / "qwen3.json"
    path.write_text(json.dumps(QWEN3))
    run = {"model": str(path), "hardware": "h100-80gb", "devices": 8, "global_batch": 16, "seq_len": 256,
           "tp": 1, "pp": 1, "dp": 8, "ep": 4, "micro_batch": 1}
    hf, megatron = (api.evaluate(**run, expert_weighting=w) for w in ("output", "activation"))
    assert megatron.memory[0].activations < hf.memory[0].activations
    # the scaling moves from the outputs to the activation (one more small element-wise cast on
    # this tiny model, where every kernel costs its floor): the step barely moves
    assert megatron.iteration_time_s == pytest.approx(hf.iteration_time_s, rel=0.1)
