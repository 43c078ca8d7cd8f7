"""Tensor and sequence parallelism as a transform of the traced graph (Megatron-LM).

Every tensor of the traced joint graph gets a state:

* ``R`` replicated: every TP rank holds all of it;
* ``S`` sharded: every rank holds 1/t of it (heads, FFN columns, vocabulary);
* ``P`` partial: every rank holds a full-size partial sum that must be reduced.

States propagate in topological order.  A forward weight matmul fed a
replicated activation is column-parallel (its weight, and bias, become ``S``);
fed a sharded one it is row-parallel (weight ``S``, output ``P``) — Shoeybi et
al. 2019, Megatron-LM, Sec. 3.  The token embedding and the output layer are
vocabulary-parallel (Narayanan et al. 2021).  Every matmul, forward or backward,
then follows one rule on its operands ``A [m, k] x B [k, n]``: both sharded ->
split ``k`` and the output is partial (the row-parallel forward and the
column-parallel data gradient); only A sharded -> split ``m``; only B -> split
``n``; a batched matmul with a sharded operand splits its batch (the heads).
Other operators are sharded when any input is.  Adds of partial (and
replicated) tensors stay partial, since a reduction is linear; a partial tensor
is all-reduced right after its producer, once, when a consumer that needs the
full value is met.  This places exactly Megatron's two all-reduces per block
forward and two backward.

Sequence parallelism (Korthikanti et al. 2022): the replicated operators of a
block (norms, dropout, residual adds) work on 1/t of the sequence; the
all-reduces inside blocks become reduce-scatters, and a sequence-sharded tensor
is all-gathered before a sharded matmul reads it.

Mixture-of-experts blocks (sequence parallelism on, as Megatron-Core requires for
training with TP > 1: ``MoELayer.forward`` raises "performance may degrade if MoE and
tensor parallelism are enabled without also enabling sequence parallelism",
megatron/core/transformer/moe/moe_layer.py): the routed operators (``whole``) -- router,
top-k, token copies, the routed experts' grouped GEMMs and the weighted sum
(:func:`archplace.workload.experts_op.routed_nodes`) -- run on the rank's own
1/t of the tokens with whole, replicated weights (expert tensor-parallel width 1,
expert parallelism 1: "MoE parallel folding", Liu et al. 2025, sec. 3, where the
experts' ranks etp x ep x edp fold over attention's tp x cp x dp).  So their
weights are not split, a matmul with no sharded operand that reads a
sequence-sharded one splits its token dimension (``m``; ``k`` for a weight
gradient, whose full-size result is summed by the expert-data-parallel gradient
reduction, not by a TP collective), and a partial input of a routed operator is
reduce-scattered before it (the shared experts' output before it is added to
the routed one: Megatron-Core's ``SharedExpertMLP`` is a TP-sharded dense MLP
whose output is reduce-scattered, megatron/core/transformer/moe/shared_experts.py).
The shared experts themselves are sharded like a dense MLP.  Multi-head latent
attention's down projections are kept whole the same way (Megatron-Core's
``parallel_mode='duplicated'`` linears): they project the rank's own tokens and the
column-parallel up projections all-gather the latents.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from archplace.base.errors import ConfigError
from archplace.workload.graph import OpKind

BLOCK_LAYER = 1  # layer index of the block in the traced (embedding, block, head) graph


class State(enum.Enum):
    """Distribution of a tensor over the TP ranks."""

    R = "replicated"
    S = "sharded"
    P = "partial"


@dataclass(frozen=True)
class TensorParallel:
    """TP width and whether sequence parallelism is on.

    Raises:
        ConfigError: a width below 1.
    """

    tp: int = 1
    sp: bool = False

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ConfigError(f"TP width must be >= 1, got {self.tp}")


@dataclass
class Sharding:
    """Result of :func:`propagate` (read-only once built).

    Attributes:
        tp: TP width.
        state: state of every storage node (placeholders and compute nodes).
        split: for matmul nodes, the dimension divided by ``tp`` (``batch``, ``m``, ``k``, ``n``).
        seq_sharded: compute nodes working on 1/tp of the sequence (SP).
        before: all-gathers to run before a consumer: ``[(kind, tensor storage node), ...]``.
        after: reductions (all-reduce, reduce-scatter) of a partial tensor, run right after
            its producer (and in its producer's graph): ``{producer: kind}``.
        sharded_params: parameter placeholders split over the TP ranks.
        vocab_parallel: the token embedding is split over the vocabulary.
    """

    tp: int
    state: dict[Any, State] = field(default_factory=dict)
    split: dict[Any, str] = field(default_factory=dict)
    seq_sharded: set[Any] = field(default_factory=set)
    before: dict[Any, list[tuple[str, Any]]] = field(default_factory=dict)
    after: dict[Any, str] = field(default_factory=dict)
    sharded_params: set[Any] = field(default_factory=set)
    vocab_parallel: bool = False

    def state_of(self, storage: Any) -> State:
        """State of a storage node; an element of a multi-output op has its producer's state."""
        if storage in self.state:
            return self.state[storage]
        return self.state.get(_producer(storage), State.R)

    def is_seq_sharded(self, storage: Any) -> bool:
        """Whether a tensor holds 1/tp of the sequence (SP), looking through tuple elements."""
        return storage in self.seq_sharded or _producer(storage) in self.seq_sharded

    def tensor_factor(self, storage: Any) -> float:
        """Fraction of a tensor one rank holds: 1/tp if sharded (or sequence-sharded), else 1."""
        if self.state_of(storage) is State.S or self.is_seq_sharded(storage):
            return 1.0 / self.tp
        return 1.0

    def work_factor(self, node: Any) -> float:
        """Fraction of a non-matmul operator's work one rank does."""
        return self.tensor_factor(node)


def check_width(config: dict[str, Any], heads_field: str, kv_field: str | None, ffn: int,
                parallel: TensorParallel, model: str) -> None:
    """Refuse a TP width that does not divide the heads, KV heads and FFN size.

    Raises:
        ConfigError: naming the quantity the width does not divide.
    """
    t = parallel.tp
    heads = int(config[heads_field])
    kv_heads = int(config.get(kv_field) or heads) if kv_field else heads
    for what, value in (("attention heads", heads), ("key/value heads", kv_heads), ("FFN size", ffn)):
        if value % t:
            raise ConfigError(f"TP width {t} does not divide the {value} {what} of {model}")


_ADDS = frozenset({"add", "sub", "add_"})


def _producer(storage: Any) -> Any:
    """The multi-output op a ``getitem`` storage node selects from, else the node itself."""
    if getattr(storage, "target", None) is operator.getitem:
        return storage.args[0]
    return storage


def propagate(
    calls: Iterable[Any],
    placeholders: Iterable[Any],
    kind: dict[Any, OpKind | None],
    storage: Callable[[Any], Any],
    is_param: Callable[[Any], bool],
    where: dict[Any, tuple[int, Any]],
    op_name: Callable[[Any], str],
    vocab_size: int,
    hidden_size: int,
    parallel: TensorParallel,
    blocks: int = 1,
    whole: Collection[Any] = frozenset(),
) -> Sharding:
    """Assign a :class:`State` to every tensor and place the TP collectives (module docstring).

    Args:
        calls: call nodes of the joint graph in topological order.
        placeholders: its placeholder nodes.
        kind: OpKind of each call node, None for views.
        storage: the node owning a node's memory (views resolved).
        is_param: whether a placeholder is a parameter.
        where: (layer index, phase) of every compute node; layer 1 is the block.
        op_name: aten name of a node (``mm``).
        vocab_size: rows of the token embedding (vocabulary-parallel).
        hidden_size: model width (identifies hidden states entering a block).
        parallel: TP width and SP.
        blocks: traced blocks, layers 1 .. ``blocks`` (one per kind: DeepSeek-V3's dense and
            mixture-of-experts blocks).
        whole: forward nodes whose weights stay whole on every TP rank and which work on the
            rank's own tokens: the mixture-of-experts blocks' routed region (module docstring)
            and multi-head latent attention's down projections
            (:func:`archplace.workload.trace.latent_down_nodes`). Without sequence
            parallelism they run on the whole sequence on every rank (duplicated).
    """
    out = Sharding(parallel.tp)
    if parallel.tp == 1:
        return out
    state = out.state
    for p in placeholders:
        state[p] = State.R

    def st(node: Any) -> State:
        return out.state_of(storage(node))

    def is_bwd(node: Any) -> bool:
        return bool(node.meta.get("autograd_backward"))

    def rows(node: Any) -> int:
        val = storage(node).meta.get("val")
        return int(val.shape[0]) if val is not None and getattr(val, "dim", lambda: 0)() >= 1 else -1

    for n in calls:
        op_kind = kind.get(n)
        if op_kind is None:
            continue
        name = op_name(n)
        layer = where[n][0] if n in where else BLOCK_LAYER
        in_blocks = BLOCK_LAYER <= layer < BLOCK_LAYER + blocks
        inputs = [a for a in n.all_input_nodes]
        if parallel.sp and in_blocks:
            # Hidden states enter a block sequence-sharded from its neighbour blocks; the
            # traced block's neighbours are the embedding and head, so mark them as such.
            for a in inputs:
                s = storage(a)
                made = where.get(_producer(s), (BLOCK_LAYER,))[0]
                if not BLOCK_LAYER <= made < BLOCK_LAYER + blocks and not is_param(s) \
                        and st(a) is State.R and _last_dim(s) == hidden_size:
                    out.seq_sharded.add(s)
        # 1. forward: decide which parameters are split.
        if not is_bwd(n) and n not in whole:
            _shard_parameters(n, name, inputs, BLOCK_LAYER if in_blocks else layer, st, storage,
                              is_param, rows, vocab_size, out)
        # 2. reduce partial inputs unless this is an add of partials.
        partial = [storage(a) for a in inputs if st(a) is State.P]
        # Reductions are linear: an add of partial and replicated tensors stays partial
        # (one rank adds the replicated term) and is reduced once, where a consumer needs it.
        sum_of_partials = bool(partial) and name in _ADDS and n not in whole and all(
            st(a) in (State.P, State.R) for a in inputs)
        if partial and not sum_of_partials:
            for tensor in dict.fromkeys(partial):
                made = where.get(tensor, (layer,))[0]
                in_block = BLOCK_LAYER <= made < BLOCK_LAYER + blocks and parallel.sp
                out.after[tensor] = "reduce_scatter" if in_block else "all_reduce"
                state[tensor] = State.R
                if in_block:
                    out.seq_sharded.add(tensor)
        # 3. output state.
        if sum_of_partials:
            result = State.P
        elif op_kind is OpKind.MATMUL:
            result = _matmul_state(n, name, inputs, st, out)
            if parallel.sp and in_blocks and result is State.R:
                _split_tokens(n, name, storage, is_param, out)
            if parallel.sp and result is not State.R:
                for a in inputs:
                    s = storage(a)
                    if st(a) is State.R and out.is_seq_sharded(s) and not is_param(s):
                        out.before.setdefault(n, []).append(("all_gather", s))
        elif name == "embedding" and st(inputs[0]) is State.S:
            result = State.P
        elif name == "embedding_dense_backward" and out.vocab_parallel and n.args[2] == vocab_size:
            result = State.S  # gradient of the local vocabulary rows
        elif name == "nll_loss_forward":
            result = State.R  # parallel cross-entropy: a reduction of b*s scalars (neglected)
        else:
            result = State.S if any(st(a) is State.S for a in inputs) else State.R
        if parallel.sp and not in_blocks:
            for a in inputs:  # leaving the sequence-parallel region: gather the sequence first
                s = storage(a)
                if out.is_seq_sharded(s) and not any(c == s for _, c in out.before.get(n, [])):
                    out.before.setdefault(n, []).append(("all_gather", s))
        state[n] = result
        if parallel.sp and in_blocks and result is State.R and out.split.get(n) != "k" and \
                any(not is_param(storage(a)) for a in inputs):
            out.seq_sharded.add(n)
    return out


def _last_dim(storage: Any) -> int:
    val = storage.meta.get("val")
    shape = getattr(val, "shape", None)
    return int(shape[-1]) if shape else -1


def _operands(n: Any, name: str) -> tuple[Any, Any]:
    tensors = [a for a in n.args if hasattr(a, "meta")]
    return tensors[-2], tensors[-1]


def _shard_parameters(n: Any, name: str, inputs: list[Any], layer: int, st: Callable[[Any], State],
                      storage: Callable[[Any], Any], is_param: Callable[[Any], bool],
                      rows: Callable[[Any], int], vocab_size: int, out: Sharding) -> None:
    """Mark the weight (and bias) of a forward weight matmul or the token embedding as split."""
    if name in ("mm", "addmm"):
        a, b = _operands(n, name)
        weight = storage(b)
        if not is_param(weight) or weight in out.sharded_params:
            return
        shape = weight.meta["val"].shape
        if layer != BLOCK_LAYER and vocab_size not in tuple(shape):
            return  # only the output layer is split outside the blocks (vocabulary-parallel)
        out.sharded_params.add(weight)
        out.state[weight] = State.S
        if name == "addmm" and st(a) is not State.S:  # column-parallel: the bias is split too
            bias = storage(n.args[0])
            if is_param(bias):
                out.sharded_params.add(bias)
                out.state[bias] = State.S
    elif name == "embedding":
        weight = storage(inputs[0])
        if is_param(weight) and rows(weight) == vocab_size:
            out.sharded_params.add(weight)
            out.state[weight] = State.S
            out.vocab_parallel = True


def _split_tokens(n: Any, name: str, storage: Callable[[Any], Any], is_param: Callable[[Any], bool],
                  out: Sharding) -> None:
    """A block matmul with no sharded operand that reads a sequence-sharded tensor (the routed
    experts' region of a mixture-of-experts block, module docstring) works on the rank's
    tokens: split ``m`` when its left operand holds them, ``k`` when both do (a weight
    gradient).  Dense blocks have no such matmul: every one reads a sharded operand."""
    a, b = (storage(x) for x in _operands(n, name))
    tokens_a = out.is_seq_sharded(a) and not is_param(a)
    tokens_b = out.is_seq_sharded(b) and not is_param(b)
    if tokens_a and tokens_b:
        out.split[n] = "k"
    elif tokens_a:
        out.split[n] = "m"
    elif tokens_b:
        out.split[n] = "n"


def _matmul_state(n: Any, name: str, inputs: list[Any], st: Callable[[Any], State], out: Sharding) -> State:
    a, b = _operands(n, name)
    sa, sb = st(a) is State.S, st(b) is State.S
    if name in ("bmm", "baddbmm"):
        if sa or sb:
            out.split[n] = "batch"
            return State.S
        return State.R
    if sa and sb:
        out.split[n] = "k"
        return State.P
    if sa:
        out.split[n] = "m"
        return State.S
    if sb:
        out.split[n] = "n"
        return State.S
    return State.R
