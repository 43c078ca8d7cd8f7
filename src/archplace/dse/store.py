"""SQLite store of searches: one row per evaluated design, written as each finishes.

A search is identified by a key derived from its request (models, designs, cluster, batch,
options: :func:`archplace.dse.request.request_identity`; the key is the SHA-256 of the request
as stored, which holds the designs' digest, not the designs), so re-running the same command
against the same store resumes it: finished designs are read back, not evaluated again.  Each
row is committed on its own, so a killed search loses at most the evaluations still running.
A store holds any number of searches; each is shown by the first :data:`SHORT_ID` hex digits of
its key, its models and the objective of its latest run.  A search's row must agree with its
request: its models are the request's model names (each a plain name:
:func:`~archplace.dse.store_file.check_plain_name`), its devices and global batch the
request's.
The pruning bounds of a search's designs (:mod:`archplace.dse.bounds`) are kept too, one row
per design and model, so that a resumed search does not compute them again (table
``plan_bounds``).

The file says that it is a store: SQLite's ``application_id`` is :data:`APPLICATION_ID` and its
``user_version`` the schema version :data:`SCHEMA_VERSION` (both read from the 100-byte file
header, without SQLite, before anything is opened).  A search writes only to a file that is
missing or empty (0 bytes; an empty store is then put there in one step, before any search is
written: :func:`~archplace.dse.store_file.create_store`) or that is a store of
this schema version passing SQLite's ``quick_check``; anything else -- text, another
application's database, another schema version, a truncated or corrupt database -- is refused
with a :class:`~archplace.base.errors.ConfigError` before a byte is written.  Readers
(``read_only=True``, ``archplace results``) open the file read-only and never create it.  Every
row read is checked: every row's ``checksum`` column must match its other columns
(:func:`~archplace.dse.store_file.row_checksum`), a search's request must match its key, and
a result's JSON must parse into a :class:`~archplace.dse.evaluate.DesignResult` that agrees
with the row's columns.  A row that fails is refused with a ConfigError naming the store and
the search.

Schema version 2 added the checksums, the model names in the request and the designs' digest
in place of the designs (a request row of the full ``phaze`` space was 33.8 MB); stores of
version 1 are refused with a line saying so.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from archplace.base.errors import ArchplaceError, ConfigError
from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective
from archplace.dse.store_file import check_plain_name, create_store, row_checksum, sqlite_ids

APPLICATION_ID = 0x41504C43
"""SQLite ``application_id`` of a result store ("APLC")."""

SCHEMA_VERSION = 2
"""SQLite ``user_version`` of the stores this module reads and writes (0: the unversioned
stores of archplace before the version was recorded; 1: stores without row checksums, whose
requests held every design)."""

SHORT_ID = 8
"""Hex digits of a search's key shown as its id."""

_READONLY_ROLLBACK = 776  # SQLITE_READONLY_ROLLBACK: a hot journal that a read-only connection cannot replay
_WRITE_FAILED = (10, 13)  # SQLITE_IOERR (and its extended codes), SQLITE_FULL: a full disk, a size limit
_BOUNDS_TABLE = "plan_bounds"
_COLUMNS = {
    "searches": ("key", "request", "models", "objective", "devices", "global_batch", "created", "checksum"),
    "results": ("search", "design", "throughput_samples_per_s", "area_mm2", "feasible", "result", "finished",
                "checksum"),
    _BOUNDS_TABLE: ("search", "design", "model", "samples_per_s", "samples_per_s_per_device", "checksum"),
}
_SCHEMA = (
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
    """CREATE TABLE searches (
        key TEXT PRIMARY KEY,
        request TEXT NOT NULL,
        models TEXT NOT NULL,
        objective TEXT NOT NULL,
        devices INTEGER NOT NULL,
        global_batch INTEGER NOT NULL,
        created REAL NOT NULL,
        checksum TEXT NOT NULL
    )""",
    """CREATE TABLE results (
        search TEXT NOT NULL REFERENCES searches(key),
        design TEXT NOT NULL,
        throughput_samples_per_s REAL NOT NULL,
        area_mm2 REAL NOT NULL,
        feasible INTEGER NOT NULL,
        result TEXT NOT NULL,
        finished REAL NOT NULL,
        checksum TEXT NOT NULL,
        PRIMARY KEY (search, design)
    )""",
    # the pruning bounds of a search's designs (archplace.dse.bounds), one row per design and
    # model (the model's position in the search)
    f"""CREATE TABLE {_BOUNDS_TABLE} (
        search TEXT NOT NULL REFERENCES searches(key),
        design TEXT NOT NULL,
        model INTEGER NOT NULL,
        samples_per_s REAL NOT NULL,
        samples_per_s_per_device REAL NOT NULL,
        checksum TEXT NOT NULL,
        PRIMARY KEY (search, design, model)
    )""",
)


