"""Profiled kernel tables: written in the format of the shipped measured tables
(:mod:`archplace.cost.measured_tables`), and read back for one GEMM's latency.

A profiled table's header names its source as this machine: ``source_repo: local``,
``source_path: -`` and ``source_commit: -`` (nothing was imported), ``gpu`` the device's own
name, ``made_by`` the ``archplace profile`` command that wrote it, and beside the required keys
the ``device``, ``torch`` and ``cuda`` versions, the UTC ``date``, the ``grid`` and the timer's
``warmup`` and ``repeats``.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.inputs import MAX_FILE_BYTES
from archplace.cost.measured_tables import (
    MeasuredTable,
    columns,
    gemm_latency,
    load_table,
    read_table,
    shipped_tables,
)

#: Columns of an attention table, as :mod:`archplace.cost.attention_tables` reads them:
#: ``causal`` 0 or 1, ``direction`` ``fwd`` or ``bwd``, ``tflop_per_s`` the rate in 1e12 FLOP/s
#: with the FlashAttention papers' FLOP count (:func:`archplace.profiling.run.attention_flop`).
ATTENTION_COLUMNS = ("label", "batch", "heads", "seq_len", "head_dim", "causal", "direction", "dtype",
                     "tflop_per_s")


def table_columns(kernel: str) -> tuple[str, ...]:
    """The CSV columns a profiled table of ``kernel`` is written with: :data:`ATTENTION_COLUMNS`
    for ``attention`` (a throughput table), else the latency-table schema of
    :func:`archplace.cost.measured_tables.columns`.

    Raises:
        ConfigError: an unknown kernel class.
    """
    return ATTENTION_COLUMNS if kernel == "attention" else columns(kernel)


@dataclass(frozen=True, slots=True)
class Row:
    """One measured point: its ``label``, size columns (name -> value, in any order; for
    attention also ``tflop_per_s``), dtype and median latency in seconds."""

    label: str
    sizes: Mapping[str, int | str]
    dtype: str
    latency_s: float


def _one_line(value: str) -> str:
    return " ".join(str(value).split()) or "-"


def header_text(kernel: str, header: Mapping[str, str]) -> str:
    """``# kernel: KERNEL`` and one ``# key: value`` line per other ``header`` entry, each value
    on one line (``-`` when empty)."""
    lines = [f"# kernel: {kernel}\n"]
    lines += [f"# {key}: {_one_line(value)}\n" for key, value in header.items() if key != "kernel"]
    return "".join(lines)


def table_text(kernel: str, header: Mapping[str, str], rows: Sequence[Row]) -> str:
    """The text of one table: ``# kernel: ...`` and the ``header`` lines (each value on one
    line, ``-`` when empty), the column line, then one line per row (latency written with
    :func:`repr`, so it reads back exactly).

    Raises:
        ConfigError: an unknown kernel class, no rows, or a row lacking a column.
    """
    want = table_columns(kernel)
    if not rows:
        raise ConfigError(f"profile: no {kernel} rows to write")
    out = io.StringIO()
    out.write(header_text(kernel, header))
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(want)
    for row in rows:
        record: dict[str, object] = {"label": row.label, "dtype": row.dtype,
                                     "latency_s": repr(float(row.latency_s)), **row.sizes}
        missing = [c for c in want if c not in record]
        if missing:
            raise ConfigError(f"profile: a {kernel} row lacks {', '.join(missing)}")
        writer.writerow([record[c] for c in want])
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class TableGemm:
    """One GEMM's latency read from a kernel table (:func:`table_gemm`).

    Attributes:
        table: the table's name (file stem) and ``path`` its file.
        gpu: the table's ``gpu`` header.
        latency_s: latency of ``[batch, m, k] x [batch, k, n]`` by the table's interpolation
            (:func:`archplace.cost.measured_tables.gemm_latency`), seconds.
        achieved_flop_per_s: ``2 batch m k n / latency_s``.
        at_table_point: whether the shape is a row of the table (one call): then
            ``latency_s`` is that row's measurement.
    """

    table: str
    path: str
    gpu: str
    latency_s: float
    achieved_flop_per_s: float
    at_table_point: bool

    def to_dict(self) -> dict[str, object]:
        return {"table": self.table, "path": self.path, "gpu": self.gpu, "latency_s": self.latency_s,
                "achieved_flop_per_s": self.achieved_flop_per_s, "at_table_point": self.at_table_point}


def open_table(source: str | os.PathLike[str]) -> MeasuredTable:
    """A kernel table: a shipped table by name (``gemm_h100_xla``), else a table file (a
    regular file of at most 64 MiB, read with :func:`~archplace.cost.measured_tables.read_table`).

    Raises:
        ConfigError: no such shipped table or file, not a regular file, too large, or malformed.
    """
    text = os.fspath(source)
    if text in shipped_tables():
        return load_table(text)
    path = Path(text)
    try:
        info = path.stat()
    except (OSError, ValueError) as exc:
        known = ", ".join(shipped_tables())
        raise ConfigError(f"kernel table {text!r}: neither a file ({getattr(exc, 'strerror', None) or exc}) "
                          f"nor a shipped table ({known})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"kernel table {text!r} is not a regular file")
    if info.st_size > MAX_FILE_BYTES:
        raise ConfigError(f"kernel table {text!r}: {info.st_size:,} bytes, more than the "
                          f"{MAX_FILE_BYTES:,}-byte limit for input files")
    return read_table(path)


def table_gemm(source: str | os.PathLike[str], m: int, k: int, n: int, *, batch: int = 1) -> TableGemm:
    """Latency of the GEMM ``[batch, m, k] x [batch, k, n]`` from a kernel table
    (:func:`open_table`; shipped or profiled), by the table's own interpolation.

    Raises:
        ConfigError: the table cannot be opened, it holds no GEMMs, or a size is out of range
            (1 .. 2**31 - 1).
    """
    for name, value in (("m", m), ("k", k), ("n", n), ("batch", batch)):
        limits.whole(f"matmul: {name}", value, 1, limits.MAX_GEMM_DIM)
    table = open_table(source)
    if table.kernel != "gemm":
        raise ConfigError(f"kernel table {os.fspath(source)!r} holds {table.kernel} kernels, not gemm")
    latency = gemm_latency(table, m, n, k, batch=batch)
    s = table.sizes
    at_point = bool(((s["batch"] == batch) & (s["m"] == m) & (s["n"] == n) & (s["k"] == k)
                     & (s["calls"] == 1)).any())
    flop = 2.0 * batch * m * n * k
    return TableGemm(table.name, os.fspath(source), table.header.get("gpu", "-"), latency,
                     flop / latency, at_point)
