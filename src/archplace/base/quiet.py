"""Silencing a family of other libraries' loggers for a while (rendering nothing on stderr but
archplace's own one line): torch while a model is built and traced, Dask and tornado while a
local cluster runs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

SILENT = logging.CRITICAL + 1
"""A level above every level a library logs at."""


@contextmanager
def silenced(roots: tuple[str, ...], *,
             kept_after: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """The loggers ``roots`` and all their existing descendants silent meanwhile, their levels
    restored afterwards.  The descendants too: a library may give some of them levels of their
    own (Dask: ``distributed.client`` at WARNING, ``tornado.application`` at ERROR; torch gives
    several their own stderr handlers), which a parent's level does not override; loggers made
    meanwhile inherit the silent level of their root.

    Args:
        roots: dotted logger names (``"torch"``).
        kept_after: exceptions after which the loggers stay silent for good (an interrupt, when
            the clean-up that may still log finishes in an exit hook).
    """
    known = sorted(logging.Logger.manager.loggerDict)
    loggers = [logging.getLogger(name) for name in known
               if any(name == root or name.startswith(root + ".") for root in roots)]
    loggers += [logging.getLogger(name) for name in roots if name not in known]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(SILENT)
    try:
        yield
    except kept_after:
        raise  # silent for good
    except BaseException:
        _restore(loggers, levels)
        raise
    _restore(loggers, levels)


def _restore(loggers: list[logging.Logger], levels: list[int]) -> None:
    for log, level in zip(loggers, levels, strict=True):
        log.setLevel(level)
