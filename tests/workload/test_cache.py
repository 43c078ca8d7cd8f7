"""The on-disk graph cache: a second extraction reads the file; keys separate options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.cli import main
from archplace.workload import cache as cache_module
from archplace.workload.cache import GraphCache, cache_key
from archplace.workload.extract import ExtractOptions
from archplace.workload.zoo import load_model


def test_second_extraction_reads_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = load_model("bert-large")
    options = ExtractOptions.of(1, 64)
    cache = GraphCache(tmp_path)
    first = cache.chain(spec, options)
    assert cache.path(spec, options).is_file()

    def fail(*_: object) -> None:
        raise AssertionError("extracted again instead of reading the cache")

    monkeypatch.setattr(cache_module, "extract_chain", fail)
    second = cache.chain(spec, options)
    assert second == first
    assert second.layers[1].fwd is second.layers[5].fwd  # shared block graphs survive the file


def test_key_covers_every_option():
    spec = load_model("gpt2-xl")
    base = ExtractOptions.of(1, 128)
    variants = [ExtractOptions.of(2, 128), ExtractOptions.of(1, 256), ExtractOptions.of(1, 128, tp=5),
                ExtractOptions.of(1, 128, tp=5, sp=True), ExtractOptions.of(1, 128, fuse=True),
                ExtractOptions.of(1, 128, dtype="float32"), ExtractOptions.of(1, 128, training=False),
                ExtractOptions.of(1, 128, attention="sdpa"), ExtractOptions.of(1, 128, attention="eager"),
                ExtractOptions.of(1, 128, kernels="unfused")]
    keys = {cache_key(spec, o) for o in [base, *variants]}
    assert len(keys) == len(variants) + 1
    assert cache_key(spec, base) == cache_key(load_model("gpt2-xl"), ExtractOptions.of(1, 128))
    assert cache_key(spec, base) != cache_key(load_model("opt-350m"), base)


def test_unreadable_file_is_replaced(tmp_path: Path):
    spec = load_model("opt-350m")
    options = ExtractOptions.of(1, 64)
    cache = GraphCache(tmp_path)
    path = cache.path(spec, options)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a chain file")
    chain = cache.chain(spec, options)
    assert chain.layers[1].params > 0 and cache.load(spec, options) == chain


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_graph_command_json(capsys: pytest.CaptureFixture[str]):
    code, out, _ = run(["graph", "--model", "llama2-7b", "--seq-len", "128", "--tp", "4", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["tp"] == 4 and len(data["layers"]) == 34
    block = data["layers"][1]
    assert block["kind"] == "block" and block["collectives"] == {"all_reduce": 4}
    assert set(block) >= {"name", "params", "fwd_flop", "bwd_flop", "activation_bytes",
                          "boundary_bytes", "collectives"}
    assert data["total"]["params"] * 4 == pytest.approx(6.738e9, rel=0.01)
    assert data["total"]["fwd_flop"] == pytest.approx(sum(layer["fwd_flop"] for layer in data["layers"]))


def test_graph_command_table_and_errors(capsys: pytest.CaptureFixture[str]):
    code, out, _ = run(["graph", "--model", "gpt2-xl", "--seq-len", "64"], capsys)
    assert code == 0 and "block.0 … block.47 (×48)" in out
    code, _, err = run(["graph", "--model", "gpt2-xl", "--tp", "2"], capsys)
    assert code == 2 and err.strip() == "archplace: error: TP width 2 does not divide the 25 " \
        "attention heads of gpt2-xl"
    code, _, err = run(["graph", "--model", "gpt2-xl", "--seq-len", "0"], capsys)
    assert code == 2 and "--seq-len must be a whole number from 1 to 1,048,576, got 0" in err


def test_graph_command_refuses_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                                "n_positon": 64, "n_positions": 64}))
    code, _, err = run(["graph", "--model", str(path)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown field 'n_positon' (did you mean 'n_positions'?)" in err
    path.write_text(json.dumps({"model_type": "transformer9000", "n_layer": 2}))
    code, _, err = run(["graph", "--model", str(path)], capsys)
    assert code == 2 and "unknown architecture model_type='transformer9000'" in err
