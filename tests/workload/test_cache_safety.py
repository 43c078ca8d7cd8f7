"""The graph cache runs no code from its files and reads only files it can trust (issue #23): a
planted pickle never runs, a FIFO never blocks, a symbolic link, a file others may write or own,
a file of another key or with a wrong checksum is ignored and the chain traced again; names never
become paths; the code-free format round-trips chains exactly, shared graphs included."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pickle
import re
import signal
import stat
import zlib
from collections.abc import Iterator
from dataclasses import asdict, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archplace.workload import cache as cache_module
from archplace.workload.cache import GraphCache, cache_key
from archplace.workload.chain_codec import (
    CHAIN_FIELDS,
    KEY_FIELDS,
    LAYER_FIELDS,
    MAGIC,
    OPERATOR_FIELDS,
    ChainCodecError,
    decode_chain,
    encode_chain,
    pack,
    unpack,
)
from archplace.workload.extract import ExtractOptions, derive_experts, extract_chain
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase
from archplace.workload.key import CostKey
from archplace.workload.layers import Layer, LayerChain, LayerKind
from archplace.workload.rebatch import rebatch_chain
from archplace.workload.zoo import LoadedModel

TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 256,
            "vocab_size": 1024, "bos_token_id": 0, "eos_token_id": 0}
SMALL_MOE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 512, "num_local_experts": 4,
             "num_experts_per_tok": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
             "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False}
OPTIONS = ExtractOptions.of(1, 32)
KEY_FILE = re.compile(r"[0-9a-f]{64}\.chain")


def tiny(name: str = "tiny-gpt", config: dict[str, Any] = TINY_GPT) -> LoadedModel:
    return LoadedModel(name, json.dumps(config, sort_keys=True), 64)


@pytest.fixture(scope="module")
def traces() -> dict[tuple[LoadedModel, ExtractOptions], LayerChain]:
    """Chains traced in this module, by model and options (traced once each: the machine is shared)."""
    return {}


@pytest.fixture(autouse=True)
def trace_once(traces: dict[tuple[LoadedModel, ExtractOptions], LayerChain],
               monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's traces go through :data:`traces`: a chain traced again is the one traced before."""

    def trace(spec: LoadedModel, options: ExtractOptions) -> LayerChain:
        if (spec, options) not in traces:
            traces[spec, options] = extract_chain(spec, options)
        return traces[spec, options]

    monkeypatch.setattr(cache_module, "extract_chain", trace)


@pytest.fixture
def traced(trace_once: None) -> LayerChain:
    """The tiny model's chain."""
    return cache_module.extract_chain(tiny(), OPTIONS)


@pytest.fixture
def cache(tmp_path: Path) -> GraphCache:
    return GraphCache(tmp_path / "cache")


