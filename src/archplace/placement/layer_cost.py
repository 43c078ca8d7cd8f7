"""Layer costs: what the placement engine knows of one layer (:class:`LayerCost`), for one
design, micro-batch size, TP width and SP flag, validated once at construction."""

from __future__ import annotations

import math
import numbers
import operator
import sys
from dataclasses import dataclass

from archplace.base.errors import ConfigError
from archplace.placement.choices import Recompute


def _finite_non_negative(owner: str, name: str, value: object) -> float:
    number = (float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool)
              else math.nan)
    if not (math.isfinite(number) and number >= 0):
        raise ConfigError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")
    return number


_FLOAT_MAX = sys.float_info.max

_COUNT_FIELDS = ("params", "fp8_params", "expert_params")
"""LayerCost's integer counts."""

_FIGURE_FIELDS = ("fwd_s", "bwd_s", "activation_bytes", "input_bytes", "boundary_bytes", "working_bytes",
                  "fwd_flop", "bwd_flop", "selective_recompute_s", "tp_comm_fwd_s", "tp_comm_bwd_s",
                  "selective_recompute_flop", "cp_comm_fwd_s", "cp_comm_bwd_s", "ep_comm_fwd_s",
                  "ep_comm_bwd_s", "padding_fwd_flop", "padding_bwd_flop", "ep_comm_hidden_s",
                  "ep_overlap_slowed_s")
"""LayerCost's finite non-negative figures (``selective_activation_bytes`` apart: it may be None)."""


