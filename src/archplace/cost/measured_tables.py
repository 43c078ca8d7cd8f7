"""Published per-shape kernel measurements, shipped as data (``archplace/cost/measured/*.csv``).

Each file holds one kernel class measured on one GPU by one source.  It opens with ``#``
header lines ``# key: value`` naming the source (``source_repo``, ``source_path``,
``source_commit``), the ``gpu`` and the matching archplace hardware ``preset``, the ``dtype``,
``library``, what was ``measured``, the ``units`` conversion and the command that ``made_by``
the file (``tools/import_kernel_tables.py``).  Then one CSV header line and the rows, in the
schema of its ``kernel``:

* ``gemm``: ``label,batch,m,n,k,calls,dtype,latency_s`` -- ``calls`` GEMMs
  ``[batch, m, k] x [batch, k, n]`` (sizes in elements) took ``latency_s`` seconds in all;
* ``softmax`` and ``layernorm``: ``label,rows,cols,dtype,latency_s`` -- the op over the last
  dimension (``cols``) of a ``rows x cols`` tensor;
* ``gelu``: ``label,elements,dtype,latency_s``.

Optional header keys: ``timing`` (``kernel``: traced kernel times; ``wall-clock``: host time
around a call and a synchronisation) and, for wall-clock tables, ``host_overhead_s`` (seconds,
then its basis in words): what :mod:`archplace.cost.kernel_tables` subtracts from each call;
``clock`` (a frequency, then its basis in words): the SM clock the rows were measured at
(:mod:`archplace.cost.clock`).

Every latency is in SI seconds.  A preset's ``efficiency.kernel_tables`` makes the cost model
read them (:mod:`archplace.cost.kernel_tables`); the benchmark
``benchmarks/bench_kernel_tables.py`` compares its predictions with every row.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError

#: Folder of the shipped tables.
MEASURED_DIR = Path(__file__).resolve().parent / "measured"

#: The integer size columns of each kernel class, in file order (after ``label``).
SIZE_COLUMNS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "gemm": ("batch", "m", "n", "k", "calls"),
    "softmax": ("rows", "cols"),
    "layernorm": ("rows", "cols"),
    "gelu": ("elements",),
    "copy": ("bytes",),  # a device-to-device copy of ``bytes`` (archplace profile writes these)
})

#: Header keys every table must carry.
REQUIRED_KEYS = ("kernel", "source_repo", "source_path", "source_commit", "gpu", "preset", "dtype",
                 "library", "measured", "units", "made_by")


def columns(kernel: str) -> tuple[str, ...]:
    """The CSV columns of a kernel class: ``label``, its size columns, ``dtype``, ``latency_s``.

    Raises:
        ConfigError: an unknown kernel class.
    """
    if kernel not in SIZE_COLUMNS:
        raise ConfigError(f"unknown kernel class {kernel!r}; known: {', '.join(SIZE_COLUMNS)}")
    return ("label", *SIZE_COLUMNS[kernel], "dtype", "latency_s")


@dataclass(frozen=True, slots=True)
class MeasuredTable:
    """One shipped table of measured kernel latencies.

    Attributes:
        name: the file's stem, e.g. ``gemm_h100_xla``.
        kernel: ``gemm``, ``softmax``, ``layernorm`` or ``gelu``.
        header: every ``# key: value`` of the file (the source's repo, path and commit, ...).
        labels: the source's name of each row (``-`` when it has none).
        sizes: each size column (:data:`SIZE_COLUMNS`) as an int64 array, one entry per row.
        dtypes: the dtype of each row (``bf16``, ``fp16``).
        latency_s: measured latency of each row in seconds (float64, positive and finite).
    """

    name: str
    kernel: str
    header: Mapping[str, str]
    labels: tuple[str, ...]
    sizes: Mapping[str, NDArray[np.int64]]
    dtypes: tuple[str, ...]
    latency_s: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def preset(self) -> str:
        """The archplace hardware preset of the measured GPU (``a100-80gb``)."""
        return self.header["preset"]

    def size(self, column: str) -> NDArray[np.int64]:
        """One size column (``m``, ``rows``, ...).

        Raises:
            ConfigError: the kernel class has no such column.
        """
        if column not in self.sizes:
            raise ConfigError(f"table {self.name}: no column {column!r}; it has {', '.join(self.sizes)}")
        return self.sizes[column]


def shipped_tables() -> tuple[str, ...]:
    """Names (file stems) of the latency tables shipped with archplace, sorted (the attention
    throughput tables ``attention_*.csv`` have their own reader, :mod:`archplace.cost.attention_tables`)."""
    return tuple(sorted(p.stem for p in MEASURED_DIR.glob("*.csv") if not p.stem.startswith("attention_")))


def load_table(name: str) -> MeasuredTable:
    """A shipped table by name (:func:`shipped_tables`).

    Raises:
        ConfigError: no such table, or the file is malformed (:func:`read_table`).
    """
    path = MEASURED_DIR / f"{name}.csv"
    if name not in shipped_tables():
        raise ConfigError(f"no measured table {name!r}; shipped: {', '.join(shipped_tables())}")
    return read_table(path)


def _split(path: Path) -> tuple[dict[str, str], list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"measured table {path}: cannot be read ({exc})") from None
    header: dict[str, str] = {}
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            if body:
                raise ConfigError(f"measured table {path}: line {number}: a comment after the data")
            key, sep, value = line[1:].partition(":")
            if not sep or not key.strip():
                raise ConfigError(f"measured table {path}: line {number}: a header line is '# key: value'")
            header[key.strip()] = value.strip()
        elif line.strip():
            body.append(line)
    return header, body


def _positive_int(path: Path, row: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"measured table {path}: row {row}: {column} {text!r} "
                          "is not a whole number") from None
    if value < 1:
        raise ConfigError(f"measured table {path}: row {row}: {column} {value} is not positive")
    return value


def _positive_float(path: Path, row: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"measured table {path}: row {row}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0.0:
        raise ConfigError(f"measured table {path}: row {row}: {column} {value} is not positive and finite")
    return value


def read_table(path: Path | str) -> MeasuredTable:
    """Read and check one measured table (format in the module docstring).

    Raises:
        ConfigError: unreadable; a header key of :data:`REQUIRED_KEYS` missing or empty; an
            unknown kernel class; a column line other than the kernel's; a row with the wrong
            number of fields, a size that is not a positive whole number, or a latency that is
            not positive and finite; no rows.  One line, naming the file.
    """
    path = Path(path)
    header, body = _split(path)
    missing = [k for k in REQUIRED_KEYS if not header.get(k)]
    if missing:
        raise ConfigError(f"measured table {path}: header lacks {', '.join(missing)}")
    kernel = header["kernel"]
    if kernel not in SIZE_COLUMNS:
        raise ConfigError(f"measured table {path}: unknown kernel class {kernel!r}; "
                          f"known: {', '.join(SIZE_COLUMNS)}")
    want = columns(kernel)
    rows = list(csv.reader(body))
    if not rows or tuple(c.strip() for c in rows[0]) != want:
        raise ConfigError(f"measured table {path}: the column line must be {','.join(want)}")
    if len(rows) < 2:
        raise ConfigError(f"measured table {path}: no rows")
    labels: list[str] = []
    dtypes: list[str] = []
    sizes: dict[str, list[int]] = {c: [] for c in SIZE_COLUMNS[kernel]}
    latency: list[float] = []
    for number, fields in enumerate(rows[1:], 1):
        if len(fields) != len(want):
            raise ConfigError(f"measured table {path}: row {number} has {len(fields)} fields, "
                              f"not {len(want)}")
        record = dict(zip(want, (f.strip() for f in fields), strict=True))
        if not record["label"] or not record["dtype"]:
            raise ConfigError(f"measured table {path}: row {number}: empty label or dtype")
        labels.append(record["label"])
        dtypes.append(record["dtype"])
        for column in SIZE_COLUMNS[kernel]:
            sizes[column].append(_positive_int(path, number, column, record[column]))
        latency.append(_positive_float(path, number, "latency_s", record["latency_s"]))
    frozen = {c: _readonly(np.array(v, dtype=np.int64)) for c, v in sizes.items()}
    return MeasuredTable(path.stem, kernel, MappingProxyType(dict(header)), tuple(labels),
                         MappingProxyType(frozen), tuple(dtypes),
                         _readonly(np.array(latency, dtype=np.float64)))


def _readonly(array: NDArray[Any]) -> NDArray[Any]:
    array.flags.writeable = False
    return array


def gemm_flop(table: MeasuredTable) -> NDArray[np.float64]:
    """FLOP of each row of a GEMM table: ``2 * calls * batch * m * n * k``.

    Raises:
        ConfigError: not a GEMM table.
    """
    if table.kernel != "gemm":
        raise ConfigError(f"table {table.name} holds {table.kernel} kernels, not gemm")
    s = table.sizes
    flop: NDArray[np.float64] = 2.0 * (s["calls"] * s["batch"]).astype(np.float64) * s["m"] * s["n"] * s["k"]
    return flop


def gemm_latency(table: MeasuredTable, m: int, n: int, k: int, *, batch: int = 1) -> float:
    """Latency in seconds of one GEMM ``[batch, m, k] x [batch, k, n]``, from a GEMM table by
    nearest neighbour in log space (a quick look-up of the raw rows; the cost model uses the
    monotone surface of :class:`archplace.cost.kernel_tables.GemmSurface`): the row whose
    ``(log batch, log m, log n, log k)`` is
    nearest (Euclidean; the first such row on a tie) lends its sustained FLOP/s, and the
    latency is ``2 * batch * m * n * k`` over it.  Exact at the table's own shapes (one call).

    Raises:
        ConfigError: not a GEMM table, or a size below 1.
    """
    for label, value in (("batch", batch), ("m", m), ("n", n), ("k", k)):
        if value < 1:
            raise ConfigError(f"gemm_latency: {label} {value} is not positive")
    rate = gemm_flop(table) / table.latency_s
    s = table.sizes
    points = np.log(np.stack([s["batch"], s["m"], s["n"], s["k"]], axis=1).astype(np.float64))
    query = np.log(np.array([batch, m, n, k], dtype=np.float64))
    nearest = int(np.argmin(np.sum((points - query) ** 2, axis=1)))
    return 2.0 * batch * m * n * k / float(rate[nearest])
