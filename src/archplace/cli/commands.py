"""The command-line application: the Typer app with every command (each in its own module of
:mod:`archplace.cli`, added by its ``register(app)``) and :func:`main`, which answers bad input
with one line and an interrupt with one line and status 130."""

from __future__ import annotations

import logging
import sys

import typer
from typer.exceptions import TyperException

from archplace.base.errors import ArchplaceError
from archplace.base.lifetime import Interrupted, raising_interrupts
from archplace.cli.options import (
    MAX_ERROR_CHARS,
    cli_message,
    error_line,
    one_line,
)

# rich_markup_mode=None: help texts show defaults in [brackets], which rich markup would eat.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Joint search of accelerator architecture and parallel placement for LLM training.")

# Each command lives in its own module, exposing ``register(app)``; the order is --help's.
_COMMAND_MODULES = ("archplace.cli.search", "archplace.cli.results", "archplace.cli.presets",
                    "archplace.cli.graph", "archplace.cli.estimate", "archplace.cli.schedule",
                    "archplace.cli.plan", "archplace.cli.evaluate", "archplace.cli.config",
                    "archplace.cli.report", "archplace.cli.profile", "archplace.cli.calibrate")


def _register_commands() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input gives one line on stderr (at most
    :data:`~archplace.cli.options.MAX_ERROR_CHARS` characters of message) and exit status 2,
    never a traceback; an interrupt (Ctrl-C, SIGINT) at any point -- while the command is built
    too -- stops the work and any worker processes and gives one line
    ``archplace: interrupted (what was kept)`` and exit status 130."""
    try:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        command = typer.main.get_command(app)
        with raising_interrupts():
            code = command.main(args=argv, prog_name="archplace", standalone_mode=False)
    except (Interrupted, KeyboardInterrupt, typer.Abort) as exc:
        _interrupted(exc)
    except ImportError as exc:  # an interrupt while a C extension initialised (OR-Tools: pybind11)
        cause = _interrupt_behind(exc)
        if cause is None:
            raise
        _interrupted(cause)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except TyperException as exc:  # usage errors: missing option, a value of the wrong type
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        sys.stderr.write(error_line(" ".join(message.split())))
        sys.exit(2)
    except ArchplaceError as exc:
        sys.stderr.write(error_line(cli_message(exc)))
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _interrupted(exc: BaseException) -> None:
    """Say ``archplace: interrupted`` (with what was kept, if ``exc`` says) and exit with 130."""
    detail = one_line(exc.detail, MAX_ERROR_CHARS) if isinstance(exc, Interrupted) else ""
    sys.stderr.write(f"archplace: interrupted{f' ({detail})' if detail else ''}\n")
    sys.exit(130)


def _interrupt_behind(exc: BaseException) -> BaseException | None:
    """The interrupt (:class:`Interrupted`, KeyboardInterrupt) that ``exc`` was raised from, if
    any: a C extension whose initialisation an interrupt stopped raises ImportError("initialization
    failed") from it (pybind11's module init wraps the pending exception), so the CLI answers it
    as the interrupt it is, not with a traceback."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, Interrupted | KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None
