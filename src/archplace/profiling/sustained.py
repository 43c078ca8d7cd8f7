"""The SM clock a GPU sustains under minutes of matrix load (issue #24, item 4: in-situ effects).

Isolated kernel timings run in short bursts, at which GPU Boost holds the boost clock; a training
run keeps the tensor cores busy for minutes, the board reaches its power limit and the SM clock
settles lower (:mod:`archplace.cost.clock` scales compute-bound table times by the ratio).  This
measures that lower clock on one's own GPU:

* **load**: back-to-back GEMMs of two ``size x size`` matrices in the run's dtype (the
  profiler's GEMM call, :func:`archplace.profiling.kernels.gemm_call`; 8192: large enough that
  each GEMM runs at the tensor cores' rate, about 1.1 TFLOP per call), in chunks of ``chunk``
  calls, each chunk followed by a synchronisation;
* **readings**: after each chunk, the SM clock and the board power as NVML reports them over its
  last sample period (``torch.cuda.clock_rate``, MHz, and ``torch.cuda.power_draw``, mW: the
  figures ``nvidia-smi`` prints), and the chunk's throughput from the host clock;
* **steady state**: the readings of the run's second half (:data:`STEADY_FRACTION`), once the
  board has reached its power limit or thermal steady state; **burst**: the readings before the
  power limit binds, those after the first (which holds the library's warm-up) whose SM clock is
  within :data:`BURST_TOLERANCE` of the highest reading.

**What the cost model takes** (``efficiency.sustained_clock``, :mod:`archplace.cost.clock`) is
the *throughput-equivalent* clock, ``f_ref x (steady FLOP/s / reference FLOP/s)``: the clock at
which a kernel of the reference would take the time it takes under sustained load, if its time
were SM cycles.  The reference is the GEMM table the same run measured (its ``clock`` header and
its latency of the load's shape, which is what the cost model scales), else the burst readings.
It is not NVML's steady SM clock, because GEMM throughput does not follow that clock: on an H200
(700 W) NVML reported 1965 MHz in the burst and 1485 MHz in the steady state, a 24 % lower
clock, while the 8192^3 bf16 GEMM's throughput fell 3 % (696 to 674 TFLOP/s; 5 % against the
table's 707; the traces in ``archplace/cost/measured/h200_runs/``).  The table is the better
reference: FP8 GEMMs on that H200 met the power limit within the first chunk (NVML 1410 MHz from
the start), so their burst readings were already the capped ones.

torch is passed in, never imported here.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import ConfigError
from archplace.profiling.grid import GemmPoint
from archplace.profiling.kernels import LIBRARY, gemm_call
from archplace.profiling.tables import header_text

#: Side of the square GEMM that loads the GPU (elements).
SUSTAINED_SIZE = 8192

#: GEMM calls between two readings.
SUSTAINED_CHUNK = 50

#: Readings taken before this fraction of the run are the warm-up; the steady state is the rest.
STEADY_FRACTION = 0.5

#: Burst readings: SM clock within this fraction of the highest reading (NVML reports the clock in
#: 15 MHz steps on Hopper, 1 % of 1980 MHz is 20 MHz).
BURST_TOLERANCE = 0.01

#: Columns of the trace file.
TRACE_COLUMNS = ("time_s", "sm_clock_mhz", "power_w", "tflop_per_s")


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One reading after a chunk of GEMMs.

    Attributes:
        time_s: seconds since the load began, at the reading.
        sm_clock_hz: the SM clock NVML reports (Hz); NaN when it cannot be read.
        power_w: the board power NVML reports (W); NaN when it cannot be read.
        tflop_per_s: the chunk's throughput, 1e12 FLOP/s (host clock around the chunk).
    """

    time_s: float
    sm_clock_hz: float
    power_w: float
    tflop_per_s: float


