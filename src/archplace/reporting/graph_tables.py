"""Rich table of ``archplace graph``: per-layer totals of a model's operator graphs (rendering
only)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from archplace.reporting.plain import PlainTable


def graph_table(summary: dict[str, Any]) -> Table:
    """Per-layer figures of a graph summary (the dict of :func:`archplace.front.api.graph`): parameters,
    forward and backward GFLOP, activation MiB (and, when the recompute modules free something,
    what selective recomputation keeps), boundary MiB, collectives and operator counts (and for
    a mixture-of-experts model the experts of each block: routed experts, top-k, shared experts,
    the experts per EP rank, rows per expert and the bytes of each all-to-all and expert-TP
    all-gather / reduce-scatter), then the totals.
    Layers with identical figures (the repeated blocks) collapse into one row."""
    tp, ep, etp = summary["tp"], summary.get("ep", 1), summary.get("etp", 1)
    table = PlainTable(title=f"{summary['model']}: micro-batch {summary['micro_batch']}, "
                        f"sequence {summary['seq_len']}, TP {tp}{' + SP' if summary['sp'] else ''}"
                        f"{f', EP {ep}' if ep > 1 else ''}{f', expert TP {etp}' if etp > 1 else ''}"
                        f"{' (per device)' if tp * ep * etp > 1 else ''}")
    moe = any("experts" in layer for layer in summary["layers"])
    # what selective recompute keeps, when its modules free something in some layer
    selective = any(layer.get("selective_activation_bytes", layer["activation_bytes"])
                    != layer["activation_bytes"] for layer in summary["layers"])
    for column in ("layers", "params", "fwd GFLOP", "bwd GFLOP", "activations MiB",
                   *(("selective MiB",) if selective else ()), "boundary MiB", "collectives", "operators",
                   *(("experts",) if moe else ())):
        table.add_column(column, justify="left" if column in ("layers", "collectives", "operators", "experts")
                         else "right")
    rows: list[tuple[list[str], dict[str, Any]]] = []
    for layer in summary["layers"]:
        figures = {k: v for k, v in layer.items() if k != "name"}
        if rows and rows[-1][1] == figures:
            rows[-1][0].append(layer["name"])
        else:
            rows.append(([layer["name"]], figures))
    for names, f in rows:
        label = names[0] if len(names) == 1 else f"{names[0]} … {names[-1]} (×{len(names)})"
        table.add_row(label, f"{f['params']:,}", f"{f['fwd_flop'] / 1e9:,.1f}",
                      f"{f['bwd_flop'] / 1e9:,.1f}", f"{f['activation_bytes'] / 2**20:,.1f}",
                      *((f"{f['selective_activation_bytes'] / 2**20:,.1f}",) if selective else ()),
                      f"{f['boundary_bytes'] / 2**20:,.2f}",
                      ", ".join(f"{k} {v}" for k, v in f["collectives"].items()) or "-",
                      ", ".join(f"{k} {v}" for k, v in f["operators"].items()),
                      *((_experts(f),) if moe else ()))
    total = summary["total"]
    table.add_section()
    table.add_row("total", f"{total['params']:,}", f"{total['fwd_flop'] / 1e9:,.1f}",
                  f"{total['bwd_flop'] / 1e9:,.1f}", "", *(("",) if selective else ()), "", "", "",
                  *(("",) if moe else ()))
    if moe:
        table.caption = f"active parameters per token: {total['active_params']:,}"
    return table


def _experts(figures: dict[str, Any]) -> str:
    """``8 (top 2), 16 tokens each`` for a mixture-of-experts block (``+ 1 shared`` after the top-k
    with shared experts; ``, 4 per rank`` and ``; all-to-all 0.25 MiB`` with expert parallelism;
    ``; expert-TP gather/scatter 0.50 MiB`` with expert tensor parallelism, whose rows per expert
    are those gathered from the etp group), ``-`` for a dense layer."""
    if "experts" not in figures:
        return "-"
    shared = figures.get("shared_experts", 0)
    local = figures.get("local_experts", figures["experts"])
    text = (f"{figures['experts']} (top {figures['experts_per_token']})"
            f"{f' + {shared} shared' if shared else ''}"
            f"{f', {local} per rank' if local != figures['experts'] else ''}, "
            f"{figures['tokens_per_expert']:,} tokens each")
    a2a = figures.get("all_to_all_bytes", 0.0)
    text = f"{text}; all-to-all {a2a / 2**20:,.2f} MiB" if a2a else text
    etp = figures.get("expert_tp_bytes", 0.0)
    return f"{text}; expert-TP gather/scatter {etp / 2**20:,.2f} MiB" if etp else text
