"""What a result store (:mod:`archplace.dse.store`) relies on besides SQL: the check of its
rows, the rule for the model names it holds, and its creation in one step.

* Every row of a store carries a ``checksum`` (:func:`row_checksum`) of its other columns, so a
  column edited or damaged alone is found when the row is read.
* A model name read from a store is used as a name elsewhere (the graph cache, the report's
  headings): it must be a plain name (:func:`check_plain_name`).
* A new store is initialised in a temporary file beside it and then linked into place
  (:func:`create_store`): the path is either absent or a valid empty store, whatever fails
  (a full disk, a file-size limit, a kill) while it is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from archplace.base.errors import ConfigError

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (sqlite.org, Database File Format, 1.3)."""

MAX_NAME = 255
"""The longest model name a store holds (characters): a file name's usual limit."""


def row_checksum(*values: str | int | float) -> str:
    """The checksum of a row's columns (32 hex digits of SHA-256 over their JSON list).

    Callers pass REAL columns as ``float`` and INTEGER columns as ``int``, as SQLite gives them
    back, so that a row read back has the checksum it was written with.
    """
    return hashlib.sha256(json.dumps(list(values)).encode()).hexdigest()[:32]


def sqlite_ids(header: bytes) -> tuple[int, int] | None:
    """``(application_id, user_version)`` of an SQLite database from its file's first 100 bytes
    (big-endian at offsets 68 and 60: sqlite.org, Database File Format, 1.3), or None when
    ``header`` is not a whole SQLite header."""
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        return None
    return int.from_bytes(header[68:72], "big"), int.from_bytes(header[60:64], "big")


def check_plain_name(name: object, what: str = "model name") -> str:
    """``name`` when it is a plain name: a non-empty string of at most :data:`MAX_NAME`
    characters, with no path separator (``/``, ``\\``), not ``.`` or ``..``, and no control
    or format character.

    Raises:
        ValueError: anything else (the message names ``what`` and the value).
    """
    if not isinstance(name, str):
        raise ValueError(f"{what} must be text, got {name!r}")
    bad = [c for c in name if c in "/\\" or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn")]
    if not name or len(name) > MAX_NAME or name in (".", "..") or bad:
        raise ValueError(f"{what} {name!r:.80} is not a plain name (1 to {MAX_NAME} characters, no "
                         f"'/' or '\\', not '.' or '..', no control characters)")
    return name


def create_store(path: Path, schema: Sequence[str]) -> None:
    """Put an empty store at ``path`` (which is missing or an empty file): the ``schema``
    statements run in one transaction on a temporary file in the same directory, which is then
    hard-linked to ``path`` (or, for an empty file there, renamed over it).  A store that another
    process created meanwhile is left as it is.  The temporary file is removed in every case.

    Raises:
        ConfigError: the file cannot be written (full disk, no permission); ``path`` is as it was.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.init")
    try:
        os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # mode less the umask
        db = sqlite3.connect(temp, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            for statement in schema:
                db.execute(statement)
            db.execute("COMMIT")
        finally:
            db.close()
        _move(temp, path)
    except (OSError, sqlite3.Error) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot create the result store {path}: {' '.join(detail.split())}") from None
    finally:
        for leftover in (temp, Path(f"{temp}-journal")):
            leftover.unlink(missing_ok=True)


def _move(temp: Path, path: Path) -> None:
    """``temp`` to ``path`` unless a non-empty file is there by now."""
    try:
        os.link(temp, path)  # fails rather than replace a store another search just created
        return
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links
        if not path.exists():
            os.replace(temp, path)
            return
    if path.is_file() and path.stat().st_size == 0:
        os.replace(temp, path)
