"""Tensor and sequence parallelism as graph transforms (Megatron-LM; Korthikanti et al. 2022)."""

from __future__ import annotations

import pytest

from archplace.base.errors import ConfigError
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import OpKind
from archplace.workload.zoo import load_model

# HF eager attention and unfused element-wise ops: these tests check tracing and TP sharding
# of the operators as HF writes them, not the kernels production trainers run.
AS_TRACED = {"attention": "eager", "kernels": "unfused"}

SEQ = 128


def chains(name: str, tp: int):
    spec = load_model(name)
    base = extract_chain(spec, ExtractOptions.of(2, SEQ, **AS_TRACED))
    return spec, base, extract_chain(spec, ExtractOptions.of(2, SEQ, tp=tp, **AS_TRACED)), \
        extract_chain(spec, ExtractOptions.of(2, SEQ, tp=tp, sp=True, **AS_TRACED))


@pytest.fixture(scope="module", params=["gpt3-175b", "llama2-70b", "bert-large"])
def sharded(request):
    return chains(request.param, 8)


def test_matmul_flop_divided_by_tp(sharded):
    _, base, tp8, sp8 = sharded
    for chain in (tp8, sp8):
        for full, part in zip(base.layers[1:2], chain.layers[1:2], strict=True):
            assert part.fwd.matmul_flop() * 8 == pytest.approx(full.fwd.matmul_flop(), rel=1e-9)
            assert part.bwd.matmul_flop() * 8 == pytest.approx(full.bwd.matmul_flop(), rel=1e-9)


def test_megatron_collectives_per_block(sharded):
    """TP: one all-reduce after each row-parallel matmul forward, one per column-parallel
    input gradient backward. SP: each becomes reduce-scatter + all-gather (the backward
    re-gathers the inputs of the weight-gradient GEMMs too)."""
    _, _, tp8, sp8 = sharded
    block = tp8.layers[1]
    assert block.fwd.collectives() == {"all_reduce": 2}
    assert block.bwd.collectives() == {"all_reduce": 2}
    block = sp8.layers[1]
    assert block.fwd.collectives() == {"all_gather": 2, "reduce_scatter": 2}
    assert block.bwd.collectives() == {"all_gather": 4, "reduce_scatter": 2}
    for graph in (block.fwd, block.bwd):
        consumed = {p for op in graph.ops for p in op.preds}
        for op in graph.ops:
            if op.kind is OpKind.COLLECTIVE:
                # some operator waits for it, or it produces the layer output
                assert op.group == 8 and (op.id in consumed or op.id == len(graph) - 1)


def test_collective_buffer_is_the_hidden_state(sharded):
    spec, _, tp8, _ = sharded
    hidden_bytes = 2 * SEQ * spec.hidden_size * 2  # b * s * h * bf16
    sizes = {op.bytes_read for op in tp8.layers[1].fwd.ops if op.kind is OpKind.COLLECTIVE}
    assert sizes == {hidden_bytes}


def test_parameters_split(sharded):
    spec, base, tp8, _ = sharded
    full, part = base.layers[1].params, tp8.layers[1].params
    # matmul weights are split; norms (and row-parallel biases) are replicated
    assert full / 8 <= part < full / 8 + 12 * spec.hidden_size
    # vocabulary-parallel embedding
    assert tp8.layers[0].params < base.layers[0].params / 4


def test_activation_memory_korthikanti(sharded):
    """SP + TP divide every saved activation of a block by t (Korthikanti et al., eq. 5 vs 2);
    TP alone leaves the norm/dropout/residual inputs replicated (eq. 4)."""
    _, base, tp8, sp8 = sharded
    full = base.layers[1].activation_bytes
    assert sp8.layers[1].activation_bytes == pytest.approx(full / 8, rel=0.02)
    assert full / 8 < tp8.layers[1].activation_bytes < full / 2
    assert sp8.layers[1].boundary_bytes == base.layers[1].boundary_bytes / 8


@pytest.mark.parametrize("name, tp, what", [
    ("gpt2-xl", 2, "25 attention heads"),
    ("llama2-70b", 16, "8 key/value heads"),
    ("llama2-7b", 3, "32 attention heads"),
])
def test_invalid_widths_are_refused(name: str, tp: int, what: str):
    with pytest.raises(ConfigError, match=f"TP width {tp} does not divide the {what}"):
        extract_chain(load_model(name), ExtractOptions.of(1, SEQ, tp=tp, **AS_TRACED))


def test_fusion_preserves_flop_and_removes_intermediates():
    spec = load_model("gpt2-xl")
    plain = extract_chain(spec, ExtractOptions.of(1, SEQ, **AS_TRACED)).layers[1]
    fused = extract_chain(spec, ExtractOptions.of(1, SEQ, fuse=True, **AS_TRACED)).layers[1]
    for a, b in ((plain.fwd, fused.fwd), (plain.bwd, fused.bwd)):
        assert b.flop == pytest.approx(a.flop, rel=1e-12)
        assert len(b) < len(a)
        assert sum(op.bytes_read + op.bytes_written for op in b.ops) < \
            sum(op.bytes_read + op.bytes_written for op in a.ops)
    fused_ops = [op for op in fused.fwd.ops if op.fused]
    assert fused_ops and all(op.kind is OpKind.MATMUL and op.fused_elements > 0 for op in fused_ops)
    for op in fused.fwd.ops:
        assert all(p < op.id for p in op.preds)


@pytest.mark.parametrize("name, tp, sp", [("gpt3-175b", 1, False), ("gpt3-175b", 8, True),
                                          ("bert-large", 4, False)])
def test_selective_recompute_drops_the_attention_core(name: str, tp: int, sp: bool):
    """Selective recompute drops exactly Korthikanti et al.'s 5*a*s^2*b bytes per block (per TP
    rank): softmax output and attention-dropout output in bf16, the dropout mask in one byte."""
    spec = load_model(name)
    b, s = 2, 256
    block = extract_chain(spec, ExtractOptions.of(b, s, tp=tp, sp=sp, **AS_TRACED)).layers[1]
    dropped = block.activation_bytes - block.selective_activation_bytes
    assert dropped == pytest.approx(5 * spec.heads * s * s * b / tp, rel=1e-9)
    assert "_softmax" in block.selective_ops
    embedding = extract_chain(spec, ExtractOptions.of(b, s, tp=tp, sp=sp, **AS_TRACED)).layers[0]
    assert embedding.selective_activation_bytes == embedding.activation_bytes and not embedding.selective_ops


def test_activations_follow_korthikanti_terms():
    """GPT-3 block, TP 8 + SP: Korthikanti et al.'s sbh/t*(34 + 5as/h) with HF's unfused tanh-GELU,
    which keeps three more 4h-wide bf16 tensors than Megatron's fused kernel (+24 sbh)."""
    spec = load_model("gpt3-175b")
    b, s, t = 1, 2048, 8
    h, a = spec.hidden_size, spec.heads
    block = extract_chain(spec, ExtractOptions.of(b, s, tp=t, sp=True, **AS_TRACED)).layers[1]
    expected = s * b * h / t * (34 + 24 + 5 * a * s / h)
    assert block.activation_bytes == pytest.approx(expected, rel=0.02)
