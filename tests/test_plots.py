"""Design-space plots: the right points in the right groups, and the CLI writes them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from archplace.cli import main
from archplace.dse.objective import pareto_front
from archplace.dse.request import SearchResult
from archplace.front import api
from archplace.reporting.plain import figure_text
from archplace.reporting.plotly_space import design_hover
from archplace.reporting.plots import FRONT_LABEL, design_space_figure

SEARCH = ["--model", "gpt2-xl", "--seq-len", "512", "--devices", "256", "--global-batch", "512",
          "--micro-batch", "1", "--jobs", "1", "--exact-top", "0"]


@pytest.fixture(scope="module")
def space(small_space_file: Path) -> Path:
    return small_space_file


@pytest.fixture(scope="module")
def searched(space: Path) -> SearchResult:
    return api.search("gpt2-xl", space=str(space), strategy="exhaustive-all", devices=256, global_batch=512,
                      seq_len=512, micro_batch_sizes=(1,))


def points(figure, label: str) -> list[set[tuple[float, float]]]:
    """Per panel, the (x, y) points of the scatter labelled ``label``."""
    out = []
    for axes in figure.axes:
        found = [c for c in axes.collections if c.get_label() == label]
        out.append({(float(x), float(y)) for x, y in found[0].get_offsets()} if found else set())
    return out


def test_points_fronts_best_and_baseline(searched: SearchResult) -> None:
    assert searched.best is not None and searched.baseline is not None
    infeasible = dataclasses.replace(searched.evaluated[-1], best=None)
    results = [*searched.evaluated, infeasible]
    figure = design_space_figure(results, title="t", best=searched.best, baseline=searched.baseline)
    feasible = [r for r in results if r.best is not None]
    front = pareto_front(feasible)
    assert 2 <= len(front) < len(feasible)
    for panel, attribute in zip(range(2), ("area_mm2", "tdp_w"), strict=True):
        def at(r, attribute=attribute):
            return (getattr(r, attribute), r.throughput_samples_per_s)
        assert points(figure, "designs")[panel] == {at(r) for r in feasible}
        assert points(figure, FRONT_LABEL)[panel] == {at(r) for r in front}
        assert points(figure, "best")[panel] == {at(searched.best)}
        assert points(figure, "tpuv4")[panel] == {at(searched.baseline)}
    assert figure.get_suptitle() == "t (1 infeasible designs not shown)"


def test_search_and_results_write_plots(space: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    png, stored, db = tmp_path / "s.png", tmp_path / "stored.svg", tmp_path / "run.db"
    with pytest.raises(SystemExit) as exc:
        main(["search", *SEARCH, "--space", str(space), "--plot", str(png), "--store", str(db)])
    assert exc.value.code in (0, None) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit) as exc:
        main(["results", str(db), "--plot", str(stored)])
    assert exc.value.code in (0, None) and "<svg" in stored.read_text()
    capsys.readouterr()
    for command in (["results", str(db)], ["search", *SEARCH, "--space", "no-such-space"]):
        # refused before anything else is read or searched
        with pytest.raises(SystemExit) as exc:
            main([*command, "--plot", str(tmp_path / "plot.xyz")])
        err = capsys.readouterr().err.strip().splitlines()
        assert exc.value.code == 2 and len(err) == 1 and "--plot" in err[0] and "'.xyz'" in err[0]


def test_api_plots_a_result(searched: SearchResult, tmp_path: Path) -> None:
    path = tmp_path / "space.pdf"
    api.plot_design_space(searched, path)
    assert path.read_bytes()[:5] == b"%PDF-"


@pytest.mark.parametrize("name", ["$\\frac{$", "a $x$ b", "_hidden", "plain"])
def test_names_are_drawn_verbatim(searched: SearchResult, name: str, tmp_path: Path) -> None:
    """A design or baseline name is text in a figure: matplotlib neither reads it as mathtext
    (an invalid expression raised when drawn) nor hides it as a legend entry starting with '_'."""
    assert searched.best is not None and searched.baseline is not None
    best = dataclasses.replace(searched.best,
                               accelerator=dataclasses.replace(searched.best.accelerator, name=name))
    baseline = dataclasses.replace(searched.baseline,
                                   accelerator=dataclasses.replace(searched.baseline.accelerator, name=name))
    figure = design_space_figure(searched.evaluated, title=name, best=best, baseline=baseline)
    figure.savefig(tmp_path / "f.png")
    labels = {c.get_label() for c in figure.axes[0].collections}
    assert figure_text(name) in labels and figure.get_suptitle() == figure_text(name)
    assert [t.get_text() for t in figure.axes[0].texts] == [figure_text(name)]
    assert figure_text(name).replace("\\$", "").count("$") == 0
    assert figure_text(name).lstrip("\u200b").replace("\\$", "$") == name


def test_the_report_hover_shows_names_as_text(searched: SearchResult) -> None:
    assert searched.best is not None
    named = dataclasses.replace(searched.best,
                                accelerator=dataclasses.replace(searched.best.accelerator, name="<b>x</b> &"))
    assert design_hover(named).startswith("<b>&lt;b&gt;x&lt;/b&gt; &amp;</b><br>")
