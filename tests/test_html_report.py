"""The HTML report: its figures' data (Pareto front, pipeline timeline and its bubbles), the
commands that write it (``report``, ``search --report``, ``evaluate --report``) and the page
itself, opened in headless Chromium: no console message, every figure drawn, a screenshot kept
(``test-artifacts/report.png``)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.dse.evaluate import DesignResult
from archplace.dse.request import SearchResult
from archplace.front import api
from archplace.placement.pipeline_timeline import (
    plan_micro_batches,
    plan_timeline,
    shown_micro_batches,
    simulate_pipeline,
)
from archplace.placement.plan import PipelineSchedule
from archplace.reporting.html import Figures, Heading, Text, render_page
from archplace.reporting.plotly_plan import timeline_traces
from archplace.reporting.plotly_space import FRONT_NAME, design_space_figures
from cli_helpers import run

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
SEARCH = ["search", "--model", "gpt2-xl", "--seq-len", "512", "--devices", "64", "--global-batch", "256",
          "--micro-batch", "1", "--tp", "1", "--zero-stage", "0", "--jobs", "1", "--exact-top", "0",
          "--strategy", "exhaustive-all", "--top", "3"]
# 16 GiB of HBM and no ZeRO: gpt2-xl's weights, gradients and Adam states need a pipeline
SPACE = ("base: tpuv4\ntensor_cores: [2, 4, 8]\narray_dim: [64, 128]\nvector_cores: [1, 2]\n"
         "buffer: [32 MiB]\nhbm: [16 GiB]\narea_min_fraction: 0.0\n")
FIGURE_DIV = re.compile(r'<div id="figure-\d+" class="[^"]*\bjs-plotly-plot\b')


# ---------------------------------------------------------------- the pipeline timeline

@pytest.mark.parametrize(("pp", "m", "schedule"), [
    (p, m, s) for p, m, s in itertools.product((1, 2, 4, 5), (1, 4, 8, 11), (PipelineSchedule.GPIPE,
                                                                          PipelineSchedule.ONE_F_ONE_B))
    if m >= p])
def test_gpipe_and_1f1b_leave_p_minus_1_slots_idle_per_device(pp: int, m: int,
                                                                  schedule: PipelineSchedule) -> None:
    forward, backward = 1.0, 2.0
    timeline = simulate_pipeline([forward] * pp, [backward] * pp, pp=pp, micro_batches=m, schedule=schedule)
    slot = forward + backward
    assert timeline.makespan_s == pytest.approx((m + pp - 1) * slot)
    for device in range(pp):
        assert timeline.idle_s(device) == pytest.approx((pp - 1) * slot)
        assert (timeline.bubbles(device) == []) == (pp == 1)


@pytest.mark.parametrize(("pp", "chunks", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 12), (3, 2, 9), (4, 2, 4)])
def test_interleaving_shrinks_the_bubble_v_times(pp: int, chunks: int, m: int) -> None:
    segments = pp * chunks
    timeline = simulate_pipeline([1.0 / chunks] * segments, [2.0 / chunks] * segments, pp=pp, micro_batches=m,
                                 schedule=PipelineSchedule.INTERLEAVED)
    for device in range(pp):
        assert timeline.idle_s(device) == pytest.approx((pp - 1) * 3.0 / chunks)


@pytest.mark.parametrize("schedule", list(PipelineSchedule))
def test_every_pass_once_in_dependency_order_without_overlap(schedule: PipelineSchedule) -> None:
    pp, chunks, m = 3, 2 if schedule is PipelineSchedule.INTERLEAVED else 1, 6
    segments = pp * chunks
    forward = [0.5, 1.0, 0.7, 0.9, 1.2, 0.4][:segments]  # unequal segments
    backward = [2 * f + 0.1 for f in forward]
    timeline = simulate_pipeline(forward, backward, pp=pp, micro_batches=m, schedule=schedule)
    ends = {(b.backward, b.segment, b.micro_batch): b for b in timeline.blocks}
    assert len(ends) == len(timeline.blocks) == 2 * segments * m
    for b in timeline.blocks:
        assert b.device == b.segment % pp
        assert b.end_s - b.start_s == pytest.approx((backward if b.backward else forward)[b.segment])
        if not b.backward and b.segment > 0:
            assert b.start_s >= ends[(False, b.segment - 1, b.micro_batch)].end_s
        if b.backward:
            assert b.start_s >= ends[(False, b.segment, b.micro_batch)].end_s
            if b.segment + 1 < segments:
                assert b.start_s >= ends[(True, b.segment + 1, b.micro_batch)].end_s
    for device in range(pp):
        mine = sorted((b for b in timeline.blocks if b.device == device), key=lambda b: b.start_s)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in itertools.pairwise(mine))
        busy = sum(b.end_s - b.start_s for b in mine)
        assert busy + timeline.idle_s(device) == pytest.approx(timeline.makespan_s)


def test_bad_timelines_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least pp 2 micro-batches"):
        simulate_pipeline([1.0] * 4, [1.0] * 4, pp=2, micro_batches=1, schedule=PipelineSchedule.INTERLEAVED)
    with pytest.raises(ConfigError, match="pipeline timeline"):
        simulate_pipeline([1.0] * 3, [1.0] * 3, pp=2, micro_batches=2, schedule=PipelineSchedule.ONE_F_ONE_B)


def test_timeline_traces_hold_every_pass_and_every_bubble() -> None:
    timeline = simulate_pipeline([1.0] * 4, [2.0] * 4, pp=4, micro_batches=8,
                                 schedule=PipelineSchedule.ONE_F_ONE_B)
    forward, backward, bubbles = timeline_traces(timeline)
    assert len(forward.x) == len(backward.x) == 32
    assert sum(bubbles.x) == pytest.approx(4 * 3 * 3.0 * 1e3)  # ms: (p - 1) slots on each of 4 devices


# ---------------------------------------------------------------- the design space

def _design(template: DesignResult, name: str, samples_per_s: float, area: float) -> DesignResult:
    assert template.best is not None
    best = dataclasses.replace(template.best, throughput_samples_per_s=samples_per_s)
    return dataclasses.replace(template, accelerator=dataclasses.replace(template.accelerator, name=name),
                               area_mm2=area, best=best)


def test_the_front_of_hand_made_points(searched: SearchResult) -> None:
    template = next(r for r in searched.evaluated if r.best is not None)
    points = {"a": (10.0, 100.0), "b": (8.0, 80.0), "c": (9.0, 120.0), "d": (5.0, 50.0), "e": (4.0, 60.0)}
    designs = [_design(template, name, *xy) for name, xy in points.items()]
    chip = dataclasses.replace(template.accelerator, name="x")
    infeasible = dataclasses.replace(designs[0], accelerator=chip, best=None, infeasible_reason="too big")
    area, tdp = design_space_figures([*designs, infeasible], best=designs[0])
    traces = {t.name: t for t in area.data}
    assert set(zip(traces[FRONT_NAME].x, traces[FRONT_NAME].y, strict=True)) == \
        {(100.0, 10.0), (80.0, 8.0), (50.0, 5.0)}
    assert set(zip(traces["designs"].x, traces["designs"].y, strict=True)) == {(120.0, 9.0), (60.0, 4.0)}
    assert list(traces["best"].x) == [100.0] and "1 infeasible not shown" in area.layout.title.text
    assert traces["best"].text[0].startswith("<b>a</b>") and "plan: tp" in traces[FRONT_NAME].text[0]
    assert list(tdp.data[1].x) == [template.tdp_w] * 3


# ---------------------------------------------------------------- commands and the page

@pytest.fixture(scope="module")
def space(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("space") / "space.yaml"
    path.write_text(SPACE)
    return path


@pytest.fixture(scope="module")
def searched(space: Path) -> SearchResult:
    return api.search("gpt2-xl", space=str(space), strategy="exhaustive-all", devices=64, global_batch=256,
                      seq_len=512, micro_batch_sizes=(1,), tps=(1,), zero_stages=(0,))


@pytest.fixture(scope="module")
def pages(space: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``search --store --report`` then ``report STORE -o``."""
    folder = tmp_path_factory.mktemp("report")
    db, searched_page, stored_page = folder / "run.db", folder / "search.html", folder / "report.html"
    for argv in ([*SEARCH, "--space", str(space), "--store", str(db), "--report", str(searched_page)],
                 ["report", str(db), "-o", str(stored_page)]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code in (0, None), argv
    return {"search": searched_page, "report": stored_page, "store": db}


def _figures_written(page: Path) -> int:
    found = re.search(r'<meta name="archplace-figures" content="(\d+)">', page.read_text(encoding="utf-8"))
    assert found is not None
    return int(found.group(1))


def test_pages_are_self_contained_with_every_figure(pages: dict[str, Path], searched: SearchResult) -> None:
    for name in ("search", "report"):
        text = pages[name].read_text(encoding="utf-8")
        assert "<script src=" not in text and "<link" not in text  # nothing fetched: plotly.js inline
        assert text.count("Plotly.newPlot(") == _figures_written(pages[name]) == 7
        assert "pipeline timeline: interleaved (v=4), pp 2" in text and "block.0 forward" in text
    assert searched.best is not None and searched.baseline is not None
    assert searched.best.accelerator.name in pages["report"].read_text(encoding="utf-8")
    # the store keeps no baseline: report evaluates it again, to the same figures as the search
    base = [re.findall(r'<tbody class="section">.*?</tbody>', pages[name].read_text(encoding="utf-8"))
            for name in ("search", "report")]
    assert base[0] == base[1] and len(base[0]) == 1 and ">base</td><td class=\"left\">tpuv4<" in base[0][0]
    assert f"{searched.baseline.throughput_samples_per_s:,.1f}" in base[0][0]


def test_plan_figures_of_an_interleaved_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "plan.html"
    status, out, err = run(["evaluate", "--model", "gpt2-xl", "--seq-len", "256", "--hardware", "tpuv4",
                            "--devices", "16", "--global-batch", "64", "--tp", "1", "--pp", "4", "--dp", "4",
                            "--micro-batch", "2", "--schedule", "interleaved", "--chunks", "2",
                            "--report", str(page)], capsys)
    assert status == 0 and f"wrote {page}" in err
    text = page.read_text(encoding="utf-8")
    assert _figures_written(page) == text.count("Plotly.newPlot(") == 5
    assert "pipeline timeline: interleaved (v=2), pp 4, all 8 micro-batches" in text
    assert "HBM 32 GiB" in text


def test_plan_micro_batches_and_shown() -> None:
    result = api.evaluate("gpt2-xl", "tpuv4", devices=16, global_batch=64, tp=1, pp=4, dp=4, micro_batch=2,
                          seq_len=256)
    assert plan_micro_batches(result) == 64 // (2 * 4)
    assert (shown_micro_batches(4, 16), shown_micro_batches(1, 16), shown_micro_batches(4, 3)) == (8, 4, 3)
    timeline = plan_timeline(result, 8)
    slot = max(t.total_s for t in result.stage_times)
    assert timeline.makespan_s <= (8 + 4 - 1) * slot * (1 + 1e-9)  # no slower than the lock-step pace


@pytest.mark.parametrize("case", ["missing", "text", "itself"])
def test_report_refuses_a_bad_store_and_writes_nothing(case: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    store, out = tmp_path / "run.db", tmp_path / "out" / "report.html"
    if case == "text":
        store.write_text("not a store\n")
    if case == "itself":
        store.write_text("")
        out = store
    status, _, err = run(["report", str(store), "-o", str(out)], capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists() and (case != "missing" or not store.exists())
    if case == "itself":
        assert store.read_bytes() == b""


def test_api_report_functions(pages: dict[str, Path], searched: SearchResult, tmp_path: Path) -> None:
    written = api.report(pages["store"], tmp_path / "a.html", top=2, baseline=None)
    assert _figures_written(written) == 7 and 'class="section"' not in written.read_text(encoding="utf-8")
    assert _figures_written(api.report_search(searched, tmp_path / "b.html")) == 6  # no model: no layer
    assert searched.best is not None and searched.best.best is not None
    plan_page = api.report_plan(searched.best.best, tmp_path / "c.html")
    assert _figures_written(plan_page) == 4 and "no layer schedule" in plan_page.read_text(encoding="utf-8")
    with pytest.raises(ConfigError, match="result store"):
        api.report(pages["store"], pages["store"])


def test_a_page_renders_plain_blocks(tmp_path: Path) -> None:
    text = render_page("t <&>", [Heading("h"), Text("a < b", note=True), Figures(())])
    assert "<title>t &lt;&amp;&gt;</title>" in text and '<p class=note>a &lt; b</p>' in text
    assert '<meta name="archplace-figures" content="0">' in text


# ---------------------------------------------------------------- headless Chromium

def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _open(browser: str, page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}",
                           "--virtual-time-budget=15000",
                           "--no-first-run", "--hide-scrollbars", *extra, page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
def test_chromium_draws_every_figure_without_console_messages(pages: dict[str, Path], tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium; .ci/run installs it)")
    control = tmp_path / "control.html"  # the check sees a console error when there is one
    control.write_text("<html><body><script>console.error('control-error')</script></body></html>")
    seen = _open(browser, control, tmp_path / "profile", "--dump-dom")
    assert "CONSOLE" in seen.stderr and "control-error" in seen.stderr
    for name in ("search", "report"):
        done = _open(browser, pages[name], tmp_path / "profile", "--dump-dom")
        assert done.returncode == 0, done.stderr[-2000:]
        console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
        assert console == []
        assert len(FIGURE_DIV.findall(done.stdout)) == _figures_written(pages[name]) == 7
        assert done.stdout.count('class="main-svg"') >= 2 * 6  # each drawn figure has its SVG layers
    screenshot = tmp_path / "report.png"
    shot = _open(browser, pages["report"], tmp_path / "profile", f"--screenshot={screenshot}",
                 "--window-size=1400,3000")
    assert shot.returncode == 0 and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(screenshot, ARTIFACTS / "report.png")


@pytest.mark.parametrize(("strategy", "objective", "heading"), [
    ("phaze", "pareto", "Pareto front and the designs after it (objective: pareto)"),
    ("optuna", "throughput-per-watt", "best designs (objective: throughput-per-watt)")])
def test_stores_of_other_strategies_and_objectives(space: Path, tmp_path: Path, strategy: str, objective: str,
                                                   heading: str, capsys: pytest.CaptureFixture[str]) -> None:
    db, page = tmp_path / "run.db", tmp_path / "report.html"
    argv = [*SEARCH, "--space", str(space), "--store", str(db), "--strategy", strategy,
            "--objective", objective, "--trials", "5"]
    assert run(argv, capsys)[0] == 0
    assert run(["report", str(db), "-o", str(page)], capsys)[0] == 0
    text = page.read_text(encoding="utf-8")
    assert f"<h3>{heading}</h3>" in text and _figures_written(page) == text.count("Plotly.newPlot(") == 7


def test_a_store_where_nothing_fits_still_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = tmp_path / "space.yaml"
    tiny.write_text(SPACE.replace("hbm: [16 GiB]", "hbm: [1 GiB]").replace("[2, 4, 8]", "[2]"))
    db, page = tmp_path / "run.db", tmp_path / "report.html"
    status, _, err = run([*SEARCH, "--space", str(tiny), "--store", str(db)], capsys)
    assert status == 2 and "no design of the space can train" in err
    assert run(["report", str(db), "-o", str(page)], capsys)[0] == 0
    text = page.read_text(encoding="utf-8")
    assert _figures_written(page) == 2 and "no design fits, so no plan to show" in text
    assert "4 infeasible not shown" in text
