"""A layer chain at another micro-batch, derived from two traced ones instead of tracing it.

Tracing a model (:func:`archplace.workload.extract.extract_chain`) costs about a second per
(micro-batch, TP width, SP, CP) setting, and a plan search asks for micro-batches 1, 2, 4 and 8
of every setting.  The graphs of one setting differ between micro-batches only in numbers: every
activation's batch dimension is the micro-batch b, so an operator's shape fields are either fixed
(a weight's dims) or b times a per-sample figure, and its FLOP, bytes and the layer's activation
figures are a fixed part (weights, RoPE tables) plus b times a per-sample part.  Two traces at
consecutive micro-batches (:data:`REFERENCE_BATCHES`: 2 and 3) give both parts of every figure,
and the chain of a larger b follows in exact rational arithmetic.  Micro-batch 1 is never a
reference: a size of 1 is special to PyTorch and to model code (broadcasting, squeezed dims,
``torch.export`` specialises sizes 0 and 1), and a traced GPT-2 has other operators at b = 1 than
at b >= 2; sizes from 2 on are generic.

The derivation is only used where it gives the traced chain bit for bit; otherwise
:func:`rebatch_chain` returns None and the caller traces.  It requires:

* the two chains alike in everything but numbers (operator names, targets, kinds, edges, fused
  operators, the layers' selective-recompute operators, ...);
* every shape field (an operator's batch, m, k, n and elements -- but a fused kernel's elements,
  its members' work, which may have both parts; a layer's routed tokens and tokens per expert)
  fixed or proportional to b, and every other figure with a fixed part and a per-sample part that
  are not negative; except the bytes a fused element-wise kernel reads
  (:func:`archplace.workload.fusion.merge_groups`: its members' reads less their internal traffic,
  clipped at zero), which must be above zero at both references (then the unclipped figure is
  known and the derived one is clipped as the tracer clips it); no epilogue fusion (``fuse``: a
  clipped part inside a sum);
* TP width and CP degree powers of two, the rank's tokens per sample (seq_len / cp) a multiple of
  the TP width and, in a mixture-of-experts layer, the routed tokens per sample and TP rank a
  multiple of the experts: so every size the tracer rounds up (``ceil`` of a per-rank share, the
  rows per expert) is a whole number at every b, hence linear in b;
* every figure, at the references and derived, a whole multiple of 1 / (:data:`GRAIN_PER_TP` x
  tp), and below 2**53 such units: the tracer's terms are such multiples, so its float sums and
  products were exact and equal the derived value.

A layer's working set (the most bytes one operator holds, :func:`~archplace.workload.graph.
working_set_bytes`) is a maximum, not a linear figure: it is recomputed from the derived operators
as the tracer computes it.  Tests compare
derived and traced chains field by field for GPT-2-, Llama- and BERT-style models, a small
Mixtral (MoE), TP with and without SP, CP > 1, fused and unfused kernels, eager attention.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

from archplace.workload.fusion import FUSED_KERNEL_TARGET
from archplace.workload.graph import Operator, OpGraph, OpKind, working_set_bytes
from archplace.workload.layers import Layer, LayerChain

REFERENCE_BATCHES = (2, 3)
"""Micro-batches traced for a setting, from which the larger ones are derived (module docstring)."""

GRAIN_PER_TP = 4
"""Figures must be whole multiples of 1 / (4 tp): the tracer's terms are whole sizes, shares of
them over the TP width (1/tp) and halves (the backward attention's 2.5 x the forward's FLOP)."""

_LIMIT = 2**53
_SHAPE_FIELDS = {
    Operator: frozenset({"batch", "m", "k", "n", "elements"}),
    Layer: frozenset({"tokens_per_expert", "routed_tokens"}),
}
_SKIPPED = {Layer: frozenset({"fwd", "bwd", "working_bytes"}),
            LayerChain: frozenset({"layers", "key"})}


class _NotDerivable(Exception):
    """The two references do not give the chain exactly (the caller traces)."""


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def derivable(chain: LayerChain) -> bool:
    """Whether the setting of ``chain`` (TP width, CP degree, tokens per rank, MoE routing)
    rounds no size up at any micro-batch: the condition on the setting of :func:`rebatch_chain`."""
    if not (_power_of_two(chain.tp) and _power_of_two(chain.cp)) or chain.seq_len % chain.cp:
        return False
    tokens = chain.seq_len // chain.cp
    if tokens % chain.tp:
        return False
    for layer in chain.layers:  # routed token copies per sample and TP rank (SP splits them)
        if layer.experts and (tokens // chain.tp * layer.experts_per_token) % layer.experts:
            return False
    return True


class _Kind:
    """How a figure may depend on the micro-batch."""

    SHAPE = "shape"  # fixed or proportional
    SUM = "sum"  # a fixed part and a per-sample part, neither negative
    CLIPPED = "clipped"  # max(affine, 0): a fused kernel's bytes read less its internal traffic


def _scaled(low: Any, high: Any, lo: int, micro_batch: int, kind: str, grain: int) -> Any:
    """The figure at ``micro_batch`` from its values at micro-batches ``lo`` and ``lo + 1``
    (module docstring)."""
    if isinstance(low, bool) or isinstance(high, bool):
        if low != high:
            raise _NotDerivable
        return low
    exact = [Fraction(low), Fraction(high)]
    per_sample = exact[1] - exact[0]
    fixed = exact[0] - per_sample * lo
    if kind == _Kind.CLIPPED:
        # Both references above zero: the affine part is unclipped there, hence exactly known.
        if exact[0] <= 0 or exact[1] <= 0:
            raise _NotDerivable
        value = max(fixed + per_sample * micro_batch, Fraction(0))
    else:
        if kind == _Kind.SHAPE and fixed and per_sample:  # fixed or proportional to the micro-batch
            raise _NotDerivable
        if fixed < 0 or per_sample < 0:
            raise _NotDerivable
        value = fixed + per_sample * micro_batch
    for figure in (*exact, value):
        units = figure * grain
        if units.denominator != 1 or abs(units) >= _LIMIT:
            raise _NotDerivable
    if isinstance(low, int) and isinstance(high, int):
        if value.denominator != 1:
            raise _NotDerivable
        return int(value)
    if isinstance(low, float) and isinstance(high, float):
        return float(value)
    raise _NotDerivable


def _kind(obj: Any, name: str) -> str:
    if name in _SHAPE_FIELDS.get(type(obj), ()):
        fused_work = isinstance(obj, Operator) and obj.target == FUSED_KERNEL_TARGET and name == "elements"
        return _Kind.SUM if fused_work else _Kind.SHAPE
    if isinstance(obj, Operator) and obj.target == FUSED_KERNEL_TARGET and name == "bytes_read":
        return _Kind.CLIPPED
    return _Kind.SUM


def _derive(low: Any, high: Any, lo: int, micro_batch: int, grain: int) -> dict[str, Any]:
    """Fields of the dataclass at ``micro_batch``: numbers derived, everything else equal."""
    if type(high) is not type(low):
        raise _NotDerivable
    if isinstance(low, Operator) and low.kind is OpKind.MATMUL and (low.fused or low.fused_elements):
        raise _NotDerivable  # epilogue fusion: bytes read with a clipped part inside a sum
    skipped = _SKIPPED.get(type(low), frozenset())
    out: dict[str, Any] = {}
    for field in dataclasses.fields(low):
        if field.name.startswith("_") or field.name in skipped:
            continue
        a, b = getattr(low, field.name), getattr(high, field.name)
        if isinstance(a, int | float) and not isinstance(a, bool):
            out[field.name] = _scaled(a, b, lo, micro_batch, _kind(low, field.name), grain)
        elif a != b:
            raise _NotDerivable
        else:
            out[field.name] = a
    return out


def _graph(low: OpGraph, high: OpGraph, lo: int, micro_batch: int, grain: int) -> OpGraph:
    if len(low.ops) != len(high.ops):
        raise _NotDerivable
    ops = zip(low.ops, high.ops, strict=True)
    return OpGraph(tuple(Operator(**_derive(a, b, lo, micro_batch, grain)) for a, b in ops))


def _layer(low: Layer, high: Layer, lo: int, micro_batch: int, grain: int,
           graphs: dict[tuple[int, int], OpGraph]) -> Layer:
    for ref in (low, high):
        if ref.working_bytes != working_set_bytes((ref.fwd, ref.bwd)):
            raise _NotDerivable
    derived = []
    for a, b in ((low.fwd, high.fwd), (low.bwd, high.bwd)):
        if (id(a), id(b)) not in graphs:  # blocks share their graphs: derive each pair once
            graphs[id(a), id(b)] = _graph(a, b, lo, micro_batch, grain)
        derived.append(graphs[id(a), id(b)])
    return Layer(fwd=derived[0], bwd=derived[1], working_bytes=working_set_bytes(derived),
                 **_derive(low, high, lo, micro_batch, grain))


def rebatch_chain(low: LayerChain, high: LayerChain, micro_batch: int) -> LayerChain | None:
    """The chain at ``micro_batch`` from the chains traced at two consecutive micro-batches
    (:data:`REFERENCE_BATCHES`) of one setting (same model, sequence length, TP width, SP, CP, dtype,
    kernels, attention).

    Args:
        low, high: the traced chains at micro-batches b and b + 1 (ep = 1: expert parallelism is
            applied to the derived chain afterwards, as to a traced one).
        micro_batch: the micro-batch wanted, above ``high``'s.

    Returns:
        The chain equal, field by field, to the one :func:`archplace.workload.extract.extract_chain`
        traces at ``micro_batch`` (blocks sharing their graphs as there), or None when the
        references do not determine it exactly (module docstring): the caller traces it.

    Raises:
        ValueError: references not at consecutive micro-batches from 2, or ``micro_batch`` not above
            them.
    """
    lo = low.micro_batch
    if lo < 2 or high.micro_batch != lo + 1 or micro_batch <= high.micro_batch:
        raise ValueError(f"references must be at consecutive micro-batches from 2, the micro-batch above "
                         f"them; got {low.micro_batch}, {high.micro_batch} and {micro_batch}")
    same_setting = low.key._replace(micro_batch=lo) == high.key._replace(micro_batch=lo)
    if not same_setting or not derivable(low) or len(low.layers) != len(high.layers):
        return None
    graphs: dict[tuple[int, int], OpGraph] = {}
    grain = GRAIN_PER_TP * low.tp
    try:
        pairs = zip(low.layers, high.layers, strict=True)
        layers = tuple(_layer(a, b, lo, micro_batch, grain, graphs) for a, b in pairs)
        fields = _derive(low, high, lo, micro_batch, grain)
        return LayerChain(layers=layers, key=low.key._replace(micro_batch=micro_batch), **fields)
    except (_NotDerivable, TypeError, ValueError):
        return None


__all__ = ["GRAIN_PER_TP", "REFERENCE_BATCHES", "derivable", "rebatch_chain"]
