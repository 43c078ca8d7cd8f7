"""The layer chain: embedding -> L identical blocks -> head + loss.

Blocks repeat, so one traced block's graphs are shared by every block of the
chain (same objects, no copies).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from archplace.workload.graph import OpGraph
from archplace.workload.key import CostKey, Keyed


class LayerKind(enum.StrEnum):
    """Role of a layer in the chain."""

    EMBEDDING = "embedding"
    BLOCK = "block"
    HEAD = "head"


@dataclass(frozen=True)
class Layer:
    """One layer of the chain, for one micro-batch size and TP width.

    Attributes:
        name: ``embedding``, ``block.0`` ... ``block.{L-1}``, ``head``.
        kind: layer role.
        params: number of parameters held by this layer (per device for TP > 1).
        fwd, bwd: operator graphs of the forward and backward pass.
        activation_bytes: bytes this layer saves for its backward pass, per
            micro-batch, without recomputation (forward outputs read by backward
            operators, excluding parameters and views of them).
        input_bytes: bytes of the layer's input, per micro-batch (what full
            recomputation keeps instead of ``activation_bytes``).
        boundary_bytes: bytes of the tensor passed to the next layer, per micro-batch.
        working_bytes: peak bytes of any one operator's operands and result (the
            transient working set of running this layer).
        selective_activation_bytes: bytes saved for backward under selective
            recomputation of the traced recompute modules
            (:mod:`archplace.workload.recompute_regions`); with the default, core_attn, the
            attention core is dropped — every tensor of sequence × sequence shape: scores,
            softmax, attention dropout (Korthikanti et al. 2022, Sec. 5); equals
            ``activation_bytes`` for layers without attention.
        selective_ops: names of the forward operators selective recomputation runs
            again in the backward pass.
        experts: routed experts of the layer's mixture-of-experts FFN; 0 for a dense layer.
        experts_per_token: experts each token is routed to (top-k); 0 for a dense layer.
        tokens_per_expert: rows of each expert's GEMMs per micro-batch under balanced routing,
            ``ceil(tokens x top-k / experts)`` (:mod:`archplace.workload.experts_op`), tokens being
            the rank's share (1/tp of them under sequence parallelism); with expert parallelism,
            of each of this rank's experts, ``ceil(factor x ep x tokens x top-k / experts)``
            (:mod:`archplace.workload.expert_parallel`), etp times that with expert tensor
            parallelism (the rows gathered from the etp group).
        expert_params: parameters of the routed experts this rank holds (included in
            ``params``): all of them at ep = etp = 1, ``1/(ep x etp)`` of them with expert
            parallelism and expert tensor parallelism.
        routed_tokens: token copies the layer's router sends to experts per micro-batch, the
            rank's tokens x top-k (the rows each all-to-all moves, before padding); 0 for a dense
            layer.
        ep: expert-parallel degree the routed experts are sharded over (1: not sharded).
        all_to_all_bytes: bytes one rank sends in each of the layer's expert-parallel
            all-to-alls (two forward, two backward) per micro-batch; 0 when ep = 1.
        etp: expert-tensor-parallel width every routed expert's weights are split over
            (:mod:`archplace.workload.expert_tensor`; 1: whole experts). ``tokens_per_expert``
            then counts the rows gathered from the etp group.
        expert_tp_bytes: full buffer of each of the layer's expert-TP all-gathers and
            reduce-scatters (two forward, two backward) per micro-batch; 0 when etp = 1.
        padding_fwd_flop, padding_bwd_flop: the part of the matmul FLOP (2 x batch x m x k x n)
            of ``fwd`` / ``bwd`` spent on the expert rows beyond balanced routing -- the padding
            of a capacity factor above 1, or the busiest rank's excess rows under load imbalance
            (:func:`archplace.workload.extract.derive_experts`). Hardware FLOP, not model FLOP:
            MFU leaves them out, HFU counts them. 0 for a dense or balanced layer.
        fp8_activation_saving_bytes: bytes fewer saved for the backward pass, per micro-batch,
            when the layer's linear GEMMs run in FP8: Transformer Engine keeps a GEMM's input in
            FP8 for its weight gradient (:mod:`archplace.workload.fp8_saved`); taken off
            ``activation_bytes`` under FP8.
        selective_fp8_saving_bytes: the same, of what selective recomputation keeps; taken off
            ``selective_activation_bytes`` under FP8 (default: ``fp8_activation_saving_bytes``).
    """

    name: str
    kind: LayerKind
    params: int
    fwd: OpGraph
    bwd: OpGraph
    activation_bytes: float
    input_bytes: float
    boundary_bytes: float
    working_bytes: float
    selective_activation_bytes: float = -1.0
    selective_ops: tuple[str, ...] = ()
    experts: int = 0
    experts_per_token: int = 0
    tokens_per_expert: int = 0
    expert_params: int = 0
    routed_tokens: int = 0
    ep: int = 1
    all_to_all_bytes: float = 0.0
    etp: int = 1
    expert_tp_bytes: float = 0.0
    padding_fwd_flop: float = 0.0
    padding_bwd_flop: float = 0.0
    fp8_activation_saving_bytes: float = 0.0
    selective_fp8_saving_bytes: float | None = None

    def __post_init__(self) -> None:
        if self.selective_activation_bytes < 0:
            object.__setattr__(self, "selective_activation_bytes", self.activation_bytes)
        if self.selective_fp8_saving_bytes is None:
            object.__setattr__(self, "selective_fp8_saving_bytes", self.fp8_activation_saving_bytes)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``params`` less the routed experts it is not sent to (with
        expert (tensor) parallelism, the model's figure: the experts of all ``ep x etp`` ranks
        counted)."""
        if not self.experts:
            return self.params
        routed = self.expert_params * self.ep * self.etp
        return self.params - self.expert_params + routed * self.experts_per_token // self.experts

    @property
    def fwd_flop(self) -> float:
        """Forward FLOP per micro-batch."""
        return self.fwd.flop

    @property
    def bwd_flop(self) -> float:
        """Backward FLOP per micro-batch."""
        return self.bwd.flop