class Planted:
    """Unpickling this creates ``marker`` (through ``open``): a stand-in for any payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def planted_pickle(marker: Path) -> bytes:
    data = pickle.dumps(Planted(marker))
    return data


def old_pickle_path(cache: GraphCache, spec: LoadedModel, options: ExtractOptions) -> Path:
    """Where the pickle cache (format 6) kept the chain."""
    payload = {"config": json.loads(spec.config_json), "options": asdict(options),
               "versions": {name: version(name) for name in ("torch", "transformers", "archplace")},
               "format": 6}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return cache.directory / f"{spec.name}-{key[:32]}.pkl"


def must_not_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object) -> None:
        raise AssertionError("traced instead of reading the cache")

    monkeypatch.setattr(cache_module, "extract_chain", fail)


@pytest.fixture
def alarm() -> Iterator[None]:
    """Fail, instead of hanging, if the test blocks for 60 s."""

    def timeout(*_: object) -> None:
        raise TimeoutError("blocked on a cache file")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(60)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_planted_payload_is_live(tmp_path: Path):
    """The payload of the tests below does run when unpickled (so its absence means something)."""
    marker = tmp_path / "ran"
    pickle.loads(planted_pickle(marker))
    assert marker.exists()


@pytest.mark.parametrize("where", ["old", "new"])
def test_planted_pickle_never_runs(cache: GraphCache, tmp_path: Path, traced: LayerChain, where: str,
                                   caplog: pytest.LogCaptureFixture):
    spec = tiny()
    marker = tmp_path / "ran"
    path = old_pickle_path(cache, spec, OPTIONS) if where == "old" else cache.path(spec, OPTIONS)
    path.parent.mkdir(mode=0o700)
    path.write_bytes(planted_pickle(marker))
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING):
        chain = cache.chain(spec, OPTIONS)
    assert not marker.exists()
    assert chain == traced
    assert cache.load(spec, OPTIONS) == traced  # the planted file was replaced
    assert (where == "new") == ("malformed" in caplog.text)


def test_fifo_does_not_block(cache: GraphCache, traced: LayerChain, alarm: None,
                             caplog: pytest.LogCaptureFixture):
    spec = tiny()
    path = cache.path(spec, OPTIONS)
    path.parent.mkdir(mode=0o700)
    os.mkfifo(path, 0o600)
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "not a regular file" in caplog.text
    assert cache.chain(spec, OPTIONS) == traced
    assert stat.S_ISREG(path.lstat().st_mode)  # renamed over the FIFO
    assert cache.load(spec, OPTIONS) == traced


def test_files_are_private(cache: GraphCache, traced: LayerChain):
    spec = tiny()
    previous = os.umask(0o002)
    try:
        cache.store(spec, OPTIONS, traced)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(cache.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path(spec, OPTIONS).stat().st_mode) == 0o600
    assert os.listdir(cache.directory) == [cache.path(spec, OPTIONS).name]  # no partial file left


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_file_writable_by_others_is_ignored(cache: GraphCache, traced: LayerChain, mode: int,
                                            monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture):
    spec = tiny()
    cache.store(spec, OPTIONS, traced)
    path = cache.path(spec, OPTIONS)
    path.chmod(mode)
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "writable by others" in caplog.text
    assert cache.chain(spec, OPTIONS) == traced  # traced again and rewritten, private
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    must_not_trace(monkeypatch)
    assert cache.chain(spec, OPTIONS) == traced


def test_file_of_another_user_is_ignored(cache: GraphCache, traced: LayerChain,
                                         monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    spec = tiny()
    cache.store(spec, OPTIONS, traced)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "owned by user" in caplog.text


def test_symlink_is_ignored_and_not_written_through(cache: GraphCache, tmp_path: Path, traced: LayerChain,
                                                    caplog: pytest.LogCaptureFixture):
    spec = tiny()
    target = tmp_path / "elsewhere.chain"
    target.write_bytes(pack(cache_key(spec, OPTIONS), traced))  # a valid file, but behind a link
    target.chmod(0o600)
    before = target.read_bytes()
    path = cache.path(spec, OPTIONS)
    path.parent.mkdir(mode=0o700)
    path.symlink_to(target)
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "not a regular file" in caplog.text
    assert cache.chain(spec, OPTIONS) == traced
    assert not path.is_symlink() and target.read_bytes() == before


def test_oversized_file_is_refused(cache: GraphCache, traced: LayerChain, monkeypatch: pytest.MonkeyPatch,
                                   caplog: pytest.LogCaptureFixture):
    spec = tiny()
    cache.store(spec, OPTIONS, traced)
    size = cache.path(spec, OPTIONS).stat().st_size
    monkeypatch.setattr(cache_module, "MAX_FILE_BYTES", size - 1)
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert f"more than {size - 1}" in caplog.text
    monkeypatch.setattr(cache_module, "MAX_FILE_BYTES", size)
    assert cache.load(spec, OPTIONS) == traced


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """The header and the compressed body of a chain file."""
    end = data.index(b"\n", len(MAGIC))
    return json.loads(data[len(MAGIC):end]), data[end + 1:]


def join(header: dict[str, Any], body: bytes) -> bytes:
    return MAGIC + json.dumps(header).encode() + b"\n" + body


def tampered_payload(data: bytes, fix_checksum: bool) -> bytes:
    """``data`` with one operator's FLOP doubled (a well-formed chain with another result)."""
    header, body = split(data)
    document = json.loads(zlib.decompress(body))
    document["graphs"][1][0][10] *= 2  # flop
    payload = json.dumps(document, separators=(",", ":")).encode()
    body = zlib.compress(payload)
    header["size"] = len(payload)
    if fix_checksum:
        header["sha256"] = hashlib.sha256(body).hexdigest()
    return join(header, body)


