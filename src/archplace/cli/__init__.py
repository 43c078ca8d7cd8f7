"""The command-line interface, one module per command (``search``, ``results``, ``presets``
(``models`` and ``hardware``), ``graph``, ``estimate``, ``schedule``, ``plan``, ``evaluate``,
``config``, ``report``, ``profile``, ``calibrate``), each adding itself to the Typer app of
:mod:`archplace.cli.commands` with ``register(app)``; ``options`` holds the options and console
helpers they share, ``runs`` the run files of ``plan --config`` and ``evaluate --plan``, and
``entry`` the console script's entry point, which stays light (this package imports nothing
until :func:`main` or ``app`` is asked for).

The CLI is the front door's outermost layer: it maps options to the fields of the specs and
never computes a figure.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """``main`` and ``app`` of :mod:`archplace.cli.commands`, imported on first use."""
    if name in ("main", "app"):
        return getattr(importlib.import_module("archplace.cli.commands"), name)
    raise AttributeError(f"module 'archplace.cli' has no attribute {name!r}")
