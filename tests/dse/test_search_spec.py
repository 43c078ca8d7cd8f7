"""SearchSpec: a search written down (YAML, dict), checked field by field, and the same search
whether it comes from a file, from flags or from Python."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from archplace.base.errors import ConfigError
from archplace.front import api
from archplace.front.specs.search import EXAMPLE, FIELDS, SearchSpec, read_fields
from archplace.placement.plan import Recompute
from archplace.schemas import stamp
from cli_helpers import run

TINY_GPT = {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 256,
            "vocab_size": 1024}


@pytest.fixture()
def model(tmp_path: Path) -> str:
    path = tmp_path / "tiny-gpt" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY_GPT))
    return str(path)


def test_the_example_loads_into_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(EXAMPLE)
    spec = SearchSpec.from_yaml(path)
    assert spec == SearchSpec(models=("gpt2-xl",), devices=1024, global_batch=4096)
    assert set(yaml.safe_load(EXAMPLE)) == set(FIELDS)  # the example shows every field


def test_dict_and_yaml_round_trips(tmp_path: Path) -> None:
    spec = SearchSpec(models=["a", "b"], devices=64, global_batch=128, space="phaze", strategy="optuna",
                      objective="pareto", area_budget="280 mm2", power_budget=300, trials=7, seed=3,
                      seq_len=512, micro_batch_sizes=[2, 4], recomputes="all", tps=[1, 2],
                      schedules=["gpipe"],
                      zero_stages="0,3", grad_reduce_dtype="bf16", attention="sdpa", kernels="unfused",
                      fuse=True, baseline="none", executor="dask", scheduler="tcp://h:8786", jobs=1,
                      store=tmp_path / "r.db", exact_top=2, per_model=True, top=3)
    assert spec.models == ("a", "b") and spec.recomputes == tuple(Recompute) and spec.zero_stages == (0, 3)
    assert spec.baseline is None and spec.store == str(tmp_path / "r.db") and spec.tps == (1, 2)
    assert SearchSpec.from_dict(spec.to_dict()) == spec
    assert SearchSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    path = tmp_path / "spec.yaml"
    path.write_text(spec.to_yaml())
    assert SearchSpec.from_yaml(path) == spec
    assert spec.groups == (("a",), ("b",)) and spec.exact == 2
    assert spec.replace(per_model=False).groups == (("a", "b"),)
    assert SearchSpec(models="m", devices=1, global_batch=1).exact == 5  # exact_top None: top


@pytest.mark.parametrize(("changes", "message"), [
    ({"models": []}, "models: at least one model"),
    ({"devices": 0}, "devices must be a whole number from 1 to 1,048,576, got 0"),
    ({"global_batch": True}, "global_batch must be a whole number"),
    ({"space": ""}, "space must be a space name or a file path"),
    ({"strategy": "random"}, "unknown strategy 'random'; choose from: exhaustive"),
    ({"objective": "fast"}, "unknown objective 'fast'"),
    ({"area_budget": "-5 mm2"}, "area_budget: must be positive, got '-5 mm2'"),
    ({"power_budget": "nan W"}, "power_budget: cannot parse 'nan W'"),
    ({"area_budget": [1]}, "area_budget must be a quantity"),
    ({"trials": 0}, "trials must be a whole number from 1 to 1,000,000, got 0"),
    ({"seed": -1}, "seed must be a whole number from 0 to 4,294,967,295, got -1"),
    ({"micro_batch_sizes": []}, "micro_batch_sizes needs at least one value"),
    ({"micro_batch_sizes": [0]}, "micro_batch_sizes must be a whole number from 1"),
    ({"recomputes": "some"}, "unknown recompute 'some'"),
    ({"tps": "2"}, "tps must be a whole number"),
    ({"schedules": ["zigzag"]}, "unknown schedule 'zigzag'"),
    ({"zero_stages": "5"}, "zero_stage"),
    ({"grad_reduce_dtype": "fp8"}, "unknown grad_reduce_dtype 'fp8'"),
    ({"attention": "fast"}, "attention"),
    ({"fuse": "yes"}, "fuse must be true or false"),
    ({"executor": "ray"}, "unknown executor 'ray'"),
    ({"jobs": 0}, "jobs must be a whole number from 1"),
    ({"exact_top": 1001}, "exact_top must be a whole number from 0 to 1,000, got 1001"),
    ({"per_model": 1}, "per_model must be true or false"),
    ({"top": 0}, "top must be a whole number from 1 to 1,000, got 0"),
])
def test_bad_fields_are_named_never_as_flags(changes: dict[str, object], message: str,
                                             tmp_path: Path) -> None:
    base: dict[str, object] = {"models": ["gpt2-xl"], "devices": 8, "global_batch": 8}
    with pytest.raises(ConfigError) as exc:
        SearchSpec(**{**base, **changes})  # type: ignore[arg-type]
    assert message in str(exc.value) and "--" not in str(exc.value)  # the field, never a CLI flag
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**base, **changes}))
    with pytest.raises(ConfigError) as exc:
        SearchSpec.from_yaml(path)
    assert str(exc.value).startswith(f"{path}: ") and message in str(exc.value)


def test_unknown_and_missing_fields(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="search spec: unknown field 'model'; the fields are: models"):
        SearchSpec.from_dict({"model": "gpt2-xl", "devices": 8, "global_batch": 8})
    with pytest.raises(ConfigError, match="search spec: missing devices, global_batch"):
        SearchSpec.from_dict({"models": "gpt2-xl"})
    with pytest.raises(ConfigError, match="unknown field 'bogus'"):
        SearchSpec(models=("m",), devices=1, global_batch=1).replace(bogus=1)
    path = tmp_path / "partial.yaml"
    path.write_text("devices: 8\ntrials: 2\n")
    assert read_fields(path) == {"devices": 8, "trials": 2}  # the rest may come from flags
    path.write_text("- a list\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        read_fields(path)


@pytest.mark.slow  # 10 s: two searches; make test-slow (CI) runs it
def test_a_file_search_equals_the_same_search_from_flags(model: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny space, a tiny model, a few trials: the file and the flags give the same JSON,
    and options given with --config override the file's fields."""
    flags = ["--model", model, "--space", "tiny", "--devices", "8", "--global-batch", "16", "--trials", "2",
             "--micro-batch", "1", "--micro-batch", "2", "--recompute", "none", "--zero-stage", "0,1",
             "--baseline", "none", "--jobs", "1", "--top", "2", "--exact-top", "0"]
    code, by_flags, err = run(["search", *flags, "--out", str(tmp_path / "flags.json")], capsys)
    assert code == 0, err
    config = tmp_path / "run.yaml"
    config.write_text(EXAMPLE.replace("[gpt2-xl]", f"['{model}']").replace("1024 ", "8 ")
                      .replace("4096 ", "16 ").replace("trials: null", "trials: 2")
                      .replace("[1, 2, 4, 8]", "[1, 2]").replace("[both]", "[none]")
                      .replace("[0, 1, 2, 3]", "'0,1'").replace("baseline: tpuv4", "baseline: none")
                      .replace("jobs: null", "jobs: 1").replace("top: 5", "top: 2")
                      .replace("exact_top: null", "exact_top: 0"))
    code, by_file, err = run(["search", "--config", str(config), "--out", str(tmp_path / "file.json")],
                             capsys)
    assert code == 0, err
    assert by_file == by_flags
    assert (tmp_path / "file.json").read_text() == (tmp_path / "flags.json").read_text()
    from_api = api.search(SearchSpec.from_yaml(config))
    assert json.dumps(stamp("search", from_api.to_dict()), indent=2) + "\n" == \
        (tmp_path / "file.json").read_text()
    # an option given on the command line overrides the file's field
    code, _, err = run(["search", "--config", str(config), "--objective", "pareto",
                        "--out", str(tmp_path / "pareto.json")], capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "pareto.json").read_text())["objective"] == "pareto"


