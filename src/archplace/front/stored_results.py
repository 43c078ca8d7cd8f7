"""Reading a result store back: its designs ranked search by search (:func:`results`) and the
design-space figure of a search or a store (:func:`plot_design_space`); re-exported by
:mod:`archplace.front.api`."""

from __future__ import annotations

from pathlib import Path

from archplace.base.errors import ConfigError
from archplace.dse.objective import rank
from archplace.dse.request import SearchResult
from archplace.dse.store import ResultStore, StoredResult

__all__ = ["plot_design_space", "results"]


def results(store: str | Path, *, search: str | None = None, top: int | None = None) -> list[StoredResult]:
    """Results in a search store, search by search (oldest first), each search's designs best first
    by the objective of its latest run (:func:`archplace.dse.objective.rank`: feasible designs by
    the objective, ties by area then name, infeasible last; ``pareto``: the front first).

    Args:
        store: the SQLite file a search wrote (opened read-only; never written or created).
        search: only the search whose id starts with this (the hex digits ``StoredResult.search``
            shows, any case); None for every search.
        top: at most this many designs of each search (None: all).

    Raises:
        ConfigError: the file is missing, empty or not a result store of this schema version
            (:mod:`archplace.dse.store`), a row is corrupt, no search or several match
            ``search``, ``top`` is not a whole number >= 1.
    """
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
        raise ConfigError(f"top must be a whole number >= 1 or None, got {top!r}")
    reader = ResultStore(Path(store), read_only=True)
    out: list[StoredResult] = []
    for chosen in reader.select(search):
        rows = {row.design: row for row in reader.rows(chosen)}
        ranked = rank([row.outcome for row in rows.values()], chosen.label.objective)
        out.extend(rows[r.accelerator.name] for r in ranked[:top])
    return out


def plot_design_space(source: SearchResult | str, path: str | Path, *, search: str | None = None) -> None:
    """Draw samples/s against die area and against TDP of every evaluated design, the Pareto
    front of (throughput, area, TDP), the best design and the baseline
    (:func:`archplace.reporting.plots.design_space_figure`).

    Args:
        source: a search's result, or the path of a result store (every stored design of one of
            its searches; the best is that search's best, :func:`results`).
        path: the image to write; its suffix picks the format (``.png``, ``.svg``, ``.pdf``, ...).
        search: with a store holding several searches, the id (prefix) of the one to draw.

    Raises:
        ConfigError: the store is missing or not a result store; it holds designs of several
            searches and ``search`` does not choose one.
        OSError, ValueError: the image cannot be written, or its format is unknown.
    """
    from archplace.reporting.plots import draw_design_space  # matplotlib only when asked for

    if isinstance(source, SearchResult):
        draw_design_space(source.evaluated, path, best=source.best, baseline=source.baseline,
                          title=f"{source.model} on {source.devices} devices, global batch "
                                f"{source.global_batch} ({source.strategy})")
        return
    rows = results(source, search=search)
    searches = list(dict.fromkeys(row.search for row in rows))
    if len(searches) > 1:
        raise ConfigError(f"{source} holds designs of {len(searches)} searches "
                          f"({', '.join(s.short_id for s in searches)}): choose one with search=ID")
    designs = [row.outcome for row in rows]
    best = designs[0] if designs and designs[0].best is not None else None
    label = f", search {searches[0].short_id} ({', '.join(searches[0].label.models)})" if searches else ""
    draw_design_space(designs, path, best=best, title=f"{source}{label}: {len(rows)} stored designs")
