"""The files and the per-case check of the CLI fuzz test (tests/test_cli_fuzz.py), shared with
tests/test_hostile_inputs.py: good and bad input files, a real result store and its tampered
copies, placeholders made real in each case's own directory, and the promises every case keeps
(status 0 or 2, one error line, no traceback, no hang, special files and stores untouched, nothing
created by a refused command)."""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from archplace.cli import main
from archplace.cli.options import MAX_ERROR_CHARS
from hostile import Guards, make_stores, materialise

CASE_LIMIT_S = 120  # a case running longer than this counts as a hang
ERROR_LINE_LIMIT = len("archplace: error: ") + MAX_ERROR_CHARS  # characters of the one error line
ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "src" / "archplace" / "hw" / "presets"
TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 256,
            "vocab_size": 1024, "bos_token_id": 0, "eos_token_id": 0}
SPACE = ("base: tpuv4\ntensor_cores: [2, 8]\narray_dim: [128]\nvector_cores: [2]\nbuffer: [32 MiB]\n"
         "hbm: [32 GiB]\narea_min_fraction: 0.0\n")
PROBLEM = {"tensor_cores": 2, "vector_cores": 1,
           "ops": [{"id": 0, "core_type": "tensor", "single_s": 0.004, "all_s": 0.002, "preds": []},
                   {"id": 1, "core_type": "vector", "single_s": 0.001, "all_s": 0.001, "preds": [0]},
                   {"id": 2, "core_type": "fused", "single_s": 0.002, "all_s": 0.001, "preds": [0]}]}
YAML_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))

# HF configs that must be refused with a message naming the field (or the MoE refusal).
BAD_CONFIGS = {
    "bool-layers": {**TINY_GPT, "n_layer": True},
    "zero-heads": {**TINY_GPT, "n_head": 0},
    "non-dividing-heads": {**TINY_GPT, "n_head": 3},
    "negative-vocab": {**TINY_GPT, "vocab_size": -5},
    "string-hidden": {**TINY_GPT, "n_embd": "128"},
    "float-layers": {**TINY_GPT, "n_layer": 2.5},
    "unknown-activation": {**TINY_GPT, "activation_function": "not_an_activation"},
    "huge-layers": {**TINY_GPT, "n_layer": 10_000},
    "moe": {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 256,
            "vocab_size": 1024, "num_local_experts": 8, "num_experts_per_tok": 2},
    "list-top": [1, 2, 3],
}


@dataclass(frozen=True)
class Files:
    """Files shared by every case: good ones and one of each bad kind."""

    good: dict[str, Path]
    bad: tuple[Path, ...]
    out_dir: Path
    stores: dict[str, Path]


