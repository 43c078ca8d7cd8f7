"""Expert tensor parallelism (etp) as a transform of an expert-parallel layer chain.

Megatron-Core splits every routed expert's weights over ``etp`` ranks
(``--expert-tensor-parallel-size``): the gate/up projection column-parallel, the down projection
row-parallel, as a dense MLP under tensor parallelism. With "MoE parallel folding" (Liu et al.
2025, sec. 3) the experts' ranks etp x ep x edp fold over the same ranks as attention's
tp x cp x dp, so etp is chosen independently of the attention TP width (Megatron-Core sets it
to tp when left unset).

What one rank does in a mixture-of-experts layer (``MoEAlltoAllTokenDispatcher``,
megatron/core/transformer/moe/token_dispatcher.py: "permute -> A2A(EP) -> AG(TP) -> sort_chunk"
and back "sort_chunk -> RS(TP) -> A2A(EP) -> unpermute", its TP group being the expert-TP
group): it routes its own tokens (1/tp of them under sequence parallelism,
:mod:`archplace.workload.parallel`), the expert-parallel all-to-all brings it the ``R`` rows
for its ``E/ep`` experts (:mod:`archplace.workload.expert_parallel`), an all-gather over the
etp group collects the ``etp·R`` rows its etp peers received for the same experts, the grouped
GEMMs run on them with ``1/etp`` of every expert's FFN width -- the same FLOP as ``R`` rows at
full width -- and the down projection's partial sums ``[etp·R, h]`` are reduce-scattered back to
``R`` rows before the combine all-to-all. The backward pass mirrors it: the gradient of the
reduce-scatter is an all-gather before the down projection's gradients, the gradient of the
all-gather a reduce-scatter after the gate/up projection's data gradient.

:func:`split_experts` derives this from the etp = 1 chain: in each graph's experts' region the
grouped GEMMs get ``etp`` times the rows and ``1/etp`` of the expert width (the gating
activation between them keeps its element count), and two ``COLLECTIVE`` operators with targets
:data:`ETP_ALL_GATHER` and :data:`ETP_REDUCE_SCATTER` and ``group`` etp enter and leave it
(:func:`archplace.cost.collective.collective_kind` costs them as an all-gather and a
reduce-scatter), each of a full buffer of ``etp·R·h`` elements. The layer holds ``1/etp`` of its
routed experts' parameters and also saves the gathered ``etp·R`` input rows of the gate/up
projection.
"""

from __future__ import annotations

import dataclasses
import math

from archplace.base.errors import ConfigError
from archplace.workload import experts_op
from archplace.workload.expert_parallel import (
    _grouped,
    _region,
    map_shared_layers,
    routed_rerun,
    with_region,
    wrap_region,
)
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase
from archplace.workload.layers import Layer, LayerChain
from archplace.workload.zoo import LoadedModel

ETP_ALL_GATHER = "expert_tp_all_gather"
"""``target`` of the expert-tensor-parallel all-gathers (costed as ``all_gather``)."""
ETP_REDUCE_SCATTER = "expert_tp_reduce_scatter"
"""``target`` of the expert-tensor-parallel reduce-scatters (costed as ``reduce_scatter``)."""
ETP_TARGETS = frozenset({ETP_ALL_GATHER, ETP_REDUCE_SCATTER})


def expert_width(spec: LoadedModel) -> int:
    """Intermediate width of one routed expert of ``spec``: ``moe_intermediate_size`` where the
    architecture has one (its config class's default when the config leaves it out), else the
    FFN size (Mixtral); 0 for a dense model."""
    if not spec.experts:
        return 0
    if spec.model_type == "mixtral":
        return spec.ffn_size
    return int(spec.moe_field("moe_intermediate_size"))


def check_etp(spec: LoadedModel, etp: int) -> None:
    """Refuse an expert-TP width that does not divide the routed experts' width of ``spec``, or
    etp > 1 for a dense model.

    Raises:
        ConfigError: with the width and the expert size.
    """
    if isinstance(etp, bool) or not isinstance(etp, int) or etp <= 0:
        raise ConfigError(f"expert-TP width must be a whole number >= 1, got {etp!r}")
    if etp == 1:
        return
    if not spec.experts:
        raise ConfigError(f"expert-TP width {etp}: {spec.name} is a dense model (no routed experts); "
                          "use etp 1")
    width = expert_width(spec)
    if width % etp:
        raise ConfigError(f"expert-TP width {etp} does not divide the routed experts' FFN size {width} "
                          f"of {spec.name}")


