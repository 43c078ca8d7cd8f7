"""Every JSON document the CLI writes is stamped (schema_version, archplace_version) and valid
against the JSON Schema of its kind shipped in ``archplace.schemas`` (issue #13)."""

from __future__ import annotations

import copy
import importlib
import importlib.metadata
import json
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

import archplace._version
from archplace.base.errors import ConfigError, InternalError
from archplace.cli import app
from archplace.scheduling.problem import ScheduleProblem
from archplace.schemas import SCHEMA_VERSIONS, STAMP_KEYS, load_schema, stamp

ROOT = Path(__file__).resolve().parents[1]
TINY_GPT = {"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256,
            "vocab_size": 2048}
WIDE_GPT = {**TINY_GPT, "n_embd": 512, "n_head": 8}
# 4 designs; the 16 MiB HBM ones cannot hold the wide model: infeasible designs in the results
SPACE = """\
base: tpuv4
tensor_cores: [2, 8]
array_dim: [128]
vector_cores: [2]
buffer: [32 MiB]
hbm: [16 MiB, 32 GiB]
area_min_fraction: 0.0
"""

# (document name, kind, command line (none: the file is written by an earlier line), output file or
# None for stdout); {dir} is a scratch directory, {tiny}, {wide} and {space} the files above
COMMANDS: list[tuple[str, str, list[str], str | None]] = [
    ("graph tp2 sp", "graph", ["graph", "--model", "{tiny}", "--tp", "2", "--sp", "--json"], None),
    ("estimate", "estimate", ["estimate", "--model", "{tiny}", "--hardware", "tpuv4", "--json"], None),
    ("matmul on arrays", "estimate-matmul",
     ["estimate", "matmul", "--m", "128", "--k", "256", "--n", "512", "--array", "128x128", "--json"], None),
    ("matmul on a preset", "estimate-matmul",
     ["estimate", "matmul", "--m", "128", "--k", "256", "--n", "512", "--hardware", "a100-80gb", "--json"],
     None),
    ("schedule", "schedule", ["schedule", "--model", "{tiny}", "--backend", "list", "--json",
                              "--dump-problem", "{dir}/problem.json"], None),
    ("dumped problem", "schedule-problem", [], "{dir}/problem.json"),  # written by the line above
    ("plan", "plan", ["plan", "--model", "{tiny}", "--hardware", "tpuv4", "--devices", "8",
                      "--global-batch", "32", "--top", "3", "--json"], None),
    ("plan of a layer graph", "plan", ["plan", "--layer-graph", str(ROOT / "examples" / "layer_graph.yaml"),
                                       "--hardware", "tpuv4", "--devices", "8", "--global-batch", "32",
                                       "--json"], None),
    ("evaluate interleaved zero3", "evaluate",
     ["evaluate", "--model", "{tiny}", "--hardware", "tpuv4", "--devices", "8", "--global-batch", "32",
      "--tp", "1", "--pp", "2", "--dp", "4", "--micro-batch", "1", "--schedule", "interleaved", "--chunks",
      "2", "--zero-stage", "3", "--dp-overlap", "--recompute", "selective", "--json"], None),
    ("search two models, pareto, exact", "search",
     ["search", "--model", "{tiny}", "--model", "{wide}", "--space", "{space}", "--devices", "16",
      "--global-batch", "64", "--micro-batch", "1", "--objective", "pareto", "--exact-top", "1",
      "--baseline", "a100-80gb", "--jobs", "1", "--out", "{dir}/pareto.json"], "{dir}/pareto.json"),
    ("search per model, no baseline", "search",
     ["search", "--model", "{tiny}", "--model", "{wide}", "--per-model", "--space", "{space}", "--devices",
      "16", "--global-batch", "64", "--micro-batch", "1", "--exact-top", "0", "--baseline", "none",
      "--jobs", "1", "--out", "{dir}/each.json"], "{dir}/each.json"),
]


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every command of COMMANDS run once (in this process), its JSON document by name."""
    scratch = tmp_path_factory.mktemp("outputs")
    names = {"dir": str(scratch), "space": str(scratch / "space.yaml")}
    (scratch / "space.yaml").write_text(SPACE)
    for name, config in (("tiny", TINY_GPT), ("wide", WIDE_GPT)):
        path = scratch / f"{name}-gpt" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        names[name] = str(path)
    runner = CliRunner()
    out: dict[str, dict[str, Any]] = {}
    for name, _, argv, target in COMMANDS:
        stdout = ""
        if argv:
            result = runner.invoke(app, [arg.format(**names) for arg in argv])
            assert result.exit_code == 0, (name, result.output, result.exception)
            stdout = result.stdout
        text = Path(target.format(**names)).read_text() if target else stdout
        out[name] = json.loads(text)
    return out


def _validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator(load_schema(kind))  # no format checker: formats are not asserted


def _errors(kind: str, document: object) -> list[str]:
    return [f"{error.json_path}: {error.message}" for error in _validator(kind).iter_errors(document)]


def test_every_kind_has_a_command_here() -> None:
    assert {kind for _, kind, _, _ in COMMANDS} == set(SCHEMA_VERSIONS)


@pytest.mark.parametrize("name, kind", [(name, kind) for name, kind, _, _ in COMMANDS])
def test_output_is_stamped_and_valid(documents: dict[str, dict[str, Any]], name: str, kind: str) -> None:
    document = documents[name]
    assert list(document)[:2] == list(STAMP_KEYS)
    assert document["schema_version"] == SCHEMA_VERSIONS[kind]
    assert document["archplace_version"] == archplace._version.__version__
    assert _errors(kind, document) == []


def _without(document: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    """A copy of ``document`` without the key at ``path``."""
    changed = copy.deepcopy(document)
    holder: Any = changed
    for step in path[:-1]:
        holder = holder[step]
    del holder[path[-1]]
    return changed


@pytest.mark.parametrize("name, kind, path", [
    ("graph tp2 sp", "graph", ("schema_version",)),
    ("graph tp2 sp", "graph", ("layers", 1, "activation_bytes")),
    ("estimate", "estimate", ("archplace_version",)),
    ("estimate", "estimate", ("layers", 1, "fwd", "ops", 0, "bound")),
    ("matmul on arrays", "estimate-matmul", ("compute_cycles",)),
    ("matmul on a preset", "estimate-matmul", ("gemm_efficiency",)),
    ("schedule", "schedule", ("ops", 0, "core")),
    ("dumped problem", "schedule-problem", ("ops", 0, "preds")),
    ("plan", "plan", ("plans", 1, "plan", "zero_stage")),
    ("plan", "plan", ("memory_per_device_bytes", 0, "gathered")),
    ("plan of a layer graph", "plan", ("comm_s", "dp")),
    ("evaluate interleaved zero3", "evaluate", ("stage_times_s", 3, "dp_comm")),
    ("search two models, pareto, exact", "search", ("front", 0, "models", 0, "accelerator", "clock_hz")),
    ("search two models, pareto, exact", "search", ("exact", 0, "feasible")),
    ("search per model, no baseline", "search", ("per_model", 1, "evaluated", -1, "infeasible_reason")),
    ("search per model, no baseline", "search", ("per_model", 0, "speedup_vs_baseline")),
])
def test_a_missing_required_key_fails(documents: dict[str, dict[str, Any]], name: str, kind: str,
                                      path: tuple[str | int, ...]) -> None:
    errors = _errors(kind, _without(documents[name], path))
    assert errors and any(repr(path[-1]) in error for error in errors), errors


def test_closed_and_open_objects(documents: dict[str, dict[str, Any]]) -> None:
    """Fixed structures refuse an unknown key; the plan and evaluate documents' top level takes
    fields describing the run."""
    graph = copy.deepcopy(documents["graph tp2 sp"])
    graph["layers"][0]["flops"] = 1
    assert any("'flops' was unexpected" in e for e in _errors("graph", graph))
    search = copy.deepcopy(documents["search two models, pareto, exact"])
    search["evaluated"][0]["models"][0]["plan"]["stage_count"] = 2
    assert _errors("search", search)
    for name, kind in (("plan", "plan"), ("evaluate interleaved zero3", "evaluate")):
        document = {**documents[name], "model": "tiny-gpt", "devices": 8, "global_batch": 32}
        assert _errors(kind, document) == []
        document["plan"] = {**document["plan"], "pipeline": "x"}
        assert any("'pipeline' was unexpected" in e for e in _errors(kind, document))


def test_context_and_expert_parallel_terms(documents: dict[str, dict[str, Any]]) -> None:
    """The breakdown parts and communication kinds of context and expert parallelism are
    required (the engine always gives them, 0 without cp and ep), other parts and kinds are
    refused."""
    for name, kind in (("plan", "plan"), ("evaluate interleaved zero3", "evaluate")):
        document = copy.deepcopy(documents[name])
        assert document["breakdown_s"]["cp_comm"] == 0.0 and document["comm_s"]["ep"]["total"] == 0.0
        missing = copy.deepcopy(document)
        del missing["breakdown_s"]["ep_comm"]
        assert any("'ep_comm' is a required property" in e for e in _errors(kind, missing))
        document["breakdown_s"].update(cp_comm=0.0, ep_comm=0.25)
        document["comm_s"].update(cp={"total": 0.5, "exposed": 0.25}, ep={"total": 0.0, "exposed": 0.0})
        document["plan"].update(cp=2, ep=4)
        assert _errors(kind, document) == []
        document["breakdown_s"]["sp_comm"] = 0.0
        document["comm_s"]["cp"] = {"total": -1.0, "exposed": 0.0}
        errors = _errors(kind, document)
        assert any("'sp_comm' was unexpected" in e for e in errors) and len(errors) == 2, errors
        document["plan"]["cp"] = 0
        assert len(_errors(kind, document)) == 3


def test_outputs_cover_the_variants(documents: dict[str, dict[str, Any]]) -> None:
    """The documents above exercise what the schemas branch on, so each branch is validated."""
    each = documents["search per model, no baseline"]["per_model"]
    assert {d["plan"] is None for d in each[1]["evaluated"]} == {True, False}  # infeasible designs too
    assert each[0]["baseline"] is None and each[0]["speedup_vs_baseline"] is None
    pareto = documents["search two models, pareto, exact"]
    assert pareto["front"] and pareto["exact"]
    assert {d["feasible"] for d in pareto["evaluated"]} == {True, False}
    assert pareto["baseline"]["accelerator"]["efficiency"] is not None  # a100-80gb's declared efficiency
    assert each[0]["evaluated"][0]["accelerator"]["efficiency"] is None  # a design of the space
    assert documents["plan of a layer graph"]["plan"]["stage_layers"]
    assert any(layer["collectives"] for layer in documents["graph tp2 sp"]["layers"])
    assert documents["matmul on a preset"]["gemm_efficiency"] is not None


def test_a_dumped_problem_is_read_back(documents: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    dumped = documents["dumped problem"]
    problem = ScheduleProblem.from_dict(dumped)
    assert problem.to_dict() == {k: v for k, v in dumped.items() if k not in STAMP_KEYS}
    with pytest.raises(ConfigError, match="schema_version 2 of a schedule-problem document"):
        ScheduleProblem.from_dict({**dumped, "schema_version": 2})
    with pytest.raises(ConfigError, match="archplace_version must be text"):
        ScheduleProblem.from_dict({**dumped, "archplace_version": 1})


def _shipped() -> Iterator[str]:
    for entry in resources.files("archplace.schemas").iterdir():
        if entry.name.endswith(".schema.json"):
            yield entry.name.removesuffix(".schema.json")


@pytest.mark.parametrize("kind", sorted(SCHEMA_VERSIONS))
def test_schemas_are_valid_and_versioned(kind: str) -> None:
    schema = load_schema(kind)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"urn:archplace:schema:{kind}" and schema["description"]
    branches = (schema, schema.get("then"), schema.get("else"), *schema.get("$defs", {}).values())
    versions = {branch["properties"]["schema_version"]["const"] for branch in branches
                if isinstance(branch, dict) and "schema_version" in branch.get("properties", {})}
    assert versions == {SCHEMA_VERSIONS[kind]}
    assert load_schema(kind) is not load_schema(kind)  # a fresh copy each time


def test_every_schema_file_is_shipped() -> None:
    assert set(_shipped()) == {*SCHEMA_VERSIONS, "common"}
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "schemas/*.schema.json" in data["tool"]["setuptools"]["package-data"]["archplace"]


def test_stamp() -> None:
    version = archplace._version.__version__
    assert stamp("plan", {"a": 1}) == {"schema_version": 1, "archplace_version": version, "a": 1}
    with pytest.raises(ConfigError, match="unknown document kind 'plans'"):
        stamp("plans", {})
    with pytest.raises(ConfigError, match="unknown document kind"):
        load_schema("common")
    with pytest.raises(InternalError):
        stamp("plan", {"schema_version": 3})


def test_version_without_package_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    assert archplace._version.__version__ == importlib.metadata.version("archplace")

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    try:
        assert importlib.reload(archplace._version).__version__ == "0+unknown"
    finally:
        monkeypatch.undo()
        importlib.reload(archplace._version)
    assert archplace._version.__version__ == importlib.metadata.version("archplace")
