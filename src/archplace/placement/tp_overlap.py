"""Tensor-parallel communication overlapped with the GEMMs next to it (Transformer Engine's
userbuffers overlap, ``tp_comm_overlap``).

With sequence parallelism a TP layer's collectives sit between GEMMs: an all-gather of the
sequence-sharded input before the QKV and FC1 GEMMs, a reduce-scatter of the output after the
attention projection and FC2 GEMMs, and the same collectives on the gradients in the backward
pass (Korthikanti et al. 2022, sec. 4.2.2).  Run one after the other they add up; Transformer
Engine's userbuffers overlap splits each GEMM into chunks and moves one chunk's data while it
multiplies another, so the collective hides behind the GEMM it feeds or drains.  The methods
NeMo configures per GEMM (NVIDIA/NeMo-Framework-Launcher,
``launcher_scripts/conf/training/tp_overlap/ub_cfg_h100_h8192_tp4_mbs1_seqlen8192.yaml`` at
commit a3f310000241e33d93d3516495b786b253ebf760):

* the all-gathers feeding a GEMM (``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad``):
  ``ring_exchange``, peer-to-peer copies by the copy engines, no SM taken from the GEMM;
* the reduce-scatters draining a forward GEMM (``proj_fprop``, ``fc2_fprop``): ``pipeline``
  with ``num_splits: 4`` and 24 or 16 SMs for the communication kernels (``num_sm``);
* the backward pass's other collectives: ``bulk`` overlap with the independent dgrad or wgrad
  GEMM, 2 to 24 SMs.

archplace prices each TP collective of c seconds beside the GEMMs adjacent to it in the layer
graph (the matmuls an all-gather feeds, or a reduce-scatter drains, through element-wise
operators only) of g seconds:

    exposed = max(0, c - g) + (c / 4 for a forward reduce-scatter: the last of its 4 splits
              has no GEMM left to hide behind)
    slowed  = max(0, L - exposed),  L = (s / S) c for a reduce-scatter (s the chip's
              ``collective_sms`` of its S SMs, 20 of 132 on H100 by default, the range of the
              16 to 24 SMs above), 0 for an all-gather (copy engines)

the formula of :mod:`archplace.placement.interference` for one collective beside compute: the
pair takes g + exposed + slowed instead of g + c.  Without ``tp_comm_overlap`` (Megatron-LM's
and most frameworks' default) the collectives stay exposed whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from archplace.workload.graph import Operator, OpGraph, OpKind

UB_PIPELINE_SPLITS = 4
"""Chunks a forward GEMM + reduce-scatter pair is split into (``num_splits: 4`` of
``proj_fprop`` and ``fc2_fprop`` in NeMo's userbuffers configurations, module docstring)."""

ALL_GATHER = "all_gather"
REDUCE_SCATTER = "reduce_scatter"
_PASS_THROUGH = (OpKind.ELEMENTWISE, OpKind.NORM, OpKind.REDUCTION, OpKind.SOFTMAX)


@dataclass(frozen=True, slots=True)
class OverlappedTp:
    """TP collectives of one layer graph under userbuffers overlap, seconds per micro-batch.

    Attributes:
        total_s: the collectives' whole time.
        exposed_s: what sticks out of the GEMMs they overlap.
        slowed_s: GEMM time added by the SMs the hidden reduce-scatters take.
    """

    total_s: float
    exposed_s: float
    slowed_s: float


def _partners(graph: OpGraph, op: Operator, successors: Sequence[Sequence[int]]) -> list[int]:
    """Ids of the matmuls next to collective ``op``: those its output reaches (an all-gather)
    or those reaching its input (any other collective), through element-wise operators only."""
    ops = graph.ops
    forward = op.target == ALL_GATHER
    stack = list(successors[op.id] if forward else op.preds)
    seen: set[int] = set()
    found = []
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        kind = ops[i].kind
        if kind is OpKind.MATMUL:
            found.append(i)
        elif kind in _PASS_THROUGH:
            stack.extend(successors[i] if forward else ops[i].preds)
    return sorted(found)


def overlapped_tp(graph: OpGraph, times_s: Sequence[float], *, tp_ops: Sequence[int],
                  backward: bool, sm_share: float) -> OverlappedTp:
    """The TP collectives ``tp_ops`` (operator ids) of ``graph`` under userbuffers overlap
    (module docstring), ``times_s`` the time of every operator alone, seconds; ``backward``:
    the graph is a backward pass (no pipelined reduce-scatter); ``sm_share`` the share s / S of
    the SMs a hidden reduce-scatter takes, in [0, 1)."""
    successors: list[list[int]] = [[] for _ in graph.ops]
    for op in graph.ops:
        for p in op.preds:
            successors[p].append(op.id)
    total = exposed = slowed = 0.0
    for i in tp_ops:
        op = graph.ops[i]
        c = times_s[i]
        g = sum(times_s[j] for j in _partners(graph, op, successors))
        scatter = op.target != ALL_GATHER
        tail = c / UB_PIPELINE_SPLITS if scatter and not backward else 0.0
        out = min(c, max(0.0, c - g) + tail)
        lost = sm_share * c if scatter else 0.0
        total += c
        exposed += out
        slowed += max(0.0, lost - out)
    return OverlappedTp(total, exposed, slowed)
