"""The ``archplace`` command's entry point.

Importing the CLI takes about a second (torch, transformers, typer); a Ctrl-C in that time is
answered as everywhere else (:func:`archplace.cli.commands.main`): one line on stderr, exit status 130,
no traceback.

After an interrupt the process ends at once: the exit handlers run (multiprocessing's, which
release a process pool's semaphores -- skipped, its resource tracker would print a warning of
leaked semaphores after the one-line message -- and Dask's), stdout and stderr are flushed, and
:func:`os._exit` ends the process without the rest of Python's shutdown, which takes 1-2 s more
once torch and transformers are loaded (measured on 2 cores: ``import torch, transformers``
then a normal exit, 2.3-4.2 s; with the exit handlers then ``os._exit``, 1.7-1.9 s).  Nothing is
lost by skipping the rest: worker processes were stopped on the way out of the command and end
with this process anyway (:mod:`archplace.base.lifetime`), a result store commits each row as it is
written, and output files are renamed into place whole or not at all.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from contextlib import suppress

INTERRUPTED_STATUS = 130
"""Exit status of an interrupted command (128 + SIGINT, as shells report it)."""


def _exit_now(status: int) -> None:
    atexit._run_exitfuncs()  # each handler's own failure is reported and skipped by atexit itself
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(status)


def run_exiting_fast(run: Callable[[], object]) -> None:
    """Call ``run`` (a CLI main that ends with :class:`SystemExit`); when it ends with the
    interrupted status, or is interrupted before it can answer, end the process at once.

    Raises:
        SystemExit: ``run``'s own, for every other status.
    """
    try:
        run()
    except SystemExit as exc:
        if exc.code == INTERRUPTED_STATUS:
            _exit_now(INTERRUPTED_STATUS)
        raise
    except KeyboardInterrupt:
        sys.stderr.write("archplace: interrupted\n")
        _exit_now(INTERRUPTED_STATUS)


TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"
"""A warning filter that multiprocessing's resource tracker inherits (it starts with this
process's ``-W`` options, ``subprocess._args_from_interpreter_flags``). An interrupted search ends
this process at once (:func:`run_exiting_fast`), before its worker pool's queue semaphores are
freed; the tracker then unlinks them, as it exists to, but also warns about each on stderr, after
the CLI's one line. The unlinking stays; only its warnings go."""


def main() -> None:
    """Import the CLI and run it on ``sys.argv`` (an interrupt that :func:`archplace.cli.commands.main`
    has not answered yet, while it starts, is answered here)."""
    if TRACKER_QUIET not in sys.warnoptions:  # before any child process or semaphore starts it
        sys.warnoptions.append(TRACKER_QUIET)

    def start() -> None:
        from archplace.cli import main as cli_main

        cli_main()

    run_exiting_fast(start)
