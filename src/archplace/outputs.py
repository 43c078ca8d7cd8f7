"""Output files named on the command line: checked before the work that fills them starts, so a
bad path fails at once with one line instead of after a long search, and written with one-line
errors."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

from archplace.errors import ConfigError


def check_output(path: Path, option: str) -> None:
    """Make sure ``path`` can be written: it is not a directory, its parent exists (created if
    missing) and is writable, and an existing file is writable.

    Raises:
        ConfigError: naming ``option`` and the reason.
    """
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a directory, not a file")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot create {parent} ({exc.strerror or exc})") from None
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{option} {path}: not writable")


def write_output(path: Path, option: str, write: Callable[[IO[str]], None]) -> None:
    """Check ``path`` (:func:`check_output`), then open it for text and call ``write`` on it.

    Raises:
        ConfigError: the path cannot be written, or writing fails (disk full, ...).
    """
    check_output(path, option)
    try:
        with path.open("w", newline="") as handle:
            write(handle)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write ({exc.strerror or exc})") from None


def write_text_output(path: Path, option: str, text: str) -> None:
    """Write ``text`` to ``path`` as :func:`write_output` does."""

    def write(handle: IO[str]) -> None:
        handle.write(text)

    write_output(path, option, write)
