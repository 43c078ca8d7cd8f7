"""Timing one kernel call: warm-up calls, then ``repeats`` timed calls, the median kept.

On a CUDA device each call is timed with a pair of CUDA events recorded on the current stream
around it (``torch.cuda.Event(enable_timing=True)``; ``elapsed_time`` is in milliseconds), and
before each timed call the L2 cache is flushed by zeroing a 256 MiB buffer, outside the timed
interval -- as Triton's benchmark does (triton-lang/triton
``third_party/nvidia/backend/driver.py`` ``get_empty_cache_for_benchmark`` and ``clear_cache``,
commit 00852cfbc6dae68faaf23232869a23540d30bc9a: "a buffer of 256 MB that we clear before each
kernel call to make sure that the L2 cache doesn't contain any input data").  The table then
holds cold-cache kernel times, without host launch overhead between calls.

On the CPU each call is timed with :func:`time.perf_counter` (wall clock, seconds).

torch is passed in, never imported here: importing archplace must not import torch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from archplace.base.errors import ConfigError

#: The smallest latency a table records (1 ns, time.perf_counter's resolution on Linux).
MIN_LATENCY_S = 1e-9

#: Bytes zeroed before each timed CUDA call to flush the L2 cache (Triton's figure, module docstring).
L2_FLUSH_BYTES = 256 * 1024 * 1024


def time_call(torch: Any, device: Any, call: Callable[[], object], *, warmup: int, repeats: int,
              flush: Any | None = None) -> float:
    """Median seconds of ``repeats`` timed calls of ``call`` after ``warmup`` untimed ones.

    Args:
        torch: the torch module.
        device: a ``torch.device``: ``cuda`` events time the calls on a CUDA device, the host
            clock on any other.
        call: runs the kernel once (its result is dropped).
        warmup: untimed calls first (at least 0).
        repeats: timed calls (at least 1).
        flush: on CUDA, a tensor zeroed before each timed call, outside the timing (the L2 flush
            buffer, :func:`l2_flush_buffer`); None flushes nothing.

    Returns:
        The median latency in seconds (positive).

    Raises:
        ConfigError: ``warmup`` below 0 or ``repeats`` below 1.
    """
    if warmup < 0 or repeats < 1:
        raise ConfigError(f"profile: warmup {warmup} must be >= 0 and repeats {repeats} >= 1")
    for _ in range(warmup):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for start, end in zip(starts, ends, strict=True):
            if flush is not None:
                flush.zero_()
            start.record()
            call()
            end.record()
        torch.cuda.synchronize(device)
        times = [start.elapsed_time(end) * 1e-3 for start, end in zip(starts, ends, strict=True)]
    else:
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            call()
            times.append(time.perf_counter() - begin)
    # a tiny kernel can read 0 on a coarse clock: 1 ns (perf_counter's resolution on Linux) is
    # the floor, so that every latency of a table is positive
    return max(float(statistics.median(times)), MIN_LATENCY_S)


def l2_flush_buffer(torch: Any, device: Any) -> Any | None:
    """The L2 flush buffer of a CUDA ``device`` (:data:`L2_FLUSH_BYTES` of int32), None elsewhere."""
    if device.type != "cuda":
        return None
    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