def request_key(request: dict[str, Any]) -> str:
    """Stable identifier of a search request (canonical JSON, SHA-256, 32 hex digits)."""
    return hashlib.sha256(_canonical(request).encode()).hexdigest()[:32]


def _canonical(request: dict[str, Any]) -> str:
    return json.dumps(request, sort_keys=True)


@dataclass(frozen=True)
class SearchLabel:
    """How a search is shown: its models, objective, devices and global batch (samples)."""

    models: tuple[str, ...]
    objective: Objective
    devices: int
    global_batch: int


@dataclass(frozen=True)
class StoredSearch:
    """One search of a store: its key (32 hex digits), label and creation time (Unix s)."""

    key: str
    label: SearchLabel
    created: float

    @property
    def short_id(self) -> str:
        """The first :data:`SHORT_ID` hex digits of the key (what ``archplace results`` shows)."""
        return self.key[:SHORT_ID]


@dataclass(frozen=True)
class StoredResult:
    """One row: its search, the design's name and figures (samples/s, mm²), the result JSON and
    the result it describes."""

    search: StoredSearch
    design: str
    throughput_samples_per_s: float
    area_mm2: float
    feasible: bool
    result: dict[str, Any]
    outcome: DesignResult

    def to_dict(self) -> dict[str, Any]:
        """JSON form: ``{"search": {"key", "models", "objective", "devices", "global_batch",
        "created"}, "design", "throughput_samples_per_s", "area_mm2", "feasible", "result"}``
        (``outcome`` is ``result`` read back, so not repeated)."""
        search, label = self.search, self.search.label
        return {"search": {"key": search.key, "models": list(label.models),
                           "objective": label.objective.value, "devices": label.devices,
                           "global_batch": label.global_batch, "created": search.created},
                "design": self.design, "throughput_samples_per_s": self.throughput_samples_per_s,
                "area_mm2": self.area_mm2, "feasible": self.feasible, "result": self.result}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredResult:
        """Inverse of :meth:`to_dict` (``outcome`` parsed from ``result``).

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            raw = data["search"]
            label = SearchLabel(tuple(str(m) for m in raw["models"]), Objective(raw["objective"]),
                                int(raw["devices"]), int(raw["global_batch"]))
            search = StoredSearch(str(raw["key"]), label, float(raw["created"]))
            result = dict(data["result"])
            return cls(search, str(data["design"]), float(data["throughput_samples_per_s"]),
                       float(data["area_mm2"]), bool(data["feasible"]), result,
                       DesignResult.from_dict(result))
        except (LookupError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"invalid stored result: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc}"
    return " ".join(str(exc).split()) or type(exc).__name__


def _describe(path: Path, exc: sqlite3.Error) -> str:
    if getattr(exc, "sqlite_errorcode", None) == _READONLY_ROLLBACK:
        return (f"{path}: a search was interrupted while writing to it (its unfinished write is in "
                f"{path.name}-journal); resume that search on the store to recover the file")
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _WRITE_FAILED:
        return f"{path}: cannot write to the result store ({_one_line(exc)}); what was written before is kept"
    return f"{path}: not a usable result store ({_one_line(exc)})"


@dataclass(frozen=True)
class ResultStore:
    """An SQLite file of search results (module docstring).

    Attributes:
        path: the file.
        read_only: only read (``archplace results``): the file must exist and is opened
            read-only; otherwise it may be missing or empty, and is created or initialised
            by :meth:`begin`.

    Raises:
        ConfigError: the file is not a result store of this schema version (not SQLite, another
            application's database, another version, corrupt), cannot be read, or (read-only)
            is missing or empty.  Nothing is written in any case.
    """

    path: Path
    read_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        if self._check_header():
            self._check_content()

    def _check_header(self) -> bool:
        """Check what can be checked without SQLite; False when the file is missing or empty."""
        path = self.path
        try:
            if not path.exists():
                if self.read_only:
                    raise ConfigError(f"result store not found: {path}")
                if not path.parent.is_dir():
                    raise ConfigError(f"cannot create the result store {path}: {path.parent} is not a "
                                      f"directory")
                if not os.access(path.parent, os.W_OK):
                    raise ConfigError(f"cannot create the result store {path}: {path.parent} is not writable")
                return False
            if not path.is_file():
                raise ConfigError(f"{path}: not a file, so not a result store")
            if not self.read_only and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
                raise ConfigError(f"{path}: the result store is not writable (the file and its directory "
                                  f"must be: SQLite writes a journal beside it)")
            with path.open("rb") as handle:
                header = handle.read(100)
        except OSError as exc:
            raise ConfigError(f"cannot read the result store {path}: {exc.strerror or exc}") from None
        if not header:
            if self.read_only:
                raise ConfigError(f"{path}: the file is empty, not a result store")
            return False
        ids = sqlite_ids(header)
        if ids is None:
            raise ConfigError(f"{path}: not an SQLite database, so not a result store")
        application, version = ids
        if application != APPLICATION_ID:
            tables = self._tables_or_none()
            if application == 0 and version == 0 and {"searches", "results"} <= tables:
                raise ConfigError(f"{path}: a result store of schema version 0 (an older archplace); this "
                                  f"archplace reads version {SCHEMA_VERSION}: use a new store file")
            found = f"tables: {', '.join(sorted(tables))}" if tables else "no tables"
            raise ConfigError(f"{path}: an SQLite database of another application (application id "
                              f"{application}, {found}), not a result store")
        if version != SCHEMA_VERSION:
            newer = "a newer archplace" if version > SCHEMA_VERSION else "an older archplace"
            hint = "" if version > SCHEMA_VERSION else ": use a new store file"
            raise ConfigError(f"{path}: a result store of schema version {version} ({newer}); "
                              f"this archplace reads version {SCHEMA_VERSION}{hint}")
        return True

    def _tables_or_none(self) -> set[str]:
        """Tables of the database, or an empty set when SQLite cannot list them."""
        try:
            with self._connect("ro") as db:
                return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except ConfigError:
            return set()

    def _check_content(self) -> None:
        """Tables and columns of this schema, no row of an unknown search, SQLite's quick_check."""
        # A writer may open read-write: that replays the journal of an interrupted write of
        # this (checked) store, which a read-only connection cannot do.
        with self._connect("ro" if self.read_only else "rw") as db:
            for table, columns in _COLUMNS.items():
                found = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
                if found != columns:
                    raise ConfigError(f"{self.path}: corrupt result store (table {table!r} has columns "
                                      f"{list(found)}, expected {list(columns)})")
            check = [row[0] for row in db.execute("PRAGMA quick_check")]
            if check != ["ok"]:
                raise ConfigError(f"{self.path}: corrupt result store (SQLite quick_check: "
                                  f"{' '.join(str(check[0]).split())})")
            orphans = db.execute("SELECT count(*) FROM results WHERE search NOT IN "
                                 "(SELECT key FROM searches)").fetchone()[0]
            if orphans:
                raise ConfigError(f"{self.path}: corrupt result store ({orphans} results of no stored "
                                  f"search)")

    @contextmanager
    def _connect(self, mode: str) -> Iterator[sqlite3.Connection]:
        """A connection in SQLite URI ``mode`` (``ro``, ``rw``, ``rwc``), autocommit; every SQLite
        error becomes a ConfigError."""
        uri = f"{self.path.resolve().as_uri()}?mode={mode}"
        try:
            db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
            try:
                yield db
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise ConfigError(_describe(self.path, exc)) from None
        except UnicodeDecodeError:
            raise ConfigError(f"{self.path}: corrupt result store (text that is not UTF-8)") from None

    def _exists(self) -> bool:
        """The file is there and not empty (a search's store before :meth:`begin` may be neither)."""
        return self.path.is_file() and self.path.stat().st_size > 0

    def begin(self, request: dict[str, Any], label: SearchLabel) -> str:
        """Register a search; returns its key.  A missing or empty file first becomes an empty
        store, in one step of its own (:func:`~archplace.dse.store_file.create_store`); the
        search's row is written after, in a transaction of its own.  A search already in the
        store keeps its key and creation time and takes ``label``'s objective (its latest run's).

        Raises:
            ConfigError: a read-only store; the store cannot be created; the file changed into
                something else since it was checked; ``label`` disagrees with ``request`` (its
                model names, devices or global batch).
        """
        if self.read_only:
            raise ConfigError(f"{self.path}: opened read-only")
        key = request_key(request)
        models = json.dumps(list(label.models))
        try:
            _check_label(request, models, label.devices, label.global_batch)
        except (LookupError, TypeError, ValueError) as exc:
            raise ConfigError(f"{self.path}: search {key[:SHORT_ID]}: {_one_line(exc)}") from None
        if not self._exists():
            create_store(self.path, _SCHEMA)
        with self._connect("rw") as db, db:
            db.execute("BEGIN IMMEDIATE")
            application = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if (application, version) != (APPLICATION_ID, SCHEMA_VERSION):
                raise ConfigError(f"{self.path}: no longer a result store of schema version {SCHEMA_VERSION}")
            found = db.execute("SELECT created FROM searches WHERE key = ?", (key,)).fetchone()
            created = float(found[0]) if found else time.time()
            row = (key, _canonical(request), models, label.objective.value, label.devices, label.global_batch,
                   created)
            db.execute("INSERT INTO searches VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                       "objective = excluded.objective, checksum = excluded.checksum",
                       (*row, row_checksum(*row)))
        return key

    def record(self, key: str, design: str, result: dict[str, Any], throughput_samples_per_s: float,
               area_mm2: float, feasible: bool) -> None:
        """Write one design's result and commit it at once."""
        if self.read_only:
            raise ConfigError(f"{self.path}: opened read-only")
        row = (key, design, float(throughput_samples_per_s), float(area_mm2), int(feasible),
               json.dumps(result), time.time())
        with self._connect("rw") as db:
            db.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (*row, row_checksum(*row)))

    def record_bounds(self, key: str, rows: list[tuple[str, int, float, float]]) -> None:
        """Write the pruning bounds of designs of search ``key`` -- (design, model index,
        samples/s, samples/s per device used) -- in one transaction."""
        if self.read_only:
            raise ConfigError(f"{self.path}: opened read-only")
        with self._connect("rw") as db, db:
            db.execute("BEGIN IMMEDIATE")
            full = [(key, design, int(model), float(bound), float(per_device))
                    for design, model, bound, per_device in rows]
            db.executemany(f"INSERT OR REPLACE INTO {_BOUNDS_TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                           [(*row, row_checksum(*row)) for row in full])

    def bounds(self, key: str) -> dict[str, dict[int, tuple[float, float]]]:
        """The stored pruning bounds of search ``key``: (samples/s, samples/s per device used) by
        design name, then model index (empty for a new store).

        Raises:
            ConfigError: a bound that is not a number >= 0, a row whose checksum does not match.
        """
        if not self._exists():
            return {}
        with self._connect("ro") as db:
            rows = db.execute(f"SELECT design, model, samples_per_s, samples_per_s_per_device, checksum "
                              f"FROM {_BOUNDS_TABLE} WHERE search = ?", (key,)).fetchall()
        out: dict[str, dict[int, tuple[float, float]]] = {}
        for design, model, *values, checksum in rows:
            if (not isinstance(design, str) or isinstance(model, bool) or not isinstance(model, int)
                    or not all(_is_bound(value) for value in values)
                    or checksum != row_checksum(key, design, model, *map(float, values))):
                raise ConfigError(f"{self.path}: corrupt result store (search {key[:SHORT_ID]}: bound "
                                  f"{design!r}, {model!r}: {', '.join(map(repr, values))})")
            out.setdefault(design, {})[model] = (float(values[0]), float(values[1]))
        return out

    def searches(self) -> list[StoredSearch]:
        """Every search in the store, oldest first.

        Raises:
            ConfigError: a corrupt search row.
        """
        if not self._exists():
            return []
        with self._connect("ro") as db:
            rows = db.execute("SELECT * FROM searches ORDER BY created, key").fetchall()
        return [self._search(*row) for row in rows]

    def select(self, prefix: str | None = None) -> list[StoredSearch]:
        """The searches whose key starts with ``prefix`` (any case), oldest first; every search
        for None.

        Raises:
            ConfigError: an empty ``prefix``, or one that matches no search or several.
        """
        searches = self.searches()
        if prefix is None:
            return searches
        wanted = prefix.strip().lower()
        if not wanted:
            raise ConfigError("a search id must not be empty")
        chosen = [s for s in searches if s.key.startswith(wanted)]
        known = ", ".join(f"{s.short_id} ({', '.join(s.label.models)})" for s in searches) or "none"
        if not chosen:
            raise ConfigError(f"no search {prefix!r} in {self.path}; its searches: {known}")
        if len(chosen) > 1:
            raise ConfigError(f"search id {prefix!r} matches {len(chosen)} searches of {self.path} "
                              f"({', '.join(s.key[:len(wanted) + 4] for s in chosen)}): give more digits")
        return chosen

    def finished(self, key: str) -> dict[str, DesignResult]:
        """Every design already evaluated in search ``key``, by name (empty for a new store).

        Raises:
            ConfigError: a corrupt row.
        """
        found = {s.key: s for s in self.searches()}
        if key not in found:
            return {}
        return {row.design: row.outcome for row in self.rows(found[key])}

    def count(self, key: str) -> int:
        """How many designs of search ``key`` the store holds (0 for a new store); the rows are
        counted, not read or checked, so this is fast whatever their number."""
        if not self._exists():
            return 0
        with self._connect("ro") as db:
            return int(db.execute("SELECT count(*) FROM results WHERE search = ?", (key,)).fetchone()[0])

    def rows(self, search: StoredSearch) -> list[StoredResult]:
        """The results of ``search``, by design name.

        Raises:
            ConfigError: a corrupt row.
        """
        if not self._exists():
            return []
        with self._connect("ro") as db:
            rows = db.execute("SELECT design, throughput_samples_per_s, area_mm2, feasible, result, "
                              "finished, checksum FROM results WHERE search = ? ORDER BY design",
                              (search.key,)).fetchall()
        return [self._result(search, *row) for row in rows]

    def request(self, search: StoredSearch) -> dict[str, Any]:
        """The request of ``search`` as it was stored (:func:`~archplace.dse.request.request_identity`:
        models' configs, designs, cluster, plan space), checked against its key when the search
        was read.

        Raises:
            ConfigError: the search is not in the store.
        """
        with self._connect("ro") as db:
            row = db.execute("SELECT request FROM searches WHERE key = ?", (search.key,)).fetchone()
        if row is None:
            raise ConfigError(f"{self.path}: no search {search.short_id}")
        data = json.loads(row[0])
        if not isinstance(data, dict) or request_key(data) != search.key:
            raise ConfigError(f"{self.path}: corrupt result store (search {search.short_id}: its request "
                              f"does not match its key)")
        return data

    def _search(self, key: Any, request: Any, models: Any, objective: Any, devices: Any, global_batch: Any,
                created: Any, checksum: Any) -> StoredSearch:
        where = f"{self.path}: corrupt result store (search {str(key)[:SHORT_ID]!r}"
        try:
            identity = json.loads(request)
            if not isinstance(identity, dict) or request_key(identity) != key:
                raise ValueError("its request does not match its key")
            names = _check_label(identity, models, devices, global_batch)
            if isinstance(created, bool) or not isinstance(created, int | float):
                raise ValueError(f"created must be a time, got {created!r}")
            label = SearchLabel(names, Objective(objective), devices, global_batch)
            if checksum != row_checksum(key, request, models, objective, devices, global_batch,
                                        float(created)):
                raise ValueError("its columns do not match its checksum")
        except (LookupError, TypeError, ValueError, RecursionError) as exc:
            raise ConfigError(f"{where}: {_one_line(exc)})") from None
        return StoredSearch(key, label, float(created))

    def _result(self, search: StoredSearch, design: Any, throughput: Any, area: Any, feasible: Any,
                text: Any, finished: Any, checksum: Any) -> StoredResult:
        where = f"{self.path}: corrupt result store (search {search.short_id}, design {design!r}"
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"the result is not a JSON object: {text!r:.40}")
            outcome = DesignResult.from_dict(data)
            for name, value in (("throughput_samples_per_s", throughput), ("area_mm2", area)):
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise ValueError(f"{name} must be a finite number, got {value!r}")
            if feasible not in (0, 1) or isinstance(feasible, float):
                raise ValueError(f"feasible must be 0 or 1, got {feasible!r}")
            disagree = [name for name, column, value in (
                ("design", design, outcome.accelerator.name),
                ("feasible", bool(feasible), outcome.best is not None),
                ("throughput_samples_per_s", throughput, outcome.throughput_samples_per_s),
                ("area_mm2", area, outcome.area_mm2))
                if column != value and not (isinstance(value, float) and math.isclose(column, value))]
            if disagree:
                raise ValueError(f"its result JSON disagrees with the row's {', '.join(disagree)}")
            if isinstance(finished, bool) or not isinstance(finished, int | float):
                raise ValueError(f"finished must be a time, got {finished!r}")
            if checksum != row_checksum(search.key, design, float(throughput), float(area), feasible, text,
                                        float(finished)):
                raise ValueError("its columns do not match its checksum")
        except (ArchplaceError, LookupError, TypeError, ValueError, AttributeError, ArithmeticError,
                RecursionError) as exc:  # whatever the JSON holds: the row is corrupt
            raise ConfigError(f"{where}: {_one_line(exc)})") from None
        return StoredResult(search, design, float(throughput), float(area), bool(feasible), data, outcome)


def _check_label(request: dict[str, Any], models: Any, devices: Any, global_batch: Any) -> tuple[str, ...]:
    """The model names of a search's row (``models``: their JSON list), checked against its
    ``request``: the request's names, each a plain name; ``devices`` and ``global_batch`` the
    request's.

    Raises:
        ValueError, LookupError, TypeError: a column that disagrees with the request.
    """
    names = json.loads(models)
    if not (isinstance(names, list) and names):
        raise ValueError(f"models must be a list of names, got {models!r}")
    for name in names:
        check_plain_name(name)
    wanted = [m["name"] for m in request["models"]]
    if names != wanted:
        raise ValueError(f"models {names!r} are not its request's {wanted!r}")
    for name, value, expected in (("devices", devices, request["cluster"]["devices"]),
                                  ("global_batch", global_batch, request["global_batch"])):
        if isinstance(value, bool) or not isinstance(value, int) or value != expected:
            raise ValueError(f"{name} {value!r} is not its request's {expected!r}")
    return tuple(names)


def _is_bound(value: object) -> bool:
    """A stored bound: a number >= 0 (+inf allowed)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and value >= 0
