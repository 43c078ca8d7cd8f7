"""Mixture-of-experts blocks at tp > 1 (sequence parallelism) and expert tensor parallelism
(archplace.workload.expert_tensor): FLOP, parameters, rows and collective bytes per rank."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from archplace.base.errors import ConfigError
from archplace.cost.collective import cluster_collective_time_s
from archplace.cost.model import RooflineCostModel
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.schemas import load_schema
from archplace.workload.expert_parallel import ALL_TO_ALL
from archplace.workload.expert_tensor import ETP_ALL_GATHER, ETP_REDUCE_SCATTER, check_etp, split_experts
from archplace.workload.extract import ExtractOptions, check_tp, derive_experts, extract_chain
from archplace.workload.graph import OpGraph, OpKind
from archplace.workload.layers import LayerChain
from archplace.workload.zoo import LoadedModel, load_model
from cli_helpers import run

# A small Mixtral-architecture model: hidden 256, 4 heads (4 KV heads, so tp 4 divides them),
# 4 experts of width 512, top-2.
MIXTRAL: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 512, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 1000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "tie_word_embeddings": False,
}
H, INNER, EXPERTS, TOP_K, B, S = 256, 512, 4, 2, 2, 32
ROUTED = B * S * TOP_K  # 128 token copies per micro-batch over the whole sequence
EXPERT = 3 * H * INNER  # gate, up, down weights of one expert
ATTENTION = 4 * H * H  # q, k, v, o (4 KV heads of 64)

# A small DeepSeek-V3-architecture model: MLA, 1 dense block then 1 MoE block (1 shared + 8 routed
# experts of width 64, top-2 in 1 of 2 groups).
DEEPSEEK: dict[str, Any] = {
    "model_type": "deepseek_v3", "num_hidden_layers": 2, "first_k_dense_replace": 1, "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_group": 2, "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": 1000, "max_position_embeddings": 1024,
    "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}


def mixtral() -> LoadedModel:
    return LoadedModel("small-mixtral", json.dumps(MIXTRAL, sort_keys=True), 256)


def deepseek() -> LoadedModel:
    return LoadedModel("small-deepseek", json.dumps(DEEPSEEK, sort_keys=True), 256)


def options(tp: int, **more: Any) -> ExtractOptions:
    return ExtractOptions.of(micro_batch=B, seq_len=S, tp=tp, sp=tp > 1, **more)


@pytest.fixture(scope="module")
def traced() -> dict[int, LayerChain]:
    """The traced (ep = etp = 1) Mixtral chains at tp 1, 2, 4."""
    return {tp: extract_chain(mixtral(), options(tp)) for tp in (1, 2, 4)}


def grouped_flop(graph: OpGraph) -> float:
    return sum(op.flop for op in graph.ops if "grouped_mm" in op.target)


def collectives(graph: OpGraph, target: str) -> list[Any]:
    return [op for op in graph.ops if op.kind is OpKind.COLLECTIVE and op.target == target]


@pytest.mark.parametrize("tp", [2, 4])
def test_moe_block_at_tp_splits_tokens_and_keeps_experts_whole(traced: dict[int, LayerChain],
                                                                tp: int) -> None:
    base, block = traced[1].layers[1], traced[tp].layers[1]
    # every operator of the block works on 1/tp: attention's heads, the MoE's tokens (Mixtral has
    # no shared expert and no add of a partial and a sequence-sharded tensor forward)
    assert block.fwd.flop == pytest.approx(base.fwd.flop / tp, rel=1e-12)
    assert grouped_flop(block.fwd) == 2 * ROUTED * EXPERT / tp
    assert grouped_flop(block.bwd) == 4 * ROUTED * EXPERT / tp
    router = [op for op in block.fwd.ops if op.kind is OpKind.MATMUL and op.n == EXPERTS]
    assert [(op.m, op.k) for op in router] == [(B * S // tp, H)]
    # parameters: attention split, norms, router and the routed experts whole (etp 1, ep 1)
    assert block.params == ATTENTION // tp + 2 * H + EXPERTS * H + EXPERTS * EXPERT
    assert block.expert_params == EXPERTS * EXPERT
    assert (block.routed_tokens, block.tokens_per_expert) == (ROUTED // tp, ROUTED // (tp * EXPERTS))
    # the experts need no TP collective at etp 1: the block has Megatron's SP collectives only
    assert block.fwd.collectives() == {"all_gather": 1, "reduce_scatter": 1}
    assert traced[tp].layers[2].fwd is block.fwd


def test_deepseek_moe_block_at_tp_shards_the_shared_expert_and_mla() -> None:
    chains = {tp: extract_chain(deepseek(), options(tp)) for tp in (1, 2)}
    (dense1, moe1), (dense2, moe2) = (chains[tp].layers[1:3] for tp in (1, 2))
    assert dense2.fwd.flop == pytest.approx(dense1.fwd.flop / 2, rel=1e-12)
    assert dense2.bwd.flop == pytest.approx(dense1.bwd.flop / 2, rel=1e-12)
    # the router's fp32 copy of its [8, 256] weight is per rank, everything else is halved
    assert moe2.fwd.flop == pytest.approx(moe1.fwd.flop / 2 + 8 * H / 2, rel=1e-12)
    routed = B * S * 2
    assert grouped_flop(moe2.fwd) == 2 * routed * 3 * H * 64 / 2
    shared = [op for op in moe2.fwd.ops if op.kind is OpKind.MATMUL and (op.k, op.n) in ((H, 32), (32, H))]
    assert [(op.m, op.k, op.n) for op in shared] == [(B * S, H, 32), (B * S, H, 32), (B * S, 32, H)]
    # parameters: routed experts and router whole, shared expert and attention's up projections split
    mla_down = H * 64 + H * (32 + 16)
    mla_split = 64 * 4 * 48 + 32 * 4 * (32 + 32) + 4 * 32 * H
    norms = 64 + 32 + 2 * H
    assert moe2.expert_params == moe1.expert_params == 8 * 3 * H * 64
    assert moe2.params == mla_down + mla_split // 2 + norms + 8 * H + 3 * H * 64 // 2 + 8 * 3 * H * 64
    assert moe1.params == mla_down + mla_split + norms + 8 * H + 3 * H * 64 + 8 * 3 * H * 64


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("ep", [1, 2])
@pytest.mark.parametrize("etp", [1, 2])
def test_expert_tp_rows_flop_params_and_collectives(traced: dict[int, LayerChain], tp: int, ep: int,
                                                    etp: int) -> None:
    chain = derive_experts(traced[tp], options(tp, ep=ep, etp=etp))
    base, block = traced[tp].layers[1], chain.layers[1]
    assert (chain.ep, chain.etp, block.ep, block.etp) == (ep, etp, ep, etp)
    received = ROUTED // tp  # rows this rank's experts receive before the expert-TP gather
    assert block.tokens_per_expert == etp * ep * received // EXPERTS
    # the FLOP per rank are those of the rank's tokens: etp x the rows, 1/etp of the width
    assert grouped_flop(block.fwd) == 2 * ROUTED * EXPERT / tp
    assert grouped_flop(block.bwd) == 4 * ROUTED * EXPERT / tp
    assert block.fwd.flop == base.fwd.flop and block.bwd.flop == base.bwd.flop
    for op in (op for op in block.fwd.ops if "grouped_mm" in op.target):
        assert op.batch == EXPERTS // ep and op.m == block.tokens_per_expert
        assert (op.k, op.n) in ((H, 2 * INNER // etp), (INNER // etp, H))
    # parameters: the routed experts split ep x etp ways
    assert block.expert_params == EXPERTS * EXPERT // (ep * etp)
    assert block.params == base.params - EXPERTS * EXPERT + EXPERTS * EXPERT // (ep * etp)
    assert block.active_params == base.active_params
    # collectives: all-to-all (ep > 1) outside, expert-TP all-gather / reduce-scatter inside
    buffer = etp * received * H * 2
    assert block.expert_tp_bytes == (buffer if etp > 1 else 0.0)
    assert block.all_to_all_bytes == (received * H * 2 if ep > 1 else 0.0)
    for graph in (block.fwd, block.bwd):
        ag, rs = collectives(graph, ETP_ALL_GATHER), collectives(graph, ETP_REDUCE_SCATTER)
        assert len(ag) == len(rs) == (1 if etp > 1 else 0)
        for op in ag + rs:
            assert (op.group, op.bytes_read, op.bytes_written) == (etp, buffer, buffer)
        if etp > 1:
            experts = [op.id for op in graph.ops if "grouped_mm" in op.target]
            # every grouped GEMM after the gather; the scatter after the one whose result leaves
            assert ag[0].id < min(experts) and rs[0].preds and set(rs[0].preds) <= set(experts)
            a2a = [op.id for op in collectives(graph, ALL_TO_ALL)]
            if a2a:  # all-to-all -> all-gather -> experts -> reduce-scatter -> all-to-all
                assert a2a[0] < ag[0].id and rs[0].id < a2a[1]
                assert ag[0].preds == (a2a[0],) and graph.ops[a2a[1]].preds == (rs[0].id,)
    assert [op.name for op in collectives(block.bwd, ETP_ALL_GATHER)] == \
        (["expert_tp_all_gather_grad"] if etp > 1 else [])
    # the gathered gate/up input is saved: (etp - 1) x the received rows more
    assert block.activation_bytes - traced[tp].layers[1].activation_bytes == \
        pytest.approx((etp - 1) * received * H * 2)
    # dense layers untouched
    assert chain.layers[0] == traced[tp].layers[0] and chain.layers[-1] == traced[tp].layers[-1]


def test_expert_flop_over_the_tp_ranks_equal_the_tp1_total(traced: dict[int, LayerChain]) -> None:
    total = grouped_flop(traced[1].layers[1].fwd) + grouped_flop(traced[1].layers[1].bwd)
    for tp in (2, 4):
        for ep, etp in ((1, 2), (2, 2), (2, 1)):
            block = derive_experts(traced[tp], options(tp, ep=ep, etp=etp)).layers[1]
            assert tp * (grouped_flop(block.fwd) + grouped_flop(block.bwd)) == total


def test_extract_chain_applies_etp(traced: dict[int, LayerChain]) -> None:
    chain = extract_chain(mixtral(), options(2, ep=2, etp=2))
    assert chain == derive_experts(traced[2], options(2, ep=2, etp=2))
    assert split_experts(traced[2], 1) is traced[2]
    with pytest.raises(ConfigError, match="already split"):
        split_experts(chain, 2)


def test_refusals() -> None:
    with pytest.raises(ConfigError, match="needs sp with tp > 1"):
        extract_chain(mixtral(), ExtractOptions.of(micro_batch=B, seq_len=S, tp=2, sp=False))
    with pytest.raises(ConfigError, match="does not divide the 4 attention heads"):
        extract_chain(mixtral(), options(8))
    with pytest.raises(ConfigError, match="width 3 does not divide the routed experts' FFN size 512"):
        extract_chain(mixtral(), options(1, etp=3))
    with pytest.raises(ConfigError, match="dense model"):
        check_etp(load_model("opt-350m"), 2)
    with pytest.raises(ConfigError, match="whole number"):
        check_etp(mixtral(), 0)
    check_etp(deepseek(), 64)
    with pytest.raises(ConfigError, match="FFN size 64"):
        check_etp(deepseek(), 128)
    with pytest.raises(ConfigError, match="shared experts' width 64"):
        check_tp(LoadedModel("wide-tp", json.dumps(dict(DEEPSEEK, num_attention_heads=128,
                                                      num_key_value_heads=128), sort_keys=True), 256),
                 128, sp=True)


def test_fused_epilogues_keep_their_flop() -> None:
    """With ``--fuse`` the gating activation runs in the gate/up GEMM's epilogue; its element-wise
    FLOP are those of the rank's rows whatever etp (etp x the rows, 1/etp of the width)."""
    chain = extract_chain(mixtral(), ExtractOptions.of(micro_batch=1, seq_len=64, tp=2, sp=True, fuse=True))
    base = chain.layers[1]
    block = derive_experts(chain, ExtractOptions.of(micro_batch=1, seq_len=64, tp=2, sp=True, fuse=True,
                                                 ep=2, etp=2)).layers[1]
    assert any(op.fused_elements for op in block.fwd.ops if "grouped_mm" in op.target)
    assert (block.fwd.flop, block.bwd.flop) == (base.fwd.flop, base.bwd.flop)