def wrong_checksum(data: bytes) -> bytes:
    header, body = split(data)
    return join({**header, "sha256": "0" * 64}, body)


def flipped_body_byte(data: bytes) -> bytes:
    return data[:-5] + bytes([data[-5] ^ 1]) + data[-4:]


def schema_breaking(data: bytes) -> bytes:
    """A payload whose checksum matches but whose operator FLOP is a string."""
    header, body = split(data)
    document = json.loads(zlib.decompress(body))
    document["graphs"][0][0][10] = "1e9"
    payload = json.dumps(document).encode()
    body = zlib.compress(payload)
    return join({**header, "size": len(payload), "sha256": hashlib.sha256(body).hexdigest()}, body)


@pytest.mark.parametrize("corrupt", [
    lambda data: tampered_payload(data, fix_checksum=False), wrong_checksum, flipped_body_byte,
    schema_breaking, lambda data: data[:len(data) // 2], lambda data: b"", lambda data: b"\x80\x05junk",
], ids=["tampered-payload", "wrong-checksum", "flipped-byte", "schema-breaking", "truncated", "empty",
        "pickle-header"])
def test_damaged_file_is_ignored_and_replaced(cache: GraphCache, traced: LayerChain, corrupt: Any,
                                              caplog: pytest.LogCaptureFixture):
    spec = tiny()
    cache.store(spec, OPTIONS, traced)
    path = cache.path(spec, OPTIONS)
    path.write_bytes(corrupt(path.read_bytes()))
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "malformed graph cache file" in caplog.text
    assert cache.chain(spec, OPTIONS) == traced
    assert cache.load(spec, OPTIONS) == traced


def test_file_of_another_key_is_ignored(cache: GraphCache, traced: LayerChain,
                                        caplog: pytest.LogCaptureFixture):
    spec = tiny()
    other = replace(OPTIONS, seq_len=16)
    cache.store(spec, other, cache_module.extract_chain(spec, other))
    cache.path(spec, other).rename(cache.path(spec, OPTIONS))  # a valid file, moved to another key's name
    with caplog.at_level(logging.WARNING):
        assert cache.load(spec, OPTIONS) is None
    assert "another cache key" in caplog.text
    assert cache.chain(spec, OPTIONS) == traced


def test_tampered_payload_with_fixed_checksum_still_decodes_strictly(traced: LayerChain):
    """The checksum is no signature (the ownership checks keep others out): a consistent file
    decodes, to the tampered numbers; the checksum catches accidental damage."""
    key = "k" * 64
    data = pack(key, traced)
    assert unpack(tampered_payload(data, fix_checksum=True), key) != traced
    with pytest.raises(ChainCodecError, match="checksum"):
        unpack(tampered_payload(data, fix_checksum=False), key)


@pytest.mark.parametrize("name", ["../evil", "/tmp/abs", "a/b", "..", "x\0y"])
def test_names_never_become_paths(tmp_path: Path, traced: LayerChain, name: str,
                                  monkeypatch: pytest.MonkeyPatch):
    directory = tmp_path / "dir" / "cache"
    cache = GraphCache(directory)
    spec = tiny(name)
    path = cache.path(spec, OPTIONS)
    assert path.parent == directory and KEY_FILE.fullmatch(path.name)
    chain = cache.chain(spec, OPTIONS)
    assert chain.model == name and replace(chain, model=traced.model) == traced
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "dir", "dir/cache", f"dir/cache/{path.name}"]
    assert not Path(f"/tmp/abs-{cache_key(spec, OPTIONS)[:32]}.pkl").exists()
    assert not list(Path("/tmp").glob(f"*{cache_key(spec, OPTIONS)}*"))
    must_not_trace(monkeypatch)
    assert cache.chain(spec, OPTIONS) == chain


