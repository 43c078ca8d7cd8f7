"""The per-layer scheduling problem (docs/commands/schedule.md, Semantics).

A layer's forward or backward graph becomes a DAG of :class:`SchedOp`: each op
runs either on ONE core of its type for ``single_s`` seconds, or on ALL cores of
its type for ``all_s`` seconds -- and while an op runs on all cores, nothing
else runs on the chip (PHAZE: Wang et al., ICML 2024).  The goal is the
shortest makespan.

Core types: TENSOR (matmuls), VECTOR (everything else) and FUSED (a matmul with
its element-wise epilogue): in single mode a fused op holds one tensor core AND
one vector core -- any two, PHAZE paired tensor core c with vector core c, which
can only lengthen schedules -- and in "all" mode every core of the chip.

An op of zero duration (in the mode it runs in) occupies no instant, so it
holds no core and conflicts with nothing; it only passes precedence on.

The JSON form (:meth:`ScheduleProblem.to_dict`, read by ``archplace schedule
--problem``) is documented in docs/commands/schedule.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import ConfigError
from archplace.base.inputs import show_value
from archplace.cost.model import CostModel
from archplace.hw.accelerator import Accelerator
from archplace.schemas import STAMP_KEYS, check_stamp
from archplace.workload.graph import CoreType, OpGraph

SUPPORTED_CORE_TYPES = (CoreType.TENSOR, CoreType.VECTOR, CoreType.FUSED)


@dataclass(frozen=True, slots=True)
class SchedOp:
    """One operator to schedule.

    Attributes:
        id: position in :attr:`ScheduleProblem.ops` (0..n-1).
        core_type: TENSOR, VECTOR or FUSED.
        single_s: latency on one core of its type (fused: one tensor + one vector core), seconds.
        all_s: latency on all cores of its type (fused: of the chip) at once, seconds.
        preds: ids of the ops that must end before this one starts (all smaller than ``id``).
        name: optional label (the aten node name when built from a graph), for reports only.

    Raises:
        ConfigError: a negative or non-finite latency, a core type that is not a
            :class:`CoreType`, or predecessors that are repeated or do not precede ``id``.
    """

    id: int
    core_type: CoreType
    single_s: float
    all_s: float
    preds: tuple[int, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.core_type, CoreType) or self.core_type not in SUPPORTED_CORE_TYPES:
            raise ConfigError(f"op {self.id}: core type {self.core_type!r} is not supported "
                              "by the scheduler (tensor, vector or fused)")
        for name in ("single_s", "all_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"op {self.id}: {name} must be finite and >= 0, got {value!r}")
        if len(set(self.preds)) != len(self.preds):
            raise ConfigError(f"op {self.id}: repeated predecessors {self.preds}")
        if any(not 0 <= p < self.id for p in self.preds):
            raise ConfigError(f"op {self.id}: predecessors {self.preds} must be in [0, {self.id})")

    @property
    def min_s(self) -> float:
        """The shorter of the two latencies: no schedule runs this op in less."""
        return min(self.single_s, self.all_s)

    def uses(self, core_type: CoreType) -> bool:
        """Whether a single-mode run of this op holds a core of ``core_type`` (TENSOR or VECTOR)."""
        return self.core_type is core_type or self.core_type is CoreType.FUSED


@dataclass(frozen=True, slots=True)
class ScheduleProblem:
    """Ops of one layer in topological order, and the chip's core counts.

    Attributes:
        ops: ``ops[i].id == i``; predecessors precede their successors.
        tensor_cores: number of tensor cores (>= 1).
        vector_cores: number of vector cores (>= 1).

    Raises:
        ConfigError: ids out of order, or a core count below 1.
    """

    ops: tuple[SchedOp, ...]
    tensor_cores: int
    vector_cores: int

    def __post_init__(self) -> None:
        for name in ("tensor_cores", "vector_cores"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"schedule problem: {name} must be a whole number >= 1, "
                                  f"got {value!r}")
        for i, op in enumerate(self.ops):
            if op.id != i:
                raise ConfigError(f"schedule problem: op with id {op.id} at position {i}")

    def cores(self, core_type: CoreType) -> int:
        """Number of cores of ``core_type`` (TENSOR or VECTOR)."""
        return self.tensor_cores if core_type is CoreType.TENSOR else self.vector_cores

    def successors(self) -> list[list[int]]:
        """``successors()[i]``: ids of the ops that have ``i`` as a predecessor, ascending."""
        succs: list[list[int]] = [[] for _ in self.ops]
        for op in self.ops:
            for p in op.preds:
                succs[p].append(op.id)
        return succs

    def with_latencies(self, latencies: list[tuple[float, float]]) -> ScheduleProblem:
        """The same DAG and cores with ``latencies[i] = (single_s, all_s)`` for op ``i``."""
        return ScheduleProblem(
            tuple(SchedOp(op.id, op.core_type, single, every, op.preds, op.name)
                  for op, (single, every) in zip(self.ops, latencies, strict=True)),
            self.tensor_cores, self.vector_cores)

    @classmethod
    def from_graph(cls, graph: OpGraph, acc: Accelerator, cost: CostModel) -> ScheduleProblem:
        """The problem of scheduling ``graph`` on ``acc`` with latencies from ``cost``.

        Raises:
            ConfigError: an operator with an unsupported core type.
        """
        ops = []
        for op in graph.ops:
            latency = cost.latency(op, acc)
            ops.append(SchedOp(op.id, op.core_type, latency.single_core_s, latency.all_cores_s,
                               tuple(sorted(set(op.preds))), op.name))
        return cls(tuple(ops), acc.tensor_cores, acc.vector_cores)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: ``{"tensor_cores", "vector_cores", "ops": [{"id", "core_type",
        "single_s", "all_s", "preds"[, "name"]}, ...]}`` ("name" only when set)."""
        ops = []
        for op in self.ops:
            entry: dict[str, Any] = {"id": op.id, "core_type": op.core_type.value,
                                     "single_s": op.single_s, "all_s": op.all_s,
                                     "preds": list(op.preds)}
            if op.name:
                entry["name"] = op.name
            ops.append(entry)
        return {"tensor_cores": self.tensor_cores, "vector_cores": self.vector_cores, "ops": ops}

    @classmethod
    def from_dict(cls, data: Any) -> ScheduleProblem:
        """Inverse of :meth:`to_dict`.

        Ids and predecessors are whole numbers (``3`` or ``3.0``, not ``true``); latencies are
        finite numbers >= 0 (not text, not booleans); ``core_type`` is ``tensor``, ``vector`` or
        ``fused``; no other keys are allowed, but for the stamp ``schedule --dump-problem`` adds
        (``schema_version``, ``archplace_version``: :mod:`archplace.schemas`).

        Raises:
            ConfigError: one line naming the field: a missing or unknown key, a wrong type or an
                invalid value (``schedule problem: ops[3].single_s must be a finite number >= 0,
                got "1e-3"``), or a stamp of another schema version.
        """
        _keys(data, "schedule problem", ("tensor_cores", "vector_cores", "ops"), STAMP_KEYS)
        check_stamp("schedule-problem", data, "schedule problem")
        raw_ops = data["ops"]
        if not isinstance(raw_ops, list):
            raise ConfigError(f"schedule problem: ops must be a list of ops, got {show_value(raw_ops)}")
        ops = []
        for i, raw in enumerate(raw_ops):
            where = f"ops[{i}]"
            _keys(raw, f"schedule problem: {where}", ("id", "core_type", "single_s", "all_s", "preds"),
                  ("name",))
            core_type, kinds = raw["core_type"], [t.value for t in SUPPORTED_CORE_TYPES]
            if core_type not in kinds:
                raise ConfigError(f"schedule problem: {where}.core_type must be one of {', '.join(kinds)}, "
                                  f"got {show_value(core_type)}")
            preds = raw["preds"]
            if not isinstance(preds, list):
                raise ConfigError(f"schedule problem: {where}.preds must be a list of op ids, "
                                  f"got {show_value(preds)}")
            name = raw.get("name", "")
            if not isinstance(name, str):
                raise ConfigError(f"schedule problem: {where}.name must be text, got {show_value(name)}")
            try:
                ids = tuple(_whole(p, f"{where}.preds[{k}]") for k, p in enumerate(preds))
                ops.append(SchedOp(_whole(raw["id"], f"{where}.id"), CoreType(core_type),
                                   _latency(raw["single_s"], f"{where}.single_s"),
                                   _latency(raw["all_s"], f"{where}.all_s"), ids, name))
            except ConfigError as exc:
                raise ConfigError(f"schedule problem: {exc}") from None
        return cls(tuple(ops), data["tensor_cores"], data["vector_cores"])


def _keys(data: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    """``data`` is a mapping with every ``required`` key and no key outside ``required + optional``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping with {', '.join(required)}, got {show_value(data)}")
    for key in required:
        if key not in data:
            raise ConfigError(f"{where}: missing field {key!r}")
    for key in data:
        if key not in required and key not in optional:
            raise ConfigError(f"{where}: unknown field {key!r}; expected: {', '.join(required + optional)}")


def _whole(value: Any, name: str) -> int:
    """``value`` as an int if it is a whole number (JSON ``3`` or ``3.0``).

    Raises:
        ConfigError: a boolean, text, a fraction or a non-finite number.
    """
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or (isinstance(value, float) and not value.is_integer())):
        raise ConfigError(f"{name} must be a whole number, got {show_value(value)}")
    return int(value)


def _latency(value: Any, name: str) -> float:
    """``value`` as seconds: a finite number >= 0 (not text, not a boolean).

    Raises:
        ConfigError: anything else.
    """
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise ConfigError(f"{name} must be a finite number >= 0, got {show_value(value)}")
    return float(value)
