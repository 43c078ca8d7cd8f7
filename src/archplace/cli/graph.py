"""``archplace graph``: per-layer totals of a model's operator graphs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from archplace import api
from archplace.cli.options import (
    AttentionOption,
    CapacityFactorOption,
    KernelsOption,
    LoadImbalanceOption,
    plain_console,
)
from archplace.reporting.graph_tables import graph_table
from archplace.schemas import stamp


def register(app: typer.Typer) -> None:
    """Add the ``graph`` command to ``app``."""

    @app.command()
    def graph(
        model: Annotated[str, typer.Option(help="Model preset or path of an HF config.json.")],
        seq_len: Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")] = None,
        micro_batch: Annotated[int, typer.Option(help="Samples per micro-batch.")] = 1,
        tp: Annotated[int, typer.Option(help="Tensor-parallel width.")] = 1,
        ep: Annotated[int, typer.Option(help="Expert-parallel degree (mixture-of-experts models): "
                                              "one rank's share of the routed experts.")] = 1,
        etp: Annotated[int, typer.Option(help="Expert-tensor-parallel width (mixture-of-experts "
                                               "models): every routed expert's weights split etp "
                                               "ways.")] = 1,
        sp: Annotated[bool, typer.Option("--sp", help="Sequence parallelism.")] = False,
        fuse: Annotated[bool, typer.Option("--fuse", help="Fuse element-wise ops into matmuls.")] = False,
        attention: AttentionOption = "flash",
        kernels: KernelsOption = "fused",
        capacity_factor: CapacityFactorOption = 1.0,
        expert_load_imbalance: LoadImbalanceOption = 1.0,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """Per-layer FLOP, parameters, activation bytes and collectives of MODEL's graphs."""
        summary = api.graph(model, seq_len=seq_len, micro_batch=micro_batch, tp=tp, sp=sp, fuse=fuse,
                            attention=attention, kernels=kernels, ep=ep, capacity_factor=capacity_factor,
                            expert_load_imbalance=expert_load_imbalance, etp=etp)
        if as_json:
            typer.echo(json.dumps(stamp("graph", summary), indent=2))
        else:
            plain_console(200).print(graph_table(summary))
