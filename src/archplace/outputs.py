"""Output files named on the command line: checked before the work that fills them starts, so a
bad path fails at once with one line instead of after a long search, and written with one-line
errors."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

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


def check_image_output(path: Path, option: str, *, default_format: str | None = None) -> str:
    """Check an image path before the work that draws it: writable (:func:`check_output`), and its
    suffix names a format matplotlib writes (``.png``, ``.svg``, ``.pdf``, ...; any case).

    Args:
        path: the image file.
        option: the option or parameter that named it, for messages.
        default_format: the format of a path without a suffix (written at exactly that path);
            None refuses such a path.

    Returns:
        The format to pass to ``savefig(path, format=...)``, so that exactly ``path`` is written
        (matplotlib appends ``.png`` to a suffix-less name otherwise).

    Raises:
        ConfigError: naming ``option``: not writable, no suffix (without a default), or an
            unknown suffix (``.pgf`` too when no TeX system is installed), with the formats to
            choose from.
    """
    import matplotlib  # only when drawing
    from matplotlib.backend_bases import FigureCanvasBase

    check_output(path, option)
    formats = dict(FigureCanvasBase.get_supported_filetypes())
    if shutil.which(matplotlib.rcParams["pgf.texsystem"]) is None:
        formats.pop("pgf", None)  # PGF runs a TeX system, which is not installed
    suffix = path.suffix.lstrip(".").lower()
    if not suffix and default_format is not None:
        return default_format
    if suffix not in formats:
        raise ConfigError(f"{option} {path}: unknown image format {path.suffix or '(no suffix)'!r}; "
                          f"choose from: {', '.join(sorted(formats))}")
    return suffix


def write_output(path: Path, option: str, write: Callable[[IO[str]], None]) -> None:
    """Check ``path`` (:func:`check_output`), then open it for text and call ``write`` on it.

    Raises:
        ConfigError: the path cannot be written, or writing fails (disk full, ...).
    """
    check_output(path, option)
    try:
        replace_atomically(path, write)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot write ({exc.strerror or exc})") from None


def replace_atomically(path: Path, write: Callable[[IO[Any]], None], *, binary: bool = False) -> None:
    """Write a file through a temporary file beside it, renamed over ``path`` only once ``write``
    has returned: an interrupt, a failure or a full disk leaves ``path`` as it was (or absent)
    and no partial file behind.  The file gets the mode the umask gives a new file.

    Raises:
        OSError: the file cannot be created or written (the temporary file is removed).
    """
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        with partial.open("xb") if binary else partial.open("x", newline="") as handle:
            write(handle)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_text_output(path: Path, option: str, text: str) -> None:
    """Write ``text`` to ``path`` as :func:`write_output` does."""

    def write(handle: IO[str]) -> None:
        handle.write(text)

    write_output(path, option, write)
