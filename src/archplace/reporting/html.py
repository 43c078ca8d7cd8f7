"""One self-contained HTML page of figures and tables (rendering only): plotly.js is embedded
in the page (no network is needed to open it), every figure is a Plotly ``div`` drawn when the
page loads, tables are plain HTML.

A page is a title and a list of blocks (:class:`Heading`, :class:`Text`, :class:`HtmlTable`,
:class:`Figures`); :func:`render_page` turns them into the document.  The number of figures
is written in ``<meta name="archplace-figures">``, so a test can check that each was drawn.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from archplace._version import __version__
from archplace.dse.evaluate import DesignResult
from archplace.placement.result import PlanResult
from archplace.reporting.plan_tables import plan_label
from archplace.reporting.tables import DESIGN_COLUMNS, design_cells

_GIB = 2.0**30
FIGURE_CLASS = "archplace-figure"
"""CSS class of the element around every figure."""


@dataclass(frozen=True)
class Heading:
    """A section heading (``level`` 2 or 3)."""

    text: str
    level: int = 2


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text (escaped); ``note`` renders it as a muted remark."""

    text: str
    note: bool = False


@dataclass(frozen=True)
class HtmlTable:
    """A table: column names, rows of cells (plain text, escaped), an optional caption; rows
    after ``section`` (an index) are set apart, as the baseline under the designs."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    section: int | None = None


@dataclass(frozen=True)
class Figures:
    """Plotly figures side by side (one per row when narrow)."""

    figures: tuple[go.Figure, ...]


Block = Heading | Text | HtmlTable | Figures

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1.05em; }
p.note { color: #666; font-size: 0.9em; }
.row { display: grid; gap: 1em; }
.row > .archplace-figure { min-width: 0; }
@media (max-width: 1000px) { .row { grid-template-columns: minmax(0, 1fr) !important; } }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.left, th.left { text-align: left; }
tbody.section td { border-top: 2px solid #888; background: #f7fbf7; }
caption { caption-side: bottom; text-align: left; color: #555; padding-top: 0.4em; white-space: pre-line; }
footer { margin-top: 2em; color: #888; font-size: 0.8em; }
"""

_LEFT = {"design", "plan", "search", "part"}


def _table(block: HtmlTable) -> str:
    head = "".join(f'<th class="{"left" if c in _LEFT else ""}">{html.escape(c)}</th>' for c in block.columns)

    def row(cells: Sequence[str]) -> str:
        return "<tr>" + "".join(
            f'<td class="{"left" if c in _LEFT else ""}">{html.escape(v)}</td>'
            for c, v in zip(block.columns, cells, strict=True)) + "</tr>"

    split = len(block.rows) if block.section is None else block.section
    body = "<tbody>" + "".join(row(r) for r in block.rows[:split]) + "</tbody>"
    if split < len(block.rows):
        body += '<tbody class="section">' + "".join(row(r) for r in block.rows[split:]) + "</tbody>"
    caption = f"<caption>{html.escape(block.caption)}</caption>" if block.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead>{body}</table>"


def _figure(figure: go.Figure, number: int) -> str:
    div = pio.to_html(figure, full_html=False, include_plotlyjs=False, div_id=f"figure-{number}",
                      config={"displaylogo": False, "responsive": True}, default_height="auto")
    return f'<div class="{FIGURE_CLASS}">{div}</div>'


def figure_count(blocks: Sequence[Block]) -> int:
    """The figures of ``blocks``."""
    return sum(len(b.figures) for b in blocks if isinstance(b, Figures))


def render_page(title: str, blocks: Sequence[Block]) -> str:
    """The HTML document of ``blocks`` under ``title``, plotly.js inline (about 4.8 MB)."""
    parts, number = [], 0
    for block in blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{html.escape(block.text)}</h{block.level}>")
        elif isinstance(block, Text):
            parts.append(f'<p{" class=note" if block.note else ""}>{html.escape(block.text)}</p>')
        elif isinstance(block, HtmlTable):
            parts.append(_table(block))
        else:
            divs = []
            for figure in block.figures:
                number += 1
                divs.append(_figure(figure, number))
            # fixed columns: a figure is drawn while the page loads, before its neighbours exist
            columns = " ".join(["minmax(0, 1fr)"] * len(block.figures))
            parts.append(f'<div class="row" style="grid-template-columns: {columns}">{"".join(divs)}</div>')
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta name="generator" content="archplace {html.escape(__version__)}">\n'
            f'<meta name="archplace-figures" content="{number}">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n"
            f'<script type="text/javascript">{get_plotlyjs()}</script>\n</head>\n<body>\n'
            f"<h1>{html.escape(title)}</h1>\n{body}\n"
            f"<footer>written by archplace {html.escape(__version__)}</footer>\n</body>\n</html>\n")


def designs_table(designs: Sequence[DesignResult], baseline: DesignResult | None, caption: str = ""
                  ) -> HtmlTable:
    """The designs (numbered from 1 in the given order) under the columns of ``archplace
    search``'s table, then the baseline (``base``) set apart."""
    rows = [tuple(design_cells(str(i), r)) for i, r in enumerate(designs, 1)]
    if baseline is not None:
        rows.append(tuple(design_cells("base", baseline)))
    return HtmlTable(DESIGN_COLUMNS, tuple(rows), caption, len(designs) if baseline is not None else None)


PLAN_COLUMNS = ("#", "plan", "iteration ms", "samples/s", "tokens/s", "TFLOP/s per device", "MFU", "HFU",
                "max memory GiB")


def plans_table(results: Sequence[PlanResult], caption: str = "") -> HtmlTable:
    """One row per plan (numbered from 1 in the given order), as ``archplace plan`` prints them."""
    rows = []
    for i, r in enumerate(results, 1):
        peak = max((m.total for m in r.memory), default=0.0)
        rows.append((str(i), plan_label(r), f"{r.iteration_time_s * 1e3:.2f}",
                     f"{r.throughput_samples_per_s:,.1f}", f"{r.tokens_per_s:,.0f}",
                     f"{r.model_flop_per_s_per_device / 1e12:.1f}", f"{r.mfu:.1%}", f"{r.hfu:.1%}",
                     f"{peak / _GIB:.2f}"))
    return HtmlTable(PLAN_COLUMNS, tuple(rows), caption)
