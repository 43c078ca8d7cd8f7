"""The key of a layer chain's costs: the micro-batch and the parallel degrees it was traced at.

:class:`CostKey` is the one record that carries a micro-batch size and the TP / SP / CP / EP /
expert-TP setting from the plan space to the layer costs: the tracing options hold it
(:class:`archplace.workload.extract.ExtractOptions`), the placement engine keys its layer costs
by it, and a plan's fields of the same names are read from it.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

from archplace.base.errors import ConfigError


class CostKey(NamedTuple):
    """The layer costs of one TP width, micro-batch size, SP flag, CP degree, EP degree and
    expert-TP width.

    A plain ``(tp, micro_batch, sp)`` tuple equals ``CostKey(tp, micro_batch, sp)`` only when
    built through this class (the defaults fill cp = ep = etp = 1); build keys with it.

    Attributes:
        tp: tensor-parallel width.
        micro_batch: samples per micro-batch.
        sp: sequence parallelism (Korthikanti et al. 2022, section 4.2.2).
        cp: context-parallel degree: the sequence split over cp ranks (ring attention).
        ep: expert-parallel degree: the experts of every MoE layer sharded over ep ranks.
        etp: expert-tensor-parallel width: every routed expert's weights split over etp ranks
            (Megatron-Core's ``expert_tensor_parallel_size``); 1 for dense models.
    """

    tp: int
    micro_batch: int
    sp: bool
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @classmethod
    def of(cls, key: tuple[Any, ...]) -> CostKey:
        """``key`` as a CostKey: a ``(tp, micro_batch, sp)``, ``(tp, micro_batch, sp, cp, ep)`` or
        ``(tp, micro_batch, sp, cp, ep, etp)`` tuple of integers.

        A CostKey is returned as it is: the front door builds keys from a checked plan space
        (:class:`archplace.front.specs.PlanSpace`), so only a plain tuple is checked here.

        Raises:
            ConfigError: another length, or a non-integer or non-positive size or degree.
        """
        if isinstance(key, cls):
            return key
        try:
            if len(key) not in (3, 5, 6):
                raise ValueError
            tp, micro_batch, sp, *rest = key
            out = cls(operator.index(tp), operator.index(micro_batch), bool(sp),
                      *(operator.index(x) for x in rest))
        except (TypeError, ValueError):
            raise ConfigError(f"costs keys must be (tp, micro_batch, sp[, cp, ep[, etp]]), "
                              f"got {key!r}") from None
        for name in ("tp", "micro_batch", "cp", "ep", "etp"):
            if getattr(out, name) < 1:
                raise ConfigError(f"costs key {key!r}: {name} must be a positive integer, "
                                  f"got {getattr(out, name)}")
        return out


class Keyed:
    """Mixin of a record that holds a :class:`CostKey` as ``key``: its fields read as properties
    of the same names (``record.micro_batch`` is ``record.key.micro_batch``), so the micro-batch
    and the degrees stay one value in one shape."""

    __slots__ = ()
    key: CostKey

    @property
    def tp(self) -> int:
        """Tensor-parallel width (the key's)."""
        return self.key.tp

    @property
    def micro_batch(self) -> int:
        """Samples per micro-batch (the key's)."""
        return self.key.micro_batch

    @property
    def sp(self) -> bool:
        """Sequence parallelism (the key's)."""
        return self.key.sp

    @property
    def cp(self) -> int:
        """Context-parallel degree (the key's)."""
        return self.key.cp

    @property
    def ep(self) -> int:
        """Expert-parallel degree (the key's)."""
        return self.key.ep

    @property
    def etp(self) -> int:
        """Expert-tensor-parallel width (the key's)."""
        return self.key.etp