def test_graph_cli_shows_etp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    argv = ["graph", "--model", str(path), "--seq-len", "256", "--tp", "2", "--sp", "--ep", "2", "--etp", "2"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    graph = json.loads(out)
    assert not list(Draft202012Validator(load_schema("graph")).iter_errors(graph))
    block = graph["layers"][1]
    assert (graph["tp"], graph["sp"], graph["ep"], graph["etp"]) == (2, True, 2, 2)
    received = 256 * TOP_K // 2  # the rank's 128 tokens, 2 copies each
    assert (block["local_experts"], block["tokens_per_expert"]) == (2, 2 * 2 * received // EXPERTS)
    assert block["all_to_all_bytes"] == received * H * 2
    assert block["expert_tp_bytes"] == 2 * received * H * 2
    counts = block["collectives"]
    assert counts["expert_tp_all_gather"] == counts["expert_tp_reduce_scatter"] == 2
    assert block["params"] == ATTENTION // 2 + 2 * H + EXPERTS * H + EXPERTS * EXPERT // 4
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "TP 2 + SP, EP 2, expert TP 2 (per device)" in out
    assert "2 per rank, 256" in out and "expert-TP gather/scatter" in out and "0.25 MiB" in out
    code, _, err = run(["graph", "--model", str(path), "--seq-len", "256", "--tp", "2"], capsys)
    assert code == 2 and "needs sp with tp > 1" in err
    code, _, err = run(["graph", "--model", str(path), "--seq-len", "256", "--etp", "3"], capsys)
    assert code == 2 and "expert-TP width 3 does not divide" in err


def test_qwen2_moe_gated_shared_expert_at_tp() -> None:
    """Qwen2-MoE: the shared expert's 1-output gate stays whole and gates the rank's tokens after
    the shared expert's output is reduce-scattered; the block's forward FLOP halve exactly."""
    config = {"model_type": "qwen2_moe", "num_hidden_layers": 1, "hidden_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256,
              "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128, "num_experts": 4,
              "num_experts_per_tok": 2, "vocab_size": 500, "max_position_embeddings": 512,
              "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False}
    spec = LoadedModel("small-qwen2-moe", json.dumps(config, sort_keys=True), 64)
    one, two = (extract_chain(spec, ExtractOptions.of(micro_batch=1, seq_len=64, tp=tp, sp=tp > 1)).layers[1]
                for tp in (1, 2))
    assert two.fwd.flop == pytest.approx(one.fwd.flop / 2, rel=1e-12)
    h = 128
    attention = 4 * h * h + 3 * h  # q, k, v with biases, o
    assert one.params - two.params == attention // 2 + 3 * h * 128 // 2
    assert two.fwd.collectives() == {"all_gather": 2, "reduce_scatter": 2}


def test_expert_tp_collectives_are_costed_as_all_gather_and_reduce_scatter(
        traced: dict[int, LayerChain]) -> None:
    cluster = Cluster(16, 8, 400e9, 50e9, 1e-6, 4e-6)
    acc = load_accelerator("h100-80gb")
    model = RooflineCostModel(cluster)
    block = derive_experts(traced[2], options(2, ep=2, etp=2)).layers[1]
    for graph in (block.fwd, block.bwd):
        for target, kind in ((ETP_ALL_GATHER, "all_gather"), (ETP_REDUCE_SCATTER, "reduce_scatter")):
            (op,) = collectives(graph, target)
            expected = cluster_collective_time_s(cluster, kind, block.expert_tp_bytes, 2)
            assert expected > 0 and model.latency(op, acc).single_core_s == pytest.approx(expected)
