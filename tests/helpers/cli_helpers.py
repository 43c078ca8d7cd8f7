"""Running the CLI in-process from a test: ``run(argv, capsys) -> (exit status, stdout, stderr)``."""

from __future__ import annotations

import pytest

from archplace.cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``archplace ARGV`` as the console script would and return its exit status (0 for a
    plain exit, 1 for a non-integer code such as a message) and what it printed."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    code = exc.value.code
    status = 0 if code is None else code if isinstance(code, int) else 1
    return status, captured.out, captured.err
