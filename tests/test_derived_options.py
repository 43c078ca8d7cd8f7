"""Every option of ``plan`` and ``evaluate`` is derived from one declared spec field, and the
other way round (issue #25: one home for every plan option).

Checked: the commands' options are exactly the derived ones plus each command's own (files,
outputs, deprecated aliases); each derived option's flag and help are its field's; giving an
option on the command line sets its field in the run (every option, end to end through the
command, the engine replaced by a probe); the plan space's fields and the plan's correspond;
the Python keywords of ``api.plan`` / ``api.evaluate`` are the same fields.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from archplace.base.options import METADATA_KEY, declared, tried
from archplace.cli import app
from archplace.cli.derived import CliOption, cli_options
from archplace.cli.runs import EVALUATE_SPECS, PLAN_SPECS
from archplace.front import api
from archplace.front.specs import EvaluateRun, ModelSpec, Plan, PlanRun, PlanSpace
from archplace.front.specs.search import SearchSpec

# Options a command has of its own: not fields of a run (files to read or write, output form,
# deprecated aliases of a field's option).
OWN = {"plan": {"config", "layer_graph", "no_zero", "as_json", "report"},
       "evaluate": {"plan_file", "zero", "as_json", "report"},
       "search": {"config", "out", "plot", "report"},
       "graph": {"micro_batch", "tp", "ep", "etp", "sp", "as_json"},
       "estimate": {"hardware", "tp", "micro_batch", "ops", "as_json"},
       "schedule": {"problem_file", "hardware", "layer", "phase", "tp", "micro_batch", "backend",
                    "time_limit", "seed", "workers", "dump_problem", "as_json", "gantt"}}
SPECS: dict[str, tuple[type, ...]] = {"plan": PLAN_SPECS, "evaluate": EVALUATE_SPECS,
                                      "search": (SearchSpec,), "graph": (ModelSpec,),
                                      "estimate": (ModelSpec,), "schedule": (ModelSpec,)}
EXCLUDED: dict[str, tuple[str, ...]] = {
    "estimate": ("fuse", "recompute_modules", "expert_weighting", "swiglu_fp8_input"),
    "schedule": ("fuse", "recompute_modules", "expert_weighting", "swiglu_fp8_input")}
"""Spec fields a command does not take (estimate and schedule cost the operators as traced)."""
COMMANDS = ("plan", "evaluate", "search", "graph", "estimate", "schedule")

# The one text of a field given through a parse function, and the value it must set.
PARSED = {"stages": ("0-1,2-3", [[0, 1], [2, 3]]), "zero_stages": ("0,3", [0, 3]),
          "recompute_modules": ("layernorm,moe_act", ["layernorm", "moe_act"])}
# Plan fields no plan-space field lists: the plan search covers every pipeline depth, DP degree
# and stage split (the DP degree follows from the devices and the other degrees).
NOT_TRIED = {"pp", "dp", "stages"}
# The plan space's fields that set how the search reports, not a plan field.
SEARCH_ONLY = {"top_k"}
# Keywords of the Python functions that are not fields: the older spelling of ZeRO stage 1.
LEGACY_KEYWORDS = {"zero"}


def _command(name: str) -> Any:
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_is_a_field_or_the_commands_own(command: str) -> None:
    params = {p.name for p in _command(command).params}
    derived = cli_options(*SPECS[command], exclude=EXCLUDED.get(command, ()))
    assert params == set(derived) | OWN[command]
    fields = {(d.spec, d.name) for spec in SPECS[command] for d in declared(spec).values()
              if d.option.cli and d.name not in EXCLUDED.get(command, ())}
    assert {(o.field.spec, o.field.name) for o in derived.values()} == fields


@pytest.mark.parametrize("command", COMMANDS)
def test_each_option_has_its_fields_flag_and_help(command: str) -> None:
    by_name = {p.name: p for p in _command(command).params}
    for name, option in cli_options(*SPECS[command], exclude=EXCLUDED.get(command, ())).items():
        param = by_name[name]
        assert param.opts[0] == option.field.flag
        assert getattr(param, "help", None) == option.field.help
        listed = option.field.element is not None and option.field.option.parse is None
        assert getattr(param, "multiple", False) == listed


def test_a_plan_space_field_tries_a_plan_field_of_the_same_kind() -> None:
    plan, space = declared(Plan), declared(PlanSpace)
    tries = tried(PlanSpace)
    assert set(tries.values()) <= set(plan)
    for name, target in tries.items():
        element = space[name].element
        assert element is not None, name
        assert element is plan[target].type, name
    shared = set(space) - set(tries) - SEARCH_ONLY
    assert all(space[name].type is plan[name].type for name in shared)
    assert set(plan) == set(tries.values()) | shared | NOT_TRIED


def _sample(option: CliOption) -> tuple[list[str], Any]:
    """Command-line words that give ``option`` a value other than its default, and the value the
    field must then hold in the run's JSON form."""
    d = option.field
    flag = d.flag
    if d.name in PARSED:
        text, value = PARSED[d.name]
        return [flag, text], value
    if d.type is bool:
        if d.negated:
            return [flag], False
        return [flag], True
    kinds = d.enum
    if kinds is not None:
        values = [m.value for m in kinds]
        if d.element is not None:
            return [flag, values[-1], flag, values[0]], [values[-1], values[0]]
        other = next(v for v in reversed(values) if d.default is dataclasses.MISSING or v != d.default.value)
        return [flag, other], other
    kind = d.element if d.element is not None else d.type
    one: Any = {int: 2, float: 1.5, str: "some-name"}[kind]
    if d.element is not None:
        two = 3 if kind is int else one
        return [flag, str(one), flag, str(two)], [one, two] if two != one else [one]
    return [flag, str(one)], one