def test_key_covers_the_name(traced: LayerChain):
    """Two names with one config are two files: each chain keeps its own model name."""
    assert cache_key(tiny("a"), OPTIONS) != cache_key(tiny("b"), OPTIONS)


def graph_partition(chain: LayerChain) -> list[int]:
    """Which graph object each (layer, phase) holds, numbered by first appearance."""
    seen: dict[int, int] = {}
    return [seen.setdefault(id(graph), len(seen))
            for layer in chain.layers for graph in (layer.fwd, layer.bwd)]


def round_trip(chain: LayerChain) -> LayerChain:
    key = "a" * 64
    back = unpack(pack(key, chain), key)
    assert back == chain and graph_partition(back) == graph_partition(chain)
    assert decode_chain(encode_chain(chain)) == chain
    return back


def test_round_trip_dense_keeps_shared_graphs(traced: LayerChain):
    back = round_trip(traced)
    assert back.layers[1].fwd is back.layers[2].fwd and back.layers[1].bwd is back.layers[2].bwd
    assert back.layers[1].fwd is not back.layers[1].bwd


def test_round_trip_moe_rebatched_and_expert_parallel():
    spec = tiny("small-moe", SMALL_MOE)
    two, three = (extract_chain(spec, ExtractOptions.of(b, 32)) for b in (2, 3))
    for chain in (two, three):
        back = round_trip(chain)
        assert back.layers[1].experts == 4 and back.layers[1].fwd is back.layers[2].fwd
    derived = rebatch_chain(two, three, 5)
    assert derived is not None
    round_trip(derived)
    round_trip(derive_experts(two, ExtractOptions.of(2, 32, ep=2)))


def test_schemas_cover_every_field():
    for cls, schema in ((Operator, OPERATOR_FIELDS), (Layer, LAYER_FIELDS)):
        assert [name for name, _ in schema] == [f.name for f in dataclasses.fields(cls)]
    assert [name for name, _ in CHAIN_FIELDS] == [f.name for f in dataclasses.fields(LayerChain)
                                                  if f.name != "layers"]
    assert [name for name, _ in KEY_FIELDS] == list(CostKey._fields)
    assert [f.name for f in dataclasses.fields(OpGraph)] == ["ops", "_check"]


def small_chain() -> LayerChain:
    op = Operator(0, "mm", "aten.mm.default", OpKind.MATMUL, Phase.FWD, 1, 2, 3, 4, 8, 48.0, 10.0, 8.0)
    graph = OpGraph((op, replace(op, id=1, name="add", preds=(0,))))
    layer = Layer("block.0", LayerKind.BLOCK, 7, graph, graph, 1.0, 2.0, 3.0, 4.0)
    return LayerChain("m", CostKey(1, 1, False), 8, (layer, replace(layer, name="block.1")))


def edited(change: Any) -> bytes:
    document = json.loads(encode_chain(small_chain()))
    change(document)
    return json.dumps(document).encode()


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def change(document: Any) -> None:
        for step in path[:-1]:
            document = document[step]
        document[path[-1]] = value

    return change


