"""The segment tables of the plan search's families, kept within a memory budget
(:data:`~archplace.placement.budget.TABLE_BYTES`): built on first use, the least recently used
evicted and rebuilt on demand (they are pure functions of a family's layers, so the answer does
not change)."""

from __future__ import annotations

from archplace.placement.budget import TABLE_BYTES, WorkMeter
from archplace.placement.candidates import FamilyState
from archplace.placement.plan import TrainingSetup
from archplace.placement.tables import SegmentTables


class ResidentTables:
    """The families' :class:`SegmentTables` on one setup, within ``limit_bytes`` together.

    Args:
        setup: the training setup the tables price.
        meter: the search's work meter (charged by the tables' DPs).
        limit_bytes: most bytes of tables held at once (None:
            :data:`~archplace.placement.budget.TABLE_BYTES`, 512 MiB).
    """

    def __init__(self, setup: TrainingSetup, meter: WorkMeter, limit_bytes: int | None = None) -> None:
        self.setup = setup
        self.meter = meter
        self.limit_bytes = TABLE_BYTES if limit_bytes is None else limit_bytes
        self._resident: list[FamilyState] = []  # families holding tables, least recently used first
        self._held = 0  # bytes of their tables

    def of(self, state: FamilyState) -> SegmentTables:
        """The family's tables, built on first use; the tables of all families together are kept
        within the limit by evicting the least recently used (and, if one family's alone exceed
        it, its caches)."""
        resident = self._resident
        if resident:  # the family used last may have grown its caches since
            self._account(resident[-1])
        if state.tables is None:
            fam = state.family
            state.tables = SegmentTables(fam.layers, self.setup, fam.tp, fam.recompute, fam.sp, self.meter,
                                         cp=fam.cp, ep=fam.ep, etp=fam.etp)
        if not resident or resident[-1] is not state:
            at = next((i for i, other in enumerate(resident) if other is state), None)
            if at is not None:
                del resident[at]
            resident.append(state)
        self._account(state)
        while self._held > self.limit_bytes and len(resident) > 1:
            evicted = resident.pop(0)
            self._held -= evicted.table_bytes
            evicted.tables, evicted.table_bytes = None, 0
        if self._held > self.limit_bytes:
            state.tables.drop_caches()
            self._account(state)
        return state.tables

    def _account(self, state: FamilyState) -> None:
        """Bring the count of table bytes held up to date for ``state``."""
        now = state.tables.nbytes() if state.tables is not None else 0
        self._held += now - state.table_bytes
        state.table_bytes = now