def test_cli_config_errors(model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("trials: 0\n")
    code, _, err = run(["search", "--config", str(config), "--model", model], capsys)
    assert code == 2 and err.strip() == f"archplace: error: {config}: trials must be a whole number from 1 " \
                                        f"to 1,000,000, got 0"
    config.write_text("devices: 8\n")
    code, _, err = run(["search", "--config", str(config), "--model", model], capsys)
    assert code == 2 and "--global-batch is required (or global_batch: in a --config file)" in err
    code, out, _ = run(["config", "--example", "search"], capsys)
    assert code == 0 and out == EXAMPLE


@pytest.mark.slow
def test_the_older_call_and_the_spec_agree(model: str) -> None:
    options = {"devices": 8, "global_batch": 16, "micro_batch_sizes": (1,), "recomputes": ("none",),
               "zero_stages": (0,), "baseline": None, "space": "tiny", "trials": 2}
    older = api.search(model, **options)
    spec = SearchSpec(models=(model,), jobs=1, exact_top=0, top=1, **options)  # type: ignore[arg-type]
    assert api.search(spec) == older
    assert api.search_each([model], **options) == [older]
    with pytest.raises(ConfigError, match="per_model: .* use search_each"):
        api.search(spec.replace(models=(model, "gpt2-xl"), per_model=True))
