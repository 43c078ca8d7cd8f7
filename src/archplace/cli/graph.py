"""``archplace graph``: per-layer totals of a model's operator graphs."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from archplace.base.errors import ConfigError
from archplace.cli.derived import given_fields, with_options
from archplace.cli.options import plain_console
from archplace.front import api
from archplace.front.specs import ModelSpec
from archplace.reporting.graph_tables import graph_table
from archplace.schemas import stamp


def register(app: typer.Typer) -> None:
    """Add the ``graph`` command to ``app``."""

    @app.command()
    @with_options(ModelSpec)
    def graph(
        micro_batch: Annotated[int, typer.Option(help="Samples per micro-batch.")] = 1,
        tp: Annotated[int, typer.Option(help="Tensor-parallel width.")] = 1,
        ep: Annotated[int, typer.Option(help="Expert-parallel degree (mixture-of-experts models): "
                                              "one rank's share of the routed experts.")] = 1,
        etp: Annotated[int, typer.Option(help="Expert-tensor-parallel width (mixture-of-experts "
                                               "models): every routed expert's weights split etp "
                                               "ways.")] = 1,
        sp: Annotated[bool, typer.Option("--sp", help="Sequence parallelism.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
        **options: Any,
    ) -> None:
        """Per-layer FLOP, parameters, activation bytes and collectives of MODEL's graphs."""
        if options["model"] is None:
            raise ConfigError("graph needs --model")
        summary = api.graph(micro_batch=micro_batch, tp=tp, sp=sp, ep=ep, etp=etp,
                            **given_fields(ModelSpec, options))
        if as_json:
            typer.echo(json.dumps(stamp("graph", summary), indent=2))
        else:
            plain_console(200).print(graph_table(summary))