@dataclass(frozen=True, slots=True)
class SustainedClock:
    """What :func:`measure_sustained_clock` read.

    Attributes:
        seconds: how long the load ran (as asked). size: the GEMM's side. dtype: its operands'.
        readings: in order.
    """

    seconds: float
    size: int
    readings: tuple[ClockReading, ...]
    dtype: str = "bf16"
    reference: str = ""
    reference_hz: float = 0.0
    reference_tflop_per_s: float = 0.0

    def against(self, table: str, clock_hz: float, tflop_per_s: float) -> SustainedClock:
        """The same readings with a GEMM table as the reference: its name, ``clock`` header (Hz)
        and throughput at the load's shape (1e12 FLOP/s)."""
        return SustainedClock(self.seconds, self.size, self.readings, self.dtype, table, clock_hz,
                              tflop_per_s)

    def steady(self) -> tuple[ClockReading, ...]:
        """The readings of the run's second half (:data:`STEADY_FRACTION`); the last reading
        when none falls there."""
        late = tuple(r for r in self.readings if r.time_s >= STEADY_FRACTION * self.seconds)
        return late or self.readings[-1:]

    def burst(self) -> tuple[ClockReading, ...]:
        """The readings before the power limit binds: after the first, SM clock within
        :data:`BURST_TOLERANCE` of the highest reading; the first when no other qualifies."""
        rest = self.readings[1:]
        top = max((r.sm_clock_hz for r in rest if not math.isnan(r.sm_clock_hz)), default=0.0)
        early = tuple(r for r in rest if r.sm_clock_hz >= (1.0 - BURST_TOLERANCE) * top)
        return early or self.readings[:1]

    @property
    def sustained_hz(self) -> float:
        """NVML's median SM clock of :meth:`steady` (Hz; NaN when none was read)."""
        return _median([r.sm_clock_hz for r in self.steady()])

    @property
    def burst_hz(self) -> float:
        """NVML's median SM clock of :meth:`burst` (Hz; NaN when none was read)."""
        return _median([r.sm_clock_hz for r in self.burst()])

    @property
    def burst_tflop_per_s(self) -> float:
        """The median GEMM throughput of :meth:`burst` (1e12 FLOP/s)."""
        return float(statistics.median(r.tflop_per_s for r in self.burst()))

    @property
    def effective_hz(self) -> float:
        """The throughput-equivalent sustained clock (module docstring), Hz: ``f x
        steady_tflop_per_s / t``, with ``(f, t)`` the reference table's clock and throughput when
        there is one, else :attr:`burst_hz` and :attr:`burst_tflop_per_s`; never above ``f``."""
        if self.reference:
            return self.reference_hz * min(1.0, self.steady_tflop_per_s / self.reference_tflop_per_s)
        return self.burst_hz * min(1.0, self.steady_tflop_per_s / self.burst_tflop_per_s)

    @property
    def steady_power_w(self) -> float:
        """The median board power of :meth:`steady` (W); NaN when it could not be read."""
        return _median([r.power_w for r in self.steady()])

    @property
    def steady_tflop_per_s(self) -> float:
        """The median GEMM throughput of :meth:`steady` (1e12 FLOP/s)."""
        return float(statistics.median(r.tflop_per_s for r in self.steady()))

    def summary(self) -> str:
        """One line: the throughput-equivalent clock, then NVML's clocks, power and throughput
        in the burst and the steady state."""
        power = "" if math.isnan(self.steady_power_w) else f" at {self.steady_power_w:.0f} W"
        reference = (f"; reference {self.reference}: {self.reference_tflop_per_s:.0f} TFLOP/s at "
                     f"{self.reference_hz / 1e6:.0f} MHz" if self.reference else "")
        return (f"sustained clock {self.effective_hz / 1e9:.4g} GHz throughput-equivalent: {self.dtype} "
                f"{self.size}^3 GEMMs {self.burst_tflop_per_s:.0f} TFLOP/s at NVML "
                f"{self.burst_hz / 1e6:.0f} MHz "
                f"(burst, {len(self.burst())} readings), {self.steady_tflop_per_s:.0f} TFLOP/s at NVML "
                f"{self.sustained_hz / 1e6:.0f} MHz{power} (steady, {len(self.steady())} of "
                f"{len(self.readings)} readings){reference}")

    def trace_rows(self) -> list[dict[str, str]]:
        """The readings as rows of :data:`TRACE_COLUMNS` (``-`` for a reading NVML did not give)."""
        return [{"time_s": f"{r.time_s:.3f}",
                 "sm_clock_mhz": "-" if math.isnan(r.sm_clock_hz) else f"{r.sm_clock_hz / 1e6:.0f}",
                 "power_w": "-" if math.isnan(r.power_w) else f"{r.power_w:.1f}",
                 "tflop_per_s": f"{r.tflop_per_s:.1f}"} for r in self.readings]


def _median(values: list[float]) -> float:
    """The median of the values that are not NaN (an NVML reading that failed); NaN for none."""
    read = [v for v in values if not math.isnan(v)]
    return float(statistics.median(read)) if read else math.nan