def _count(layer: str, name: str, value: object) -> int:
    """``value`` as a Python int >= 0 (NumPy integers accepted, bools refused)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        count = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        count = -1
    if count < 0:
        raise ConfigError(f"layer {layer!r}: {name} must be an integer >= 0, got {value!r}")
    return count


@dataclass(frozen=True, slots=True)
class LayerCost:
    """Everything placement needs of one layer, for one design, micro-batch size, TP width and SP flag.

    Times are per micro-batch, in seconds; bytes per micro-batch and per TP rank.

    Attributes:
        name: layer name (``embedding``, ``block.3``, ``head``).
        fwd_s, bwd_s: makespan of the layer's forward / backward graph on one device, TP
            collectives included.
        params: parameters held by the layer (per TP rank).
        activation_bytes: bytes saved for backward without recomputation.
        input_bytes: bytes of the layer input (all that full recompute keeps).
        boundary_bytes: bytes of the output tensor sent to the next layer.
        working_bytes: transient working set of running the layer.
        fwd_flop, bwd_flop: model FLOP of the layer on the tensor cores, i.e. of its matmuls
            (for MFU, whose peak counts the arrays only; recompute and expert padding not
            counted). Running them takes at least ``flop / peak``, so MFU is at most 1.
        selective_activation_bytes: bytes saved for backward under selective recomputation
            (Korthikanti et al. 2022, section 5: the attention core is dropped); None means the
            same as ``activation_bytes`` (a layer without attention).
        selective_recompute_s: time to recompute the dropped part in the backward pass.
        selective_recompute_flop: tensor-core FLOP of that recomputation (for HFU).
        tp_comm_fwd_s, tp_comm_bwd_s: the part of ``fwd_s`` / ``bwd_s`` spent in TP collectives
            (already included in them; only used to attribute the ``tp_comm`` breakdown).
        fp8_params: the weights (per TP rank) of the layer's GEMMs that run in FP8, whose FP8
            copies FP8 training keeps (:mod:`archplace.cost.precision`); 0 in bf16.
        expert_params: the part of ``params`` that are routed experts' weights held by this
            rank (already divided by the EP degree and the expert-TP width); their gradients
            are reduced, and their optimizer state sharded, over the expert-data-parallel group
            (dp * cp * tp / (etp * ep) ranks) instead of the dense DP group. 0 for dense layers.
        cp_comm_fwd_s, cp_comm_bwd_s: the part of ``fwd_s`` / ``bwd_s`` spent in exposed
            context-parallel (ring attention) communication (already included; breakdown only).
        ep_comm_fwd_s, ep_comm_bwd_s: the part of ``fwd_s`` / ``bwd_s`` spent in the expert
            all-to-all dispatch and combine (already included; breakdown only).
        padding_fwd_flop, padding_bwd_flop: tensor-core FLOP the pass runs beyond ``fwd_flop``
            / ``bwd_flop`` on mixture-of-experts rows that balanced, unpadded routing would not
            have (a capacity factor's padding, the busiest rank's excess under load imbalance;
            :attr:`archplace.workload.layers.Layer.padding_fwd_flop`): hardware FLOP, counted
            by HFU and not by MFU; included in ``fwd_s`` / ``bwd_s``. 0 for a dense layer.
        ep_comm_hidden_s, ep_overlap_slowed_s: under ``ep_comm_overlap``
            (:mod:`archplace.placement.ep_overlap`), the all-to-all time the pair of this
            layer's passes hides behind another micro-batch's, and the computation the hidden
            all-to-alls add; ``fwd_s`` and ``bwd_s`` are then the paired passes' times, which
            save ``ep_comm_hidden_s - ep_overlap_slowed_s`` over the passes alone. 0 otherwise.

    Raises:
        ConfigError: a negative or non-finite figure, non-integer ``params`` or
            ``fp8_params`` or ``expert_params``, ``fp8_params`` or ``expert_params`` larger than
            ``params``, or TP + CP + EP communication time larger than the pass that contains it.
    """

    name: str
    fwd_s: float
    bwd_s: float
    params: int
    activation_bytes: float
    input_bytes: float
    boundary_bytes: float
    working_bytes: float
    fwd_flop: float
    bwd_flop: float
    selective_activation_bytes: float | None = None
    selective_recompute_s: float = 0.0
    tp_comm_fwd_s: float = 0.0
    tp_comm_bwd_s: float = 0.0
    selective_recompute_flop: float = 0.0
    fp8_params: int = 0
    expert_params: int = 0
    cp_comm_fwd_s: float = 0.0
    cp_comm_bwd_s: float = 0.0
    ep_comm_fwd_s: float = 0.0
    ep_comm_bwd_s: float = 0.0
    padding_fwd_flop: float = 0.0
    padding_bwd_flop: float = 0.0
    ep_comm_hidden_s: float = 0.0
    ep_overlap_slowed_s: float = 0.0

    def __post_init__(self) -> None:
        # NumPy scalars are accepted and stored as Python int / float. Values that already are
        # a Python int >= 0 or a finite Python float >= 0 (what the cost code builds) pass a
        # fast check and are stored as given; anything else takes the full conversion.
        for name in _COUNT_FIELDS:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                object.__setattr__(self, name, _count(self.name, name, value))
        for name in ("fp8_params", "expert_params"):
            if getattr(self, name) > self.params:
                raise ConfigError(f"layer {self.name!r}: {name} = {getattr(self, name)} exceeds "
                                  f"params = {self.params}")
        for name in _FIGURE_FIELDS:
            value = getattr(self, name)
            if type(value) is not float or not 0.0 <= value <= _FLOAT_MAX:  # NaN fails too
                object.__setattr__(self, name, _finite_non_negative(f"layer {self.name!r}", name, value))
        value = self.selective_activation_bytes
        if value is not None and (type(value) is not float or not 0.0 <= value <= _FLOAT_MAX):
            object.__setattr__(self, "selective_activation_bytes", _finite_non_negative(
                f"layer {self.name!r}", "selective_activation_bytes", self.selective_activation_bytes))
        for pass_, total, comm in (
                ("fwd", self.fwd_s, self.tp_comm_fwd_s + self.cp_comm_fwd_s + self.ep_comm_fwd_s),
                ("bwd", self.bwd_s, self.tp_comm_bwd_s + self.cp_comm_bwd_s + self.ep_comm_bwd_s)):
            if comm > total * (1 + 1e-12):
                raise ConfigError(f"layer {self.name!r}: TP + CP + EP communication {comm} s exceeds "
                                  f"{pass_}_s = {total} s (collectives are part of the pass)")

    @property
    def ep_overlap_saving_s(self) -> float:
        """Seconds the paired passes save over the passes alone under ``ep_comm_overlap``:
        ``ep_comm_hidden_s - ep_overlap_slowed_s`` (0 without it)."""
        return max(0.0, self.ep_comm_hidden_s - self.ep_overlap_slowed_s)

    def saved_bytes(self, recompute: Recompute) -> float:
        """Bytes one micro-batch keeps for the backward pass under ``recompute``, in bytes:
        ``activation_bytes`` (none), ``selective_activation_bytes`` (selective; defaults to
        ``activation_bytes``) or ``input_bytes`` (full)."""
        if recompute is Recompute.FULL:
            return self.input_bytes
        if recompute is Recompute.SELECTIVE and self.selective_activation_bytes is not None:
            return self.selective_activation_bytes
        return self.activation_bytes

    def recompute_s(self, recompute: Recompute) -> float:
        """Time the backward pass spends recomputing under ``recompute``, in seconds:
        0 (none), ``selective_recompute_s`` (selective), ``fwd_s`` (full)."""
        if recompute is Recompute.FULL:
            return self.fwd_s
        if recompute is Recompute.SELECTIVE:
            return self.selective_recompute_s
        return 0.0

    def recompute_flop(self, recompute: Recompute) -> float:
        """Tensor-core FLOP the backward pass recomputes under ``recompute``: 0 (none),
        ``selective_recompute_flop`` (selective), the whole forward pass ``fwd_flop +
        padding_fwd_flop`` (full)."""
        if recompute is Recompute.FULL:
            return self.fwd_flop + self.padding_fwd_flop
        if recompute is Recompute.SELECTIVE:
            return self.selective_recompute_flop
        return 0.0
