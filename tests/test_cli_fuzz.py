"""Fuzz test of the whole CLI: generated argument lists and files for every command.

The README's promise, checked on every generated case: the command exits with status 0 or 2,
never with a traceback (an exception escaping ``main``), and on status 2 it writes exactly one
line on stderr, ``archplace: error: ...``.  Arguments are drawn per option from valid values,
values of the wrong kind or range, and files of every bad kind (binary, empty, not UTF-8,
deeply nested, over the size cap, YAML alias bombs, HF configs with bad fields); the option
names come from the CLI itself. An option derived from a declared spec field (a plan, search
or model option) gets its generator from the field (:func:`declared_generators`: its enum's
values, whole numbers, decimals), so a new plan dimension is fuzzed with nothing written here;
any other option without a generator here fails :func:`test_every_option_has_a_generator`.

The default run draws ``FUZZ_EXAMPLES`` cases (40) on small inputs; the ``slow`` run draws
``SLOW_EXAMPLES`` (1,500) and adds model presets, process pools and the HiGHS backend.
Both are derandomized (the same cases on every run, so CI never turns red by chance); the
environment variables ``ARCHPLACE_FUZZ_EXAMPLES`` and ``ARCHPLACE_FUZZ_SLOW_EXAMPLES`` change
the counts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archplace.base.options import Declared
from archplace.cli import app
from archplace.cli.derived import cli_options
from archplace.cli.runs import EVALUATE_SPECS, PLAN_SPECS
from archplace.front.specs import ModelSpec
from archplace.front.specs.search import SearchSpec
from fuzz_files import Files, check_case, make_files
from hostile import hostile_stores, markup_hardware, moe_configs, special_outputs

FUZZ_EXAMPLES = int(os.environ.get("ARCHPLACE_FUZZ_EXAMPLES", "40"))
SLOW_EXAMPLES = int(os.environ.get("ARCHPLACE_FUZZ_SLOW_EXAMPLES", "1500"))
# Options always given (drawn like the others): a search runs on the 2-design space (in this
# process in the default run), and a schedule has a time limit of at most 2 s when valid, so that
# every case stays short (and profile times the smoke grid); the default run also gives estimate
# a model and hardware.
ALWAYS = {("search",): {"--space"}, ("schedule",): {"--time-limit"}, ("profile",): {"--grid"}}
FAST_ALWAYS = {("search",): {"--jobs"}, ("estimate",): {"--model", "--hardware"}}

@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("fuzz"))


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
    """An output path under the case's own directory (never elsewhere), now and then one onto a
    special file (a FIFO, ``/dev/null``) or an existing result store."""
    names = [f"o{s}" for s in suffixes] + ["o", "o.unknownfmt", "sub/dir/o" + suffixes[0], "."]
    return _mix(st.sampled_from(names).map(lambda name: "OUT:" + name), special_outputs())


def _declared(d: Declared) -> st.SearchStrategy[str] | None:
    """The generator of a declared field's option, from the field: its enum's values, small
    whole numbers (1, 2 and the default), decimals (1, 1.5 and the default); None for a type
    with no rule here (its option needs an entry in :func:`generators`)."""
    kinds = d.enum
    if kinds is not None:
        return _words([str(member.value) for member in kinds])
    kind = d.element if d.element is not None else d.type
    default = d.default if isinstance(d.default, int | float) and not isinstance(d.default, bool) else None
    if kind is int:
        return _ints(sorted({1, 2} | ({default} if isinstance(default, int) else set())))
    if kind is float:
        return _floats(sorted({"1", "1.5"} | ({str(default)} if default is not None else set())))
    return None


def declared_generators() -> dict[str, st.SearchStrategy[str]]:
    """Generators of the options derived from declared fields (``plan``, ``evaluate``,
    ``search`` and the model options), by option name; fields whose option takes one text
    (a ``parse`` function) are left to :func:`generators`."""
    out: dict[str, st.SearchStrategy[str]] = {}
    for specs in (PLAN_SPECS, EVALUATE_SPECS, (SearchSpec,), (ModelSpec,)):
        for option in cli_options(*specs).values():
            d = option.field
            made = None if d.option.parse is not None or d.type is bool else _declared(d)
            if made is not None:
                out.setdefault(d.flag, made)
    return out


def generators(files: Files, slow: bool) -> dict[str, st.SearchStrategy[str]]:
    """Value generator of each option name: those of :func:`declared_generators`, then (taking
    precedence) the options with chosen values or of other kinds."""
    models = ["gpt2-xl", "bert-large", "opt-350m"] if slow else []
    return declared_generators() | {
        "--model": st.one_of(_input_file(files, ["config"], models), moe_configs()),
        "--hardware": st.one_of(_input_file(files, ["hardware"], ["tpuv4", "a100-80gb", "h100-80gb",
                                                                  "phaze-ref"]),
                                markup_hardware()),
        "--cluster": st.one_of(_input_file(files, ["hardware"], ["tpuv4", "a100-80gb"]), markup_hardware()),
        "--space": _input_file(files, ["space"], []),
        "--layer-graph": _input_file(files, ["layer_graph"], []),
        "--problem": _input_file(files, ["problem"], []),
        "--config": _input_file(files, ["plan_config"], []),
        "--plan": _input_file(files, ["plan_doc"], []),
        "--example": _words(["search", "plan"]),
        "runs": _input_file(files, ["runs"], []),
        "--fit": _words(["gemm_sustained", "hbm", "gemm_sustained,hbm", "attention_fwd,", "warp"]),
        "--variant": _words(["as-trained", "flash+fused", "eager+unfused"]),
        "store": st.one_of(st.just("OUT:run.db"), st.sampled_from([str(p) for p in files.bad]),
                           hostile_stores()),
        "--store": st.one_of(st.just("OUT:run.db"), st.sampled_from([str(p) for p in files.bad]),
                             hostile_stores()),
        "--devices": _ints([1, 2, 8, 16, 64, 1024]),
        "--global-batch": _ints([1, 8, 16, 64]),
        "--seq-len": _ints([64, 128, 256]),
        "--micro-batch": _ints([1, 2, 4]),
        "--tp": _ints([1, 2, 4]),
        "--pp": _ints([1, 2]),
        "--dp": _ints([1, 2, 8]),
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
        "--executor": _words(["local"]),  # dask: tests/test_interrupts.py, tests/dse/test_store.py
        "--scheduler": st.sampled_from(["", "nonsense", "tcp://"]),
        "--search": _words(["0", "a", "deadbeef", "f"]),
        "--baseline": st.one_of(_words(["tpuv4", "none", "a100-80gb"]), markup_hardware()),
        "--layer": _words(["embedding", "block", "head"]),
        "--phase": _words(["fwd", "bwd"]),
        "--backend": _words(["list", "cpsat"] + (["highs"] if slow else [])),
        "--dataflow": _words(["ws", "os"]),
        "--array-timing": _words(["overlapped", "scalesim", "fast"]),
        "--attention-kernel": _words(["flash2", "flash3", "cudnn", "triton-flash1", "nope"]),
        "--capacity-factor": _floats(["1", "1.0", "1.25", "2"]),
        "--expert-load-imbalance": _floats(["1", "1.5"]),
        "--recompute-modules": _words(["core_attn", "layernorm,mlp", "moe,moe_act", "mla_up_proj", "",
                                       "bogus"]),
        "--zero-stage": _words(["0", "1", "2", "3", "0,3", "all", "4", "x"]),
        "--grad-reduce-dtype": _words(["fp32", "bf16", "fp8"]),
        "--stages": _words(["0-1,2-3", "0-3", "0-0,1-3", "3-0", "0-1,1-3", "a-b", "0-99"]),
        "--out": _output(files, [".json"]),
        "--csv": _output(files, [".csv"]),
        "--plot": _output(files, [".png", ".svg"]),
        "--gantt": _output(files, [".png", ".pdf"]),
        "--report": _output(files, [".html"]),
        "--dump-problem": _output(files, [".json"]),
        # profile: only the smoke grid is valid here (ALWAYS gives --grid), so a case stays short
        "--out-dir": _output(files, ["-tables"]),
        "--grid": _words(["smoke"]),
        "--device": _words(["cpu", "cuda", "cuda:0", "cuda:x"]),
        "--dtype": _words(["bf16", "fp16", "fp32", "fp8"]),
        "--max-seconds": _floats(["0.5", "5"]),
        "--kernel": _words(["gemm", "attention", "softmax", "layernorm", "gelu", "copy"]),
        "--tag": _words(["profiled", "h100", "../up"]),
        "--preset": _words(["-", "h100-80gb"]),
        "--attention": _words(["flash2", "cudnn", "flash3"]),
        "--sustained": _floats(["0", "5", "inf"]),
        "--kernel-table": _input_file(files, [], ["gemm_h100_xla", "gemm_a100_llmcompass",
                                                  "gelu_a100_llmcompass"]),
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
    names = ("config", "space", "hardware", "layer_graph", "problem", "plan_config", "plan_doc", "runs")
    known = set(generators(Files({k: tmp_path for k in names}, (), tmp_path,
                                 {}), slow=True))
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
