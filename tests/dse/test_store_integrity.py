"""A result store's rows are checked against their checksums and their search's request, so a
store cannot choose names (paths) for the commands that read it; a store is created in one step,
before its first search's row, so a write that fails leaves it absent or usable; a refused
command creates nothing."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.dse.objective import Objective
from archplace.dse.request import SearchRequest
from archplace.dse.store import ResultStore, SearchLabel, request_key
from archplace.dse.store_file import check_plain_name, row_checksum
from archplace.front import api
from archplace.workload.zoo import LoadedModel


def argv_search(models: dict[str, str], space: Path, store: Path, *extra: str) -> list[str]:
    return ["search", "--model", models["gpt"], "--devices", "16", "--global-batch", "32", "--micro-batch",
            "1", "--space", str(space), "--jobs", "1", "--strategy", "exhaustive", "--exact-top", "0",
            "--baseline", "none", "--store", str(store), *extra]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), capsys.readouterr().err


def refused_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("archplace: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, models: dict[str, str], small_space_file: Path) -> Path:
    """One finished search of the 12-design small space (pruned: some designs are not evaluated,
    and every design's bound is stored)."""
    db = tmp_path_factory.mktemp("store") / "run.db"
    with pytest.raises(SystemExit) as exc:
        main(argv_search(models, small_space_file, db))
    assert exc.value.code in (0, None)
    return db


def copy(store: Path, tmp_path: Path) -> Path:
    path = tmp_path / "copy.db"
    path.write_bytes(store.read_bytes())
    return path


def execute(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    db = sqlite3.connect(path)
    with db:
        for sql, args in statements:
            db.execute(sql, args)
    db.close()


def forge(path: Path, name: str) -> str:
    """Rename the store's model to ``name`` everywhere, consistently: its request (and so its
    key), its row, every checksum -- what a hand-made store could hold.  Returns the new key."""
    db = sqlite3.connect(path)
    (key, text, objective, devices, batch, created), = db.execute(
        "SELECT key, request, objective, devices, global_batch, created FROM searches").fetchall()
    request = json.loads(text)
    request["models"][0]["name"] = name
    new = request_key(request)
    text = json.dumps(request, sort_keys=True)
    models = json.dumps([name])
    with db:
        db.execute("UPDATE searches SET key = ?, request = ?, models = ?, checksum = ?",
                   (new, text, models, row_checksum(new, text, models, objective, devices, batch, created)))
        rows = db.execute("SELECT rowid, design, throughput_samples_per_s, area_mm2, feasible, result, "
                          "finished FROM results").fetchall()
        for rowid, *columns in rows:
            db.execute("UPDATE results SET search = ?, checksum = ? WHERE rowid = ?",
                       (new, row_checksum(new, *columns), rowid))
        db.execute("DELETE FROM plan_bounds")
    db.close()
    return new


EDITS = {  # one column changed alone: (SQL, what the refusal says)
    "models": ("UPDATE searches SET models = '[\"other\"]'", "are not its request's"),
    "devices": ("UPDATE searches SET devices = devices * 2", "devices 32 is not its request's 16"),
    "global batch": ("UPDATE searches SET global_batch = 8", "global_batch 8 is not its request's 32"),
    "objective": ("UPDATE searches SET objective = 'pareto'", "its columns do not match its checksum"),
    "created": ("UPDATE searches SET created = created + 1", "its columns do not match its checksum"),
    "search checksum": ("UPDATE searches SET checksum = 'x'", "its columns do not match its checksum"),
    "finished": ("UPDATE results SET finished = finished + 1 WHERE rowid = 1",
                 "its columns do not match its checksum"),
    "result JSON": ("UPDATE results SET result = replace(result, ', ', ',  ') WHERE rowid = 1",  # same JSON
                    "its columns do not match its checksum"),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_a_column_edited_alone_is_refused(case: str, store: Path, tmp_path: Path) -> None:
    path = copy(store, tmp_path)
    sql, fragment = EDITS[case]
    execute(path, (sql, ()))
    (key,), = sqlite3.connect(path).execute("SELECT key FROM searches").fetchall()
    with pytest.raises(ConfigError) as exc:
        api.results(path)
    line = str(exc.value)
    assert "\n" not in line
    assert line.startswith((f"{path}: corrupt result store (search {key[:8]!r}",  # its search row
                            f"{path}: corrupt result store (search {key[:8]}, design "))  # a result row
    assert fragment in line, line


def test_an_edited_bound_is_refused(store: Path, tmp_path: Path) -> None:
    path = copy(store, tmp_path)
    (key, bounds), = sqlite3.connect(path).execute(
        "SELECT search, count(*) FROM plan_bounds GROUP BY search").fetchall()
    assert bounds > 0
    assert len(ResultStore(path).bounds(key)) == bounds  # one model: one bound per design
    execute(path, ("UPDATE plan_bounds SET samples_per_s = samples_per_s * 2 WHERE rowid = 1", ()))
    with pytest.raises(ConfigError, match=f"corrupt result store \\(search {key[:8]}: bound"):
        ResultStore(path).bounds(key)


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/absolute", "..", "a\nb", "tab\there", ""])
def test_a_store_naming_a_model_with_a_path_is_refused(name: str, store: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A store whose rows agree with each other but name a model with a path: ``results`` and
    ``report`` refuse it, in one line naming the store and the search; nothing is written."""
    path = copy(store, tmp_path)
    key = forge(path, name)
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in (["results", str(path)], ["report", str(path), "--out", str(tmp_path / "page.html")]):
        line = refused_line(argv, capsys)
        assert f"{path}: corrupt result store (search {key[:8]!r}" in line and "not a plain name" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_plainly_renamed_model_is_read_and_reported(store: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The checks refuse paths, not names: the same store with its model renamed consistently."""
    path = copy(store, tmp_path)
    forge(path, "renamed-model")
    assert {tuple(r.search.label.models) for r in api.results(path)} == {("renamed-model",)}
    out = tmp_path / "page.html"
    code, err = run(["report", str(path), "--out", str(out), "--baseline", "none"], capsys)
    assert code == 0, err
    assert "renamed-model" in out.read_text()


def test_plain_names() -> None:
    for name in ("gpt2-xl", "Llama-3.1 8B", "my..model", ".hidden", "名前"):
        assert check_plain_name(name) == name
    for bad in ("a/b", "a\\b", ".", "..", "", "x" * 256, "nul\x00", "bidi\u202e", 3):
        with pytest.raises(ValueError, match="model name"):
            check_plain_name(bad)


def test_a_search_refuses_a_model_named_like_a_path(models: dict[str, str]) -> None:
    loaded = api.search_request(models["gpt"], devices=16, global_batch=32, baseline=None)
    model = loaded.models[0]
    with pytest.raises(ConfigError, match="a search's model name '../up' is not a plain name"):
        SearchRequest((LoadedModel("../up", model.config_json, model.seq_len),), loaded.designs,
                      loaded.cluster, loaded.global_batch, loaded.plan_space)


def test_begin_refuses_a_label_that_disagrees_with_its_request(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "s.db")
    request = {"models": [{"name": "m"}], "cluster": {"devices": 8}, "global_batch": 8}
    with pytest.raises(ConfigError, match="models \\['n'\\] are not its request's \\['m'\\]"):
        store.begin(request, SearchLabel(("n",), Objective.THROUGHPUT, 8, 8))
    with pytest.raises(ConfigError, match="devices 4 is not its request's 8"):
        store.begin(request, SearchLabel(("m",), Objective.THROUGHPUT, 4, 8))
    assert not store.path.exists()  # refused before the file is made
    key = store.begin(request, SearchLabel(("m",), Objective.THROUGHPUT, 8, 8))
    assert [s.key for s in store.searches()] == [key]


def test_the_stored_request_holds_the_designs_digest_not_the_designs(store: Path) -> None:
    (text,), = sqlite3.connect(store).execute("SELECT request FROM searches").fetchall()
    designs = json.loads(text)["designs"]
    assert designs["count"] == 12 and len(designs["sha256"]) == 64 and len(text) < 4096


@pytest.mark.parametrize("argv_extra", [["--devices", "0"], ["--micro-batch", "0"], ["--space", "nowhere"],
                                        ["--strategy", "nonsense"]])
def test_a_refused_search_creates_no_store(argv_extra: list[str], models: dict[str, str],
                                           small_space_file: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new.db"
    refused_line([*argv_search(models, small_space_file, db), *argv_extra], capsys)
    assert list(tmp_path.iterdir()) == []


LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from archplace.cli import main
main(sys.argv[2:])
"""


# the whole store: 60 KiB; make test writes 8 KiB of it, make test-slow (CI) more
@pytest.mark.parametrize("limit", [8 << 10, *(pytest.param(k << 10, marks=pytest.mark.slow)
                                              for k in (28, 36, 48))])
def test_a_store_whose_writes_fail_is_absent_or_usable(limit: int, store: Path, models: dict[str, str],
                                                       small_space_file: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A search whose writes fail part-way (a file-size limit, as a full disk): one line, and the
    store is absent or a store that the same search then resumes into.  (The ``store`` fixture
    has filled the graph cache, so the limited run writes nothing else.)"""
    db = tmp_path / "run.db"
    argv = argv_search(models, small_space_file, db)
    failed = subprocess.run([sys.executable, "-c", LIMITED, str(limit), *argv], capture_output=True,
                            text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 2 and len(lines) == 1 and lines[0].startswith("archplace: error: "), \
        failed.stderr
    assert str(db) in lines[0] and failed.returncode != -signal.SIGXFSZ
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".init")] == []
    assert db.exists() == (limit > 8 << 10)  # an empty store takes more than 8 KiB, less than 28 KiB
    if db.exists():
        ResultStore(db)  # a store (a writer replays what an interrupted write left)
    code, err = run(argv, capsys)
    assert code == 0, err
    assert sorted(r.design for r in api.results(db)) == sorted(r.design for r in api.results(store))
