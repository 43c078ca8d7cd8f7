"""``archplace graph``: per-layer totals of a model's operator graphs."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from archplace import api
from archplace.cli_options import AttentionOption, KernelsOption
from archplace.schemas import stamp


def _table(summary: dict[str, Any]) -> Table:
    """Layers with identical figures (the repeated blocks) collapse into one row."""
    tp = summary["tp"]
    table = Table(title=f"{summary['model']}: micro-batch {summary['micro_batch']}, "
                        f"sequence {summary['seq_len']}, TP {tp}{' + SP' if summary['sp'] else ''}"
                        f"{' (per device)' if tp > 1 else ''}")
    for column in ("layers", "params", "fwd GFLOP", "bwd GFLOP", "activations MiB", "boundary MiB",
                   "collectives", "operators"):
        table.add_column(column, justify="left" if column in ("layers", "collectives", "operators")
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
                      f"{f['boundary_bytes'] / 2**20:,.2f}",
                      ", ".join(f"{k} {v}" for k, v in f["collectives"].items()) or "-",
                      ", ".join(f"{k} {v}" for k, v in f["operators"].items()))
    total = summary["total"]
    table.add_section()
    table.add_row("total", f"{total['params']:,}", f"{total['fwd_flop'] / 1e9:,.1f}",
                  f"{total['bwd_flop'] / 1e9:,.1f}", "", "", "", "")
    return table


def register(app: typer.Typer) -> None:
    """Add the ``graph`` command to ``app``."""

    @app.command()
    def graph(
        model: Annotated[str, typer.Option(help="Model preset or path of an HF config.json.")],
        seq_len: Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")] = None,
        micro_batch: Annotated[int, typer.Option(help="Samples per micro-batch.")] = 1,
        tp: Annotated[int, typer.Option(help="Tensor-parallel width.")] = 1,
        sp: Annotated[bool, typer.Option("--sp", help="Sequence parallelism.")] = False,
        fuse: Annotated[bool, typer.Option("--fuse", help="Fuse element-wise ops into matmuls.")] = False,
        attention: AttentionOption = "flash",
        kernels: KernelsOption = "fused",
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """Per-layer FLOP, parameters, activation bytes and collectives of MODEL's graphs."""
        summary = api.graph(model, seq_len=seq_len, micro_batch=micro_batch, tp=tp, sp=sp, fuse=fuse,
                            attention=attention, kernels=kernels)
        if as_json:
            typer.echo(json.dumps(stamp("graph", summary), indent=2))
        else:
            Console(width=200).print(_table(summary))
