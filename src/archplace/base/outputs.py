"""Output files named on the command line: checked before the work that fills them starts, so a
bad path fails at once with one line instead of after a long search, and written with one-line
errors.

A check changes nothing on disk (no directory is made, no file opened for writing): the missing
directories of an output are made only when it is written.  Only a regular file or a missing path
is an output: a directory, a FIFO, a device node or a socket (or a symbolic link to one) is
refused, and so is an SQLite database such as a result store, which an output would destroy.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from archplace.base.errors import ConfigError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words (``a FIFO (named pipe)``), or ``""`` for a regular file."""
    if stat.S_ISREG(mode):
        return ""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _database(path: Path) -> str:
    """``"an archplace result store"`` or ``"an SQLite database"`` when the regular file ``path``
    starts with SQLite's header, else ``""``.  The file is opened without blocking and read only
    if it is still a regular file once open (a FIFO put in its place is never read).

    Raises:
        OSError: the file cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        header = os.read(fd, 100)
    finally:
        os.close(fd)
    from archplace.dse.store import APPLICATION_ID
    from archplace.dse.store_file import SQLITE_MAGIC, sqlite_ids

    if not header.startswith(SQLITE_MAGIC):
        return ""
    ids = sqlite_ids(header)
    return "an archplace result store" if ids and ids[0] == APPLICATION_ID else "an SQLite database"


def _nearest_existing(path: Path) -> tuple[Path, os.stat_result]:
    """The nearest ancestor of ``path`` that exists, with its status (following links).

    Raises:
        OSError: an ancestor cannot be examined (permission denied, a loop of links).
    """
    for ancestor in path.absolute().parents:
        try:
            return ancestor, ancestor.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
    raise FileNotFoundError(errno.ENOENT, "no existing ancestor", str(path))  # the root always exists


def check_output(path: Path, option: str) -> None:
    """Make sure ``path`` can be written, changing nothing: it is missing or a regular file that
    is no SQLite database (a result store above all) and is writable, and the nearest existing
    directory above it is writable (the missing ones are made when the file is written).  A FIFO
    is never opened: the kind of an existing path is read from its status.

    Raises:
        ConfigError: one line naming ``option``, the path and the reason: a directory, a FIFO, a
            device node or a socket (or a symbolic link to one); a result store or other SQLite
            database; not writable; a parent that is a file; a path that cannot be examined.
    """
    try:
        status: os.stat_result | None = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        status = None  # missing (a dangling link is replaced by the file, as a missing path)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot check it ({exc.strerror or exc})") from None
    if status is not None:
        kind = _kind(status.st_mode)
        if kind:
            link = "a symbolic link to " if path.is_symlink() else ""
            raise ConfigError(f"{option} {path}: is {link}{kind}, not a regular file")
        try:
            database = _database(path)
        except OSError as exc:
            raise ConfigError(f"{option} {path}: cannot read it ({exc.strerror or exc})") from None
        if database:
            raise ConfigError(f"{option} {path}: is {database}, which this output would destroy: "
                              "choose another file")
        if not os.access(path, os.W_OK):
            raise ConfigError(f"{option} {path}: not writable")
    try:
        ancestor, found = _nearest_existing(path)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot check its directory ({exc.strerror or exc})") from None
    # the file is written beside itself and renamed into place: its directory must be writable
    missing = "" if ancestor == path.absolute().parent else f"cannot create {path.parent}: "
    if not stat.S_ISDIR(found.st_mode):
        raise ConfigError(f"{option} {path}: {missing or 'cannot create it: '}{ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{option} {path}: {missing}{ancestor} is not writable")


def check_outputs(outputs: Mapping[str, Path | None]) -> None:
    """:func:`check_output` on each path given (option -> path; None: not asked for), and no two
    options naming the same file (the second would overwrite the first).

    Raises:
        ConfigError: the first path refused, or the second option naming a file already named.
    """
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        check_output(path, option)
        same = seen.setdefault(path.resolve(), option)
        if same != option:
            raise ConfigError(f"{option} {path}: is also the file of {same}: choose another file")


def prepare_output(path: Path, option: str) -> None:
    """Check ``path`` again (:func:`check_output`; the work before may have taken long) and make
    its missing parent directories, just before it is written.

    Raises:
        ConfigError: the path is refused, or a directory cannot be made.
    """
    check_output(path, option)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot create {path.parent} ({exc.strerror or exc})") from None


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
        ConfigError: naming ``option``: refused by :func:`check_output`, no suffix (without a
            default), or an unknown suffix (``.pgf`` too when no TeX system is installed), with
            the formats to choose from.
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


def write_output(path: Path, option: str, write: Callable[[IO[Any]], None], *, binary: bool = False) -> None:
    """Check ``path`` and make its directories (:func:`prepare_output`), then write it through
    :func:`replace_atomically`, calling ``write`` on a text (or, ``binary``, a byte) file.

    Raises:
        ConfigError: the path is refused or cannot be written, or writing fails (disk full, ...).
    """
    prepare_output(path, option)
    try:
        replace_atomically(path, write, binary=binary)
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
