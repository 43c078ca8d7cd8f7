"""Fused kernels and fused attention: saved activations against Korthikanti et al. 2022.

Korthikanti et al. 2022, sec. 4.1, eq. (1)-(5), count the activations of one GPT block in
bytes, 2 per bf16 element and 1 per dropout-mask element: s·b·h·(34 + 5·a·s/h) without
parallelism; s·b·h·(10 + 24/t + 5·a·s/(h·t)) with TP t; s·b·h/t·(34 + 5·a·s/h) with TP + SP;
34·s·b·h/t with selective recompute + SP.  They neglect the layer norms' per-row mean and rstd
(fp32, two per norm, two norms a block): 16·s·b bytes, replicated under TP and split by SP,
which the tests add.  Small configs keep them fast; s differs from the head dim and from h so
that no s x s test can mistake another tensor for an attention score.
"""

from __future__ import annotations

import json

import pytest

from archplace.base.errors import ConfigError
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.graph import OpKind
from archplace.workload.options import Attention, Kernels
from archplace.workload.zoo import LoadedModel, load_model

H, A, S, B = 64, 4, 48, 2  # hidden, heads (head dim 16), sequence, micro-batch
NORM_STATS = 16 * S * B    # fp32 mean + rstd of two layer norms


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    cfg = {"model_type": "gpt2", "n_layer": 1, "n_embd": H, "n_head": A, "n_positions": 64,
           "vocab_size": 128}
    path = tmp_path_factory.mktemp("gpt") / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    return load_model(str(path))


def block(spec: LoadedModel, **options: object):
    opts = {"micro_batch": B, "seq_len": S, **options}
    return extract_chain(spec, ExtractOptions.of(**opts)).layers[1]  # type: ignore[arg-type]


def test_fused_eager_equals_korthikanti_without_parallelism(gpt: LoadedModel):
    layer = block(gpt, attention="eager", kernels="fused")
    sbh = S * B * H
    assert layer.activation_bytes == sbh * 34 + 5 * A * S * S * B + NORM_STATS
    # selective recompute drops exactly the 5as²b attention core
    assert layer.selective_activation_bytes == sbh * 34 + NORM_STATS


@pytest.mark.parametrize("t", [2, 4])
def test_fused_eager_with_tensor_parallelism(gpt: LoadedModel, t: int):
    layer = block(gpt, attention="eager", kernels="fused", tp=t)
    sbh = S * B * H
    assert layer.activation_bytes == sbh * (10 + 24 / t) + 5 * A * S * S * B / t + NORM_STATS


@pytest.mark.parametrize("t", [2, 4])
def test_fused_eager_with_sequence_parallelism(gpt: LoadedModel, t: int):
    layer = block(gpt, attention="eager", kernels="fused", tp=t, sp=True)
    sbh = S * B * H
    assert layer.activation_bytes == (sbh * 34 + 5 * A * S * S * B + NORM_STATS) / t
    assert layer.selective_activation_bytes == (sbh * 34 + NORM_STATS) / t


@pytest.mark.parametrize("t, sp", [(1, False), (2, True), (4, True)])
def test_flash_replaces_the_score_terms_by_the_log_sum_exp(gpt: LoadedModel, t: int, sp: bool):
    """FlashAttention keeps Q, K, V (already in the 34) and its output (the output
    projection's input, already in the 34), plus the fp32 log-sum-exp: 4·a·s·b bytes."""
    layer = block(gpt, attention="flash", kernels="fused", tp=t, sp=sp)
    sbh = S * B * H
    assert layer.activation_bytes == (sbh * 34 + NORM_STATS + 4 * A * S * B) / t
    assert layer.selective_activation_bytes == layer.activation_bytes  # no s x s tensor left


def test_unfused_gelu_keeps_three_more_tensors(gpt: LoadedModel):
    """HF's tanh GeLU (gelu_new) traced op by op keeps three 4h-wide bf16 intermediates more
    than Megatron's fused bias+GeLU: 24·s·b·h bytes."""
    fused = block(gpt, attention="eager", kernels="fused")
    unfused = block(gpt, attention="eager", kernels="unfused")
    assert unfused.activation_bytes - fused.activation_bytes == 24 * S * B * H


def test_full_recompute_keeps_only_the_hidden_state(gpt: LoadedModel):
    for attention in ("eager", "flash"):
        layer = block(gpt, attention=attention, kernels="fused")
        assert layer.input_bytes == 2 * S * B * H


