"""Every hostile input of the fuzz test's generators (tests/helpers/hostile.py), each tried once
on purpose rather than by chance: tampered result stores through ``results``, ``report`` and
``search --store``; MoE / MLA configs with a bad field through ``graph``; hardware named with rich
markup through ``estimate`` and ``search --baseline``; outputs onto FIFOs, ``/dev/null`` and
result stores.  Each must end with status 0 or 2, on status 2 with exactly one line on stderr, and
must leave special files, stores and (when refused) the case's directory as they were
(:func:`fuzz_files.check_case`)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fuzz_files import Files, check_case, make_files
from hostile import HOSTILE_STORES, MARKUP_NAMES, make_stores
from small_moe import MOE_BASES

Capture = pytest.CaptureFixture[str]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    return make_files(tmp_path_factory.mktemp("hostile"))


def _search(files: Files, *more: str) -> list[str]:
    return ["search", "--model", str(files.good["config"]), "--space", str(files.good["space"]),
            "--devices", "8", "--global-batch", "8", "--jobs", "1", *more]


@pytest.mark.parametrize("name", sorted(HOSTILE_STORES))
def test_tampered_store_is_read_safely(files: Files, name: str, capfd: Capture,
                                       _private_graph_cache: Path) -> None:
    beside_cache = set(_private_graph_cache.parent.iterdir())
    check_case(["results", f"STORE:{name}"], files, capfd)
    check_case(["report", f"STORE:{name}", "-o", "OUT:r.html", "--baseline", "none"], files, capfd)
    # a model name read from a store never becomes a path: nothing lands beside the graph cache
    assert set(_private_graph_cache.parent.iterdir()) == beside_cache
    assert not Path("/tmp/archplace-evil").exists()


@pytest.mark.parametrize("name", sorted(HOSTILE_STORES))
def test_search_into_a_tampered_store(files: Files, name: str, capfd: Capture) -> None:
    check_case(_search(files, "--baseline", "none", "--store", f"STORE:{name}"), files, capfd)


# The fields of the MoE / MLA bases that only MoE or MLA models have (the common ones are checked
# by tests/workload/test_config_checks.py).
MOE_FIELDS = {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
              "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts", "n_group",
              "topk_group", "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers", "q_lora_rank",
              "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "head_dim"}


FAST_DEEPSEEK = ("n_routed_experts", "q_lora_rank")
"""DeepSeek-V3's MoE / MLA fields that make test removes (each a 4-5 s trace); make test-slow
(CI) removes every one."""


def _bad_variants(values: tuple[object, ...], *marks: pytest.MarkDecorator) -> list[object]:
    """(family, field, value): each MoE / MLA field of each base set to each of ``values``
    (``MISSING``: removed); without ``marks``, DeepSeek-V3's fields but :data:`FAST_DEEPSEEK`
    are marked slow."""
    out = []
    for base in MOE_BASES:
        for field in sorted(set(base) & MOE_FIELDS):
            slow = not marks and base["model_type"] == "deepseek_v3" and field not in FAST_DEEPSEEK
            for value in values:
                out.append(pytest.param(base["model_type"], field, value,
                                        marks=(pytest.mark.slow,) if slow else marks))
    return out


# Removed and zero in make test; negative, far too large, fractional, null, boolean and text in
# the slow run (most of those are traced, 1-5 s each).
@pytest.mark.parametrize(("family", "field", "value"),
                         _bad_variants(("MISSING", 0))
                         + _bad_variants((-1, 10**6, 1.5, None, True, "8"), pytest.mark.slow))
def test_moe_config_field(files: Files, family: str, field: str, value: object, capfd: Capture) -> None:
    config = dict(next(base for base in MOE_BASES if base["model_type"] == family))
    if value == "MISSING":
        config.pop(field)
    else:
        config[field] = value
    check_case(["graph", "--model", "CONFIG:" + json.dumps(config).encode().hex(), "--seq-len", "64"],
               files, capfd)


FAST_MARKUP = ("[bold]x[/bold]", "a\x1b[31mred", "<script>alert(1)</script>")
"""The markup names make test tries (markup, an escape sequence, HTML); make test-slow (CI) all."""


@pytest.mark.parametrize("name", [name if name in FAST_MARKUP else pytest.param(name, marks=pytest.mark.slow)
                                  for name in MARKUP_NAMES])
def test_markup_hardware_name_is_text(files: Files, name: str, capfd: Capture) -> None:
    hardware = "HWNAME:" + name.encode().hex()
    code, err, _ = check_case(["estimate", "--model", str(files.good["config"]), "--hardware", hardware],
                              files, capfd)
    assert code == 0, err
    code, err, case = check_case(_search(files, "--baseline", hardware, "--out", "OUT:o.json",
                                         "--report", "OUT:o.html", "--plot", "OUT:o.png"), files, capfd)
    assert code == 0, err
    assert (case / "o.json").is_file() and (case / "o.png").is_file()
    page = (case / "o.html").read_text()
    assert json.loads((case / "o.json").read_text())["baseline"]["accelerator"]["name"] == name
    if "<" in name:  # the page shows the name, never runs or renders it as HTML
        assert name not in page


def _outputs(files: Files) -> dict[str, tuple[list[str], str, str]]:
    """Each output option of each command: (a command that succeeds, the option, a good suffix)."""
    model = str(files.good["config"])
    plan = ["--model", model, "--hardware", "tpuv4", "--devices", "8", "--global-batch", "8"]
    schedule = ["schedule", "--problem", str(files.good["problem"]), "--backend", "list"]
    return {
        "search --out": (_search(files, "--baseline", "none"), "--out", ".json"),
        "search --plot": (_search(files, "--baseline", "none"), "--plot", ".png"),
        "search --report": (_search(files, "--baseline", "none"), "--report", ".html"),
        "results --csv": (["results", "STORE:good"], "--csv", ".csv"),
        "results --plot": (["results", "STORE:good"], "--plot", ".svg"),
        "report -o": (["report", "STORE:good", "--baseline", "none"], "-o", ".html"),
        "plan --report": (["plan", *plan], "--report", ".html"),
        "evaluate --report": (["evaluate", "--plan", str(files.good["plan_doc"])], "--report", ".html"),
        "schedule --dump-problem": (schedule, "--dump-problem", ".json"),
        "schedule --gantt": (schedule, "--gantt", ".png"),
    }


OUTPUTS = ("search --out", "search --plot", "search --report", "results --csv", "results --plot", "report -o",
           "plan --report", "evaluate --report", "schedule --dump-problem", "schedule --gantt")


@pytest.mark.parametrize("target", ["FIFO", "DEVNULL", "STORE:good"])
@pytest.mark.parametrize("output", OUTPUTS)
def test_output_onto_special_file_is_refused(files: Files, output: str, target: str, capfd: Capture) -> None:
    argv, option, suffix = _outputs(files)[output]
    code, err, case = check_case([*argv, option, f"OUT:o{suffix}"], files, capfd)
    assert code == 0 and (case / f"o{suffix}").is_file(), err  # the command itself works
    onto = f"FIFO:o{suffix}" if target == "FIFO" else target
    code, err, _ = check_case([*argv, option, onto], files, capfd)
    assert code == 2, err


def test_each_tampered_store_differs(tmp_path: Path) -> None:
    """Every entry of HOSTILE_STORES changes its copy (its SQL matched something)."""

    def write(path: Path) -> None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE searches (key, request, models, objective, devices, global_batch, "
                       "created)")
            db.execute("CREATE TABLE results (search, design, throughput_samples_per_s, area_mm2, feasible, "
                       "result, finished)")
            db.execute("INSERT INTO searches VALUES ('k', '{\"a\": 1}', '[\"m\"]', 'throughput', 8, 8, 0)")
            db.execute("INSERT INTO results VALUES ('k', 'd', 1.0, 2.0, 1, '{\"design\": \"d\"}', 0)")
        db.close()

    stores = make_stores(tmp_path, write)
    good = stores.pop("good").read_bytes()
    assert all(path.read_bytes() != good for path in stores.values())
