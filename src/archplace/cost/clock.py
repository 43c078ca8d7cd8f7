"""The sustained clock under the board's power limit (issue #24, item 4: in-situ effects).

Isolated kernel measurements run short bursts: a few calls after a few warm-up calls, with a
synchronisation between them.  The board stays below its power limit and GPU Boost holds the
boost clock.  A training run keeps the tensor cores busy for minutes; the board then sits at its
power limit and the SM clock settles lower (NVIDIA's GPU Boost lowers the SM clock until the
board power fits the limit; the HBM clock is a separate domain and does not move).  A known
chip may declare that clock, ``efficiency.sustained_clock`` (``KernelEfficiency.
sustained_clock_hz``, cited in the preset).  Without it nothing here changes any time.

**What is scaled.**  A compute-bound kernel's time is a count of SM cycles, so at the clock
``f_s`` it takes ``f_m / f_s`` times the time measured at ``f_m``::

    scale = f_m / f_s                    (1 when no sustained clock is declared)

* GEMMs priced from a measured table (:func:`sustained_gemm_s`), with ``f_m`` the ``clock``
  header of the chip's GEMM tables of the operand dtype class (the highest when several state
  one: they were measured on one chip under one method), or, for tables that state none, the
  chip's ``clock`` (the assumption that an isolated measurement ran at the clock its peak is
  quoted at).  A table time ``t`` holds compute and what does not scale with the SM clock (HBM streaming,
  launch latency).  With ``c`` the tile/wave model's compute time
  (:func:`archplace.cost.measured_gemm.gemm_model_s` with ``compute_only``) standing for its
  compute part and ``m`` its streaming time::

      t' = max(t, min(t · scale, t + (scale - 1) · c, max(m, scale · c)))

  A GEMM measured faster than the model's compute time (``c >= t``) is all compute: ``t ·
  scale``.  One slower than it stretches by its modelled compute only (``t + (scale - 1) ·
  c``).  The last term keeps a memory-bound GEMM (a GEMV: ``scale · c <= m``) within its
  streaming time and a launch-bound one (the kernel floor, ``c`` and ``m`` tiny) at ``t``.
  ``t'`` lies in ``[t, t · scale]`` and, every term being non-decreasing in ``t``, ``c`` and
  ``m``, is non-decreasing in each GEMM dimension wherever they are.
  GEMMs without a table are *not* scaled:
  their ``gemm_sustained`` is a MAMF measurement (S. Bekman, *Machine Learning Engineering*,
  compute/accelerator/benchmarks/mamf-finder.py: 30 s of warm-up GEMMs on ``torch.randn``
  inputs, then back-to-back timed calls), taken at the sustained clock already.
* Fused attention (``OpKind.ATTENTION``): its time from the chip's measured attention table
  or its FLOP time at the declared FlashAttention fraction of the peak, with ``f_m`` the table's
  ``clock`` header where it states one (``archplace profile`` writes it), else the chip's
  ``clock`` (the papers quote their fractions of the peak, measured in short benchmark loops);
  never below 1.

**Which clock.**  ``f_s`` is best measured as a *throughput-equivalent* clock
(:mod:`archplace.profiling.sustained`, ``archplace profile --sustained``): the reference table's
clock times the ratio of a large GEMM's throughput under minutes of load to its throughput in the
table.  NVML's SM clock overstates the loss: on an H200 at its 700 W limit NVML's SM clock fell
from 1965 to 1485 MHz while an 8192^3 bf16 GEMM fell from 707 to 671 TFLOP/s (a 1.88 GHz
equivalent), and FP8 GEMMs, whose arithmetic is denser, fell further (a 1.647 GHz equivalent,
``efficiency.sustained_clock_fp8``, used for FP8 GEMM tables;
``archplace/cost/measured/h200_runs/``).
* Not scaled: memory time (HBM clock), streaming kernels (memory-bound), collectives (links),
  the kernel floor (launch latency).  A memory-bound GEMM stays memory-bound: only its compute
  part grows and the latency is still ``max(compute, memory)``.

``scale`` is ``f_m / f_s``: a lower sustained clock never makes an operator faster.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.base.units import parse_frequency
from archplace.cost.attention_tables import AttentionTable, table_for
from archplace.cost.kernel_tables import dtype_class, resolve_table
from archplace.cost.measured_tables import MeasuredTable
from archplace.hw.accelerator import KernelEfficiency

FloatArray = NDArray[np.float64]

__all__ = ["attention_scale", "gemm_table_clock_hz", "gemm_table_scale", "sustained_gemm_s",
           "table_clock_hz"]


def table_clock_hz(table: MeasuredTable | AttentionTable) -> float:
    """The SM clock a measured table (a latency or an attention table) states in its ``clock``
    header (its first two words, e.g. ``1.41 GHz (assumed: ...)``), Hz; 0 when the header has no
    ``clock`` key.

    Raises:
        ConfigError: a ``clock`` header that is not a positive frequency.
    """
    text = table.header.get("clock")
    if text is None:
        return 0.0
    words = text.split()
    value = parse_frequency(" ".join(words[:2]), f"measured table {table.name}: header clock")
    if not value > 0.0:
        raise ConfigError(f"measured table {table.name}: header clock {text!r} is not a positive frequency")
    return value


@functools.lru_cache(maxsize=32)
def gemm_table_clock_hz(names: tuple[str, ...], dtype: str) -> float:
    """The highest ``clock`` header among the GEMM tables of ``names`` with rows of the dtype
    class ``dtype`` (:func:`archplace.cost.kernel_tables.dtype_class`), Hz; 0 when none states one.

    Raises:
        ConfigError: a table that cannot be read, or a malformed ``clock`` header.
    """
    clocks = [table_clock_hz(t) for t in (resolve_table(n) for n in names)
              if t.kernel == "gemm" and any(dtype_class(d) == dtype for d in t.dtypes)]
    return max(clocks, default=0.0)


def gemm_table_scale(efficiency: KernelEfficiency, dtype: str,
                     chip_clock_hz: FloatArray, *, fp8: bool | None = None) -> float | FloatArray:
    """``f_m / f_s`` for a GEMM priced from the chip's ``dtype`` tables (module docstring): 1.0
    without a sustained clock; ``chip_clock_hz`` (one entry per design) stands in for ``f_m``
    where the tables state no clock; ``f_s`` is ``sustained_clock_fp8_hz`` for an FP8 GEMM
    (``fp8``; by default, one priced from ``fp8`` tables) where the chip declares it, also when
    the GEMM is priced from the 16-bit tables at the FP8 speed-up.

    Raises:
        ConfigError: as :func:`gemm_table_clock_hz`.
    """
    sustained = efficiency.sustained_clock_hz
    if (dtype == "fp8" if fp8 is None else fp8) and efficiency.sustained_clock_fp8_hz > 0.0:
        sustained = efficiency.sustained_clock_fp8_hz
    if sustained <= 0.0:
        return 1.0
    measured = gemm_table_clock_hz(efficiency.kernel_tables, dtype)
    if measured > 0.0:
        return measured / sustained
    scale: FloatArray = np.asarray(chip_clock_hz, dtype=np.float64) / sustained
    return scale


def attention_scale(efficiency: KernelEfficiency, chip_clock_hz: FloatArray) -> float | FloatArray:
    """``f_m / f_s`` for a fused attention operator (module docstring): the clock its speed was
    measured at over the sustained clock, one entry per design, never below 1; 1.0 without a
    sustained clock.  ``f_m`` is the ``clock`` header of the chip's measured attention table
    (``efficiency.attention_kernel``) where it states one (``archplace profile`` writes it), else
    the chip's clock.

    Raises:
        ConfigError: the attention table cannot be read, or its ``clock`` header is malformed.
    """
    sustained = efficiency.sustained_clock_hz
    if sustained <= 0.0:
        return 1.0
    measured = _attention_table_clock_hz(efficiency.attention_kernel) if efficiency.attention_kernel else 0.0
    base = measured if measured > 0.0 else np.asarray(chip_clock_hz, dtype=np.float64)
    scale: FloatArray = np.maximum(np.asarray(base, dtype=np.float64) / sustained, 1.0)
    return scale


@functools.lru_cache(maxsize=32)
def _attention_table_clock_hz(kernel: str) -> float:
    """The ``clock`` header of the model attention table ``FAMILY/PRESET``, Hz; 0 when it states
    none (the published tables: no source logs its clock)."""
    family, _, preset = kernel.partition("/")
    return table_clock_hz(table_for(family, preset))


def sustained_gemm_s(measured_s: FloatArray, compute_s: FloatArray, memory_s: FloatArray,
                     scale: float | FloatArray) -> FloatArray:
    """A table GEMM's seconds at the sustained clock (module docstring): ``max(t, min(t·scale,
    t + (scale - 1)·c, max(m, scale·c)))`` with ``t = measured_s`` (its time at the table's
    clock), ``c = compute_s`` (the tile/wave model's compute seconds) and ``m = memory_s`` (its
    streaming seconds); arrays of one entry per design."""
    stretched = np.minimum(np.minimum(measured_s * scale, measured_s + (scale - 1.0) * compute_s),
                           np.maximum(memory_s, compute_s * scale))
    result: FloatArray = np.maximum(measured_s, stretched)
    return result
