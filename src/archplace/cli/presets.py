"""``archplace models`` and ``archplace hardware``: the bundled presets."""

from __future__ import annotations

import typer

from archplace.cli.options import (
    table_console,
)
from archplace.front import api
from archplace.reporting.tables import (
    hardware_table,
    models_table,
)


def models() -> None:
    """List the bundled model presets."""
    table_console(200).print(models_table(api.models()))


def hardware() -> None:
    """List the bundled hardware presets."""
    table_console(200).print(hardware_table(api.hardware()))



def register(app: typer.Typer) -> None:
    """Add the ``models`` and ``hardware`` commands to ``app``."""
    app.command(name="models")(models)
    app.command(name="hardware")(hardware)
