"""Plots of a searched design space (rendering only): throughput against die area and against
TDP, every evaluated design a point, the Pareto front of (throughput, area, TDP) marked, the best
design and the baseline labelled.  Uses matplotlib's object API (no pyplot, no global state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from archplace.base.outputs import replace_atomically
from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import pareto_front
from archplace.reporting.plain import figure_text

FRONT_LABEL = "Pareto front (throughput, area, TDP)"


def _xy(designs: Sequence[DesignResult], attribute: str) -> tuple[list[float], list[float]]:
    """x = the designs' ``attribute`` (``area_mm2`` or ``tdp_w``), y = their samples/s."""
    return [getattr(r, attribute) for r in designs], [r.throughput_samples_per_s for r in designs]


def _panel(axes: Axes, attribute: str, label: str, feasible: Sequence[DesignResult],
           front: Sequence[DesignResult], best: DesignResult | None, baseline: DesignResult | None) -> None:
    """samples/s against ``attribute`` on ``axes``."""
    axes.scatter(*_xy(feasible, attribute), s=10, color="#9aa5b1", alpha=0.6, label="designs")
    # not joined by a line: a front of three figures is not a curve in either projection
    axes.scatter(*_xy(front, attribute), s=24, color="#4C72B0", label=FRONT_LABEL)
    if best is not None and best.best is not None:
        axes.scatter(*_xy([best], attribute), s=160, marker="*", color="#C44E52", label="best", zorder=3)
        axes.annotate(figure_text(best.accelerator.name),
                      (getattr(best, attribute), best.throughput_samples_per_s), fontsize=7,
                      xytext=(-6, 8), textcoords="offset points", ha="right")
    if baseline is not None and baseline.best is not None:
        axes.scatter(*_xy([baseline], attribute), s=70, marker="D", color="#55A868",
                     label=figure_text(baseline.accelerator.name), zorder=3)
    axes.set_xlabel(label)
    axes.set_ylabel("training throughput (samples/s)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7, loc="lower right")


def design_space_figure(results: Sequence[DesignResult], *, title: str = "",
                        best: DesignResult | None = None, baseline: DesignResult | None = None) -> Figure:
    """Two panels, samples/s against area (mm²) and against TDP (W).

    Args:
        results: evaluated designs; infeasible ones (no plan fits) are left out and counted in
            the title.
        title: figure title.
        best: the design the search chose (marked with a star), if any.
        baseline: the reference design (e.g. ``tpuv4``; marked with a diamond), if any.

    Returns:
        The figure; each panel's scatter collections are labelled ``designs``, the front label
        (:data:`FRONT_LABEL`), ``best`` and the baseline's name.
    """
    feasible = [r for r in results if r.best is not None]
    front = pareto_front(feasible)
    figure = Figure(figsize=(12, 5))
    FigureCanvasAgg(figure)
    for column, (attribute, label) in enumerate((("area_mm2", "die area (mm²)"), ("tdp_w", "TDP (W)")), 1):
        _panel(figure.add_subplot(1, 2, column), attribute, label, feasible, front, best, baseline)
    dropped = len(results) - len(feasible)
    suffix = f" ({dropped} infeasible designs not shown)" if dropped else ""
    figure.suptitle(figure_text(f"{title}{suffix}"), fontsize=10)
    figure.tight_layout()
    return figure


def draw_design_space(results: Sequence[DesignResult], path: str | Path, *, title: str = "",
                      best: DesignResult | None = None, baseline: DesignResult | None = None) -> None:
    """Write :func:`design_space_figure` to exactly ``path`` (format from its suffix, e.g. PNG, SVG,
    PDF; PNG without one), replacing it whole (:func:`archplace.base.outputs.replace_atomically`: a
    failure leaves it as it was).

    Raises:
        OSError: the file cannot be written.
        ValueError: matplotlib writes no format of that suffix.
    """
    figure = design_space_figure(results, title=title, best=best, baseline=baseline)
    target = Path(path)
    image_format = target.suffix.lstrip(".").lower() or "png"
    replace_atomically(target, lambda handle: figure.savefig(handle, dpi=120, format=image_format),
                       binary=True)
