"""How the head's cross-entropy runs (``loss``, archplace.workload.options.Loss,
archplace.workload.kernels.loss_kernels and archplace.workload.loss_traffic): the bytes each
mode keeps and moves, counted by hand on a tiny GPT-2 (T = 2 x 64 tokens, V = 1,000 logits a
token, bf16)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.cli_helpers import run
from tests.helpers.small_moe import DEEPSEEK

from archplace.base.errors import ConfigError
from archplace.front import api
from archplace.validation.runs import evaluate_kwargs, load_runs
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.options import Loss
from archplace.workload.zoo import load_model

VOCAB, BATCH, SEQ = 1000, 2, 64
TOKENS = BATCH * SEQ
LOGITS = TOKENS * VOCAB  # elements of the logits
GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128,
       "vocab_size": VOCAB}
MODES = ("megatron", "megatron-fused", "te", "fp32", "fused")


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    path = tmp_path_factory.mktemp("loss") / "gpt.json"
    path.write_text(json.dumps(GPT))
    model = load_model(str(path))
    return {loss: {layer.name: layer for layer in extract_chain(
        model, ExtractOptions.of(micro_batch=BATCH, seq_len=SEQ, loss=loss)).layers} for loss in MODES}


def _loss_ops(layer: Any, phase: str) -> dict[str, Any]:
    return {op.name: op for op in getattr(layer, phase).ops if op.kind.value != "matmul"
            and not op.name.startswith(("native_layer_norm", "ones_like"))}


def test_only_the_head_changes(chains: dict[str, dict[str, Any]]) -> None:
    reference = chains["fused"]
    for loss in MODES:
        for name, layer in chains[loss].items():
            if name == "head":
                continue
            other = reference[name]
            assert layer.activation_bytes == other.activation_bytes
            assert layer.working_bytes == other.working_bytes
            assert (layer.fwd_flop, layer.bwd_flop) == (other.fwd_flop, other.bwd_flop)


def test_upcast_modes_keep_the_float32_log_probabilities(chains: dict[str, dict[str, Any]]) -> None:
    """The upcast modes keep 4 bytes a logit, the fused one 2 (and a float32 scalar loss
    instead of a bf16 one: 2 bytes more)."""
    fused = chains["fused"]["head"].activation_bytes
    for loss in ("megatron", "megatron-fused", "fp32"):
        assert chains[loss]["head"].activation_bytes - fused == 2 * LOGITS + 4
    assert chains["te"]["head"].activation_bytes == fused  # the gradient over the 16-bit logits


def test_fp32_runs_pytorch_s_kernels_out_of_place(chains: dict[str, dict[str, Any]]) -> None:
    head = chains["fp32"]["head"]
    fwd, bwd = _loss_ops(head, "fwd"), _loss_ops(head, "bwd")
    assert (fwd["_to_copy"].bytes_read, fwd["_to_copy"].bytes_written) == (2 * LOGITS, 4 * LOGITS)
    assert (fwd["_log_softmax"].bytes_read, fwd["_log_softmax"].bytes_written) == (4 * LOGITS, 4 * LOGITS)
    # the gather reads one float32 value and one int64 target a token
    assert fwd["nll_loss_forward"].bytes_read == TOKENS * (4 + 8)
    # the gradient's zero-fill writes every logit and reads the targets and the loss gradient only
    assert bwd["nll_loss_backward"].bytes_written == 4 * LOGITS
    assert bwd["nll_loss_backward"].bytes_read == TOKENS * 8 + 4 + 4
    softmax_bwd = bwd["_log_softmax_backward_data"]
    assert (softmax_bwd.bytes_read, softmax_bwd.bytes_written) == (8 * LOGITS, 4 * LOGITS)
    # two float32 tensors and their result: 12 bytes a logit, the head's largest operator
    assert head.working_bytes == 12 * LOGITS


@pytest.mark.parametrize(("loss", "forward_bytes", "backward_bytes"), [
    # the upcast (r2 w4), max (r4), subtraction (r4 w4), exp (r4 w4), sum (r4), division (r4 w4);
    # backward: mul_ (r4 w4), the cast back (r4 w2)
    ("megatron", (2 + 4 + 4 + 4 + 4 + 4, 4 + 4 + 4 + 4), (4 + 4, 4 + 2)),
    # three compiled functions: (r2 w4), (r4 w4), (r4 w4); backward: r4, the buffer w4, bf16 w2
    ("megatron-fused", (2 + 4 + 4, 4 + 4 + 4), (4, 4 + 2)),
])
def test_megatron_forms_move_their_passes_and_make_no_second_float32_tensor(
        chains: dict[str, dict[str, Any]], loss: str, forward_bytes: tuple[int, int],
        backward_bytes: tuple[int, int]) -> None:
    head = chains[loss]["head"]
    fwd, bwd = _loss_ops(head, "fwd"), _loss_ops(head, "bwd")
    (forward,) = [op for name, op in fwd.items() if name != "nll_loss_forward"]  # cast + log-softmax
    assert (forward.bytes_read, forward.bytes_written) == tuple(b * LOGITS for b in forward_bytes)
    (backward,) = bwd.values()
    assert (backward.bytes_read, backward.bytes_written) == tuple(b * LOGITS for b in backward_bytes)
    # the footprint is the grouping's: the bf16 logits and one float32 buffer (and the targets)
    assert head.working_bytes == 6 * LOGITS + TOKENS * 8 + 8


def test_te_moves_the_16_bit_logits_in_two_passes(chains: dict[str, dict[str, Any]]) -> None:
    """Transformer Engine's kernels: the online softmax reads the logits, the cross-entropy
    kernel reads them again and writes the gradient over them; backward scales it in place."""
    head, fused = chains["te"]["head"], chains["fused"]["head"]
    fwd, bwd = _loss_ops(head, "fwd"), _loss_ops(head, "bwd")
    assert (fwd["_log_softmax"].bytes_read, fwd["_log_softmax"].bytes_written) == (4 * LOGITS, 2 * LOGITS)
    (backward,) = bwd.values()
    assert (backward.bytes_read, backward.bytes_written) == (2 * LOGITS, 2 * LOGITS)
    assert head.working_bytes == fused.working_bytes


def test_a_norm_kernel_beside_the_loss_does_not_unfuse_it(tmp_path: Path) -> None:
    """DeepSeek-V3's final RMSNorm is a fused kernel whose backward sits next to the loss's (an
    autograd accumulation shares the loss's sequence number): the loss's backward stays one
    kernel (Megatron's two backward passes over the float32 buffer, the bf16 gradient out), and no
    other operator writes a logits-sized tensor."""
    path = tmp_path / "deepseek.json"
    path.write_text(json.dumps(DEEPSEEK))
    chain = extract_chain(load_model(str(path)), ExtractOptions.of(micro_batch=1, seq_len=SEQ))
    head = chain.layers[-1]
    logits = SEQ * DEEPSEEK["vocab_size"]
    vector = [op for op in head.bwd.ops if op.kind.value != "matmul"]
    (loss,) = [op for op in vector if op.bytes_written >= 2 * logits]  # Megatron's mul_ and cast back
    assert (loss.bytes_read, loss.bytes_written) == (8 * logits, 6 * logits)


def test_fused_moves_the_16_bit_logits_only(chains: dict[str, dict[str, Any]]) -> None:
    head = chains["fused"]["head"]
    fwd, bwd = _loss_ops(head, "fwd"), _loss_ops(head, "bwd")
    assert (fwd["_log_softmax"].bytes_read, fwd["_log_softmax"].bytes_written) == (2 * LOGITS, 2 * LOGITS)
    (backward,) = bwd.values()
    assert backward.bytes_written == 2 * LOGITS
    assert backward.bytes_read == 2 * LOGITS + TOKENS * 8 + 2 + 2


def test_the_head_s_traffic_orders_the_modes(chains: dict[str, dict[str, Any]]) -> None:
    def traffic(loss: str) -> float:
        head = chains[loss]["head"]
        return sum(op.bytes_read + op.bytes_written for g in (head.fwd, head.bwd) for op in g.ops)

    order = ("fused", "te", "megatron-fused", "fp32", "megatron")
    assert [traffic(loss) for loss in order] == sorted(traffic(loss) for loss in order)
    assert len({traffic(loss) for loss in order}) == len(order)


def test_the_option_is_checked_keyed_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="loss"):
        ExtractOptions.of(micro_batch=1, seq_len=SEQ, loss="bf16")
    assert ExtractOptions.of(micro_batch=1, seq_len=SEQ).loss is Loss.MEGATRON
    keys = {json.dumps(ExtractOptions.of(micro_batch=1, seq_len=SEQ, loss=loss).identity(), default=str)
            for loss in MODES}
    assert len(keys) == len(MODES)  # each mode is its own graph-cache entry
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(GPT))
    assert api.graph(str(path), seq_len=SEQ, loss="fused")["loss"] == "fused"
    status, out, _ = run(["graph", "--model", str(path), "--seq-len", str(SEQ), "--loss", "fp32", "--json"],
                         capsys)
    assert status == 0 and json.loads(out)["loss"] == "fp32"
    status, _, err = run(["graph", "--model", str(path), "--seq-len", str(SEQ), "--loss", "bf16"], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "--loss: unknown value 'bf16'" in err


def test_the_validation_runs_state_their_loss() -> None:
    data = Path(__file__).parents[1] / "validation" / "published_runs.yaml"
    runs = {case.case: case for case in load_runs(data)}
    assert evaluate_kwargs(runs["mpt-7b-a100"], "m")["loss"] == "fused"
    assert evaluate_kwargs(runs["h200run-llama3.2-1b"], "m")["loss"] == "fp32"
    assert "loss" not in evaluate_kwargs(runs["narayanan-1.7b"], "m")  # Megatron-LM's: the default
    assert evaluate_kwargs(runs["nemo2407-llama2-7b"], "m")["loss"] == "megatron-fused"
    assert "loss" not in evaluate_kwargs(runs["nemo2407-gpt3-5b"], "m")  # no fusion key: the default
    assert evaluate_kwargs(runs["mbridge2511-llama3-8b-h100"], "m")["loss"] == "te"
    # the Hugging Face variant runs Hugging Face's loss, whatever the run states
    assert evaluate_kwargs(runs["mpt-7b-a100"], "m", "eager+unfused")["loss"] == "fp32"
