"""archplace's own operator graph: what the cost model, scheduler and placement consume.

An :class:`OpGraph` is the DAG of the compute operators of one layer in one
phase (forward or backward).  Zero-cost view operators of the traced aten graph
are removed and their producers linked straight to their consumers, so every
node here costs time on some core.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from archplace.base.errors import ConfigError


class Phase(enum.StrEnum):
    """Training phase an operator belongs to."""

    FWD = "fwd"
    BWD = "bwd"


class OpKind(enum.StrEnum):
    """Operator kinds; each maps to one cost-model routine."""

    MATMUL = "matmul"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    SOFTMAX = "softmax"
    NORM = "norm"
    EMBEDDING = "embedding"
    COLLECTIVE = "collective"
    ATTENTION = "attention"


class CoreType(enum.StrEnum):
    """Core an operator runs on (docs/model.md, Layer time)."""

    TENSOR = "tensor"
    VECTOR = "vector"
    FUSED = "fused"


@dataclass(frozen=True, slots=True)
class Operator:
    """One compute operator of a layer.

    Attributes:
        id: index of the operator inside its :class:`OpGraph` (0..n-1, topological order).
        name: aten node name, e.g. ``mm_3``.
        target: aten op, e.g. ``aten.mm.default``.
        kind: cost-model family.
        phase: forward or backward.
        batch, m, k, n: for ``MATMUL``, the (batched) GEMM ``[batch, m, k] x [batch, k, n]``;
            0 for other kinds.
        elements: number of output elements (for vector ops the work count).
        flop: floating-point operations (a multiply-add is 2 FLOP).
        bytes_read, bytes_written: bytes of the operands and results at the traced dtype.
        preds: ids of the operators of the same graph whose results this one reads.
        group: for ``COLLECTIVE`` operators, the number of devices taking part (the TP
            width); 1 otherwise.  ``target`` then names the collective: ``all_reduce``,
            ``reduce_scatter``, ``all_gather``; ``bytes_read`` is the full buffer size.
        fused_elements: element-wise work (output elements) fused into this matmul's
            epilogue; a matmul with fused work runs on a tensor and a vector core.
        fused: names of the element-wise operators fused into this one.
        causal, skip_masked_blocks, dtype_bytes: for ``ATTENTION`` operators
            (:mod:`archplace.cost.attention`): ``batch`` = micro-batch x heads (per device),
            ``m`` = query length s_q, ``k`` = head dim d, ``n`` = key length s_kv; ``causal``
            the mask is causal; ``skip_masked_blocks`` the kernel skips score blocks the mask
            hides entirely (FlashAttention-2; PyTorch SDPA computes every block);
            ``dtype_bytes`` bytes of Q, K, V and O.  ``target`` ends in ``backward`` for the
            backward operator.  False / 0 for other kinds.
        v_dim: for ``ATTENTION``, the head dim of V (and O) when it differs from ``k``, the
            head dim of Q and K (DeepSeek's multi-head latent attention: 128 against 192);
            0 means equal to ``k``.
        cp, cp_stride, ring_bytes: for ``ATTENTION`` under context parallelism (ring
            attention, :mod:`archplace.workload.attention_blocks`): the CP degree c (1 without
            it); the rank distance between the members of the CP group (the TP width, ranks
            ordered TP -> CP); the bytes of the K and V block this rank passes to the next one
            at each step of the forward ring.  With c > 1, ``m`` is the rank's s/c queries and
            ``n`` the whole sequence s.
        footprint_bytes: bytes the operator holds at once where that is not ``bytes_read +
            bytes_written``: a kernel making several passes over one buffer (the loss,
            :mod:`archplace.workload.loss_traffic`); 0 otherwise.
    """

    id: int
    name: str
    target: str
    kind: OpKind
    phase: Phase
    batch: int
    m: int
    k: int
    n: int
    elements: int
    flop: float
    bytes_read: float
    bytes_written: float
    preds: tuple[int, ...] = ()
    group: int = 1
    fused_elements: int = 0
    fused: tuple[str, ...] = ()
    causal: bool = False
    skip_masked_blocks: bool = False
    dtype_bytes: int = 0
    v_dim: int = 0
    cp: int = 1
    cp_stride: int = 1
    ring_bytes: float = 0.0
    footprint_bytes: float = 0.0

    @property
    def held_bytes(self) -> float:
        """Bytes the operator holds at once: ``footprint_bytes`` where set, else its operands
        and result (``bytes_read + bytes_written``)."""
        return self.footprint_bytes or self.bytes_read + self.bytes_written

    def __post_init__(self) -> None:
        if any(p >= self.id or p < 0 for p in self.preds):
            raise ConfigError(f"operator {self.name}: predecessors {self.preds} must precede id {self.id}")
        if self.cp != 1 and (self.cp < 1 or self.n != self.m * self.cp or (self.causal and self.m % 2)):
            raise ConfigError(f"operator {self.name}: ring attention over cp={self.cp} ranks needs cp >= 1, "
                              f"n = m x cp and, causal, an even m (2 chunks per rank); got m={self.m}, "
                              f"n={self.n}")

    @property
    def core_type(self) -> CoreType:
        """Matmuls run on tensor cores (with fused element-wise work: tensor + vector core,
        ``FUSED``); a fused attention operator (FlashAttention: its two matmuls on a tensor
        core, its online softmax on a vector core) is ``FUSED`` too; everything else runs on
        vector cores."""
        if self.kind is OpKind.ATTENTION:
            return CoreType.FUSED
        if self.kind is OpKind.MATMUL:
            return CoreType.FUSED if self.fused_elements else CoreType.TENSOR
        return CoreType.VECTOR


@dataclass(frozen=True)
class OpGraph:
    """Operators of one layer in one phase, in topological order (``ops[i].id == i``)."""

    ops: tuple[Operator, ...]
    _check: bool = field(default=True, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._check:
            for i, op in enumerate(self.ops):
                if op.id != i:
                    raise ConfigError(f"operator {op.name} has id {op.id} at position {i}")

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def flop(self) -> float:
        """Total FLOP of the graph."""
        return float(sum(op.flop for op in self.ops))

    def matmul_flop(self) -> float:
        """FLOP of the matmul operators only."""
        return float(sum(op.flop for op in self.ops if op.kind is OpKind.MATMUL))

    def edges(self) -> Iterable[tuple[int, int]]:
        """Precedence edges ``(pred, succ)``."""
        for op in self.ops:
            for p in op.preds:
                yield (p, op.id)

    def collectives(self) -> dict[str, int]:
        """Number of collective operators per kind (``all_reduce`` ...)."""
        counts: dict[str, int] = {}
        for op in self.ops:
            if op.kind is OpKind.COLLECTIVE:
                counts[op.target] = counts.get(op.target, 0) + 1
        return counts

    def count_by_kind(self) -> dict[str, int]:
        """Number of operators per :class:`OpKind` value."""
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.kind.value] = counts.get(op.kind.value, 0) + 1
        return counts


def renumber(ops: Sequence[Operator]) -> OpGraph:
    """Build an :class:`OpGraph` from operators in topological order with arbitrary ids.

    Ids are rewritten to 0..n-1 and predecessor ids translated; predecessors
    that are not in ``ops`` are dropped (they belong to another layer or phase).
    """
    new_id = {op.id: i for i, op in enumerate(ops)}
    out = []
    for i, op in enumerate(ops):
        preds = tuple(sorted({new_id[p] for p in op.preds if p in new_id and new_id[p] < i}))
        out.append(replace(op, id=i, preds=preds))
    return OpGraph(tuple(out))


def working_set_bytes(graphs: Iterable[OpGraph]) -> float:
    """A layer's working set: the most bytes one of its operators holds at once
    (:attr:`Operator.held_bytes`) over ``graphs`` (its forward and backward graphs); 0 for none."""
    return max((op.held_bytes for g in graphs for op in g.ops), default=0.0)
