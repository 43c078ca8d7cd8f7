"""MFU of a mixture-of-experts model counts model FLOP only (issue #23): the padded rows of a
capacity factor above 1 and the busiest rank's excess rows under load imbalance run (they lengthen
the iteration) but are hardware FLOP, counted by HFU. So at capacity 2.0 the model FLOP are those
of capacity 1.0 and MFU falls exactly as the iteration lengthens: MFU_2 / MFU_1 = t_1 / t_2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import archplace
from archplace.cost.model import RooflineCostModel, array_flop
from archplace.hw.presets import load_accelerator
from archplace.placement.costs import layer_costs
from archplace.placement.plan import LayerCost, Recompute
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import LoadedModel

# A small Mixtral-architecture model: 2 layers, hidden 256, 4 experts of width 512, top-2.
MOE: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128, "vocab_size": 1024}
PLAN: dict[str, Any] = dict(devices=8, global_batch=16, seq_len=64, tp=1, pp=1, dp=8, micro_batch=2)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("moe") / "config.json"
    path.write_text(json.dumps(MOE))
    return str(path)


@pytest.mark.parametrize(("ep", "options"), [
    (4, {"capacity_factor": 2.0}),
    (1, {"capacity_factor": 2.0}),  # one rank holds every expert, still padded to capacity
    (4, {"expert_load_imbalance": 1.5}),
])
def test_padding_leaves_the_model_flop_and_lowers_mfu_with_the_time(moe: str, ep: int,
                                                                    options: dict[str, float],
                                                                    tmp_path: Path) -> None:
    # a100-80gb without its measured kernel tables and 5.2 us kernel floor: every kernel of this
    # toy model (hidden 256) sits at the floor there, so padding would not lengthen it
    preset = Path(load_accelerator.__code__.co_filename).parent / "presets" / "a100-80gb.yaml"
    lines = preset.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  kernel_tables:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("  attention_fwd:"))
    hardware = tmp_path / "a100-fractions.yaml"
    hardware.write_text("\n".join(lines[:start] + lines[end:]) + "\n", encoding="utf-8")
    base = archplace.evaluate(moe, str(hardware), **PLAN, ep=ep)
    padded = archplace.evaluate(moe, str(hardware), **PLAN, ep=ep, **options)
    t1, t2 = base.iteration_time_s, padded.iteration_time_s
    assert t2 > t1 * 1.01
    assert padded.mfu / base.mfu == pytest.approx(t1 / t2, rel=1e-12)
    assert padded.model_flop_per_s_per_device / base.model_flop_per_s_per_device == pytest.approx(
        t1 / t2, rel=1e-12)
    # model FLOP per iteration are unchanged, hardware FLOP grow by the padded rows
    assert padded.mfu * t2 == pytest.approx(base.mfu * t1, rel=1e-12)
    assert base.hfu == pytest.approx(base.mfu, rel=1e-12)
    assert padded.hfu > padded.mfu
    assert padded.hfu * t2 > base.hfu * t1 * 1.01


def test_hfu_counts_exactly_the_padded_rows_and_full_recompute_runs_them_again() -> None:
    """At ep = 1 and capacity 2.0 the experts' grouped GEMMs run twice the rows: the padding is
    the routed experts' matmul FLOP once more, forward and backward."""
    spec = LoadedModel("small-moe", json.dumps(MOE, sort_keys=True), 64)
    acc = load_accelerator("a100-80gb")
    def costs(capacity: float) -> list[LayerCost]:
        chain = extract_chain(spec, ExtractOptions.of(micro_batch=2, seq_len=64, capacity_factor=capacity))
        return layer_costs(chain, acc, RooflineCostModel())

    even, padded = costs(1.0), costs(2.0)
    b, s, h, inner, top_k = 2, 64, 256, 512, 2
    routed_fwd = 2 * (b * s * top_k) * 3 * h * inner  # gate, up and down GEMMs of the routed rows
    for one, two in zip(even, padded, strict=True):
        assert (two.fwd_flop, two.bwd_flop) == pytest.approx((one.fwd_flop, one.bwd_flop), rel=1e-12)
        assert (one.padding_fwd_flop, one.padding_bwd_flop) == (0.0, 0.0)
        if one.name.startswith("block"):
            assert two.padding_fwd_flop == routed_fwd and two.padding_bwd_flop == 2 * routed_fwd
            assert two.fwd_s > one.fwd_s
            assert two.recompute_flop(Recompute.FULL) == two.fwd_flop + routed_fwd
        else:
            assert (two.padding_fwd_flop, two.padding_bwd_flop) == (0.0, 0.0)


def test_a_dense_model_is_unchanged(tmp_path: Path) -> None:
    """A dense model has no padding: its layer FLOP are its matmuls' and HFU equals MFU without
    recomputation."""
    spec = LoadedModel("gpt", json.dumps(GPT, sort_keys=True), 64)
    chain = extract_chain(spec, ExtractOptions.of(micro_batch=2, seq_len=64))
    for layer, cost in zip(chain.layers, layer_costs(chain, load_accelerator("a100-80gb"),
                                                     RooflineCostModel()), strict=True):
        assert (layer.padding_fwd_flop, layer.padding_bwd_flop) == (0.0, 0.0)
        assert (cost.fwd_flop, cost.bwd_flop) == (array_flop(layer.fwd.ops), array_flop(layer.bwd.ops))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT))
    result = archplace.evaluate(str(path), "a100-80gb", **PLAN)
    assert result.hfu == result.mfu
