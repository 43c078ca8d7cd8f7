"""Search results store: resume after SIGKILL, identical stores from local and Dask executors."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from archplace.cli import main
from archplace.front import api

SPACE = """\
base: tpuv4
tensor_cores: [1, 2, 4, 8, 16]
array_dim: [32, 64, 128]
vector_cores: [1, 2]
buffer: [32 MiB, 64 MiB]
hbm: [32 GiB]
area_min_fraction: 0.0
"""
SEARCH = ["--model", "gpt2-xl", "--seq-len", "512", "--devices", "256", "--global-batch", "512",
          "--jobs", "1", "--strategy", "exhaustive-all", "--exact-top", "0"]


def rows(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as connection:
        return dict(connection.execute("SELECT design, finished FROM results").fetchall())


def rows_so_far(db: Path) -> dict[str, float]:
    """Rows of a store another process may still be creating (file there, schema not yet)."""
    try:
        return rows(db)
    except sqlite3.OperationalError:
        return {}


@pytest.mark.slow  # 9 s: a killed search process; make test-slow (CI) runs it
def test_resume_after_sigkill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    total = len(api.search_request("gpt2-xl", space=str(space), devices=256, global_batch=512).designs)
    db = tmp_path / "run.db"
    argv = ["search", *SEARCH, "--space", str(space), "--store", str(db)]
    process = subprocess.Popen([sys.executable, "-m", "archplace.cli", *argv], env=dict(os.environ),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if db.exists() and len(rows_so_far(db)) >= 2:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = rows(db)
    assert 2 <= len(before) < total, "the search was not killed midway"

    with pytest.raises(SystemExit) as exc:
        main([*argv, "--out", str(tmp_path / "resumed.json")])
    assert exc.value.code in (0, None)
    after = rows(db)
    assert len(after) == total
    assert all(after[design] == finished for design, finished in before.items())  # not evaluated again

    with pytest.raises(SystemExit):
        main(["search", *SEARCH, "--space", str(space), "--out", str(tmp_path / "fresh.json")])
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    fresh = json.loads((tmp_path / "fresh.json").read_text())
    assert resumed["best"] == fresh["best"]
    assert sorted(r["accelerator"]["name"] for r in resumed["evaluated"]) == \
        sorted(r["accelerator"]["name"] for r in fresh["evaluated"])
    capsys.readouterr()

    assert api.results(db)[0].design == fresh["best"]["accelerator"]["name"]
    with pytest.raises(SystemExit) as exc:
        main(["results", str(db), "--top", "3", "--csv", str(tmp_path / "r.csv")])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and fresh["best"]["accelerator"]["name"] in out
    assert len((tmp_path / "r.csv").read_text().splitlines()) == total + 1
    # the per-watt figure and TDP of the best design, as the search reported them
    assert f"{fresh['best']['throughput_per_watt']:.3g}" in out and f"{fresh['best']['tdp_w']:.0f}" in out
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert {"tdp_w", "throughput_per_watt"} <= set(header)


@pytest.mark.parametrize("strategy", [pytest.param("exhaustive-all", marks=pytest.mark.slow), "exhaustive"])
def test_local_and_dask_give_identical_stores(tmp_path: Path, strategy: str) -> None:
    """The same results (and, pruned, the same bounds) from a 2-worker local pool and a 2-worker
    local Dask cluster."""
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.replace("[1, 2, 4, 8, 16]", "[2, 8]").replace("[32, 64, 128]", "[64, 128]"))
    options = dict(space=str(space), devices=64, global_batch=128, seq_len=256, micro_batch_sizes=(1, 2),
                   strategy=strategy)
    local = tmp_path / "local.db"
    dask = tmp_path / "dask.db"
    api.search("gpt2-xl", jobs=2, store=str(local), **options)
    api.search("gpt2-xl", executor="dask", jobs=2, store=str(dask), **options)

    def content(db: Path, query: str) -> list[tuple[Any, ...]]:
        with sqlite3.connect(db) as connection:
            return sorted(connection.execute(query).fetchall())

    results = "SELECT design, result FROM results"
    assert content(local, results) == content(dask, results)
    if strategy == "exhaustive-all":
        assert len(content(local, results)) == 16
    else:
        bounds = "SELECT design, model, samples_per_s, samples_per_s_per_device FROM plan_bounds"
        assert len(content(local, bounds)) == 16 and content(local, bounds) == content(dask, bounds)
        assert 0 < len(content(local, results)) < 16  # some designs pruned
