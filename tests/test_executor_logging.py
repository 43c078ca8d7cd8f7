"""A local Dask cluster's loggers in this process are silent while it runs, descendants with
their own levels included, and restored after a normal exit; after an interrupt they stay
silent (the process is on its way out)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from archplace.base.executor import _silenced
from archplace.base.lifetime import Interrupted

SILENT = logging.CRITICAL + 1


@pytest.fixture
def family() -> Iterator[list[logging.Logger]]:
    """A parent logger and a child with its own level, as Dask's set-up leaves
    ``distributed`` and ``distributed.client``; levels put back afterwards."""
    parent = logging.getLogger("archplace-test-family")
    child = logging.getLogger("archplace-test-family.client")
    cousin = logging.getLogger("archplace-test-familyx")  # shares the prefix, not the family
    saved = [(log, log.level) for log in (parent, child, cousin)]
    parent.setLevel(logging.INFO)
    child.setLevel(logging.WARNING)
    cousin.setLevel(logging.INFO)
    yield [parent, child, cousin]
    for log, level in saved:
        log.setLevel(level)


def test_silent_meanwhile_and_restored_after(family: list[logging.Logger]) -> None:
    parent, child, cousin = family
    with _silenced(("archplace-test-family",)):
        assert not child.isEnabledFor(logging.CRITICAL)
        assert not parent.isEnabledFor(logging.CRITICAL)
        assert cousin.isEnabledFor(logging.INFO)
    assert (parent.level, child.level, cousin.level) == (logging.INFO, logging.WARNING,
                                                         logging.INFO)


def test_restored_after_an_error(family: list[logging.Logger]) -> None:
    parent, child, _ = family
    with pytest.raises(ValueError), _silenced(("archplace-test-family",)):
        raise ValueError("a task failed")
    assert (parent.level, child.level) == (logging.INFO, logging.WARNING)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Interrupted])
def test_silent_for_good_after_an_interrupt(family: list[logging.Logger],
                                            stop: type[BaseException]) -> None:
    parent, child, _ = family
    with pytest.raises(stop), _silenced(("archplace-test-family",)):
        raise stop()
    assert (parent.level, child.level) == (SILENT, SILENT)
