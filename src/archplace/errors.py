"""Exception hierarchy of archplace.

The CLI turns every :class:`ArchplaceError` into one line on stderr and exit
status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class ArchplaceError(Exception):
    """Base class of every error archplace raises on purpose."""


class ConfigError(ArchplaceError):
    """Bad input: an unknown preset, a malformed file, a non-positive size, ...

    Attributes:
        fields: the input fields the message names, spelled as in the message (``sp``,
            ``plan.tp``); the CLI shows its own option for each (``--sp``, ``--tp``).
    """

    def __init__(self, message: str, *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = tuple(fields)


class ExtractionError(ArchplaceError):
    """The model code could not be traced into an operator graph."""


class InfeasibleError(ArchplaceError):
    """An expected dead end (nothing fits in memory, no valid plan), with the reason in numbers."""


class SolverError(ArchplaceError):
    """A scheduling or placement solver failed in a way that is not a bug in the input."""


class InternalError(RuntimeError):
    """An invariant of archplace's own models is violated (MFU above 1, a schedule longer than
    its horizon, ...): a bug, not bad input, so it keeps its traceback."""
