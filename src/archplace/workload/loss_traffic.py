"""HBM traffic of the cross-entropy kernels as the frameworks run them (issue #24: the loss as
frameworks run it).

The traced graph holds the loss as PyTorch's operators (an optional upcast, ``_log_softmax``,
``nll_loss_forward`` and their backward nodes); :func:`archplace.workload.kernels.loss_kernels`
groups them into one forward and one backward kernel (``Loss.MEGATRON``,
``Loss.MEGATRON_FUSED``: the upcast and the log-softmax; ``Loss.TE``: the 16-bit log-softmax).
A framework's loss makes several passes over the vocabulary-sized buffer, and each pass reads or
writes every logit: their bytes, not the grouped operators' inputs and outputs, are its traffic.
:data:`LOSS_TRAFFIC` counts them per logit of the rank (its vocabulary shard times its tokens),
and :func:`with_loss_traffic` charges them to the grouped operators.  What the passes keep for
the backward pass and the largest buffers they hold at once are the grouping's (4 bytes a logit
kept by the two Megatron forms, 2 by Transformer Engine's; the grouped operator's operands and
result, kept as its ``footprint_bytes`` for the layer's working set), not the traffic.  The
passes' per-row reads (the targets, the row maxima and sums) are left out: a few bytes a row
against thousands of logits.

The passes, bytes per logit (r read, w written; bf16 2 bytes, float32 4):

* ``megatron``: Megatron-LM's vocabulary-parallel cross-entropy as written, unfused
  (NVIDIA/Megatron-LM @ core_v0.8.0 ``megatron/core/tensor_parallel/cross_entropy.py``; the
  2021-22 Megatron-LM ran the same steps on ``output.float()``).  Forward: the upcast (r2 w4),
  the row maximum (r4), the in-place subtraction of it (r4 w4), ``exp(out=)`` in place (r4 w4),
  the row sum (r4), the in-place division by it that leaves the softmax (r4 w4): 22 read, 16
  written.  Backward: the in-place ``mul_`` by the loss gradient (r4 w4; the one-hot
  subtraction touches one logit a row) and the cast of the float32 gradient to the logits'
  dtype (r4 w2): 8 read, 6 written.
* ``megatron-fused``: the same steps in the four ``jit_fuser`` functions of
  ``megatron/core/fusions/fused_cross_entropy.py`` (core_v0.8.0, ``cross_entropy_loss_fusion``;
  ``jit_fuser`` is ``torch.compile`` from PyTorch 2.2, ``megatron/core/jit.py``), each compiled
  function reading its inputs once and writing its outputs and the inputs it mutates once:
  ``calculate_logits_max`` (r2 w4), ``calculate_predicted_logits`` (r4, the buffer mutated in
  place: w4), ``calculate_cross_entropy_loss`` (r4 w4): 10 read, 12 written; backward
  ``calculate_gradients`` (r4; the saved softmax mutated in place, w4, and the bf16 gradient,
  w2): 4 read, 6 written.
* ``te``: Megatron-Core's ``cross_entropy_fusion_impl: te``, Transformer Engine's
  ``parallel_cross_entropy`` (NVIDIA/TransformerEngine @ 6f4bc3348c
  ``transformer_engine/pytorch/triton/cross_entropy.py`` and the Triton kernels it calls): the
  online-softmax kernel reads the logits (r2), the cross-entropy kernel reads them again and
  writes the gradient over them in the logits' dtype (r2 w2): 4 read, 2 written; backward, the
  ``element_mul_kernel`` scales that gradient by the per-token loss gradient in place (r2 w2;
  skipped only when that gradient is the scalar 1.0, which Megatron's masked per-token loss is
  not).  From TransformerEngine @ 01bbe3eea (2026-07-09) the gradient is kept in float32
  instead; the rows validated here (Megatron-Bridge containers 25.09 to 26.06) predate it.

``fp32`` (PyTorch's operators one by one) and ``fused`` (flash-attn's kernel) are costed from
the traced operators as they are, so they have no entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from archplace.workload.graph import OpGraph
from archplace.workload.kernels import KernelGroup
from archplace.workload.options import Loss
from archplace.workload.trace import first_numel, op_name


@dataclass(frozen=True, slots=True)
class LossTraffic:
    """Bytes per logit the loss's passes move (module docstring).

    Attributes:
        fwd_read, fwd_written: the forward passes' reads and writes.
        bwd_read, bwd_written: the backward passes'.
    """

    fwd_read: float
    fwd_written: float
    bwd_read: float
    bwd_written: float


LOSS_TRAFFIC: Mapping[Loss, LossTraffic] = MappingProxyType({
    Loss.MEGATRON: LossTraffic(22.0, 16.0, 8.0, 6.0),
    Loss.MEGATRON_FUSED: LossTraffic(10.0, 12.0, 4.0, 6.0),
    Loss.TE: LossTraffic(4.0, 2.0, 2.0, 2.0),
})
"""Per-logit traffic of the loss modes whose passes are counted (module docstring)."""


def with_loss_traffic(graphs: Sequence[OpGraph], group: KernelGroup, loss: Loss,
                      tensor_factor: Callable[[Any], float]) -> list[OpGraph]:
    """``graphs`` (a head layer's forward and backward graphs) with the operators of the loss
    ``group`` (the one holding the ``_log_softmax`` the loss reads) moving ``loss``'s
    :data:`LOSS_TRAFFIC` per logit; unchanged for a mode without an entry or a group without
    the log-softmax.  The logits are the log-softmax's elements times ``tensor_factor`` of it
    (the rank's share under tensor parallelism)."""
    traffic = LOSS_TRAFFIC.get(loss)
    softmax = next((n for n in group.members if op_name(n) == "_log_softmax"), None)
    if traffic is None or softmax is None:
        return list(graphs)
    logits = float(first_numel(softmax.meta.get("val"))) * tensor_factor(softmax)
    out = []
    for graph, names, (read, written) in zip(
            graphs, (group.fwd, group.bwd),
            ((traffic.fwd_read, traffic.fwd_written), (traffic.bwd_read, traffic.bwd_written)),
            strict=True):
        last = max((op.id for op in graph.ops if op.name in names), default=None)  # the merged kernel
        out.append(OpGraph(tuple(
            replace(op, bytes_read=logits * read, bytes_written=logits * written,
                    footprint_bytes=op.bytes_read + op.bytes_written) if op.id == last else op
            for op in graph.ops)))
    return out


__all__ = ["LOSS_TRAFFIC", "LossTraffic", "with_loss_traffic"]
