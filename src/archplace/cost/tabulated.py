"""Operator latencies of several core configurations through the vectorised cost path.

A design search evaluates designs that share their layer graphs and differ in their cores.
:class:`TabulatedCostModel` answers ``latency(op, acc)`` for a fixed list of core configurations:
the first time it meets an operator it costs it on all of them at once
(:meth:`~archplace.cost.systolic.SystolicCostModel.latency_many`), then reads each design's
entry.  The vectorised path returns, design by design, exactly the floats of the scalar one
(``tests/cost/test_batched.py``, ``tests/dse/test_evaluate_many.py``), so a table changes no number.
Everything else -- :meth:`estimate` (traffic, energy, ring communication), chips outside the
table -- is the scalar model's answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from archplace.cost.configs import CoreConfigArray
from archplace.cost.systolic import SystolicCostModel, op_key
from archplace.cost.types import OpEstimate, OpLatency
from archplace.hw.accelerator import Accelerator
from archplace.workload.graph import Operator

FloatArray = NDArray[np.float64]


def _cores_of(acc: Accelerator) -> Accelerator:
    """The design without its name and HBM capacity (what no operator's cost depends on)."""
    return dataclasses.replace(acc, name="", hbm_bytes=1.0)


class TabulatedCostModel:
    """:class:`~archplace.cost.model.EstimatingCostModel` whose latencies come from the vectorised
    path for the core configurations of ``accs`` (module docstring).

    Args:
        accs: the designs (at least one); designs that differ only in name or HBM capacity share
            a column.
        cost: the scalar model; its cluster prices the collectives and it answers everything the
            table does not hold.

    Raises:
        ConfigError: no designs (:class:`~archplace.cost.configs.CoreConfigArray`).
    """

    def __init__(self, accs: Sequence[Accelerator], cost: SystolicCostModel) -> None:
        cores = list(dict.fromkeys(_cores_of(acc) for acc in accs))
        self.cost = cost
        self.configs = CoreConfigArray.from_accelerators(cores)
        self._column: dict[Accelerator, int | None] = {core: j for j, core in enumerate(cores)}
        for acc in accs:
            self._column[acc] = self._column[_cores_of(acc)]
        self._rows: dict[tuple[object, ...], tuple[list[float], list[float]]] = {}

    def __len__(self) -> int:
        """Core configurations in the table."""
        return len(self.configs)

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """``cost.latency(op, acc)``, read from the table when ``acc``'s cores are in it.

        Raises:
            ConfigError: as :meth:`SystolicCostModel.latency` (for the first design met, when the
                operator is costed for every design of the table).
        """
        if acc in self._column:
            column = self._column[acc]
        else:
            column = self._column[acc] = self._column.get(_cores_of(acc))
        if column is None:
            return self.cost.latency(op, acc)
        key = op_key(op)
        row = self._rows.get(key)
        if row is None:
            single, every = self.cost.latency_many(op, self.configs)
            row = self._rows[key] = (single.tolist(), every.tolist())
        return OpLatency(row[0][column], row[1][column])

    def estimate(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """``cost.estimate(op, acc)`` (the scalar path)."""
        return self.cost.estimate(op, acc)
