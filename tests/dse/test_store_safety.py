"""A result store refuses what is not its own, in one line, without writing a byte; ``results``
only reads, shows which search each row belongs to and filters by it."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.dse.objective import Objective
from archplace.dse.store import APPLICATION_ID, SCHEMA_VERSION, ResultStore, SearchLabel
from archplace.front import api


def argv_search(space: Path, store: Path, *extra: str) -> list[str]:
    return ["search", "--model", "gpt2-xl", "--seq-len", "512", "--devices", "256", "--global-batch", "512",
            "--micro-batch", "1", "--micro-batch", "2", "--space", str(space), "--jobs", "1",
            "--strategy", "exhaustive-all", "--exact-top", "0", "--baseline", "none", "--store", str(store),
            *extra]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    code = exc.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), captured.out, captured.err


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], fragment: str) -> str:
    """Run ``argv``: exit 2 and one line on stderr naming ``fragment``."""
    code, _, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("archplace: error: ") and fragment in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, small_space_file: Path) -> Path:
    """Two searches of the small space: gpt2-xl for throughput, opt-350m per watt."""
    db = tmp_path_factory.mktemp("store") / "run.db"
    for argv in (argv_search(small_space_file, db),
                 ["search", "--model", "opt-350m", "--seq-len", "256", "--devices", "64", "--global-batch",
                  "128", "--micro-batch", "1", "--space", str(small_space_file), "--jobs", "1", "--strategy",
                  "exhaustive-all", "--exact-top", "0", "--baseline", "none", "--objective",
                  "throughput-per-watt", "--store", str(db)]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code in (0, None)
    return db


def edited(store: Path, tmp_path: Path, *statements: str) -> Path:
    """A copy of ``store`` changed by SQL ``statements``."""
    path = tmp_path / "edited.db"
    shutil.copy(store, path)
    with sqlite3.connect(path) as db:
        for statement in statements:
            db.execute(statement)
    db.close()
    return path


def written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def other_application(store: Path, tmp_path: Path) -> Path:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('ada')")
    db.close()
    return path


def unversioned(store: Path, tmp_path: Path) -> Path:
    """A store of the archplace before schema versions (same tables, no application id)."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE searches (key TEXT PRIMARY KEY, request TEXT NOT NULL, "
                   "created REAL NOT NULL)")
        db.execute("CREATE TABLE results (search TEXT, design TEXT, throughput_samples_per_s REAL, "
                   "area_mm2 REAL, feasible INTEGER, result TEXT, finished REAL, "
                   "PRIMARY KEY (search, design))")
    db.close()
    return path


