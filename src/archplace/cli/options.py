"""The ``--json`` option, the option an error names for a field, consoles, and the line every
command prints for a file it wrote. (The options that set a spec field are derived from it:
:mod:`archplace.cli.derived`.)"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from archplace.base.errors import ArchplaceError, ConfigError
from archplace.base.options import flags
from archplace.front.specs import ClusterSpec, HardwareSpec, ModelSpec, Plan, PlanSpace

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


_SPEC_FLAGS = flags(Plan, PlanSpace, ModelSpec, HardwareSpec, ClusterSpec)


def flag_of(field: str) -> str:
    """The command-line option of an input field: ``plan.micro_batch`` -> ``--micro-batch``,
    ``top_k`` -> ``--top`` (the run specs' declared flags, :func:`archplace.base.options.flags`;
    a plan's field before a plan space's: ``sp`` -> ``--sp``)."""
    name = field.rsplit(".", 1)[-1]
    return _SPEC_FLAGS.get(name, "--" + name.replace("_", "-"))


def cli_message(exc: ArchplaceError) -> str:
    """The message of ``exc`` as the CLI shows it: each field a :class:`ConfigError` names
    (its ``fields``) spelled as the option that sets it."""
    message = str(exc)
    for field in getattr(exc, "fields", ()) if isinstance(exc, ConfigError) else ():
        message = re.sub(rf"(?<![\w.-]){re.escape(field)}(?![\w])", flag_of(field), message)
    return message


def plain_console(width: int | None = None, *, stderr: bool = False) -> Console:
    """A rich console for the CLI's tables, ``width`` columns wide (None: the terminal's), on
    stdout (or ``stderr``); it prints strings as they are, never reading markup (``[bold]``) or
    emoji codes (``:smile:``) in them -- names come from the user's files."""
    return Console(width=width, stderr=stderr, markup=False, emoji=False)


def table_console(width: int) -> Console:
    """:func:`plain_console` on stdout: the terminal's width, or ``width`` when stdout is not a terminal."""
    return plain_console(None if sys.stdout.isatty() else width)


MAX_ERROR_CHARS = 1000
"""Most characters of the message on the CLI's error line; a longer one loses its middle."""


def _visible(char: str) -> str:
    """``char`` itself, or ``\\x1b``-style for a control character (a terminal would act on it)."""
    if unicodedata.category(char) != "Cc" or char == "\t":
        return char
    return char.encode("unicode_escape").decode("ascii")


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` as one line of a terminal: line breaks (of any kind) become one space each, other
    control characters are shown escaped (``\\x1b``), and with a ``limit`` a longer text keeps
    its start and end around ``…(N characters left out)…``."""
    flat = "".join(_visible(c) for c in " ".join(text.splitlines()))
    if limit is None or len(flat) <= limit:
        return flat
    tail = limit // 4
    head = limit - tail
    while True:  # the marker's count grows as the head shrinks: shrink until all fits
        marker = f" …({len(flat) - head - tail:,} characters left out)… "
        if head + len(marker) + tail <= limit or head == 0:
            break
        head = max(0, limit - tail - len(marker))
    return f"{flat[:head]}{marker}{flat[len(flat) - tail:]}"


def error_line(message: str) -> str:
    """The CLI's error line for ``message``: ``archplace: error: MESSAGE`` and a newline, the
    message on one line and at most :data:`MAX_ERROR_CHARS` long (:func:`one_line`)."""
    return f"archplace: error: {one_line(message, MAX_ERROR_CHARS)}\n"


def say_wrote(path: Path) -> None:
    """``wrote PATH`` on stderr, on one line and verbatim (but for control characters, shown
    escaped): not through rich, which wraps a long path at the console's width and reads
    ``[...]`` in a file name as markup."""
    sys.stderr.write(f"wrote {one_line(str(path))}\n")