@pytest.mark.parametrize("change", [
    _set(("graphs", 0, 0, 0), True),  # bool for the id
    _set(("graphs", 0, 0, 5), 1.0),  # float for batch
    _set(("graphs", 0, 0, 3), "matrix"),  # unknown OpKind
    _set(("graphs", 0, 0, 10), None),  # null FLOP
    _set(("graphs", 0, 0, 13), [0.5]),  # float predecessor
    _set(("graphs", 0, 1, 13), [1]),  # predecessor not preceding
    _set(("graphs", 0, 1, 0), 5),  # id out of order
    _set(("graphs", 0, 0, 17), 0),  # int for causal
    _set(("graphs", 0, 0), [0] * 3),  # too few values
    _set(("layers", 0, "fwd"), 1),  # graph index out of range
    _set(("layers", 0, "bwd"), -1),
    _set(("layers", 0, "kind"), "BLOCK"),
    _set(("layers", 0, "selective_ops"), "abc"),
    _set(("layers", 0, "extra"), 1),
    _set(("chain", "tp"), "1"),
    _set(("chain", "layers"), []),
    _set(("layers",), {}),
    lambda document: document["layers"][0].pop("params"),
    lambda document: document.pop("chain"),
])
def test_strict_decode_refuses(change: Any):
    assert decode_chain(edited(lambda document: None)) == small_chain()
    with pytest.raises(ChainCodecError):
        decode_chain(edited(change))


@pytest.mark.parametrize("data", [b"[]", b"nul", b"\xff\xfe", b"[" * 100_000, b'{"chain": 1}'])
def test_strict_decode_refuses_non_documents(data: bytes):
    with pytest.raises(ChainCodecError):
        decode_chain(data)


def test_unpack_refuses_a_lying_size():
    key = "a" * 64
    header, body = split(pack(key, small_chain()))
    for size in (header["size"] - 1, header["size"] + 1, 0, 2**40, "5"):
        with pytest.raises(ChainCodecError):
            unpack(join({**header, "size": size}, body), key)


names = st.text(max_size=12)
ints = st.integers(min_value=0, max_value=2**62)
floats = st.floats(allow_nan=False) | st.integers(min_value=0, max_value=2**70)


@st.composite
def operators(draw: st.DrawFn, op_id: int) -> Operator:
    preds = draw(st.lists(st.integers(0, op_id - 1), max_size=3, unique=True)) if op_id else []
    return Operator(op_id, draw(names), draw(names), draw(st.sampled_from(OpKind)),
                    draw(st.sampled_from(Phase)), *draw(st.tuples(ints, ints, ints, ints, ints)),
                    draw(floats), draw(floats), draw(floats), tuple(sorted(preds)), draw(ints), draw(ints),
                    tuple(draw(st.lists(names, max_size=3))), draw(st.booleans()), draw(st.booleans()),
                    draw(ints), draw(ints), 1, draw(ints), draw(floats))


@st.composite
def chains(draw: st.DrawFn) -> LayerChain:
    graphs = []
    for _ in range(draw(st.integers(1, 3))):
        count = draw(st.integers(0, 5))
        graphs.append(OpGraph(tuple(draw(operators(i)) for i in range(count))))
    layers = []
    for i in range(draw(st.integers(1, 4))):
        layers.append(Layer(f"block.{i}", draw(st.sampled_from(LayerKind)), draw(ints),
                            draw(st.sampled_from(graphs)), draw(st.sampled_from(graphs)),
                            *draw(st.tuples(floats, floats, floats, floats, floats)),
                            tuple(draw(st.lists(names, max_size=2))), *draw(st.tuples(ints, ints, ints, ints,
                                                                                        ints, ints)),
                            draw(floats), draw(ints), draw(floats)))
    key = CostKey(draw(ints), draw(ints), draw(st.booleans()), draw(ints), draw(ints), draw(ints))
    return LayerChain(draw(names), key, draw(ints), tuple(layers), draw(ints))


@given(chains())
def test_round_trip_random_chains(chain: LayerChain):
    back = round_trip(chain)
    for before, after in zip(chain.layers, back.layers, strict=True):
        for field in dataclasses.fields(Layer):
            assert type(getattr(after, field.name)) is type(getattr(before, field.name))
