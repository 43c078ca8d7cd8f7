"""Process lifetime: Ctrl-C, and child processes that never outlive their parent.

The parent is in charge of stopping its children: a child ignores SIGINT (a Ctrl-C in a
terminal reaches the whole process group, and a spawned Python child would otherwise die of a
KeyboardInterrupt, traceback and all, wherever it happens to be) and is terminated by the parent
instead.  A child also ends when its parent ends, even by ``kill -9``: on Linux the kernel sends
it SIGTERM (``prctl(PR_SET_PDEATHSIG)``), and everywhere a daemon thread notices that its parent
process changed (polled every :data:`WATCH_INTERVAL_S`) and exits.

* :func:`raising_interrupts` (the CLI's entry point uses it): SIGINT raises
  :class:`Interrupted` in the main thread, and the clean-up on the way out and the exit are
  not interrupted again.
* :func:`sigint_blocked`: around the start of a child process or of threads that start them,
  so that the child starts with SIGINT blocked (threads, fork and exec inherit the signal mask)
  until :func:`guard_child` ignores it; a SIGINT for the parent meanwhile is not lost.
* :func:`guard_child`: the first thing a child does (a pool's initializer, a worker's main).
* :func:`stop_processes`: SIGTERM, then SIGKILL after a grace period.
* :func:`call_interruptibly`: a blocking call into native code (a solver) run in a helper
  thread, so that the main thread can take the interrupt at once and stop the call.

POSIX only where it must be: without ``pthread_sigmask`` (Windows) the start-up window stays
open; without ``prctl`` (macOS) only the polling thread ties a child to its parent.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import multiprocessing.process
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

WATCH_INTERVAL_S = 0.5
"""How often a child checks that its parent is still alive, s."""

REDELIVER_S = 0.25
"""How often an interrupt not yet on its way out of :func:`raising_interrupts` is raised again, s."""

STOP_GRACE_S = 1.0
"""How long :func:`stop_processes` waits after SIGTERM before SIGKILL, s."""

ORPHAN_EXIT_STATUS = 3
"""Exit status of a child whose parent is gone."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Interrupted(BaseException):
    """The user interrupted the run (SIGINT, Ctrl-C).

    A BaseException, like KeyboardInterrupt, so that ``except Exception`` clauses let it pass;
    unlike KeyboardInterrupt, typer and click do not swallow it (typer turns a
    KeyboardInterrupt into a silent exit status 130).

    Attributes:
        detail: what was done before the interrupt, for the one line the CLI prints ("" if
            nothing useful).
    """

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


class _Interrupts:
    """The SIGINT handler of :func:`raising_interrupts`.

    It raises :class:`Interrupted`, except while one is being handled already: the clean-up on
    the way out (stopping workers and solvers) must not be cut short.  An exception raised by a
    signal handler is lost when the handler happens to run inside a garbage-collector callback
    or a ``__del__`` method (Python prints "Exception ignored in ..." and carries on), so there
    it does not raise, and until the interrupt has left the ``with`` block a daemon thread sends
    SIGINT again every :data:`REDELIVER_S` seconds.
    """

    def __init__(self) -> None:
        self.arrived = False
        self.done = threading.Event()

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if isinstance(sys.exc_info()[1], Interrupted):
            return
        if not self.arrived:
            self.arrived = True
            threading.Thread(target=self._redeliver, name="archplace-interrupt", daemon=True).start()
        if not _swallowing(frame):
            raise Interrupted()

    def _redeliver(self) -> None:
        while not self.done.wait(REDELIVER_S):
            os.kill(os.getpid(), signal.SIGINT)