def _split_op(op: Operator, etp: int, phase: Phase, entry: bool, dtype_bytes: int) -> Operator:
    """A grouped GEMM of the experts' region with ``etp`` times the rows and 1/etp of the expert
    width (module docstring); other operators of the region are unchanged."""
    name = _grouped(op)
    if name is None:
        return op
    m, k, n = op.m, op.k, op.n
    if name == experts_op.WGRAD_OP:  # [E, N, rows] x [E, rows, K]: rows in k
        k *= etp
        if entry == (phase is Phase.BWD):  # the down projection's: K = its input width
            n //= etp
        else:
            m //= etp
    else:  # [E, rows, K] x [E, K, N]: rows in m
        m *= etp
        if entry:  # gate/up forward (N = its output width); the down projection's data gradient
            n //= etp
        else:  # down forward (K = its input width); gate/up data gradient (K = its output width)
            k //= etp
    b = op.batch
    before = (op.batch * op.m * op.k + op.batch * op.k * op.n, op.batch * op.m * op.n)
    after = (b * m * k + b * k * n, b * m * n)
    epilogue = op.flop - 2.0 * op.batch * op.m * op.k * op.n  # element-wise work fused in (--fuse)
    return dataclasses.replace(
        op, m=m, k=k, n=n, flop=2.0 * b * m * k * n + epilogue, elements=b * m * n,
        bytes_read=op.bytes_read + (after[0] - before[0]) * dtype_bytes,
        bytes_written=op.bytes_written + (after[1] - before[1]) * dtype_bytes)


def _split_graph(graph: OpGraph, phase: Phase, etp: int, buffer_bytes: float, elements: int,
                 dtype_bytes: int) -> OpGraph:
    region, entries = _region(graph)
    if not region:
        return graph
    ops = [_split_op(op, etp, phase, op.id in entries, dtype_bytes) if op.id in region else op
           for op in graph.ops]
    names = (("all_gather", "reduce_scatter") if phase is Phase.FWD
             else ("all_gather_grad", "reduce_scatter_grad"))
    made = [Operator(id=0, name=f"expert_tp_{name}", target=target, kind=OpKind.COLLECTIVE, phase=phase,
                     batch=0, m=0, k=0, n=0, elements=elements, flop=0.0, bytes_read=buffer_bytes,
                     bytes_written=buffer_bytes, group=etp)
            for name, target in zip(names, (ETP_ALL_GATHER, ETP_REDUCE_SCATTER), strict=True)]
    return wrap_region(graph, ops, region, entries, made[0], made[1])


def split_layer(layer: Layer, etp: int, dtype_bytes: int = 2) -> Layer:
    """One expert-TP rank's share of an etp = 1 mixture-of-experts ``layer`` (module docstring);
    a dense layer, or etp = 1, is returned as is.

    Args:
        layer: a layer of a chain at etp = 1 (any ep, capacity factor and load imbalance).
        etp: expert-tensor-parallel width; must divide the experts' FFN width.
        dtype_bytes: bytes per element of the traced dtype.

    Raises:
        ConfigError: ``etp`` does not divide the experts' width, or ``layer`` is already split.
    """
    if not layer.experts or etp == 1:
        return layer
    if layer.etp != 1:
        raise ConfigError(f"layer {layer.name} is already split over {layer.etp} expert-TP ranks")
    forward = [op for op in layer.fwd.ops if _grouped(op) == experts_op.FORWARD_OP]
    widths = {forward[0].n, forward[-1].k}
    if any(w % etp for w in widths):
        raise ConfigError(f"expert-TP width {etp} does not divide the experts' FFN widths "
                          f"{sorted(widths)} of {layer.name}")
    hidden = forward[0].k
    rows = forward[0].batch * layer.tokens_per_expert  # received by this rank before the gather
    elements = etp * rows * hidden
    buffer = float(elements * dtype_bytes)
    fwd, bwd = (_split_graph(g, phase, etp, buffer, elements, dtype_bytes)
                for g, phase in ((layer.fwd, Phase.FWD), (layer.bwd, Phase.BWD)))
    extra = float((etp - 1) * rows * hidden * dtype_bytes)  # the gathered gate/up input, saved
    whole, _ = routed_rerun(layer)  # selective recompute of the moe module keeps none of it
    return with_region(layer, fwd, bwd, extra, math.ceil(layer.expert_params / etp),
                       selective_extra_bytes=0.0 if whole else None,
                       tokens_per_expert=etp * layer.tokens_per_expert, etp=etp, expert_tp_bytes=buffer)


def split_experts(chain: LayerChain, etp: int, dtype_bytes: int = 2) -> LayerChain:
    """:func:`split_layer` of every layer of an etp = 1 ``chain``; the blocks that shared graphs
    share the split ones.

    Raises:
        ConfigError: as :func:`split_layer`.
    """
    if etp == 1:
        return chain
    return map_shared_layers(chain, lambda layer: split_layer(layer, etp, dtype_bytes),
                             chain.key._replace(etp=etp))


__all__ = ["ETP_ALL_GATHER", "ETP_REDUCE_SCATTER", "ETP_TARGETS", "check_etp", "expert_width",
           "split_experts", "split_layer"]
