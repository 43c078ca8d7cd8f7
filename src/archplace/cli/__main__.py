"""``python -m archplace.cli``: the CLI, as the console script runs it (a Ctrl-C while the CLI
imports is answered too: :func:`archplace.cli.entry.main`)."""

from archplace.cli.entry import main

if __name__ == "__main__":
    main()