class _Probe(Exception):
    def __init__(self, run: Any) -> None:
        super().__init__("probe")
        self.run = run


BASE = {"plan": ["--model", "gpt2", "--hardware", "a100-80gb", "--devices", "8", "--global-batch", "8"],
        "evaluate": ["--model", "gpt2", "--hardware", "a100-80gb", "--devices", "8", "--global-batch", "8",
                     "--tp", "1", "--pp", "4", "--dp", "2", "--micro-batch", "1"]}


def _run_of(command: str, words: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    def probe(run: Any) -> Any:
        raise _Probe(run)

    monkeypatch.setattr(api, f"{command}_run", probe)
    try:
        _command(command).main([command, *BASE[command], *words][1:], standalone_mode=False)
    except _Probe as caught:
        run = caught.run
        assert isinstance(run, PlanRun if command == "plan" else EvaluateRun)
        data: dict[str, Any] = run.to_dict()
        return data
    raise AssertionError("the command did not reach the engine")


@pytest.mark.parametrize("command,name",
                         [(c, n) for c in ("plan", "evaluate") for n in cli_options(*SPECS[c])])
def test_giving_an_option_sets_its_field(command: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    option = cli_options(*SPECS[command])[name]
    d = option.field
    if d.name in ("model", "hardware", "devices", "global_batch") or (
            command == "evaluate" and d.name in ("tp", "pp", "dp", "micro_batch")):
        words, expected = [], None  # given in BASE; checked there
    else:
        words, expected = _sample(option)
    if d.name == "sp" and command == "evaluate":
        words += ["--tp", "2", "--dp", "1"]  # sp needs tp > 1
    if d.name == "chunks" and command == "evaluate":
        words += ["--schedule", "interleaved"]
    if d.name == "schedule" and command == "evaluate" and expected == "interleaved":
        words += ["--chunks", "2"]  # more than one chunk needs the interleaved schedule
    if d.name == "stages":
        words += ["--pp", "2"]
    if d.name == "dp_replicate":
        words += ["--zero-stage", "1"]  # hybrid sharding replicates ZeRO shards
    data = _run_of(command, words, monkeypatch)
    holder = data["plan"] if command == "evaluate" and d.spec is Plan else data
    if expected is not None:
        got = holder[d.name]
        assert (got.value if isinstance(got, enum.Enum) else got) == expected


def _keywords(function: Any) -> set[str]:
    return set(inspect.signature(function).parameters)


def test_python_keywords_are_the_fields() -> None:
    plan_fields = {d.name for spec in PLAN_SPECS for d in declared(spec).values()}
    evaluate_fields = {d.name for spec in EVALUATE_SPECS for d in declared(spec).values()}
    assert _keywords(api.plan) == plan_fields | LEGACY_KEYWORDS
    assert _keywords(api.evaluate) == evaluate_fields | LEGACY_KEYWORDS


def test_every_field_of_a_run_spec_is_declared() -> None:
    for spec in {*PLAN_SPECS, *EVALUATE_SPECS, SearchSpec}:
        given = [f.name for f in dataclasses.fields(spec) if not f.metadata[METADATA_KEY].engine]
        assert [d.name for d in declared(spec).values()] == given
        for d in declared(spec).values():
            assert d.help.endswith(".") and d.text  # a help line for every field


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "estimate"])  # its page lists matmul's too
def test_the_commands_page_lists_every_option(command: str) -> None:
    """docs/commands/COMMAND.md's options table names each option of the command, and no other."""
    page = Path(__file__).resolve().parents[1] / "docs" / "commands" / f"{command}.md"
    table = page.read_text(encoding="utf-8").split("## Options", 1)[1]
    documented = set(re.findall(r"^\| `(--[a-z0-9-]+)", table, re.MULTILINE))
    documented |= set(re.findall(r"`(--[a-z0-9-]+)[^`]*`(?=[^|\n]*\|)", table))
    flags = set()
    for param in _command(command).params:
        flags.update(o for o in param.opts if o.startswith("--"))
        flags.update(o for o in getattr(param, "secondary_opts", ()) if o.startswith("--"))
    flags.discard("--help")
    assert flags <= documented, sorted(flags - documented)
    assert documented <= flags, sorted(documented - flags)


