"""Whole runs as a file holds them: :class:`PlanRun` (``plan --config``) and
:class:`EvaluateRun` (``evaluate --plan``).

A run file is one flat mapping: the fields of :class:`~archplace.front.specs.ModelSpec`,
:class:`~archplace.front.specs.HardwareSpec` and :class:`~archplace.front.specs.ClusterSpec`, then either
the fields of :class:`~archplace.front.specs.PlanSpace` (a plan run) or a ``plan`` object, the
fields of :class:`~archplace.front.specs.Plan` (an evaluate run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError
from archplace.base.fields import current_names
from archplace.front.specs.plan import Plan, PlanSpace
from archplace.front.specs.run import ClusterSpec, HardwareSpec, ModelSpec
from archplace.schemas import SCHEMA_VERSIONS, STAMP_KEYS

_PARTS: tuple[type[Any], ...] = (ModelSpec, HardwareSpec, ClusterSpec)

RUN_KEYS = tuple(f.name for part in _PARTS for f in dataclasses.fields(part))
"""The keys of a run file that say what runs where (model, seq_len, ..., devices, global_batch)."""

PLAN_SETUP_KEYS = ("grad_reduce_dtype", "optimizer")
"""Keys of :class:`Plan` that ``plan --json`` writes at the top level of its document."""

PLAN_FILE_KINDS = ("plan", "evaluate")
"""The kinds of document ``evaluate --plan`` reads back (``plan --json``, ``evaluate --json``;
:data:`archplace.schemas.SCHEMA_VERSIONS`)."""


def check_plan_stamp(document: Mapping[str, Any], where: str = "plan file") -> None:
    """Refuse a plan file whose stamp (docs/outputs.md, The stamp) names a schema version that no
    kind of :data:`PLAN_FILE_KINDS` has in this archplace; a document without a stamp passes.

    Raises:
        ConfigError: "``where``: schema_version 2 of a plan or evaluate document; this archplace
            reads version 1", or an ``archplace_version`` that is not text.
    """
    versions = sorted({SCHEMA_VERSIONS[kind] for kind in PLAN_FILE_KINDS})
    if "schema_version" in document:
        version = document["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int) or version not in versions:
            raise ConfigError(f"{where}: schema_version {limits.shown(version)} of a "
                              f"{' or '.join(PLAN_FILE_KINDS)} document; this archplace reads version "
                              f"{', '.join(map(str, versions))}")
    if "archplace_version" in document and not isinstance(document["archplace_version"], str):
        raise ConfigError(f"{where}: archplace_version must be text, got "
                          f"{limits.shown(document['archplace_version'])}")


def _split(data: object, owner: str, extra: tuple[str, ...]) -> tuple[list[Any], dict[str, Any]]:
    """The three run specs built from ``data``'s run keys, and its ``extra`` keys.

    Raises:
        ConfigError: not a mapping, an unknown key (named), a missing field (named, with the
            field in ``fields``), a bad value.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{owner} must be a mapping, got {limits.shown(data)}")
    data = current_names(data, (*_PARTS, PlanSpace), owner)
    unknown = [str(key) for key in data if key not in RUN_KEYS and key not in extra]
    if unknown:
        raise ConfigError(f"{owner}: unknown field{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(k) for k in unknown)}; known: {', '.join(RUN_KEYS + extra)}")
    missing = [f.name for part in _PARTS for f in dataclasses.fields(part)
               if f.default is dataclasses.MISSING and f.name not in data]
    if missing:
        raise ConfigError(f"{owner}: missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}",
                          fields=tuple(missing))
    specs = [part(**{f.name: data[f.name] for f in dataclasses.fields(part) if f.name in data})
             for part in _PARTS]
    return specs, {key: data[key] for key in extra if key in data}


@dataclass(frozen=True)
class PlanRun:
    """Everything ``plan`` needs: the model, the chip, the cluster and the plans to search."""

    model: ModelSpec
    hardware: HardwareSpec
    cluster: ClusterSpec
    space: PlanSpace = PlanSpace()

    def to_dict(self) -> dict[str, Any]:
        """The flat run-file form: every field of the four specs."""
        return {**self.model.to_dict(), **self.hardware.to_dict(), **self.cluster.to_dict(),
                **self.space.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRun:
        """Inverse of :meth:`to_dict`; optional fields may be left out.

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value (the field named).
        """
        space_keys = tuple(f.name for f in dataclasses.fields(PlanSpace))
        (model, hardware, cluster), rest = _split(data, "plan run", space_keys)
        return cls(model, hardware, cluster, PlanSpace(**rest))


@dataclass(frozen=True)
class EvaluateRun:
    """Everything ``evaluate`` needs: the model, the chip, the cluster and the one plan."""

    model: ModelSpec
    hardware: HardwareSpec
    cluster: ClusterSpec
    plan: Plan

    def to_dict(self) -> dict[str, Any]:
        """The flat run-file form: the run specs' fields and ``"plan"``, the plan's."""
        return {**self.model.to_dict(), **self.hardware.to_dict(), **self.cluster.to_dict(),
                "plan": self.plan.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvaluateRun:
        """Inverse of :meth:`to_dict`; optional fields may be left out.

        Raises:
            ConfigError: an unknown or missing key (named), or a bad value (the field named).
        """
        (model, hardware, cluster), rest = _split(data, "evaluate run", ("plan",))
        if "plan" not in rest:
            raise ConfigError("evaluate run: missing field plan")
        return cls(model, hardware, cluster, Plan.from_dict(rest["plan"]))


def evaluate_fields(document: Mapping[str, Any], where: str = "plan file") -> dict[str, Any]:
    """The evaluate-run fields of a document: a bare ``"plan"`` object (it has ``tp``), or the
    document ``plan --json`` / ``evaluate --json`` write (its ``"plan"``, its run keys, and its
    ``grad_reduce_dtype`` and ``optimizer`` moved into the plan; scores ignored), or a run file
    (:meth:`EvaluateRun.to_dict`). Fields absent from the document are absent from the result.
    The document may carry the stamp ``schema_version`` / ``archplace_version`` (checked by
    :func:`check_plan_stamp`, then dropped) or not.

    Args:
        document: the file's top-level mapping.
        where: the file, for messages (``old.json: plan file``).

    Raises:
        ConfigError: a ``schema_version`` other than this archplace's, or neither a plan object
            nor a document with a ``"plan"`` object.
    """
    check_plan_stamp(document, where)
    if "tp" in document:
        return {"plan": {key: value for key, value in document.items() if key not in STAMP_KEYS}}
    plan = document.get("plan")
    if not isinstance(plan, Mapping):
        raise ConfigError(f"{where}: holds neither a plan (tp, pp, dp, micro_batch, ...) nor a "
                          "document with a \"plan\" object")
    out: dict[str, Any] = {key: document[key] for key in RUN_KEYS if key in document}
    out["plan"] = {**{key: document[key] for key in PLAN_SETUP_KEYS if key in document}, **plan}
    return out
