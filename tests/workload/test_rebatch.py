"""Chains derived for another micro-batch (workload.rebatch) equal the traced ones field by field,
and the graph cache traces each setting's references once, in a pool or not, with the same chains."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from archplace.workload import cache as cache_module
from archplace.workload.cache import GraphCache, cached_chains
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.fusion import FUSED_KERNEL_TARGET
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase
from archplace.workload.key import CostKey
from archplace.workload.layers import Layer, LayerChain, LayerKind
from archplace.workload.rebatch import REFERENCE_BATCHES, derivable, rebatch_chain
from archplace.workload.zoo import LoadedModel

SEQ = 256
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_inner": 512, "vocab_size": 1000,
        "n_positions": 1024, "bos_token_id": 0, "eos_token_id": 0}
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 256, "vocab_size": 1000,
         "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "tie_word_embeddings": False}
MIXTRAL = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
           "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
TP_SP = {"tp": 2, "sp": True}
BERT = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
        "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512}
CONFIGS = {"gpt2": GPT2, "llama": LLAMA, "mixtral": MIXTRAL, "bert": BERT}


def spec(name: str, **changes: Any) -> LoadedModel:
    return LoadedModel(f"{name}-tiny", json.dumps(dict(CONFIGS[name], **changes), sort_keys=True), SEQ)


def first_difference(a: Any, b: Any, path: str = "chain") -> str | None:
    """Where two chains differ (a readable failure), or None."""
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        for field in dataclasses.fields(a):
            found = first_difference(getattr(a, field.name), getattr(b, field.name), f"{path}.{field.name}")
            if found:
                return found
        return None
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def check_derived(model: LoadedModel, batches: tuple[int, ...], **options: Any) -> None:
    low, high = (extract_chain(model, ExtractOptions.of(b, SEQ, **options)) for b in REFERENCE_BATCHES)
    for b in batches:
        traced = extract_chain(model, ExtractOptions.of(b, SEQ, **options))
        derived = rebatch_chain(low, high, b)
        assert derived is not None, f"micro-batch {b} not derived"
        assert first_difference(derived, traced) is None
        assert derived == traced
        blocks = [layer for layer in derived.layers if layer.kind is LayerKind.BLOCK]
        assert all(block.fwd is blocks[0].fwd and block.bwd is blocks[0].bwd for block in blocks)


@pytest.fixture(scope="module")
def llama_traced() -> dict[int, LayerChain]:
    """The small Llama traced at micro-batches 2, 3 and 4, TP 2 with SP."""
    return {b: extract_chain(spec("llama"), ExtractOptions.of(b, SEQ, **TP_SP)) for b in (2, 3, 4)}


def test_llama_with_tp_and_sp_derived_exactly(llama_traced: dict[int, LayerChain]) -> None:
    derived = rebatch_chain(llama_traced[2], llama_traced[3], 4)
    assert derived is not None and first_difference(derived, llama_traced[4]) is None
    assert derived == llama_traced[4]
    assert derived.layers[1].fwd is derived.layers[2].fwd  # blocks share their graphs, as traced


@pytest.mark.slow  # about 40 s of tracing; make test-slow (CI) runs it
@pytest.mark.parametrize(("name", "options"), [
    ("gpt2", {}), ("gpt2", {"tp": 2, "sp": True}), ("gpt2", {"cp": 2}), ("llama", {"cp": 2, "tp": 2}),
    ("mixtral", {}), ("bert", {"attention": "sdpa"}), ("gpt2", {"attention": "eager", "kernels": "unfused"}),
    ("llama", {"dtype": "float32"}),
], ids=str)
def test_derived_chains_equal_the_traced_ones(name: str, options: dict[str, Any]) -> None:
    check_derived(spec(name), (4, 5, 8), **options)


@pytest.mark.slow  # two traces
def test_micro_batch_one_is_no_reference() -> None:
    """GPT-2 traced at micro-batch 1 has other operators than at 2 and more: 1 is special."""
    model = spec("gpt2")
    one, two = (extract_chain(model, ExtractOptions.of(b, SEQ, attention="eager", kernels="unfused"))
                for b in (1, 2))
    sizes = [(len(c.layers[1].fwd), len(c.layers[1].bwd)) for c in (one, two)]
    assert sizes[0] != sizes[1]
    with pytest.raises(ValueError, match="consecutive"):
        rebatch_chain(one, two, 4)


def chain(tp: int = 1, cp: int = 1, seq_len: int = SEQ, experts: int = 0, top_k: int = 0,
          ops: tuple[Operator, ...] = (), micro_batch: int = 2) -> LayerChain:
    graph = OpGraph(ops)
    working = max((op.bytes_read + op.bytes_written for op in ops), default=0.0)
    layer = Layer("block.0", LayerKind.BLOCK, params=10, fwd=graph, bwd=OpGraph(()),
                  activation_bytes=8.0 * micro_batch, input_bytes=2.0 * micro_batch,
                  boundary_bytes=2.0 * micro_batch, working_bytes=working,
                  experts=experts, experts_per_token=top_k)
    return LayerChain("toy", CostKey(tp, micro_batch, False, cp), seq_len, (layer,))


def vector_op(bytes_read: float, micro_batch: int, target: str = "aten.add.Tensor") -> Operator:
    return Operator(0, "add", target, OpKind.ELEMENTWISE, Phase.FWD, 0, 0, 0, 0, elements=64 * micro_batch,
                    flop=64.0 * micro_batch, bytes_read=bytes_read, bytes_written=128.0 * micro_batch)


def test_settings_whose_sizes_round_are_not_derived() -> None:
    assert derivable(chain())
    assert not derivable(chain(tp=3))  # shares of 1/3: inexact in floating point
    assert not derivable(chain(tp=2, seq_len=255))  # 127.5 tokens per TP rank: rounded up
    assert not derivable(chain(cp=2, seq_len=SEQ, tp=256))  # 128 tokens per CP rank over 256 TP ranks
    assert derivable(chain(experts=4, top_k=2))
    assert not derivable(chain(experts=3, top_k=1))  # ceil(256 b / 3) rows per expert: not linear in b
    assert not derivable(chain(experts=4, top_k=1, tp=128))  # 2 tokens per TP rank, 4 experts


def test_toy_chains_derive_linearly_and_refuse_what_they_cannot_tell() -> None:
    low, high = (chain(ops=(vector_op(100.0 + 50 * b, b),), micro_batch=b) for b in REFERENCE_BATCHES)
    derived = rebatch_chain(low, high, 6)
    assert derived == chain(ops=(vector_op(400.0, 6),), micro_batch=6)
    assert derived is not None and derived.layers[0].working_bytes == 400.0 + 128.0 * 6
    # a figure with a negative fixed part is refused ...
    low, high = (chain(ops=(vector_op(50.0 * b - 60, b),), micro_batch=b) for b in REFERENCE_BATCHES)
    assert rebatch_chain(low, high, 6) is None
    # ... except a fused kernel's clipped bytes read when above zero at both references
    fused = [chain(ops=(vector_op(50.0 * b - 60, b, FUSED_KERNEL_TARGET),), micro_batch=b) for b in (2, 3, 6)]
    assert rebatch_chain(fused[0], fused[1], 6) == fused[2]
    zero = [chain(ops=(vector_op(max(50.0 * b - 100, 0.0), b, FUSED_KERNEL_TARGET),), micro_batch=b)
            for b in (2, 3)]
    assert rebatch_chain(zero[0], zero[1], 6) is None  # 0 at b = 2: clipped or not, unknown
    # different operators at the two references: refused
    other = dataclasses.replace(high, layers=(dataclasses.replace(
        high.layers[0], fwd=OpGraph((dataclasses.replace(high.layers[0].fwd.ops[0], name="mul"),))),))
    assert rebatch_chain(low, other, 6) is None
    with pytest.raises(ValueError, match="consecutive"):
        rebatch_chain(low, high, 3)


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    traced: list[int] = []

    def extract(model: LoadedModel, options: ExtractOptions) -> LayerChain:
        traced.append(options.micro_batch)
        return extract_chain(model, options)

    monkeypatch.setattr(cache_module, "extract_chain", extract)
    return traced


def test_cache_traces_the_references_and_derives_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_traced: dict[int, LayerChain]) -> None:
    traced = counting(monkeypatch)
    model = spec("llama")
    wanted = [(model, ExtractOptions.of(b, SEQ, **TP_SP)) for b in (1, 2, 4, 8)]
    chains = cached_chains(wanted, GraphCache(tmp_path))
    assert sorted(traced) == [1, 2, 3]  # 4 and 8 derived from 2 and 3
    assert [c.micro_batch for c in chains] == [1, 2, 4, 8]
    assert chains[1:3] == [llama_traced[2], llama_traced[4]]
    # all in the cache now (the derived ones too); another micro-batch derived from the references
    traced.clear()
    again = cached_chains([*wanted, (model, ExtractOptions.of(6, SEQ, **TP_SP))], GraphCache(tmp_path))
    assert traced == [] and again[:4] == chains
    assert again[4] == rebatch_chain(llama_traced[2], llama_traced[3], 6)
    assert GraphCache(tmp_path).chain(model, ExtractOptions.of(16, SEQ, **TP_SP)).micro_batch == 16
    assert traced == []


@pytest.mark.slow  # starts a pool of two processes (torch imported in each)
def test_pool_gives_the_same_chains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = [(spec(name), ExtractOptions.of(b, SEQ)) for name in ("llama", "gpt2") for b in (1, 2, 4)]
    here = cached_chains(wanted, GraphCache(tmp_path / "here"))
    pooled = cached_chains(wanted, GraphCache(tmp_path / "pool"), jobs=2)
    assert pooled == here

    def names(folder: str) -> list[str]:
        return sorted(p.name for p in (tmp_path / folder).iterdir())

    assert names("pool") == names("here")
    # a single wanted micro-batch without its references in the cache is traced, not derived
    traced = counting(monkeypatch)
    one = cached_chains([(spec("llama"), ExtractOptions.of(4, SEQ))], GraphCache(tmp_path / "one"))
    assert one == [here[2]]
    assert traced == [4]