SEARCH_BASE = ["--model", "gpt2", "--devices", "8", "--global-batch", "8"]
# A valid value of each search option that is a text with choices or a name (the others are
# sampled by type), and the field's value it must set.
SEARCH_SAMPLES: dict[str, tuple[list[str], Any]] = {
    "space": (["phaze"], "phaze"), "cluster": (["a100-80gb"], "a100-80gb"),
    "strategy": (["phaze"], "phaze"), "objective": (["pareto"], "pareto"),
    "area_budget": (["280 mm2"], "280 mm2"), "power_budget": (["300 W"], "300 W"),
    "recomputes": (["full", "none"], ["full", "none"]), "schedules": (["gpipe", "1f1b"], ["gpipe", "1f1b"]),
    "grad_reduce_dtype": (["bf16"], "bf16"), "precisions": (["fp8", "bf16"], ["fp8", "bf16"]),
    "attention": (["sdpa"], "sdpa"), "kernels": (["unfused"], "unfused"),
    "baseline": (["a100-80gb"], "a100-80gb"), "executor": (["dask"], "dask"),
    "scheduler": (["tcp://host:8786"], "tcp://host:8786"), "store": (["s.db"], "s.db"),
}


@pytest.mark.parametrize("name", list(cli_options(SearchSpec)))
def test_giving_a_search_option_sets_its_field(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    option = cli_options(SearchSpec)[name]
    d = option.field
    if d.name in ("models", "devices", "global_batch"):
        words, expected = [], None  # given in SEARCH_BASE
    elif d.name in SEARCH_SAMPLES:
        values, expected = SEARCH_SAMPLES[d.name]
        words = [word for value in values for word in (d.flag, value)]
    else:
        words, expected = _sample(option)
    if d.name in ("exact_top", "top"):
        words += ["--top", "3"] if d.name == "exact_top" else []

    def probe(spec: SearchSpec, **_: Any) -> Any:
        raise _Probe(spec)

    monkeypatch.setattr(api, "search_each" if d.name == "per_model" else "search", probe)
    try:
        _command("search").main([*SEARCH_BASE, *words], standalone_mode=False)
    except _Probe as caught:
        spec = caught.run
    else:
        raise AssertionError("the command did not reach the search")
    assert spec.to_dict()["models"] == ["gpt2"] and spec.devices == 8 and spec.global_batch == 8
    if expected is not None:
        assert spec.to_dict()[d.name] == expected
