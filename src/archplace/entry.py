"""The ``archplace`` command's entry point.

Importing the CLI takes about a second (torch, transformers, typer); a Ctrl-C in that time is
answered as everywhere else (:func:`archplace.cli.main`): one line on stderr, exit status 130,
no traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Import the CLI and run it on ``sys.argv`` (an interrupt that :func:`archplace.cli.main`
    has not answered yet, while it starts, is answered here)."""
    try:
        from archplace.cli import main as run

        run()
    except KeyboardInterrupt:
        sys.stderr.write("archplace: interrupted\n")
        raise SystemExit(130) from None
