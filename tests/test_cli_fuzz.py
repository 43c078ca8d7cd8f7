"""Fuzz test of the whole CLI: generated argument lists and files for every command.

The README's promise, checked on every generated case: the command exits with status 0 or 2,
never with a traceback (an exception escaping ``main``), and on status 2 it writes exactly one
line on stderr, ``archplace: error: ...``.  Arguments are drawn per option from valid values,
values of the wrong kind or range, and files of every bad kind (binary, empty, not UTF-8,
deeply nested, over the size cap, YAML alias bombs, HF configs with bad fields); the option
names come from the CLI itself, so a new option without a generator here fails
:func:`test_every_option_has_a_generator`.

The default run draws ``FUZZ_EXAMPLES`` cases (300) on small inputs; the ``slow`` run draws
``SLOW_EXAMPLES`` (1,500) and adds model presets, process pools and the HiGHS backend.
Both are derandomized (the same cases on every run, so CI never turns red by chance); the
environment variables ``ARCHPLACE_FUZZ_EXAMPLES`` and ``ARCHPLACE_FUZZ_SLOW_EXAMPLES`` change
the counts.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archplace.cli import app, main

FUZZ_EXAMPLES = int(os.environ.get("ARCHPLACE_FUZZ_EXAMPLES", "300"))
SLOW_EXAMPLES = int(os.environ.get("ARCHPLACE_FUZZ_SLOW_EXAMPLES", "1500"))
CASE_LIMIT_S = 120  # a case running longer than this counts as a hang
# Options always given (drawn like the others): a search runs on the 2-design space (in this
# process in the default run), and a schedule has a time limit of at most 2 s when valid, so that
# every case stays short; the default run also gives estimate a model and hardware.
ALWAYS = {("search",): {"--space"}, ("schedule",): {"--time-limit"}}
FAST_ALWAYS = {("search",): {"--jobs"}, ("estimate",): {"--model", "--hardware"}}

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "src" / "archplace" / "hardware" / "presets"
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


def _write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("fuzz"))


def make_files(root: Path) -> Files:
    """Write the shared good and bad input files under ``root``."""
    good = {
        "config": _write(root / "tiny" / "config.json", json.dumps(TINY_GPT)),
        "space": _write(root / "space.yaml", SPACE),
        "hardware": _write(root / "chip.yaml", (PRESETS / "tpuv4.yaml").read_text()),
        "layer_graph": ROOT / "examples" / "layer_graph.yaml",
        "problem": _write(root / "problem.json", json.dumps(PROBLEM)),
    }
    run = {"model": str(good["config"]), "hardware": "tpuv4", "devices": 8, "global_batch": 8}
    good["plan_config"] = _write(root / "plan.yaml", json.dumps({**run, "tps": [1], "micro_batches": [1]}))
    good["plan_doc"] = _write(root / "plan.json", json.dumps({**run, "plan": {"tp": 1, "pp": 1, "dp": 8,
                                                                               "micro_batch": 1}}))
    foreign_db = root / "foreign.db"
    with sqlite3.connect(foreign_db) as db:
        db.execute("CREATE TABLE t (x)")
    huge = root / "huge.json"
    with huge.open("wb") as handle:  # sparse: over any sane size cap, no disk used
        handle.truncate(200 * 2**20)
    bad = [
        _write(root / "binary.json", bytes(range(256)) * 4),
        _write(root / "empty.yaml", ""),
        _write(root / "blank.json", "  \n\t\n"),
        _write(root / "latin1.yaml", "name: caf\xe9\n".encode("latin-1")),
        _write(root / "deep.json", "[" * 100_000 + "]" * 100_000),
        _write(root / "deep.yaml", "a:\n" + "".join("  " * i + "- \n" for i in range(1, 3000))),
        _write(root / "bomb.yaml", YAML_BOMB),
        _write(root / "recursive.yaml", "a: &a [*a]\n"),
        _write(root / "list.yaml", "- 1\n- 2\n"),
        _write(root / "garbage.yaml", "{[}: : :\n\t- ]"),
        _write(root / "nan.json", '{"tensor_cores": NaN, "ops": []}'),
        huge, foreign_db, root,  # a directory where a file belongs
        root / "missing.json",
    ]
    for name, config in BAD_CONFIGS.items():
        bad.append(_write(root / name / "config.json", json.dumps(config)))
    out_dir = root / "out"
    out_dir.mkdir()
    return Files(good, tuple(bad), out_dir)


def _mix(valid: st.SearchStrategy[str], *bad: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid value three times in four (so that cases get past the first check and reach the
    work), else one of the bad kinds."""
    return st.integers(0, 3).flatmap(lambda r: valid if r else st.one_of(*bad))


