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


class MissingSectionError(ConfigError):
    """A file lacks a section it needs (e.g. a hardware preset without ``cluster``).

    Attributes:
        section: the missing section's name.
    """

    def __init__(self, message: str, section: str) -> None:
        super().__init__(message)
        self.section = section

    def __reduce__(self) -> tuple[type[MissingSectionError], tuple[str, str]]:
        return (type(self), (str(self), self.section))  # picklable, for worker processes


class ExtractionError(ArchplaceError):
    """The model code could not be traced into an operator graph."""


class InfeasibleError(ArchplaceError):
    """An expected dead end (nothing fits in memory, no valid plan), with the reason in numbers."""


class OutOfMemoryError(InfeasibleError):
    """Nothing fits in HBM (or the given plan does not): the closest candidate's memory named.

    The other :class:`InfeasibleError` dead ends are plans that cannot exist at all (no pipeline
    depth and DP degree suit the devices and the batch); callers choosing the most informative
    of several failures prefer this one.
    """


class SolverError(ArchplaceError):
    """A scheduling or placement solver failed in a way that is not a bug in the input."""


class InternalError(RuntimeError):
    """An invariant of archplace's own models is violated (MFU above 1, a schedule longer than
    its horizon, ...): a bug, not bad input, so it keeps its traceback."""
