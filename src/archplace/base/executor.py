"""Where design evaluations (and a search's graph traces) run: in this process, a local process
pool (default) or a Dask cluster.  It sits below both the search (:mod:`archplace.dse`) and
the workload's graph cache (:mod:`archplace.workload.cache`), which traces on the same pools.

The pool and Dask are :class:`concurrent.futures.Executor` objects, so the search code is the
same either way; evaluations are pure functions of their arguments, so the results are
identical.  Dask comes with the optional extra ``pip install 'archplace[cluster]'``.

The local pool's workers never outlive the search (:mod:`archplace.base.lifetime`): they ignore
SIGINT from their start (a Ctrl-C reaches the whole process group), end when their parent
ends (``kill -9`` included), and when the search stops early -- an interrupt, an error --
the work not yet started is cancelled and the workers are terminated at once instead of
finishing their tasks.  The workers of a local Dask cluster start with SIGINT blocked and
end with their parent too (Dask's own watch of the parent); the cluster is closed on the way
out.  One job runs in this process, with no pool at all.

A value every task of a search takes (the layer chains) goes to the workers with each task on
the local pool (a pickle of a few hundred kB, a few ms) and once per search on Dask
(:func:`shared`: scattered to every worker).  Dask tasks are submitted without hashing their
arguments (``pure=False``): Dask's hash of the four PHAZE models' chains takes over a second,
which capped the search at about one task per second.
"""

from __future__ import annotations

import concurrent.futures.process as stdlib_pool
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.process import BaseProcess
from types import MappingProxyType
from typing import Any, TypeVar

from archplace.base.errors import ConfigError
from archplace.base.lifetime import Interrupted, guard_child, sigint_blocked, stop_processes
from archplace.base.quiet import silenced
from archplace.base.registry import lookup


def default_jobs() -> int:
    """Worker processes of the local pool: the CPUs this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class _WorkerProcess(SpawnProcess):
    """A spawned worker that starts with SIGINT blocked (:func:`archplace.base.lifetime.sigint_blocked`)
    until its initializer, :func:`archplace.base.lifetime.guard_child`, ignores it.  Daemonic: a
    worker the pool never recorded (an interrupt taken the instant after its start, when the
    signal is unblocked) is terminated when this process exits instead of waited for."""

    def start(self) -> None:
        self.daemon = True
        with sigint_blocked():
            super().start()


class _WorkerContext(SpawnContext):
    """Spawn (workers start clean: no copy of the parent's torch threads) with :class:`_WorkerProcess`."""

    Process = _WorkerProcess


def _workers(pool: ProcessPoolExecutor) -> list[BaseProcess]:
    """The pool's worker processes (a private attribute of the stdlib pool, there since 3.9)."""
    processes = getattr(pool, "_processes", None)
    return list(processes.values()) if isinstance(processes, dict) else []


MANAGER_JOIN_S = 1.0
"""How long a stopped pool's manager thread is given to notice its killed workers and close."""


def _settle_manager(pool: ProcessPoolExecutor, timeout_s: float = MANAGER_JOIN_S) -> None:
    """Let a stopped pool's manager thread finish before this process goes on to exit.

    Python 3.11's exit hook for process pools (``concurrent.futures.process._python_exit``)
    wakes every manager thread by writing to its pipe without the lock the manager holds when
    it closes that pipe (CPython gh-105829, fixed in 3.12): when the manager is still closing
    after its workers were killed, the write meets a closed descriptor and the interpreter
    prints an ``OSError`` traceback on the way out of a Ctrl-C.  Joining the manager (it ends
    within milliseconds once its workers are gone) makes the hook see a closed pipe and skip
    it; a manager still running after ``timeout_s`` is taken out of the hook's table instead.
    Both use private names of the stdlib pool, looked up defensively.
    """
    thread = getattr(pool, "_executor_manager_thread", None)
    if thread is None:
        return
    thread.join(timeout_s)
    if thread.is_alive():
        wakeups = getattr(stdlib_pool, "_threads_wakeups", None)
        if wakeups is not None:
            wakeups.pop(thread, None)


@contextmanager
def _local(jobs: int) -> Iterator[Executor | None]:
    if jobs == 1:  # in this process: nothing to start, and an interrupt stops the work at once
        yield None
        return
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_WorkerContext(), initializer=guard_child,
                               initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:  # an interrupt or an error: stop now, do not finish the queued work
        workers = _workers(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        stop_processes(workers)
        _settle_manager(pool)
        raise
    pool.shutdown(wait=True)


def _check_address(scheduler: str) -> None:
    """Refuse a scheduler address that is not ``tcp://HOST:PORT`` (or another Dask scheme)
    before a client is made: a client made from a malformed address raises from deep inside
    Dask and then blocks the interpreter's exit for 20 s closing itself.

    Raises:
        ConfigError: the address does not parse, or its port is outside 1..65535.
    """
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        port = parse_host_port(location)[1] if scheme in ("tcp", "tls") else 1
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Dask scheduler address {scheduler!r} is not of the form tcp://HOST:PORT "
                          f"({exc})") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"Dask scheduler address {scheduler!r}: port {port} is outside 1..65535")