def test_fused_kernels_are_single_operators(gpt: LoadedModel):
    fused = block(gpt, attention="eager", kernels="fused")
    unfused = block(gpt, attention="eager", kernels="unfused")
    for a, b in ((fused.fwd, unfused.fwd), (fused.bwd, unfused.bwd)):
        assert len(a) < len(b)
        assert a.flop == pytest.approx(b.flop, rel=1e-12)  # fusion moves work, never drops it
        traffic = sum(op.bytes_read + op.bytes_written for op in a.ops)
        assert traffic < sum(op.bytes_read + op.bytes_written for op in b.ops)
        for op in a.ops:
            assert all(p < op.id for p in op.preds)
    # the GeLU chain (8 element-wise ops in HF's gelu_new) is one operator forward
    gelu = [op for op in fused.fwd.ops if "tanh" in op.fused]
    assert len(gelu) == 1 and len(gelu[0].fused) == 7
    # and one backward: its element-wise ops and autograd's sums of their gradients
    names = [(op.name, *op.fused) for op in fused.bwd.ops]
    gelu_bwd = [group for group in names if "tanh_backward" in group]
    assert len(gelu_bwd) == 1 and len(gelu_bwd[0]) == 9 + 2  # gelu_new's 9 backward ops, 2 sums


@pytest.mark.parametrize("attention", ["sdpa", "flash"])
def test_one_attention_operator_per_direction(gpt: LoadedModel, attention: str):
    layer = block(gpt, attention=attention, kernels="fused", tp=2)
    fwd = [op for op in layer.fwd.ops if op.kind is OpKind.ATTENTION]
    bwd = [op for op in layer.bwd.ops if op.kind is OpKind.ATTENTION]
    assert len(fwd) == 1 and len(bwd) == 1
    for op in (fwd[0], bwd[0]):
        assert (op.batch, op.m, op.k, op.n) == (B * A // 2, S, H // A, S)  # heads split by TP
        assert op.causal and op.dtype_bytes == 2
        assert op.skip_masked_blocks is (attention == "flash")
    # forward 4·B·d·s² (s < one 128-block: the diagonal block is computed in full), backward 2.5x
    assert fwd[0].flop == 4 * (B * A // 2) * (H // A) * S * S
    assert bwd[0].flop == 2.5 * fwd[0].flop
    assert not any(op.kind is OpKind.SOFTMAX for op in layer.fwd.ops)


def test_llama_block_against_the_formula():
    """Llama (RMSNorm, SwiGLU, RoPE, no dropout, GQA in 70B) differs from Korthikanti's GPT
    formula; asserted so that a change in what it saves shows up.  Per block, bf16 unless
    said: RMSNorm inputs 2·2sbh + rstd 2·4sb (fp32); Q, K, V projections' input 2sbh; RoPE
    keeps cos and sin (2·2·s·d, shared with the other blocks: counted once per block) and its
    outputs Q, K (2·2sbh) plus V (2sbh); output and log-sum-exp of FlashAttention (2sbh +
    4asb); the output projection's input (the same output); the MLP: gate and up projections'
    input 2sbh, SwiGLU's inputs gate and up (2·2·s·b·f) and down projection's input (2·s·b·f)."""
    spec = load_model("llama2-7b")
    b, s = 1, 96
    h, a, f, d = spec.hidden_size, spec.heads, spec.ffn_size, spec.hidden_size // spec.heads
    layer = extract_chain(spec, ExtractOptions.of(b, s)).layers[1]
    sbh = s * b * h
    expected = (2 * 2 * sbh + 2 * 4 * s * b      # two RMSNorms: input + fp32 rstd
                + 2 * sbh                          # QKV input
                + 2 * 2 * sbh + 2 * sbh            # Q, K after RoPE, V
                + 2 * 2 * s * d                    # cos, sin (bf16)
                + 2 * sbh + 4 * a * s * b          # attention output, log-sum-exp
                + 2 * sbh                          # gate/up input
                + 2 * 2 * s * b * f + 2 * s * b * f)  # SwiGLU inputs, down-projection input
    assert layer.activation_bytes == expected
    # against the GPT formula's 34: no 1-byte dropout masks (-2), SwiGLU's three f-wide tensors
    # (6·f/h = 16.125 with f = 11008) instead of GeLU's two 4h-wide ones (16): 32.125 + small terms
    big = 34 - 2 - 16 + 6 * f / h  # 32.125 for llama2-7b
    assert layer.activation_bytes - big * sbh == 2 * 4 * s * b + 2 * 2 * s * d + 4 * a * s * b


def test_options_take_names_and_refuse_unknown_values():
    options = ExtractOptions.of(1, 8, attention="SDPA", kernels="unfused")
    assert options.attention is Attention.SDPA and options.kernels is Kernels.UNFUSED
    with pytest.raises(ConfigError, match="attention must be one of eager, sdpa, flash"):
        ExtractOptions.of(1, 8, attention="xformers")
    with pytest.raises(ConfigError, match="kernels must be one of fused, unfused"):
        ExtractOptions.of(1, 8, kernels=3)  # type: ignore[arg-type]


def test_sequence_parallel_backward_regathers_the_saved_input(gpt: LoadedModel):
    """Korthikanti et al. 2022 sec. 4.2.2: with SP, Megatron-LM saves the sequence-sharded input
    of each column-parallel linear (QKV, first MLP matmul) and all-gathers it again in the
    backward pass for the weight gradient, which overlaps the data gradient's reduce-scatter."""
    t = 2
    layer = block(gpt, tp=t, sp=True)
    full = 2 * S * B * H  # the gathered hidden states, bf16
    fwd_gathers = [op for op in layer.fwd.ops if op.target == "all_gather"]
    assert len(fwd_gathers) == 2 and all(op.bytes_read == full for op in fwd_gathers)
    # backward all-gathers of saved forward tensors: no predecessor in the backward graph
    regathers = [op for op in layer.bwd.ops if op.target == "all_gather" and not op.preds]
    assert len(regathers) == 2 and all(op.bytes_read == full for op in regathers)
    users = {g.id: [op for op in layer.bwd.ops if g.id in op.preds] for g in regathers}
    for consumers in users.values():
        # weight gradients [k, m] x [m, n]: the gathered tokens are the reduction dimension
        assert consumers and all(op.kind is OpKind.MATMUL and op.k == S * B for op in consumers)
        # nothing orders them after the data gradient's reduce-scatter: they can overlap
        scatters = [op.id for op in layer.bwd.ops if op.target == "reduce_scatter"]
        assert not any(s in op.preds for op in consumers for s in scatters)
    assert layer.bwd.collectives() == {"all_gather": 4, "reduce_scatter": 2}
    assert layer.fwd.collectives() == {"all_gather": 2, "reduce_scatter": 2}


def test_hidden_size_equal_to_the_sequence_is_not_an_attention_score(gpt: LoadedModel):
    """At s = h (Llama-2-70B at 8,192 tokens) and b = 1 a [b, s, h] activation has s x s trailing
    dims; selective recompute must still drop only the attention core (eager: 5as²b, flash:
    nothing)."""
    s = H  # 64 tokens = the hidden size, micro-batch 1
    flash = extract_chain(gpt, ExtractOptions.of(1, s, attention="flash", kernels="fused")).layers[1]
    assert flash.selective_ops == () and flash.selective_activation_bytes == flash.activation_bytes
    eager = extract_chain(gpt, ExtractOptions.of(1, s, attention="eager", kernels="fused")).layers[1]
    assert eager.activation_bytes - eager.selective_activation_bytes == 5 * A * s * s


def test_squared_relu_runs_unfused_as_megatron_core_runs_it(tmp_path) -> None:
    """Megatron-Core fuses only GeLU, GeGLU and SwiGLU with their bias: Nemotron's squared ReLU
    (``torch.pow(F.relu(x), 2)``) runs as PyTorch's operators, forward and backward, also
    under ``kernels: fused``; the block's norms and RoPE stay fused. Bytes by hand, bf16, the
    FC1 output T x I (T = 2 x 48 tokens, I = 256)."""
    cfg = {"model_type": "nemotron", "num_hidden_layers": 1, "hidden_size": H, "num_attention_heads": A,
           "num_key_value_heads": A, "intermediate_size": 4 * H, "vocab_size": 128,
           "max_position_embeddings": 64, "hidden_act": "relu2", "partial_rotary_factor": 0.5,
           "tie_word_embeddings": False}
    path = tmp_path / "nemotron" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    layer = block(load_model(str(path)))
    act = 2 * B * S * 4 * H  # bytes of one T x I bf16 tensor
    fwd = {op.target: op for op in layer.fwd.ops if op.kind is not OpKind.MATMUL}
    assert (fwd["aten.relu.default"].bytes_read, fwd["aten.relu.default"].bytes_written) == (act, act)
    square = fwd["aten.pow.Tensor_Scalar"]
    assert (square.bytes_read, square.bytes_written) == (act, act)
    bwd = [op for op in layer.bwd.ops if op.kind is not OpKind.MATMUL and op.bytes_written == act]
    # pow's backward (x^1, x 2, x the gradient) and ReLU's threshold_backward, one kernel each
    assert sorted(op.target for op in bwd) == ["aten.mul.Scalar", "aten.mul.Tensor", "aten.pow.Tensor_Scalar",
                                               "aten.threshold_backward.default"]
    assert sum(op.bytes_read + op.bytes_written for op in bwd) == 10 * act  # 2 + 2 + 3 + 3 tensors
    assert any(op.target == "archplace.fused_kernel.default" for op in layer.fwd.ops)  # RoPE's kernels
