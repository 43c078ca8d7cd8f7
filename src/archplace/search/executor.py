"""Where design evaluations run: a local process pool (default) or a Dask cluster.

Both are :class:`concurrent.futures.Executor` objects, so the search code is the
same either way; evaluations are pure functions of their arguments, so the
results are identical.  Dask comes with the optional extra
``pip install 'archplace[cluster]'``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from archplace.errors import ConfigError

EXECUTORS = ("local", "dask")


def default_jobs() -> int:
    """Worker processes of the local pool: the CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@contextmanager
def _local(jobs: int) -> Any:
    if jobs == 1:  # no process start-up for a serial run
        with ThreadPoolExecutor(max_workers=1) as pool:
            yield pool
        return
    # spawn: workers start clean (no copy of the parent's torch threads)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@contextmanager
def _dask(scheduler: str | None, jobs: int) -> Any:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("the dask executor needs the optional extra: "
                          "pip install -c constraints.txt -e '.[cluster]'") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
        with client:
            yield client.get_executor()
        return
    quiet = logging.getLogger("distributed")  # its INFO start-up chatter, 30-odd lines
    level = quiet.level
    quiet.setLevel(max(level, logging.WARNING))
    try:
        with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            yield client.get_executor()
    finally:
        quiet.setLevel(level)


def make_executor(kind: str = "local", jobs: int | None = None,
                  scheduler: str | None = None) -> AbstractContextManager[Executor]:
    """A context manager yielding the executor.

    Args:
        kind: ``local`` (process pool) or ``dask`` (a local Dask cluster, or the one at
            ``scheduler``).
        jobs: worker processes (default: the usable CPUs).
        scheduler: address of a running Dask scheduler, e.g. ``tcp://10.0.0.5:8786``
            (implies ``dask``).

    Raises:
        ConfigError: unknown kind, non-positive jobs, Dask missing or unreachable.
    """
    if scheduler:
        kind = "dask"
    if kind not in EXECUTORS:
        raise ConfigError(f"unknown executor {kind!r}; choose from: {', '.join(EXECUTORS)}")
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 0:
        raise ConfigError(f"--jobs must be positive, got {jobs}")
    return _local(jobs) if kind == "local" else _dask(scheduler, jobs)