_T = TypeVar("_T")


class DaskExecutor(Executor):
    """A Dask client as an executor: tasks submitted with ``pure=False`` (their arguments are
    not hashed: Dask's hash walks the whole object graph, over a second for the layer chains of
    four models) and values shared by many tasks scattered once (:meth:`share`).

    Args:
        client: a connected ``distributed.Client``; closing it is the caller's business.
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._executor: Executor = client.get_executor(pure=False)

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        """``fn(*args, **kwargs)`` on a worker; futures of :meth:`share` among ``args`` arrive
        as their values."""
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._executor.shutdown(wait=wait)

    def share(self, value: object) -> object:
        """A Dask future of ``value``, sent once to every worker now (not hashed); a task given
        the future as an argument receives the value, the workers' copy, without a transfer."""
        return self._client.scatter(value, broadcast=True, hash=False)


def shared(executor: Executor | None, value: object) -> object:
    """``value`` as the argument of many tasks on ``executor``: on a :class:`DaskExecutor`, a
    future of it scattered once to every worker (:meth:`DaskExecutor.share`); otherwise the
    value itself (the local pool sends it with each task; in this process it is not copied).
    Either way each task's function receives the value."""
    return executor.share(value) if isinstance(executor, DaskExecutor) else value


QUIET_LOGGERS = ("distributed", "tornado")
"""This process's loggers kept silent while a local Dask cluster runs, and for good after an
interrupt (:func:`_dask`)."""


def _silenced(names: tuple[str, ...]) -> AbstractContextManager[None]:
    """The loggers ``names`` and their descendants silent while a local cluster runs, and for good
    after an interrupt: the cluster's close may finish in an exit hook
    (:func:`archplace.base.quiet.silenced`)."""
    return silenced(names, kept_after=(Interrupted, KeyboardInterrupt))


@contextmanager
def _dask(scheduler: str | None, jobs: int) -> Iterator[Executor]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("the dask executor needs the optional extra: "
                          "pip install -c constraints.txt -e '.[cluster]'") from None
    if scheduler:
        _check_address(scheduler)
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
        with client:
            yield DaskExecutor(client)
        return
    # A local cluster's scheduler and client run in this process, on tornado's IO thread.  Its
    # logs are for an operator, not for the user of one search, and they race a Ctrl-C: the
    # interrupt reaches the cluster's processes (one process group) while this process's main
    # thread is still waiting, and the IO thread logs the failed gather ("Couldn't gather 1
    # keys, rescheduling", at WARNING; tornado's traceback for the future's callback, at ERROR)
    # before the interrupt reaches this block.  So they are silent for the whole session, and
    # for good after an interrupt, as the process is on its way out.  A task's failure reaches
    # this process as its exception, not through these loggers.
    with _silenced(QUIET_LOGGERS), ExitStack() as stack:
        # SIGINT blocked meanwhile: the cluster's threads and, through them, its worker
        # processes start with it blocked and keep it so (a Ctrl-C reaches the whole process
        # group): this process takes it, in the main thread, and closes the cluster.  The
        # workers log at CRITICAL only: closing a cluster under load makes them log failed
        # heartbeats and cancelled tasks as errors with tracebacks.
        with sigint_blocked():
            cluster = stack.enter_context(LocalCluster(
                n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None,
                silence_logs=logging.CRITICAL))
        client = stack.enter_context(Client(cluster))
        yield DaskExecutor(client)


def _local_executor(jobs: int, scheduler: str | None) -> AbstractContextManager[Executor | None]:
    return _local(jobs)


def _dask_executor(jobs: int, scheduler: str | None) -> AbstractContextManager[Executor | None]:
    return _dask(scheduler, jobs)


EXECUTOR_FACTORIES: Mapping[str, Callable[[int, str | None], AbstractContextManager[Executor | None]]] = (
    MappingProxyType({"local": _local_executor, "dask": _dask_executor}))
"""Every executor by name: a read-only mapping of name -> factory ``(jobs, scheduler address or
None) -> context manager`` yielding the executor (None: run in this process)."""

EXECUTORS: tuple[str, ...] = tuple(EXECUTOR_FACTORIES)
"""The executor names, in registry order."""


def make_executor(kind: str = "local", jobs: int | None = None,
                  scheduler: str | None = None) -> AbstractContextManager[Executor | None]:
    """A context manager yielding the executor, or None to run in this process.

    Args:
        kind: a key of :data:`EXECUTOR_FACTORIES`: ``local`` (a process pool; None, this
            process, for one job) or ``dask`` (a local Dask cluster, or the one at ``scheduler``).
        jobs: worker processes (default: the usable CPUs).
        scheduler: address of a running Dask scheduler, e.g. ``tcp://10.0.0.5:8786``
            (implies ``dask``).

    Raises:
        ConfigError: unknown kind, non-positive jobs, Dask missing or unreachable.
    """
    if scheduler:
        kind = "dask"
    factory = lookup(EXECUTOR_FACTORIES, kind, "executor")
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 0:
        raise ConfigError(f"jobs must be positive, got {jobs}", fields=("jobs",))
    return factory(jobs, scheduler)