@dataclass(frozen=True)
class LayerChain(Keyed):
    """A model as a chain of layers for one cost key: the micro-batch and the TP / SP / CP / EP /
    expert-TP setting it was traced and sharded at.

    Attributes:
        model: model name.
        key: what the graphs are for (:class:`~archplace.workload.key.CostKey`):
            ``micro_batch`` samples per micro-batch; sharded for a ``tp``-wide tensor-parallel
            group (with sequence parallelism when ``sp``); one rank's share of a ``cp``-way
            context-parallel group (each rank holds ``seq_len / cp`` tokens of every sample); the
            routed experts sharded over ``ep`` ranks (:mod:`archplace.workload.expert_parallel`)
            and split over ``etp`` ranks (:mod:`archplace.workload.expert_tensor`); parameters
            are per rank of each. Read as ``chain.micro_batch``, ``chain.tp``, ... (:class:`Keyed`).
        seq_len: tokens per sample.
        layers: embedding, blocks, head, in order.
        shared_params: parameters held by two layers (tied input and output
            embeddings: the head keeps its own copy, as in Megatron-LM), per TP rank.
    """

    model: str
    key: CostKey
    seq_len: int
    layers: tuple[Layer, ...]
    shared_params: int = 0

    @property
    def params(self) -> int:
        """Parameters held by all layers together, tied copies counted twice (per TP rank)."""
        return sum(layer.params for layer in self.layers)

    @property
    def model_params(self) -> int:
        """Distinct parameters of the model (tied weights once), per TP rank."""
        return self.params - self.shared_params

    @property
    def active_params(self) -> int:
        """Distinct parameters one token uses (:attr:`Layer.active_params`; tied weights once),
        per TP rank; equals :attr:`model_params` for a dense model."""
        return sum(layer.active_params for layer in self.layers) - self.shared_params

    @property
    def flop_per_micro_batch(self) -> float:
        """Forward + backward FLOP of one micro-batch through the whole chain."""
        return sum(layer.fwd_flop + layer.bwd_flop for layer in self.layers)
