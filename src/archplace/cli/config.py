"""``archplace config``: starting files for the commands that read one (``--config``)."""

from __future__ import annotations

from typing import Annotated

import typer

from archplace.front.config_examples import EXAMPLES, example


def register(app: typer.Typer) -> None:
    """Add the ``config`` command to ``app``."""

    @app.command()
    def config(
        example_name: Annotated[str, typer.Option(
            "--example", help=f"Print a commented starting file: {' | '.join(sorted(EXAMPLES))}.")],
    ) -> None:
        """Print a commented example run file (e.g. archplace config --example plan > plan.yaml)."""
        typer.echo(example(example_name), nl=False)