def _swallowing(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a caller is a garbage-collector callback or a ``__del__`` method,
    where Python ignores exceptions."""
    callbacks = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _quiet_interrupts(unraisable: Any, hook: Callable[[Any], object]) -> None:
    """``sys.unraisablehook`` while interrupts raise: an :class:`Interrupted` lost in a callback
    or ``__del__`` is not printed (it is raised again); anything else goes to ``hook``."""
    if not isinstance(unraisable.exc_value, Interrupted):
        hook(unraisable)


@contextmanager
def raising_interrupts() -> Iterator[None]:
    """While active, SIGINT raises :class:`Interrupted` in the main thread (:class:`_Interrupts`).

    On leaving, the previous handler is restored, unless there was an interrupt: then SIGINT
    stays ignored, since the process is on its way out and its exit (atexit handlers join the
    threads of worker pools) must not be broken by another Ctrl-C.  Outside the main thread
    this does nothing (only the main thread can handle signals).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = _Interrupts()
    previous = signal.signal(signal.SIGINT, handler)
    hook = sys.unraisablehook
    sys.unraisablehook = functools.partial(_quiet_interrupts, hook=hook)
    try:
        yield
    finally:
        restored = previous if previous is not None else signal.SIG_DFL  # None: set outside Python
        signal.signal(signal.SIGINT, signal.SIG_IGN if handler.arrived else restored)
        handler.done.set()
        sys.unraisablehook = hook


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in the calling thread (only there: another thread, or the pending signal
    once unblocked, still interrupts the main thread).  Threads and child processes started
    meanwhile inherit the blocked signal, so a Ctrl-C cannot kill a child during its start-up."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # Starting multiprocessing's resource tracker (at the first child process or semaphore)
    # unblocks SIGINT in the calling thread (CPython 3.11-3.13): have it running beforehand.
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def guard_child(parent_pid: int) -> None:
    """Make this process a well-behaved child of ``parent_pid``: ignore SIGINT (the parent stops
    its children) and exit with status :data:`ORPHAN_EXIT_STATUS` as soon as the parent is gone
    (at once if it already is).  Call it first thing in the child, in its main thread.

    Args:
        parent_pid: process id of the parent (``os.getpid()`` in the parent, passed down: by
            the time the child runs, ``os.getppid()`` may already name another process).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # see sigint_blocked
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # no usable libc: the watcher below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above
        os._exit(ORPHAN_EXIT_STATUS)
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="archplace-parent-watch",
                     daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL_S)
    os._exit(ORPHAN_EXIT_STATUS)


def stop_processes(processes: Iterable[multiprocessing.process.BaseProcess],
                   grace_s: float = STOP_GRACE_S) -> None:
    """Terminate ``processes`` (SIGTERM), wait up to ``grace_s`` seconds for them all, kill
    (SIGKILL) those still running and reap them."""
    running = [p for p in processes if p.is_alive()]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + grace_s
    for process in running:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in running:
        if process.is_alive():
            process.kill()
            process.join(grace_s)


def call_interruptibly(call: Callable[[], T], stop: Callable[[], Any],
                       poll_s: float = 0.1) -> T:
    """``call()``, returned or raised as is; for a call into native code that does not return
    to Python until it is done (a solver) and can be asked to stop from another thread.

    In the main thread, with a SIGINT handler that raises, ``call`` runs in a helper thread
    while the main thread waits, taking signals every ``poll_s`` seconds at the latest; an
    exception while waiting (an interrupt) calls ``stop()``, waits for the helper to finish
    and is re-raised.  Elsewhere (another thread, a child ignoring SIGINT) ``call`` runs
    directly: nothing could interrupt it there.
    """
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or handler in (signal.SIG_IGN, None):
        return call()
    outcome: list[tuple[bool, Any]] = []
    # A bare lock, released when ``call`` has returned: not Thread.join, since an interrupted
    # join can leave the thread marked stopped while it still runs (CPython < 3.13), and a
    # daemon thread still inside native code when the interpreter finalizes aborts the process;
    # not an Event, whose inner lock an interrupt at the wrong instant can leave held.
    running = threading.Lock()
    running.acquire()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the waiting thread
            outcome.append((False, exc))
        finally:
            running.release()

    threading.Thread(target=run, name="archplace-call", daemon=True).start()
    try:
        while not running.acquire(timeout=poll_s):
            pass
    except BaseException:
        stop()
        _await_helper(running, outcome)
        raise
    done, value = outcome[0]
    if not done:
        raise value
    result: T = value
    return result


def _await_helper(running: threading.Lock, outcome: list[tuple[bool, Any]]) -> None:
    """Wait up to :data:`STOP_GRACE_S` for the helper of :func:`call_interruptibly` to leave
    native code, through further interrupts too (a KeyboardInterrupt is raised again by a second
    Ctrl-C)."""
    deadline = time.monotonic() + STOP_GRACE_S
    while not outcome and time.monotonic() < deadline:
        try:
            if running.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return
        except BaseException:  # a further interrupt: the first one is re-raised by the caller
            continue
