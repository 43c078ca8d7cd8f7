"""The ranges archplace accepts for the sizes and counts a user gives, checked at the front door.

Python (and so typer) takes integers of any size, while NumPy, torch, OR-Tools and the C
libraries under them hold 64- or 32-bit integers and overflow or wrap silently; and some sizes
multiply the work. Every bound here says why it is where it is:

* :data:`MAX_DEVICES` = 2**20 (1,048,576) accelerators, and so TP, PP and DP degrees: beyond
  the largest clusters built, and the plan search's candidate grid stays small
  (:mod:`archplace.placement.search`).
* :data:`MAX_GLOBAL_BATCH` = 2**30 samples per iteration, :data:`MAX_MICRO_BATCH` = 2**20
  samples per micro-batch, :data:`MAX_SEQ_LEN` = 2**20 tokens per sample and
  :data:`MAX_MICRO_BATCH_TOKENS` = 2**26 tokens per micro-batch: the traced tensors (an
  attention score tensor holds micro-batch x heads x seq_len**2 elements) keep their element
  and byte counts well inside torch's int64 sizes.
* :data:`MAX_TOP` = 1,000 rows or plans: the exact top-k plan search must find k plans before it
  can prune, so k multiplies its work.
* :data:`MAX_TRIALS` = 10**6 designs; :data:`MAX_SEED` = 2**32 - 1 (NumPy's and Optuna's seed
  range); :data:`MAX_SOLVER_SEED` = 2**31 - 1 (CP-SAT's ``random_seed`` is an int32, HiGHS's
  ``random_seed`` option a non-negative int32); :data:`MAX_SOLVER_THREADS` = 256;
  :data:`MAX_TIME_LIMIT_S` = 86,400 s (one day: the timers of the solvers and of the HiGHS
  worker take C doubles and time-stamps).
* Worker processes (``jobs``): at most :data:`JOBS_PER_CPU` per usable CPU: evaluations are
  CPU-bound, and every worker process holds its own copy of torch (hundreds of MB).
* Matmul dimensions of ``estimate matmul`` at most :data:`MAX_GEMM_DIM` = 2**31 - 1 and arrays
  at most :data:`MAX_ARRAY_DIM` = 2**16 rows or columns.

All checks raise :class:`~archplace.base.errors.ConfigError` with one line naming the parameter, the
allowed range and the value given.
"""

from __future__ import annotations

import math
import os

from archplace.base.errors import ConfigError

MAX_DEVICES = 2**20
MAX_GLOBAL_BATCH = 2**30
MAX_MICRO_BATCH = 2**20
MAX_SEQ_LEN = 2**20
MAX_MICRO_BATCH_TOKENS = 2**26
MAX_TOP = 1_000
MAX_MOE_FACTOR = 1024.0
"""Largest expert capacity factor and expert load imbalance a model spec takes."""
MAX_TRIALS = 10**6
MAX_SEED = 2**32 - 1
MAX_SOLVER_SEED = 2**31 - 1
MAX_SOLVER_THREADS = 256
MAX_TIME_LIMIT_S = 86_400.0
JOBS_PER_CPU = 4
MAX_GEMM_DIM = 2**31 - 1
MAX_ARRAY_DIM = 2**16


def shown(value: object) -> str:
    """``value`` for a message: its repr, or for an integer of more than 30 digits its size
    (``1.000e+23``, or ``a number of about 5,000 digits``), so that a huge number never fills
    the terminal."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        if abs(value) < 10**300:
            return f"{value:.3e}"
        digits = int(value.bit_length() * math.log10(2))
        return f"{'-' if value < 0 else ''}a number of about {digits:,} digits"
    return repr(value)


def _range_text(low: int | float, high: int | float) -> str:
    return f"from {low:,} to {high:,}"


def whole(name: str, value: object, low: int, high: int) -> int:
    """``value`` when it is an int (not a bool) with ``low <= value <= high``.

    Raises:
        ConfigError: "``name`` must be a whole number from LOW to HIGH, got VALUE" (a range of
            at most four values names them: "must be 0, 1, 2 or 3").
    """
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        if high - low < 4:  # a few values: named ("0, 1, 2 or 3")
            *head, last = range(low, high + 1)
            allowed = f"{', '.join(map(str, head))} or {last}" if head else str(last)
            raise ConfigError(f"{name} must be {allowed}, got {shown(value)}")
        raise ConfigError(f"{name} must be a whole number {_range_text(low, high)}, got {shown(value)}")
    return value


def optional_whole(name: str, value: object, low: int, high: int) -> int | None:
    """:func:`whole`, with None passed through."""
    return None if value is None else whole(name, value, low, high)


def whole_each(name: str, values: object, low: int, high: int) -> tuple[int, ...]:
    """Every member of a non-empty iterable of whole numbers checked with :func:`whole`.

    Raises:
        ConfigError: not an iterable, empty, or a member out of range.
    """
    if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
        raise ConfigError(f"{name} must be a list of whole numbers, got {shown(values)}")
    out = tuple(whole(name, value, low, high) for value in values)
    if not out:
        raise ConfigError(f"{name} needs at least one value")
    return out


def finite(name: str, value: object, low: float, high: float, *, low_open: bool = False) -> float:
    """``value`` as a float when it is a finite real number in [low, high] (or (low, high] with
    ``low_open``).

    Raises:
        ConfigError: "``name`` must be a finite number above LOW (at least LOW) and at most HIGH,
            got VALUE", for NaN, infinities and non-numbers too.
    """
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf
    if not math.isfinite(number) or number > high or number < low or (low_open and number == low):
        bound = f"above {low:g}" if low_open else f"at least {low:g}"
        raise ConfigError(f"{name} must be a finite number {bound} and at most {high:g}, "
                          f"got {shown(value)}")
    return number


def micro_batch_tokens(micro_batch: int, seq_len: int) -> None:
    """Refuse a micro-batch of more than :data:`MAX_MICRO_BATCH_TOKENS` tokens.

    Raises:
        ConfigError: naming both sizes and the cap.
    """
    if micro_batch * seq_len > MAX_MICRO_BATCH_TOKENS:
        raise ConfigError(f"a micro-batch of {micro_batch:,} samples x {seq_len:,} tokens is "
                          f"{micro_batch * seq_len:,} tokens, more than the {MAX_MICRO_BATCH_TOKENS:,} "
                          f"(2**26) archplace traces")


def usable_cpus() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def jobs(value: object) -> int:
    """Worker processes: a whole number from 1 to :data:`JOBS_PER_CPU` x the usable CPUs.

    Raises:
        ConfigError: naming the range and why.
    """
    cap = JOBS_PER_CPU * usable_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cap:
        raise ConfigError(f"jobs must be a whole number from 1 to {cap:,} ({JOBS_PER_CPU} per usable "
                          f"CPU: evaluations are CPU-bound and each worker loads torch), got {shown(value)}")
    return value
