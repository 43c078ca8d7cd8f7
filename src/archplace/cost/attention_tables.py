"""Published fused-attention throughput per shape (``archplace/cost/measured/attention_*.csv``).

One file per kernel family, GPU and source, named ``attention_<family>_<gpu>_<source>.csv``.
It opens with the ``# key: value`` header of :mod:`archplace.cost.measured_tables`
(``kernel: attention``, the source's repo, path and commit, ``gpu``, ``preset``, ``dtype``,
``library``, ``measured``, ``units``, ``made_by``) plus ``family`` (``flash2``, ``flash3``,
``cudnn``, ``triton-flash1``) and ``use``: ``model`` (the table the cost model reads for that
family and preset; at most one per pair) or ``check`` (another source of the same kernel,
for comparison only).  Then the column line and the rows::

    label,batch,heads,seq_len,head_dim,causal,direction,dtype,tflop_per_s

``label`` says how the number was read (``bar-label``, ``bar-height``, ``log``); ``causal`` is
0 or 1; ``direction`` is ``fwd``, ``bwd`` or ``fwd+bwd``; ``tflop_per_s`` the published rate in
1e12 FLOP/s, with the FLOP of the FlashAttention papers' convention (Dao 2023, sec. 4.1; Shah
et al. 2024, sec. 4.1; pytorch/benchmark's flash_attention operator): ``4·b·h·s²·d`` forward,
halved under a causal mask, 2.5x backward, 3.5x forward + backward.  Every source runs
``b·s = 16k`` tokens, so the rows vary the sequence at a fixed token count.

**Lookup** (:func:`attention_throughput_flop_per_s`) for (s, d, causal, direction):

1. The rows of that (causal, direction); when the table has none, its ``fwd+bwd`` rows of that
   causal mask (the combined rate for each pass: the forward plus backward time is then the
   measured combined time exactly, the split between the two passes is not measured); when
   neither, the rows of the other mask in that direction, times the ratio
   ``rate(causal) / rate(non-causal)`` the other direction has at the same (s, d) (the FA3
   paper's Fig. 6 gives the backward only without the mask); otherwise a ConfigError.
2. Over the head dims of those rows: linear in ``log d`` between the two nearest, the nearest
   outside their range (assumption: the rate does not keep rising or falling past the measured
   head dims).
3. At one head dim, over the sequence lengths: piecewise linear in ``(log s, log rate)``
   (a power law between neighbouring points), exact at the table's points.  Above the longest
   sequence the rate stays at its last value (every figure is flat within 1-3 % from 8k to 16k).
   Below the shortest, the first segment's power law continues, its exponent clamped to [0, 1]:
   the rate falls as the sequence shortens (fewer score blocks per query block to hide the
   per-block prologue and epilogue, Dao 2023 sec. 3.2), but not faster than the work, so a
   shorter sequence never takes longer per head than the shortest measured one (with a single
   measured sequence, exponent 1).

All rates are returned in FLOP/s (SI).
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.cost.measured_tables import MEASURED_DIR, REQUIRED_KEYS, _split
from archplace.workload.attention_blocks import is_backward
from archplace.workload.graph import Operator

#: File-name prefix of the attention tables in :data:`MEASURED_DIR`.
PREFIX = "attention_"

#: The column line of an attention table.
COLUMNS = ("label", "batch", "heads", "seq_len", "head_dim", "causal", "direction", "dtype", "tflop_per_s")

#: Directions a row may measure.
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")

#: The roles of a table (header key ``use``).
USES = ("model", "check")

_TERA = 1e12


@dataclass(frozen=True, slots=True)
class AttentionTable:
    """One shipped table of measured fused-attention throughput.

    Attributes:
        name: the file's stem, e.g. ``attention_flash2_a100_fa2paper``.
        header: every ``# key: value`` of the file.
        labels: how each row was read.
        batch, heads, seq_len, head_dim: the shape of each row (int64 arrays).
        causal: whether each row ran under a causal mask (bool array).
        directions: ``fwd``, ``bwd`` or ``fwd+bwd`` per row.
        dtypes: input dtype per row.
        flop_per_s: published throughput of each row in FLOP/s (float64, positive).
    """

    name: str
    header: Mapping[str, str]
    labels: tuple[str, ...]
    batch: NDArray[np.int64]
    heads: NDArray[np.int64]
    seq_len: NDArray[np.int64]
    head_dim: NDArray[np.int64]
    causal: NDArray[np.bool_]
    directions: tuple[str, ...]
    dtypes: tuple[str, ...]
    flop_per_s: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def family(self) -> str:
        """The kernel family (``flash2``, ...)."""
        return self.header["family"]

    @property
    def preset(self) -> str:
        """The archplace hardware preset of the measured GPU."""
        return self.header["preset"]

    @property
    def use(self) -> str:
        """``model`` or ``check`` (module docstring)."""
        return self.header["use"]


def attention_table_names() -> tuple[str, ...]:
    """Stems of the shipped attention tables, sorted."""
    return tuple(sorted(p.stem for p in MEASURED_DIR.glob(f"{PREFIX}*.csv")))


def _int(path: Path, row: int, column: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"attention table {path}: row {row}: {column} {text!r} "
                          "is not a whole number") from None
    if value < 1:
        raise ConfigError(f"attention table {path}: row {row}: {column} {value} is not positive")
    return value


def read_attention_table(path: Path | str) -> AttentionTable:
    """Read and check one attention table (format in the module docstring).

    Raises:
        ConfigError: unreadable; a header key missing or empty (those of
            :data:`~archplace.cost.measured_tables.REQUIRED_KEYS`, ``family`` and ``use``);
            ``kernel`` other than ``attention``; an unknown ``use``; a column line other than
            :data:`COLUMNS`; a row with a wrong field count, a size that is not a positive whole
            number, ``causal`` not 0/1, an unknown direction, a rate that is not positive and
            finite, or a repeated (seq_len, head_dim, causal, direction); no rows.  One line naming the file.
    """
    path = Path(path)
    header, body = _split(path)
    missing = [k for k in (*REQUIRED_KEYS, "family", "use") if not header.get(k)]
    if missing:
        raise ConfigError(f"attention table {path}: header lacks {', '.join(missing)}")
    if header["kernel"] != "attention":
        raise ConfigError(f"attention table {path}: kernel is {header['kernel']!r}, not 'attention'")
    if header["use"] not in USES:
        raise ConfigError(f"attention table {path}: use {header['use']!r}; choose from: {', '.join(USES)}")
    rows = list(csv.reader(body))
    if not rows or tuple(c.strip() for c in rows[0]) != COLUMNS:
        raise ConfigError(f"attention table {path}: the column line must be {','.join(COLUMNS)}")
    if len(rows) < 2:
        raise ConfigError(f"attention table {path}: no rows")
    ints: dict[str, list[int]] = {c: [] for c in ("batch", "heads", "seq_len", "head_dim")}
    labels, causal, directions, dtypes, rates = [], [], [], [], []
    seen: dict[tuple[int, int, str, str], int] = {}
    for number, fields in enumerate(rows[1:], 1):
        if len(fields) != len(COLUMNS):
            raise ConfigError(f"attention table {path}: row {number} has {len(fields)} fields, "
                              f"not {len(COLUMNS)}")
        record = dict(zip(COLUMNS, (f.strip() for f in fields), strict=True))
        for column in ints:
            ints[column].append(_int(path, number, column, record[column]))
        if record["causal"] not in ("0", "1"):
            raise ConfigError(f"attention table {path}: row {number}: causal {record['causal']!r} "
                              "is not 0 or 1")
        if record["direction"] not in DIRECTIONS:
            raise ConfigError(f"attention table {path}: row {number}: direction {record['direction']!r}; "
                              f"choose from: {', '.join(DIRECTIONS)}")
        try:
            rate = float(record["tflop_per_s"])
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"attention table {path}: row {number}: tflop_per_s {record['tflop_per_s']!r} "
                              "is not positive and finite")
        key = (ints["seq_len"][-1], ints["head_dim"][-1], record["causal"], record["direction"])
        if key in seen:
            raise ConfigError(f"attention table {path}: row {number} repeats seq_len, head_dim, causal "
                              f"and direction of row {seen[key]}")
        seen[key] = number
        labels.append(record["label"])
        causal.append(record["causal"] == "1")
        directions.append(record["direction"])
        dtypes.append(record["dtype"])
        rates.append(rate * _TERA)

    def frozen(values: list[int] | list[bool] | list[float], dtype: type) -> NDArray[Any]:
        array: NDArray[Any] = np.array(values, dtype=dtype)
        array.flags.writeable = False
        return array

    return AttentionTable(path.stem, MappingProxyType(dict(header)), tuple(labels),
                          frozen(ints["batch"], np.int64), frozen(ints["heads"], np.int64),
                          frozen(ints["seq_len"], np.int64), frozen(ints["head_dim"], np.int64),
                          frozen(causal, np.bool_), tuple(directions), tuple(dtypes),
                          frozen(rates, np.float64))


@functools.lru_cache(maxsize=64)
def load_attention_table(name: str) -> AttentionTable:
    """A shipped attention table by name (:func:`attention_table_names`).

    Raises:
        ConfigError: no such table, or a malformed file.
    """
    if name not in attention_table_names():
        raise ConfigError(f"no attention table {name!r}; shipped: {', '.join(attention_table_names())}")
    return read_attention_table(MEASURED_DIR / f"{name}.csv")


@functools.lru_cache(maxsize=1)
def _model_tables() -> tuple[tuple[tuple[str, str], str], ...]:
    return tuple(_scan_model_tables().items())


def model_tables() -> dict[tuple[str, str], str]:
    """``{(family, preset): table name}`` of the shipped ``use: model`` tables.

    Raises:
        ConfigError: two model tables for one (family, preset), or a malformed file.
    """
    return dict(_model_tables())


def _scan_model_tables() -> dict[tuple[str, str], str]:
    """:func:`model_tables`, read from the files.

    Raises:
        ConfigError: two model tables for one (family, preset), or a malformed file.
    """
    out: dict[tuple[str, str], str] = {}
    for name in attention_table_names():
        table = load_attention_table(name)
        if table.use != "model":
            continue
        key = (table.family, table.preset)
        if key in out:
            raise ConfigError(f"attention tables {out[key]} and {name} are both the model table of "
                              f"{table.family} on {table.preset}")
        out[key] = name
    return out


def families(preset: str) -> tuple[str, ...]:
    """Kernel families with a model table for the hardware preset ``preset``, sorted."""
    return tuple(sorted(f for f, p in model_tables() if p == preset))


def table_for(family: str, preset: str) -> AttentionTable:
    """The model table of ``family`` on ``preset``.

    Raises:
        ConfigError: no such table; the message names the families that exist for ``preset``.
    """
    name = model_tables().get((family, preset))
    if name is None:
        known = families(preset)
        choices = ", ".join(known) if known else "none (no attention table is shipped for it)"
        raise ConfigError(f"attention kernel family {family!r} has no measured table for {preset}; "
                          f"families for {preset}: {choices}")
    return load_attention_table(name)


def _along_seq(seq: NDArray[np.float64], rate: NDArray[np.float64], s: float) -> float:
    """Rule 3 of the module docstring at one head dim; ``seq`` ascending, distinct."""
    if len(seq) == 1 or s >= seq[-1]:
        return float(rate[-1]) if s >= seq[-1] else float(rate[0]) * min(1.0, s / float(seq[0]))
    if s <= seq[0]:
        slope = math.log(rate[1] / rate[0]) / math.log(seq[1] / seq[0])
        return float(rate[0]) * (s / float(seq[0])) ** min(1.0, max(0.0, slope))
    exact = np.flatnonzero(seq == s)
    if exact.size:  # a table point: its own number, without the round trip through logs
        return float(rate[exact[0]])
    return float(np.exp(np.interp(math.log(s), np.log(seq), np.log(rate))))


def _rate(table: AttentionTable, mask: NDArray[np.bool_], s: float, d: float) -> float:
    """Rules 2 and 3 over the rows of ``mask``."""
    dims = np.unique(table.head_dim[mask])

    def at(dim: int) -> float:
        rows = mask & (table.head_dim == dim)
        order = np.argsort(table.seq_len[rows])
        return _along_seq(table.seq_len[rows][order].astype(np.float64), table.flop_per_s[rows][order], s)

    if d in dims:
        return at(int(d))
    if d <= dims[0]:
        return at(int(dims[0]))
    if d >= dims[-1]:
        return at(int(dims[-1]))
    upper = int(np.searchsorted(dims, d))
    lo, hi = int(dims[upper - 1]), int(dims[upper])
    t = (math.log(d) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp((1 - t) * math.log(at(lo)) + t * math.log(at(hi)))


def attention_throughput_flop_per_s(table: AttentionTable, *, seq_len: int, head_dim: int, causal: bool,
                                    backward: bool) -> float:
    """Throughput in FLOP/s (the papers' FLOP convention, module docstring) of one fused
    attention kernel of sequence ``seq_len`` and head dim ``head_dim`` from ``table``, by the
    lookup rules of the module docstring; exact at the table's own (seq_len, head_dim).

    Raises:
        ConfigError: a size below 1, or the table cannot answer for this mask and direction.
    """
    if seq_len < 1 or head_dim < 1:
        raise ConfigError(f"attention lookup: seq_len {seq_len} and head_dim {head_dim} must be positive")
    direction = "bwd" if backward else "fwd"
    dirs = np.array(table.directions)

    def rows(mask_causal: bool, which: str) -> NDArray[np.bool_]:
        selected: NDArray[np.bool_] = (table.causal == mask_causal) & (dirs == which)
        return selected

    own = rows(causal, direction)
    if own.any():
        return _rate(table, own, seq_len, head_dim)
    combined = rows(causal, "fwd+bwd")
    if combined.any():
        return _rate(table, combined, seq_len, head_dim)
    other_dir = "fwd" if backward else "bwd"
    mirror, with_mask = rows(not causal, direction), rows(causal, other_dir)
    without = rows(not causal, other_dir)
    if mirror.any() and with_mask.any() and without.any():
        ratio = _rate(table, with_mask, seq_len, head_dim) / _rate(table, without, seq_len, head_dim)
        return _rate(table, mirror, seq_len, head_dim) * ratio
    raise ConfigError(f"attention table {table.name}: no {direction} rows "
                      f"{'with' if causal else 'without'} a causal mask to answer from")


def convention_flop(batch_heads: float, s_q: int, s_kv: int, head_dim: int, causal: bool,
                    backward: bool) -> float:
    """FLOP of one attention kernel in the tables' convention: ``4·(b·h)·s_q·s_kv·d``, halved
    under a causal mask, 2.5x backward (Dao 2023, sec. 4.1)."""
    flop = 4.0 * batch_heads * s_q * s_kv * head_dim * (0.5 if causal else 1.0)
    return 2.5 * flop if backward else flop


@functools.lru_cache(maxsize=4096)
def _kernel_rate(name: str, seq_len: int, head_dim: int, causal: bool, backward: bool) -> float:
    return attention_throughput_flop_per_s(load_attention_table(name), seq_len=seq_len, head_dim=head_dim,
                                           causal=causal, backward=backward)


def kernel_time_s(op: Operator, kernel: str) -> float:
    """Seconds of the fused attention operator ``op`` on all of a chip's SMs at the measured rate
    of ``kernel`` (``FAMILY/PRESET``, :attr:`KernelEfficiency.attention_kernel`): its FLOP in the
    tables' convention (:func:`convention_flop`: ``op.batch`` = micro-batch x heads, query
    length ``op.m``, key length ``op.n``, head dim ``op.k``, causal mask ``op.causal``) over the
    table's rate at sequence ``op.m`` (the kernel's query length: the sequence without context
    parallelism, the rank's share with it; assumption), head dim ``op.k``, the operator's mask
    and direction.  A causal operator that computes every score block (``skip_masked_blocks``
    False: SDPA with an explicit mask) is looked up and counted as a non-causal one.  0 for an
    empty operator.

    With a head dim of V different from ``op.k`` (multi-head latent attention) the convention's
    FLOP are scaled by ``attention_flop(op)`` over its value at d_v = d, so the table's rate
    applies to the operator's own FLOP.

    Raises:
        ConfigError: ``kernel`` is malformed or names no model table, or the table cannot answer
            for this mask and direction.
    """
    if op.batch <= 0 or op.m <= 0 or op.n <= 0 or op.k <= 0:
        return 0.0
    family, _, preset = kernel.partition("/")
    name = model_tables().get((family, preset))
    if name is None:
        table_for(family, preset)  # raises, naming the families of the preset
    backward = is_backward(op)
    masked = bool(op.causal and op.skip_masked_blocks)  # SDPA with an explicit mask computes every block
    flop = convention_flop(op.batch, op.m, op.n, op.k, masked, backward)
    if op.v_dim and op.v_dim != op.k:
        flop *= (op.k + op.v_dim) / (2.0 * op.k) if not backward else (3 * op.k + 2 * op.v_dim) / (5.0 * op.k)
    return flop / _kernel_rate(str(name), op.m, op.k, masked, backward)


def kernel_key(family: str, chip: str, current: str | None) -> str:
    """The ``attention_kernel`` (``FAMILY/PRESET``) of a chip when the user picks ``family``: the
    preset of the chip's current table (``current``), else the chip's own name ``chip``.

    Raises:
        ConfigError: no model table of ``family`` for that preset; the message names the
            families that exist for it.
    """
    preset = current.partition("/")[2] if current else chip
    table_for(family, preset)
    return f"{family}/{preset}"


__all__ = ["COLUMNS", "DIRECTIONS", "PREFIX", "USES", "AttentionTable", "attention_table_names",
           "attention_throughput_flop_per_s", "convention_flop", "families", "kernel_key", "kernel_time_s",
           "load_attention_table", "model_tables", "read_attention_table", "table_for"]