def _ints(valid: list[int]) -> st.SearchStrategy[str]:
    """Whole numbers: mostly valid ones, else zero, negatives, beyond int64, or not numbers."""
    bad = st.sampled_from(["0", "-1", "-7", "100000000000000000000000", str(2**63), str(2**64 + 1),
                           "1e23", "1.5", "nan", "inf", "", "abc", "0x10", "٣"])
    return _mix(st.sampled_from([str(v) for v in valid]), bad, st.integers(-10, 10**6).map(str))


def _floats(valid: list[str]) -> st.SearchStrategy[str]:
    return _mix(st.sampled_from(valid), st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e400", "", "x"]))


def _words(valid: list[str]) -> st.SearchStrategy[str]:
    bad = st.sampled_from(["", "nope", "-", "--", "none", "ALL", "\x00", "é", "1"])
    return _mix(st.sampled_from(valid), bad, st.text(max_size=8))


def _units(valid: list[str]) -> st.SearchStrategy[str]:
    bad = ["nan W", "inf mm2", "1e400 mm2", "-5 W", "0 W", "abc", "", "80", "5 parsecs", "1e308 TB/s",
           "NaN GHz", "-1 GiB", "1 GiB GiB"]
    return _mix(st.sampled_from(valid), st.sampled_from(bad), st.text(max_size=10))


def _input_file(files: Files, good: list[str], names: list[str]) -> st.SearchStrategy[str]:
    """A file option: a good file or a preset name, else a bad file or made-up bytes."""
    return _mix(st.sampled_from([str(files.good[g]) for g in good] + names),
                st.sampled_from([str(p) for p in files.bad] + ["not-a-preset"]),
                st.binary(max_size=64).map(lambda b: "BYTES:" + b.hex()))


def _output(files: Files, suffixes: list[str]) -> st.SearchStrategy[str]:
    """An output path under the case's own directory (never elsewhere)."""
    names = [f"o{s}" for s in suffixes] + ["o", "o.unknownfmt", "sub/dir/o" + suffixes[0], "."]
    return st.sampled_from(names).map(lambda name: "OUT:" + name)


def generators(files: Files, slow: bool) -> dict[str, st.SearchStrategy[str]]:
    """Value generator of each option name."""
    models = ["gpt2-xl", "bert-large", "opt-350m"] if slow else []
    return {
        "--model": _input_file(files, ["config"], models),
        "--hardware": _input_file(files, ["hardware"], ["tpuv4", "a100-80gb", "h100-80gb", "phaze-ref"]),
        "--cluster": _input_file(files, ["hardware"], ["tpuv4", "a100-80gb"]),
        "--space": _input_file(files, ["space"], []),
        "--layer-graph": _input_file(files, ["layer_graph"], []),
        "--problem": _input_file(files, ["problem"], []),
        "--config": _input_file(files, ["plan_config"], []),
        "--plan": _input_file(files, ["plan_doc"], []),
        "--example": _words(["search", "plan"]),
        "store": st.one_of(st.just("OUT:run.db"), st.sampled_from([str(p) for p in files.bad])),
        "--store": st.one_of(st.just("OUT:run.db"), st.sampled_from([str(p) for p in files.bad])),
        "--devices": _ints([1, 2, 8, 16, 64, 1024]),
        "--global-batch": _ints([1, 8, 16, 64]),
        "--seq-len": _ints([64, 128, 256]),
        "--micro-batch": _ints([1, 2, 4]),
        "--tp": _ints([1, 2, 4]),
        "--cp": _ints([1, 2]),
        "--ep": _ints([1, 2]),
        "--etp": _ints([1, 2]),
        "--pp": _ints([1, 2]),
        "--dp": _ints([1, 2, 8]),
        "--chunks": _ints([1, 2]),
        "--top": _ints([1, 3]),
        "--trials": _ints([1, 3]),
        "--exact-top": _ints([0, 1]),
        "--jobs": _ints([1, 2] if slow else [1]),
        "--workers": _ints([1, 2]),
        "--seed": st.one_of(st.sampled_from(["0", "7", "-1", str(2**32), str(2**63), "x"]),
                            st.integers(-(2**70), 2**70).map(str)),
        "--time-limit": _floats(["0.5", "1", "2"]),
        "--m": _ints([1, 16, 128]), "--k": _ints([1, 16, 128]), "--n": _ints([1, 16, 128]),
        "--batch": _ints([1, 2]), "--cores": _ints([1, 8]), "--bytes-per-element": _ints([1, 2, 4]),
        "--array": _words(["128x128", "1x1", "16x8", "0x4", "4x0", "99999999999x2", "axb", "128"]),
        "--clock": _units(["1 GHz", "1.05 GHz", "940 MHz"]),
        "--buffer": _units(["32 MiB", "1 KiB"]),
        "--hbm-bandwidth": _units(["1.2 TB/s", "900 GB/s"]),
        "--area-budget": _units(["280 mm2", "600 mm2"]),
        "--power-budget": _units(["300 W", "1000 W"]),
        "--strategy": _words(["exhaustive", "exhaustive-all", "phaze", "wham", "optuna"]),
        "--objective": _words(["throughput", "throughput-per-watt", "pareto"]),
        "--recompute": _words(["none", "selective", "full", "both", "all"]),
        "--schedule": _words(["gpipe", "1f1b", "interleaved"]),
        "--executor": _words(["local"]),  # dask: tests/test_interrupts.py, tests/search/test_store.py
        "--scheduler": st.sampled_from(["", "nonsense", "tcp://"]),
        "--search": _words(["0", "a", "deadbeef", "f"]),
        "--baseline": _words(["tpuv4", "none", "a100-80gb"]),
        "--layer": _words(["embedding", "block", "head"]),
        "--phase": _words(["fwd", "bwd"]),
        "--backend": _words(["list", "cpsat"] + (["highs"] if slow else [])),
        "--dataflow": _words(["ws", "os"]),
        "--array-timing": _words(["overlapped", "scalesim", "fast"]),
        "--attention": _words(["eager", "sdpa", "flash"]),
        "--kernels": _words(["fused", "unfused"]),
        "--capacity-factor": _floats(["1", "1.0", "1.25", "2"]),
        "--expert-load-imbalance": _floats(["1", "1.5"]),
        "--rank-order": _words(["tp-cp-ep-pp-dp", "tp-cp-ep-dp-pp"]),
        "--optimizer": _words(["adam", "sgd"]),
        "--zero-stage": _words(["0", "1", "2", "3", "0,3", "all", "4", "x"]),
        "--grad-reduce-dtype": _words(["fp32", "bf16", "fp8"]),
        "--precision": _words(["bf16", "fp8"]),
        "--stages": _words(["0-1,2-3", "0-3", "0-0,1-3", "3-0", "0-1,1-3", "a-b", "0-99"]),
        "--out": _output(files, [".json"]),
        "--csv": _output(files, [".csv"]),
        "--plot": _output(files, [".png", ".svg"]),
        "--gantt": _output(files, [".png", ".pdf"]),
        "--report": _output(files, [".html"]),
        "--dump-problem": _output(files, [".json"]),
    }


def _command_params() -> dict[tuple[str, ...], list[Any]]:
    """Every (sub)command path of the CLI with its parameters."""
    found: dict[tuple[str, ...], list[Any]] = {}

    def walk(path: tuple[str, ...], command: Any) -> None:
        subcommands = getattr(command, "commands", None)
        if path and (not subcommands or getattr(command, "invoke_without_command", False)):
            found[path] = list(command.params)  # a group's own options: the group run alone
        for name, sub in (subcommands or {}).items():
            walk((*path, name), sub)

    walk((), typer.main.get_command(app))
    return found


def _name(param: Any) -> str:
    return param.opts[-1] if param.param_type_name == "option" else param.name


def test_every_option_has_a_generator(tmp_path: Path) -> None:
    known = set(generators(Files({k: tmp_path for k in ("config", "space", "hardware", "layer_graph",
                                                        "problem", "plan_config", "plan_doc")}, (), tmp_path),
                           slow=True))
    used = {_name(p) for params in _command_params().values() for p in params
            if not getattr(p, "is_flag", False)}
    assert used - known == set()


@st.composite
def argv_cases(draw: st.DrawFn, files: Files, slow: bool) -> list[str]:
    commands = _command_params()
    path = draw(st.sampled_from(sorted(commands)))
    values = generators(files, slow)
    argv = list(path)
    always = ALWAYS.get(path, set()) | (set() if slow else FAST_ALWAYS.get(path, set()))
    for param in commands[path]:
        name = _name(param)
        present = name in always or draw(st.integers(0, 99)) < (95 if param.required else 35)
        if not present:
            continue
        if getattr(param, "is_flag", False):
            argv.append(name)
            continue
        repeats = draw(st.integers(1, 2)) if param.multiple else 1
        for _ in range(repeats):
            value = draw(values[name])
            argv += [value] if param.param_type_name == "argument" else [name, value]
    if draw(st.integers(0, 99)) < 3:  # an option that does not exist, or a stray value
        argv.insert(draw(st.integers(0, len(argv))), draw(st.sampled_from(["--bogus", "42", "-x"])))
    return argv


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


def _materialise(argv: list[str], case_dir: Path) -> list[str]:
    """Turn the placeholders into real paths of this case: made-up bytes into a file, output
    names into paths under the case's own directory."""
    real = []
    for i, value in enumerate(argv):
        if value.startswith("BYTES:"):
            value = str(_write(case_dir / f"in{i}.yaml", bytes.fromhex(value[6:])))
        elif value.startswith("OUT:"):
            value = str(case_dir / value[4:])
        real.append(value)
    return real


def check_case(argv: list[str], files: Files, capfd: pytest.CaptureFixture[str]) -> None:
    case_dir = files.out_dir / f"case{len(list(files.out_dir.iterdir()))}"
    case_dir.mkdir()
    real = _materialise(argv, case_dir)
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
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("archplace: error: "), \
            f"stderr is not one error line for: archplace {shown}\n{err}"


def fuzz(files: Files, capfd: pytest.CaptureFixture[str], examples: int, slow: bool) -> None:
    """Check ``examples`` derandomized cases (the same ones on every run)."""

    @settings(max_examples=examples, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(argv_cases(files, slow=slow))
    def run(argv: list[str]) -> None:
        check_case(argv, files, capfd)

    run()


@pytest.mark.filterwarnings("ignore")
def test_cli_fuzz(files: Files, capfd: pytest.CaptureFixture[str]) -> None:
    fuzz(files, capfd, FUZZ_EXAMPLES, slow=False)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_cli_fuzz_slow(files: Files, capfd: pytest.CaptureFixture[str]) -> None:
    fuzz(files, capfd, SLOW_EXAMPLES, slow=True)
