"""``python -m archplace.cli``: the CLI, as the console script runs it."""

from archplace.cli.commands import main
from archplace.cli.entry import run_exiting_fast

if __name__ == "__main__":
    run_exiting_fast(main)