def write_file(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def make_files(root: Path) -> Files:
    """Write the shared good and bad input files under ``root``."""
    good = {
        "config": write_file(root / "tiny" / "config.json", json.dumps(TINY_GPT)),
        "space": write_file(root / "space.yaml", SPACE),
        "hardware": write_file(root / "chip.yaml", (PRESETS / "tpuv4.yaml").read_text()),
        "layer_graph": ROOT / "examples" / "layer_graph.yaml",
        "problem": write_file(root / "problem.json", json.dumps(PROBLEM)),
    }
    run = {"model": str(good["config"]), "hardware": "tpuv4", "devices": 8, "global_batch": 8}
    good["plan_config"] = write_file(root / "plan.yaml",
                                     json.dumps({**run, "tps": [1], "micro_batches": [1]}))
    good["plan_doc"] = write_file(root / "plan.json", json.dumps({**run, "plan": {"tp": 1, "pp": 1, "dp": 8,
                                                                               "micro_batch": 1}}))
    good["runs"] = write_file(root / "runs.yaml", json.dumps({"runs": [{  # calibrate: a chip no
        "case": "r", "source": "fuzz", "hardware": "no-such-chip",      # --hardware is, refused fast
        "model": {"layers": 1, "hidden": 64, "heads": 1, "vocab": 64, "seq_len": 64},
        "plan": {"gpus": 1, "tp": 1, "pp": 1, "micro_batch": 1, "global_batch": 1, "recompute": "none",
                 "schedule": "1f1b", "chunks": 1, "sp": False, "zero_stage": 0, "dp_overlap": False},
        "published": {"value": 1.0, "unit": "iteration_time_s", "flop_formula": "narayanan_eq3"}}]}))
    foreign_db = root / "foreign.db"
    with sqlite3.connect(foreign_db) as db:
        db.execute("CREATE TABLE t (x)")
    huge = root / "huge.json"
    with huge.open("wb") as handle:  # sparse: over any sane size cap, no disk used
        handle.truncate(200 * 2**20)
    bad = [
        write_file(root / "binary.json", bytes(range(256)) * 4),
        write_file(root / "empty.yaml", ""),
        write_file(root / "blank.json", "  \n\t\n"),
        write_file(root / "latin1.yaml", "name: caf\xe9\n".encode("latin-1")),
        write_file(root / "deep.json", "[" * 100_000 + "]" * 100_000),
        write_file(root / "deep.yaml", "a:\n" + "".join("  " * i + "- \n" for i in range(1, 3000))),
        write_file(root / "bomb.yaml", YAML_BOMB),
        write_file(root / "recursive.yaml", "a: &a [*a]\n"),
        write_file(root / "list.yaml", "- 1\n- 2\n"),
        write_file(root / "garbage.yaml", "{[}: : :\n\t- ]"),
        write_file(root / "nan.json", '{"tensor_cores": NaN, "ops": []}'),
        huge, foreign_db, root,  # a directory where a file belongs
        root / "missing.json",
    ]
    for name, config in BAD_CONFIGS.items():
        bad.append(write_file(root / name / "config.json", json.dumps(config)))
    out_dir = root / "out"
    out_dir.mkdir()
    return Files(good, tuple(bad), out_dir, make_stores(root / "stores", _good_store(good)))


def _good_store(good: dict[str, Path]) -> Callable[[Path], None]:
    """Writes a real result store: the tiny model searched over the 2-design space."""

    def make(path: Path) -> None:
        try:
            main(["search", "--model", str(good["config"]), "--space", str(good["space"]), "--devices", "8",
                  "--global-batch", "8", "--jobs", "1", "--baseline", "none", "--store", str(path)])
        except SystemExit as exc:
            assert exc.code in (0, None), f"the fuzz test's store was not written (status {exc.code})"

    return make


def _materialise(argv: list[str], case_dir: Path, files: Files, guards: Guards) -> list[str]:
    """Turn the placeholders into real paths of this case: made-up bytes into a file, output
    names into paths under the case's own directory, hostile inputs and outputs
    (tests/helpers/hostile.py) into files there."""
    real = []
    hardware_text = files.good["hardware"].read_text()
    for i, value in enumerate(argv):
        if value.startswith("BYTES:"):
            value = str(write_file(case_dir / f"in{i}.yaml", bytes.fromhex(value[6:])))
        elif value.startswith("OUT:"):
            value = str(case_dir / value[4:])
        else:
            hostile = materialise(value, argv[i - 1] if i else None, case_dir, i, files.stores, hardware_text,
                                  guards)
            value = value if hostile is None else hostile
        real.append(value)
    return real


def tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (0 for a directory or special file)."""
    return {str(p.relative_to(root)): (p.lstat().st_size if p.is_file() and not p.is_symlink() else 0)
            for p in root.rglob("*")}


def check_case(argv: list[str], files: Files, capfd: pytest.CaptureFixture[str]) -> tuple[object, str, Path]:
    """Run ``argv`` (placeholders made real in a new directory of its own) in-process and check
    the CLI's promises; returns the exit status, stderr and the case's directory."""
    case_dir = files.out_dir / f"case{len(list(files.out_dir.iterdir()))}"
    case_dir.mkdir()
    guards = Guards()
    real = _materialise(argv, case_dir, files, guards)
    before = tree(case_dir)
    capfd.readouterr()
    code: object = None
    try:
        with _time_limit(CASE_LIMIT_S):
            main(real)
    except SystemExit as exc:
        code = exc.code
    out, err = capfd.readouterr()
    shown = " ".join(real)
    assert code in (0, 2), f"exit status {code!r} for: archplace {shown}\n{err}"
    assert "Traceback" not in err, f"traceback for: archplace {shown}\n{err}"
    guards.check(shown)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("archplace: error: "), \
            f"stderr is not one error line for: archplace {shown}\n{err}"
        assert len(lines[0]) <= ERROR_LINE_LIMIT, \
            f"error line of {len(lines[0])} characters for: archplace {shown}"
        assert tree(case_dir) == before, f"a refused command created or changed files: archplace {shown}"
    return code, err, case_dir


class _Hang(Exception):
    pass


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise _Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