def truncated(store: Path, tmp_path: Path) -> Path:
    data = store.read_bytes()
    return written(tmp_path / "truncated.db", data[:len(data) // 2])


def scribbled(store: Path, tmp_path: Path) -> Path:
    """Every page after the first overwritten with a pattern (a disk that returned garbage)."""
    data = bytearray(store.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = (b"\xde\xad\xbe\xef" * (len(data) // 4 + 1))[:len(data) - page]
    return written(tmp_path / "scribbled.db", bytes(data))


ROW = "rowid = (SELECT min(rowid) FROM results)"
"""The first row of the first (gpt2-xl) search."""

FOREIGN: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "text": (lambda s, t: written(t / "notes.txt", b"this is not sqlite, just text\n" * 20),
             "not an SQLite database"),
    "binary": (lambda s, t: written(t / "blob.bin", bytes(range(256)) * 40), "not an SQLite database"),
    "short SQLite-like header": (lambda s, t: written(t / "short.db", b"SQLite format 3\x00"),
                                 "not an SQLite database"),
    "another application": (other_application, "another application (application id 0, tables: users)"),
    "unversioned store": (unversioned, "schema version 0 (an older archplace)"),
    "newer schema": (lambda s, t: edited(s, t, f"PRAGMA user_version = {SCHEMA_VERSION + 1}"),
                     f"schema version {SCHEMA_VERSION + 1} (a newer archplace); this archplace reads "
                     f"version {SCHEMA_VERSION}"),
    "foreign application id": (lambda s, t: edited(s, t, "PRAGMA application_id = 7"),
                               "another application (application id 7, tables: plan_bounds, results, "
                               "searches)"),
    "truncated": (truncated, "result store"),
    "scribbled": (scribbled, "result store"),
    "extra column": (lambda s, t: edited(s, t, "ALTER TABLE results ADD COLUMN note TEXT"),
                     "table 'results' has columns"),
    "orphan row": (lambda s, t: edited(s, t, "INSERT INTO results SELECT 'f' || search, design, "
                                             "throughput_samples_per_s, area_mm2, feasible, result, "
                                             f"finished, checksum FROM results WHERE {ROW}"),
                   "results of no stored search"),
    "result not JSON": (lambda s, t: edited(s, t, f"UPDATE results SET result = '{{not json' WHERE {ROW}"),
                        "Expecting property name"),
    "result lacks fields": (lambda s, t: edited(s, t, "UPDATE results SET result = '{\"area_mm2\": 1.0}' "
                                                      f"WHERE {ROW}"),
                            "missing field 'accelerator'"),
    "result is a list": (lambda s, t: edited(s, t, f"UPDATE results SET result = '[1, 2]' WHERE {ROW}"),
                         "the result is not a JSON object"),
    "columns disagree": (lambda s, t: edited(s, t, "UPDATE results SET throughput_samples_per_s = "
                                                   f"throughput_samples_per_s * 2 WHERE {ROW}"),
                         "disagrees with the row's throughput_samples_per_s"),
    "text in a number column": (lambda s, t: edited(s, t, "UPDATE results SET area_mm2 = 'big' "
                                                          f"WHERE {ROW}"),
                                "area_mm2 must be a finite number, got 'big'"),
    "search row": (lambda s, t: edited(s, t, "UPDATE searches SET models = 'gpt2' "
                                             "WHERE objective = 'throughput'"),
                   "corrupt result store (search"),
    "unknown objective": (lambda s, t: edited(s, t, "UPDATE searches SET objective = 'speed'"),
                          "'speed' is not a valid Objective"),
}


@pytest.mark.parametrize("case", list(FOREIGN))
def test_foreign_files_are_refused_and_never_written(case: str, store: Path, small_space_file: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    make, fragment = FOREIGN[case]
    path = make(store, tmp_path)
    before = digest(path)
    line = refused(["results", str(path)], capsys, fragment)
    assert str(path) in line
    # the same search as the store's first: rows of its own search are read (and checked) first
    refused(argv_search(small_space_file, path), capsys, fragment)
    assert digest(path) == before and not Path(f"{path}-journal").exists()
    with pytest.raises(ConfigError):
        api.results(path)


def test_results_never_creates_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    refused(["results", str(missing)], capsys, f"result store not found: {missing}")
    empty = written(tmp_path / "empty.db", b"")
    refused(["results", str(empty)], capsys, "the file is empty, not a result store")
    refused(["results", str(tmp_path)], capsys, "not a file")
    assert not missing.exists() and empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_search_creates_or_initialises_a_store(small_space_file: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    refused(argv_search(small_space_file, tmp_path / "no" / "dir.db"), capsys, "is not a directory")
    assert not (tmp_path / "no").exists()
    empty = written(tmp_path / "empty.db", b"")
    code, _, _ = run(argv_search(small_space_file, empty), capsys)
    assert code == 0
    header = empty.read_bytes()[:100]
    assert int.from_bytes(header[68:72], "big") == APPLICATION_ID
    assert int.from_bytes(header[60:64], "big") == SCHEMA_VERSION
    assert len(api.results(empty)) == 12


def test_results_and_their_search(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = api.results(store)
    searches = list(dict.fromkeys(row.search for row in rows))
    assert [s.label.models for s in searches] == [("gpt2-xl",), ("opt-350m",)]
    assert [s.label.objective for s in searches] == [Objective.THROUGHPUT, Objective.PER_WATT]
    gpt2, opt = searches
    for search, figure in ((gpt2, "throughput_samples_per_s"), (opt, "throughput_per_watt")):
        ranked = [row.outcome for row in rows if row.search == search]
        values = [getattr(r, figure) for r in ranked if r.best is not None]
        assert len(ranked) == 12 and values == sorted(values, reverse=True)  # its own objective
    assert [r.design for r in api.results(store, search=opt.key[:3].upper())] == \
        [r.design for r in rows if r.search == opt]

    code, out, _ = run(["results", str(store), "--top", "2", "--csv", str(tmp_path / "r.csv")], capsys)
    assert code == 0
    assert out.count(f"{gpt2.short_id} gpt2-xl") == 2 and out.count(f"{opt.short_id} opt-350m") == 2
    assert "ranked by throughput-per-watt" in out and f"search {gpt2.short_id}: gpt2-xl on 256 devices" in out
    table = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert len(table) == 24 and [(r["search"], r["rank"]) for r in table[:2]] == [(gpt2.short_id, "1"),
                                                                                  (gpt2.short_id, "2")]
    assert {r["search"]: r["objective"] for r in table} == {gpt2.short_id: "throughput",
                                                            opt.short_id: "throughput-per-watt"}
    assert [r["design"] for r in table] == [r.design for r in rows]

    code, out, _ = run(["results", str(store), "--search", opt.short_id], capsys)
    assert code == 0 and opt.short_id in out and gpt2.short_id not in out
    refused(["results", str(store), "--search", "xyz"], capsys,
            f"no search 'xyz' in {store}; its searches: {gpt2.short_id} (gpt2-xl), {opt.short_id} (opt-350m)")
    refused(["results", str(store), "--search", " "], capsys, "a search id must not be empty")


def test_plot_draws_one_search(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "space.svg"
    refused(["results", str(store), "--plot", str(picture)], capsys, "--plot draws one search")
    assert not picture.exists()
    opt = api.results(store)[-1].search
    code, _, _ = run(["results", str(store), "--plot", str(picture), "--search", opt.short_id], capsys)
    assert code == 0 and "<svg" in picture.read_text()
    with pytest.raises(ConfigError, match="choose one with search=ID"):
        api.plot_design_space(str(store), tmp_path / "all.svg")


def test_outputs_never_overwrite_the_store(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(store)
    for option in ("--csv", "--plot"):
        refused(["results", str(store), option, str(store)], capsys, "that is the result store")
    assert digest(store) == before


def test_ambiguous_search_ids(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "many.db")
    label = SearchLabel(("m",), Objective.THROUGHPUT, 8, 8)
    keys = [store.begin({"n": i, "models": [{"name": "m"}], "cluster": {"devices": 8}, "global_batch": 8},
                        label) for i in range(40)]
    first = next(k for k in keys if sum(o[0] == k[0] for o in keys) > 1)
    with pytest.raises(ConfigError, match=f"search id '{first[0]}' matches [0-9]+ searches .*more digits"):
        store.select(first[0])
    assert [s.key for s in store.select(first)] == [first]


def test_an_interrupted_write_is_recovered_by_a_search_only(store: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A writer killed mid-transaction leaves a hot journal: ``results`` cannot read the file
    without replaying it (a write), so it refuses; a search's store replays it."""
    path = tmp_path / "killed.db"
    shutil.copy(store, path)
    code = ("import os, sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('PRAGMA cache_size = 1')\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "db.execute('DELETE FROM results')\n"
            "db.execute('INSERT INTO results SELECT search, design || x, throughput_samples_per_s, area_mm2, "
            "feasible, result, finished, checksum FROM results, "
            "(SELECT 1 AS x UNION SELECT 2 UNION SELECT 3)')\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    journal = Path(f"{path}-journal")
    assert journal.exists()
    state = (digest(path), digest(journal))
    refused(["results", str(path)], capsys, "a search was interrupted while writing to it")
    assert (digest(path), digest(journal)) == state
    ResultStore(path)  # a writer: replays the journal
    assert not journal.exists()
    assert [r.design for r in api.results(path)] == [r.design for r in api.results(store)]


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=12),
       st.sampled_from(["accelerator", "plan", "area_mm2", "models", "memory_per_device_bytes", None]))
def test_any_json_in_a_row_is_refused_cleanly(store: Path, tmp_path: Path, value: object, field: str | None
                                             ) -> None:
    """A row's result replaced by any JSON value, or one of its fields by one: a ConfigError (or, for
    a field nothing needs, like an empty memory list, the rows), never another exception."""
    path = tmp_path / "fuzz.db"
    shutil.copy(store, path)
    with sqlite3.connect(path) as db:
        (rowid, text), = db.execute(f"SELECT rowid, result FROM results WHERE {ROW}").fetchall()
        data = json.loads(text)
        if field is None:
            data = value
        else:
            data[field] = value
        db.execute("UPDATE results SET result = ? WHERE rowid = ?", (json.dumps(data), rowid))
    db.close()
    if field == "memory_per_device_bytes":
        with contextlib.suppress(ConfigError):
            assert len(api.results(path)) == 24
        return
    with pytest.raises(ConfigError, match="corrupt result store"):
        api.results(path)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(0, 255)), min_size=1, max_size=8))
def test_flipped_bytes_never_give_a_traceback(store: Path, tmp_path: Path, flips: list[tuple[int, int]]
                                              ) -> None:
    """Bytes of the file overwritten anywhere: the rows are read (a byte nothing reads) or the file
    is refused, with a ConfigError; never another exception."""
    data = bytearray(store.read_bytes())
    for offset, value in flips:
        data[offset % len(data)] = value
    path = written(tmp_path / "flipped.db", bytes(data))
    with contextlib.suppress(ConfigError):
        api.results(path)