def sm_clock_hz(torch: Any, device: Any) -> float:
    """The SM clock of a CUDA ``device`` as NVML reports it over its last sample period
    (``torch.cuda.clock_rate``, MHz, which needs the ``nvidia-ml-py`` package), in Hz; NaN when
    it cannot be read."""
    try:
        return float(torch.cuda.clock_rate(device)) * 1e6
    except Exception:  # pynvml missing, NVML not initialised, an unsupported query
        return math.nan


def power_w(torch: Any, device: Any) -> float:
    """The board power NVML reports (``torch.cuda.power_draw``, mW), in W; NaN when it cannot be
    read (an NVML build without power readings: the trace says ``-``)."""
    try:
        return float(torch.cuda.power_draw(device)) / 1e3
    except Exception:  # as sm_clock_hz
        return math.nan


def nvml_readers(torch: Any, device: Any) -> tuple[Callable[[], float], Callable[[], float]]:
    """The SM-clock (Hz) and board-power (W) readers of a CUDA ``device`` (:func:`sm_clock_hz`,
    :func:`power_w`: NaN for a reading that fails).

    Raises:
        ConfigError: the SM clock cannot be read at all.
    """
    try:
        torch.cuda.clock_rate(device)
    except Exception as exc:  # the reason, for the message: pynvml missing, NVML not initialised
        raise ConfigError(f"sustained: cannot read the SM clock through NVML (torch.cuda.clock_rate: "
                          f"{' '.join(str(exc).split())[:160]}); install nvidia-ml-py",
                          fields=("sustained",)) from exc
    return (lambda: sm_clock_hz(torch, device)), (lambda: power_w(torch, device))


def measure_sustained_clock(torch: Any, device: Any, seconds: float, *,
                            read_clock_hz: Callable[[], float], read_power_w: Callable[[], float],
                            clock: Callable[[], float] = time.monotonic, size: int = SUSTAINED_SIZE,
                            chunk: int = SUSTAINED_CHUNK, dtype: str = "bf16") -> SustainedClock:
    """Run back-to-back GEMMs for ``seconds`` and read the clock after each chunk.

    Args:
        torch: the torch module; device: a CUDA ``torch.device``.
        seconds: how long to load the GPU (positive).
        dtype: the GEMMs' operand dtype (:data:`archplace.profiling.kernels.DTYPES`).
        read_clock_hz, read_power_w: NVML readers (:func:`nvml_readers`).
        clock: the host clock (seconds; tests pass a fake one).
        size: the GEMM's side; chunk: calls between readings.

    Returns:
        At least one reading.

    Raises:
        ConfigError: ``seconds``, ``size`` or ``chunk`` not positive.
    """
    if not (0 < seconds < math.inf) or size < 1 or chunk < 1:
        raise ConfigError(f"sustained: seconds {seconds!r}, size {size} and chunk {chunk} must be positive",
                          fields=("sustained",))
    gemm = gemm_call(torch, device, GemmPoint(size, size, size), dtype)
    flop = 2.0 * size**3 * chunk
    readings: list[ClockReading] = []
    start = clock()
    while True:
        begin = clock()
        for _ in range(chunk):
            gemm()
        torch.cuda.synchronize(device)
        now = clock()
        readings.append(ClockReading(now - start, read_clock_hz(), read_power_w(),
                                     flop / max(now - begin, 1e-9) / 1e12))
        if now - start >= seconds:
            return SustainedClock(seconds, size, tuple(readings), dtype)


def trace_header(result: SustainedClock, base: Mapping[str, str]) -> dict[str, str]:
    """The ``# key: value`` lines of a trace file: ``base`` (the device and run) and what was
    measured, with the sustained clock in words."""
    library = LIBRARY["gemm-fp8" if result.dtype == "fp8" else "gemm"]
    return {**base, "kernel": "sustained",
            "measured": (f"back-to-back {result.dtype} GEMMs {result.size}x{result.size}x{result.size} "
                         f"({library}) for {result.seconds:g} s, "
                         f"{SUSTAINED_CHUNK} calls per reading; SM clock and board power from NVML "
                         "(torch.cuda.clock_rate, torch.cuda.power_draw) after each chunk"),
            "sustained_clock": result.summary(),
            "columns": ("time_s: seconds since the load began; sm_clock_mhz: NVML SM clock; power_w: "
                        "NVML board power ('-': unreadable); tflop_per_s: the chunk's throughput")}


def trace_text(result: SustainedClock, base: Mapping[str, str]) -> str:
    """The trace file: :func:`trace_header`'s lines, then one CSV line per reading."""
    out = io.StringIO()
    out.write(header_text("sustained", trace_header(result, base)))
    writer = csv.DictWriter(out, TRACE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(result.trace_rows())
    return out.getvalue()
