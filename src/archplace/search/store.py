"""SQLite store of a search: one row per evaluated design, written as each finishes.

A search is identified by a key derived from its request (model, designs,
cluster, batch, options), so re-running the same command against the same
store resumes it: finished designs are read back, not evaluated again.
Each row is committed on its own, so a killed search loses at most the
evaluations that were still running.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archplace.errors import ConfigError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS searches (
    key TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    search TEXT NOT NULL REFERENCES searches(key),
    design TEXT NOT NULL,
    throughput_samples_per_s REAL NOT NULL,
    area_mm2 REAL NOT NULL,
    feasible INTEGER NOT NULL,
    result TEXT NOT NULL,
    finished REAL NOT NULL,
    PRIMARY KEY (search, design)
);
"""


def request_key(request: dict[str, Any]) -> str:
    """Stable identifier of a search request (canonical JSON, SHA-256)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class StoredResult:
    """One row: the design's name, its figures and the full result JSON."""

    design: str
    throughput_samples_per_s: float
    area_mm2: float
    feasible: bool
    result: dict[str, Any]


@dataclass(frozen=True)
class ResultStore:
    """An SQLite file of search results.

    Raises:
        ConfigError: the file is not an SQLite database, or cannot be opened.
    """

    path: Path

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, timeout=30.0)
            connection.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{self.path}: not a usable result store ({exc})") from None
        return connection

    def begin(self, request: dict[str, Any]) -> str:
        """Register a search (idempotent); returns its key."""
        key = request_key(request)
        with closing(self._connect()) as db, db:
            db.execute("INSERT OR IGNORE INTO searches VALUES (?, ?, ?)",
                       (key, json.dumps(request, sort_keys=True), time.time()))
        return key

    def finished(self, key: str) -> dict[str, dict[str, Any]]:
        """Result JSON of every design already evaluated in search ``key``, by design name."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT design, result FROM results WHERE search = ?", (key,)).fetchall()
        return {design: json.loads(result) for design, result in rows}

    def record(self, key: str, design: str, result: dict[str, Any], throughput_samples_per_s: float,
               area_mm2: float, feasible: bool) -> None:
        """Write one design's result and commit it at once."""
        with closing(self._connect()) as db, db:
            db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (key, design, throughput_samples_per_s, area_mm2, int(feasible),
                        json.dumps(result), time.time()))

    def searches(self) -> list[tuple[str, dict[str, Any]]]:
        """(key, request) of every search in the store, oldest first."""
        with closing(self._connect()) as db:
            rows = db.execute("SELECT key, request FROM searches ORDER BY created").fetchall()
        return [(key, json.loads(request)) for key, request in rows]

    def top(self, key: str | None = None, limit: int | None = None) -> Iterator[StoredResult]:
        """Results best first (feasible, then throughput desc, area asc), of one search or all."""
        query = "SELECT design, throughput_samples_per_s, area_mm2, feasible, result FROM results"
        args: tuple[Any, ...] = ()
        if key is not None:
            query += " WHERE search = ?"
            args = (key,)
        query += " ORDER BY feasible DESC, throughput_samples_per_s DESC, area_mm2 ASC, design ASC"
        if limit is not None:
            query += " LIMIT ?"
            args = (*args, limit)
        with closing(self._connect()) as db:
            rows = db.execute(query, args).fetchall()
        for design, throughput, area, feasible, result in rows:
            yield StoredResult(design, throughput, area, bool(feasible), json.loads(result))


def open_existing(path: Path) -> ResultStore:
    """A store that must already exist (for ``archplace results``).

    Raises:
        ConfigError: the file is missing or not a result store.
    """
    if not path.is_file():
        raise ConfigError(f"result store not found: {path}")
    store = ResultStore(path)
    store.searches()  # fails cleanly on a file that is not SQLite
    return store
