"""Operator graphs and the layer chain of a model, for one (micro-batch, sequence, TP width).

The traced joint graph (:mod:`archplace.workload.trace`) is cut into three
layers — embedding, block, head + loss — whose forward and backward operator
graphs become archplace :class:`~archplace.workload.graph.OpGraph` objects.  The
block's graphs stand for every block of the model, because blocks repeat.  With
a TP width t > 1 the graphs are sharded as in Megatron-LM
(:mod:`archplace.workload.parallel`): per-device dims, FLOP and bytes, and
collective operators where the ranks exchange data.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import ConfigError, ExtractionError
from archplace.base.fields import members
from archplace.workload import experts_op
from archplace.workload.attention_blocks import attention_flop
from archplace.workload.expert_parallel import check_ep, load_factor, shard_experts, shared_expert_width
from archplace.workload.expert_tensor import check_etp, split_experts
from archplace.workload.fp8_saved import fp8_saving_bytes, swiglu_inputs
from archplace.workload.fusion import fuse_elementwise, merge_groups
from archplace.workload.graph import Operator, OpGraph, OpKind, Phase, renumber, working_set_bytes
from archplace.workload.kernels import fuse_kernels, fused_saved, loss_kernels
from archplace.workload.key import CostKey, Keyed
from archplace.workload.layers import Layer, LayerChain, LayerKind
from archplace.workload.loss_traffic import with_loss_traffic
from archplace.workload.options import (
    Attention,
    ExpertWeighting,
    Kernels,
    Loss,
    RecomputeModule,
    Tracing,
    parse_attention,
    parse_kernels,
)
from archplace.workload.parallel import Sharding, TensorParallel, check_width, propagate
from archplace.workload.recompute_regions import kept_after, regions
from archplace.workload.trace import (
    FLOP_PER_ELEMENT,
    Traced,
    build_model,
    bytes_touched,
    find_block_container,
    first_numel,
    latent_down_nodes,
    matmul_dims,
    op_name,
    quiet_torch_logging,
    tensor_bytes,
    trace,
)
from archplace.workload.zoo import LoadedModel, check_attention

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtractOptions(Keyed, Tracing):
    """What to trace: a cost key at a sequence length, traced with the tracing options
    (:class:`~archplace.workload.options.Tracing`, keyword-only).

    The sizes and degrees are taken as given: the front door checked them (as
    :class:`archplace.Plan`'s and :class:`archplace.front.specs.ModelSpec`'s fields).

    Attributes:
        key: the micro-batch and the parallel degrees (:class:`~archplace.workload.key.CostKey`;
            its fields are also read as properties of the same names):
        micro_batch: samples per micro-batch.
        seq_len: tokens per sample.
        dtype: training dtype name (``bfloat16`` | ``float16`` | ``float32``).
        training: trace in train mode (dropout on).
        tp: tensor-parallel width (Megatron-LM column/row split).
        sp: sequence parallelism (Korthikanti et al. 2022); needs tp > 1 to matter.
        fuse: fuse element-wise operators into the matmul producing their input.
        attention, kernels: attention implementation (:class:`Attention`) and element-wise
            kernel fusion (:class:`Kernels`); strings are converted.
        cp: context-parallel degree: the graph is one rank's share of a sequence split over cp
            ranks: every layer traced at seq_len / cp tokens per sample, except that the fused
            attention operator computes the rank's queries against the whole sequence (ring
            attention with causal load balancing, :mod:`archplace.workload.attention_blocks`).
            Needs seq_len divisible by 2 x cp and a fused attention (flash or sdpa).
        ep: expert-parallel degree: the graph is one rank's share of MoE layers whose routed
            experts are sharded over ep ranks (all-to-all dispatch and combine;
            :mod:`archplace.workload.expert_parallel`). Must divide the routed experts.
        capacity_factor: expert capacity over the balanced share of routed tokens. 1.0 (the
            default): dropless, no padding, as Megatron-Core's default
            (``moe_expert_capacity_factor=None``) and DeepSeek-V3 (technical report sec. 3.2:
            no token is dropped in training); above 1 every expert's buffer is padded to that
            capacity and tokens over it dropped (GShard, Lepikhin et al. 2021, sec. 2.2; Switch
            Transformer, Fedus et al. 2022, sec. 2.2, which trains at 1.0 to 2.0), so the experts'
            GEMMs and the all-to-all bytes scale with it.
        expert_load_imbalance: tokens the busiest expert-parallel rank receives over the mean, for
            dropless routing (capacity factor 1.0); it sets that rank's expert GEMM rows and
            all-to-all bytes. 1.0 (the default): perfectly balanced, the aim of DeepSeek-V3's
            auxiliary-loss-free balancing (technical report sec. 2.1.2). Ignored with a capacity
            factor above 1 (every expert is then padded to capacity) and at ep = 1.
        etp: expert-tensor-parallel width: every routed expert's weights are split over etp
            ranks (Megatron-Core's ``expert_tensor_parallel_size``), which gather the tokens
            routed to their experts; 1 (the default) for dense models and whole experts.
        recompute_modules: what selective recomputation reruns
            (:class:`~archplace.workload.options.RecomputeModule`; names are converted): the
            layers' ``selective_*`` figures (:mod:`archplace.workload.recompute_regions`).
        expert_weighting: where the MoE layers apply the routing weights
            (:class:`~archplace.workload.options.ExpertWeighting`; a name is converted).
        loss: how the cross-entropy runs (:class:`~archplace.workload.options.Loss`; a name
            is converted; ``Loss.upcast``: the logits' upcast traced before it).
        swiglu_fp8_input: SwiGLU inputs kept in FP8 (:func:`~archplace.workload.fp8_saved.swiglu_inputs`).

    Raises:
        ConfigError: an unknown dtype, attention, kernels or recompute module, none, a capacity
            factor or load imbalance below 1 or not finite; cp > 1 with seq_len not divisible by
            2 x cp or with eager attention.
    """

    key: CostKey
    seq_len: int
    dtype: str = "bfloat16"
    training: bool = True

    @classmethod
    def of(cls, micro_batch: int, seq_len: int, *, tp: int = 1, sp: bool = False, cp: int = 1, ep: int = 1,
           etp: int = 1, **tracing: Any) -> ExtractOptions:
        """The options of the key ``CostKey(tp, micro_batch, sp, cp, ep, etp)`` at ``seq_len``,
        ``tracing`` the other fields by name.

        Raises:
            ConfigError: as the class.
        """
        return cls(CostKey(tp, micro_batch, sp, cp, ep, etp), seq_len, **tracing)

    def with_key(self, **changes: Any) -> ExtractOptions:
        """A copy whose key has ``changes`` (CostKey field names) applied."""
        return dataclasses.replace(self, key=self.key._replace(**changes))

    def identity(self) -> dict[str, Any]:
        """Every option by name, the key's fields among them (the graph cache's key of a chain)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "key"}
        return {**self.key._asdict(), **out}

    def __post_init__(self) -> None:
        object.__setattr__(self, "attention", parse_attention(self.attention))
        object.__setattr__(self, "kernels", parse_kernels(self.kernels))
        object.__setattr__(self, "expert_weighting",
                           members(ExpertWeighting, (self.expert_weighting,), "expert_weighting")[0])
        object.__setattr__(self, "loss", members(Loss, (self.loss,), "loss")[0])
        if not (isinstance(self.recompute_modules, tuple) and self.recompute_modules
                and all(isinstance(m, RecomputeModule) for m in self.recompute_modules)):
            object.__setattr__(self, "recompute_modules",
                               members(RecomputeModule, self.recompute_modules, "recompute_modules"))
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ConfigError(f"dtype must be bfloat16, float16 or float32, got {self.dtype!r}")
        if self.cp > 1 and self.seq_len % (2 * self.cp):
            raise ConfigError(f"context parallelism cp={self.cp}: the sequence length {self.seq_len} "
                              f"must be a multiple of 2 x cp = {2 * self.cp} (each sequence is cut "
                              "into 2 x cp equal chunks for causal load balancing)")
        if self.cp > 1 and self.attention is Attention.EAGER:
            raise ConfigError(f"context parallelism cp={self.cp} needs a fused attention "
                              "(flash or sdpa; ring attention runs fused kernels), not eager")
        for name in ("capacity_factor", "expert_load_imbalance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 1.0 <= value < math.inf:
                raise ConfigError(f"{name.replace('_', ' ')} must be a finite number >= 1, got {value!r}")
            object.__setattr__(self, name, float(value))

    @property
    def shards_experts(self) -> bool:
        """Whether the MoE layers differ from the traced (ep = etp = 1, balanced, unpadded) ones."""
        return (self.ep, self.etp, self.capacity_factor, self.expert_load_imbalance) != (1, 1, 1.0, 1.0)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of :attr:`dtype`."""
        return 4 if self.dtype == "float32" else 2



def traced_as(seq_len: int, key: object, tracing: object) -> ExtractOptions:
    """The :class:`ExtractOptions` at ``seq_len`` whose key is the :class:`CostKey` of ``key``'s
    same-named attributes (the micro-batch and the parallel degrees: a cost key, a plan) and
    whose every other field (but ``dtype`` and ``training``, left at their defaults) is the
    same-named attribute of ``tracing`` (how the layers are traced: a plan grid, a model spec),
    so that a new tracing option or degree reaches every caller without anyone listing it.

    Raises:
        AttributeError: a field neither object has.
        ConfigError: as :class:`ExtractOptions`.
    """
    values: dict[str, Any] = {"seq_len": seq_len,
                              "key": CostKey(*(getattr(key, name) for name in CostKey._fields))}
    for field in dataclasses.fields(ExtractOptions):
        if field.name not in values and field.name not in ("dtype", "training"):
            values[field.name] = getattr(tracing, field.name)
    return ExtractOptions(**values)


def check_tp(spec: LoadedModel, tp: int, sp: bool = False) -> None:
    """Refuse a TP width that does not divide the heads, KV heads and FFN size of ``spec`` (and
    the shared experts' width of a mixture-of-experts model), and TP > 1 without sequence
    parallelism (``sp``) for a mixture-of-experts model: Megatron-Core refuses to train one
    (``MoELayer.forward``, megatron/core/transformer/moe/moe_layer.py: "performance may
    degrade if MoE and tensor parallelism are enabled without also enabling sequence
    parallelism"), and its MoE layers take the rank's sequence-parallel share of the tokens.

    Raises:
        ConfigError: with the quantity it does not divide, or naming the sequence-parallel rule.
    """
    if tp <= 0:
        raise ConfigError(f"TP width must be positive, got {tp}")
    if tp > 1 and spec.experts and not sp:
        raise ConfigError(f"TP width {tp} without sequence parallelism: the mixture-of-experts model "
                          f"{spec.name} needs sp with tp > 1 (Megatron-Core's MoE layer refuses "
                          "tensor parallelism without sequence parallelism in training)")
    family = spec.family
    check_width(spec.config, family.heads_field, family.kv_heads_field, spec.ffn_size,
                TensorParallel(tp), spec.name)
    shared = shared_expert_width(spec)
    if shared % tp:
        raise ConfigError(f"TP width {tp} does not divide the shared experts' width {shared} of "
                          f"{spec.name} (they are sharded like a dense MLP)")


def traced_options(options: ExtractOptions) -> ExtractOptions:
    """The options of the chain that is traced for ``options``: ep = etp = 1, balanced and
    unpadded (:func:`extract_chain` derives the expert-parallel chain from it)."""
    return dataclasses.replace(options, key=options.key._replace(ep=1, etp=1), capacity_factor=1.0,
                               expert_load_imbalance=1.0)


def extract_chain(spec: LoadedModel, options: ExtractOptions) -> LayerChain:
    """Trace ``spec`` and return its layer chain embedding -> L blocks -> head + loss.

    Args:
        spec: the model.
        options: micro-batch, sequence length, dtype, TP width, SP, fusion, EP degree,
            capacity factor and load imbalance.

    Returns:
        A :class:`LayerChain` whose blocks share one traced block's graphs. Figures
        are per device (per TP, CP and EP rank: seq_len / cp tokens of each sample) and per
        micro-batch, at ``options.dtype``. The expert-parallel chain is derived from the traced
        ep = 1 one (:func:`archplace.workload.expert_parallel.shard_experts`).

    Raises:
        ConfigError: the config is rejected by transformers, a fused attention for a model
            whose code computes attention itself (:func:`~archplace.workload.zoo.check_attention`),
            the TP width does not divide the heads / KV heads / FFN size, or the EP degree does not divide the
            routed experts (or is above 1 for a dense model).
        ExtractionError: the model code cannot be traced.
    """
    check_attention(spec, options.attention)
    check_tp(spec, options.tp, options.sp)
    check_ep(spec, options.ep)
    check_etp(spec, options.etp)
    if options.shards_experts:
        return derive_experts(extract_chain(spec, traced_options(options)), options)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with warnings.catch_warnings(), quiet_torch_logging():
        warnings.simplefilter("ignore")
        try:
            model = build_model(spec, options.dtype, options.training, options.attention,
                                options.expert_weighting is ExpertWeighting.ACTIVATION)
        except ConfigError:
            raise
        except Exception as exc:  # the model code raises many types; report one line
            raise ExtractionError(f"cannot build {spec.name!r}: {type(exc).__name__}: "
                                  f"{' '.join(str(exc).split())}") from exc
        container = find_block_container(model)
        try:
            gm, param_names = trace(model, options.micro_batch, options.seq_len // options.cp,
                                    upcast_logits=options.loss.upcast)
        except Exception as exc:  # torch raises many types; report one line
            raise ExtractionError(
                f"cannot trace {spec.name!r}: {type(exc).__name__}: {' '.join(str(exc).split())}") from exc
    runs = spec.block_runs
    traced = Traced(gm, param_names, [f"m.{container}.{i}" for i in range(len(runs))])
    where = traced.attribute()
    whole = experts_op.routed_nodes(traced.calls, op_name) | latent_down_nodes(traced.calls)
    sharding = propagate(traced.calls, traced.placeholders, traced.kind, traced.storage,
                         traced.is_param, where, op_name, spec.vocab_size, spec.hidden_size,
                         TensorParallel(options.tp, options.sp), blocks=len(runs), whole=whole)
    kinds = (LayerKind.EMBEDDING, *(LayerKind.BLOCK for _ in runs), LayerKind.HEAD)
    built = [_make_layer(traced, where, sharding, index, kind, options, spec.hidden_size)
             for index, kind in enumerate(kinds)]
    (embedding, embedding_params), (head, head_params) = built[0], built[-1]
    traced_blocks = [layer for layer, _ in built[1:-1]]
    if options.attention is not Attention.EAGER:
        for block in traced_blocks:
            counts = [g.count_by_kind().get(OpKind.ATTENTION.value, 0) for g in (block.fwd, block.bwd)]
            if counts != [1, 1]:
                raise ExtractionError(
                    f"model {spec.name!r} does not route its attention through transformers' attention "
                    f"interface ({counts[0]} forward, {counts[1]} backward fused attention operators "
                    "per block); use attention='eager'")
    shared = sum(_param_numel(traced, sharding, p) for p in embedding_params & head_params)
    kinds_in_order = [block for block, run in zip(traced_blocks, runs, strict=True) for _ in range(run)]
    blocks = tuple(_rename(block, f"block.{i}") for i, block in enumerate(kinds_in_order))
    block = traced_blocks[-1]
    log.info("extracted %s (tp=%d, cp=%d): %d fwd + %d bwd operators per block", spec.name,
             options.tp, options.cp, len(block.fwd), len(block.bwd))
    return LayerChain(spec.name, options.key._replace(ep=1, etp=1), options.seq_len,
                      (embedding, *blocks, head), shared_params=shared)


def derive_experts(chain: LayerChain, options: ExtractOptions) -> LayerChain:
    """One rank's share of the mixture-of-experts layers of a traced (:func:`traced_options`)
    ``chain``: expert parallelism (:func:`archplace.workload.expert_parallel.shard_experts`),
    then the expert-tensor-parallel split (:func:`archplace.workload.expert_tensor.split_experts`).

    With padding (capacity factor above 1) or load imbalance (at ep > 1), each layer's
    ``padding_fwd_flop`` / ``padding_bwd_flop`` are its matmul FLOP beyond those of the same
    derivation at capacity factor 1 and imbalance 1 (balanced, unpadded routing): the model FLOP
    are the balanced chain's, the rest is hardware FLOP (MFU and HFU, Korthikanti et al. 2022,
    sec. 6.3; docs/model.md).

    Raises:
        ConfigError: as those two.
    """
    padded = split_experts(shard_experts(chain, options.ep, options.capacity_factor,
                                         options.expert_load_imbalance, options.dtype_bytes),
                           options.etp, options.dtype_bytes)
    if load_factor(options.ep, options.capacity_factor, options.expert_load_imbalance) == 1.0:
        return padded
    balanced = split_experts(shard_experts(chain, options.ep, 1.0, 1.0, options.dtype_bytes),
                             options.etp, options.dtype_bytes)
    layers = tuple(
        dataclasses.replace(layer, padding_fwd_flop=_matmul_flop(layer.fwd) - _matmul_flop(even.fwd),
                            padding_bwd_flop=_matmul_flop(layer.bwd) - _matmul_flop(even.bwd))
        if layer.experts else layer
        for layer, even in zip(padded.layers, balanced.layers, strict=True))
    return dataclasses.replace(padded, layers=layers)


def _matmul_flop(graph: OpGraph) -> float:
    """FLOP of the matmuls of ``graph``, 2 x batch x m x k x n each (the grouped GEMMs are the
    only operators padding changes)."""
    return float(sum(2 * op.batch * op.m * op.k * op.n for op in graph.ops if op.kind is OpKind.MATMUL))


def _rename(layer: Layer, name: str) -> Layer:
    return dataclasses.replace(layer, name=name)


def _param_numel(traced: Traced, sharding: Sharding, param: Any) -> int:
    return math.ceil(traced.param_numel[param] * sharding.tensor_factor(param))


def _split_dims(dims: tuple[int, int, int, int], split: str | None, tp: int) -> tuple[int, ...]:
    if split is None:
        return dims
    index = ("batch", "m", "k", "n").index(split)
    return tuple(math.ceil(d / tp) if i == index else d for i, d in enumerate(dims))


def _operators(traced: Traced, sharding: Sharding, nodes: Sequence[Any], phase: Phase,
               skip_masked_blocks: bool, cp: int = 1) -> list[Operator]:
    """Operators of ``nodes`` (one layer, one phase), sharded, with TP collectives inserted."""
    ops: list[Operator] = []
    produced: dict[Any, int] = {}  # storage node (or its collective) -> operator id

    def producer_id(node: Any) -> int | None:
        s = traced.storage(node)
        if s in produced:
            return produced[s]
        if s.op == "call_function" and traced.kind[s] is None:  # element of a multi-output op
            return produced.get(s.args[0])
        return None

    def collective(kind: str, tensor: Any) -> None:
        pred = producer_id(tensor)
        full = tensor_bytes(tensor.meta.get("val"))
        ops.append(Operator(
            id=len(ops), name=f"{kind}_{tensor.name}", target=kind, kind=OpKind.COLLECTIVE,
            phase=phase, batch=0, m=0, k=0, n=0, elements=first_numel(tensor.meta.get("val")),
            flop=0.0, bytes_read=full, bytes_written=full,
            preds=() if pred is None else (pred,), group=sharding.tp))
        produced[(kind, tensor)] = produced[traced.storage(tensor)] = len(ops) - 1

    for n in nodes:
        for kind, tensor in sharding.before.get(n, ()):
            if (kind, tensor) not in produced:
                collective(kind, tensor)
        ops.append(_operator(traced, sharding, n, phase, len(ops), producer_id, skip_masked_blocks, cp))
        produced[n] = len(ops) - 1
        if n in sharding.after:
            collective(sharding.after[n], n)
    return ops


def _operator(traced: Traced, sharding: Sharding, n: Any, phase: Phase, op_id: int,
              producer_id: Any, skip_masked_blocks: bool = False, cp: int = 1) -> Operator:
    kind = traced.kind[n]
    assert kind is not None
    name = op_name(n)
    gathered = {t for kind, t in sharding.before.get(n, ()) if kind == "all_gather"}
    bytes_read = 0.0
    for a in n.all_input_nodes:
        s = traced.storage(a)
        whole = min(tensor_bytes(a.meta.get("val")), tensor_bytes(s.meta.get("val")))
        whole = bytes_touched(n, name, a, whole)
        bytes_read += whole * (1.0 if s in gathered else sharding.tensor_factor(s))
    val = n.meta.get("val")
    out_factor = sharding.tensor_factor(n)
    batch = m = k = nn = 0
    preds = {p for p in (producer_id(a) for a in n.all_input_nodes) if p is not None and p < op_id}
    if kind is OpKind.ATTENTION:
        return _attention_operator(traced, sharding, n, phase, op_id, tuple(sorted(preds)),
                                   bytes_read, skip_masked_blocks, cp)
    if kind is OpKind.MATMUL:
        batch, m, k, nn = _split_dims(matmul_dims(n, name), sharding.split.get(n), sharding.tp)
        flop = 2.0 * batch * m * k * nn
        bytes_written = tensor_bytes(val) * (1.0 if sharding.split.get(n) in (None, "k") else
                                             1.0 / sharding.tp)
        elements = math.ceil(first_numel(val) * bytes_written / max(tensor_bytes(val), 1.0))
    else:
        if kind is OpKind.REDUCTION:  # work on the input elements, split as the inputs are
            work = max([first_numel(a.meta.get("val")) for a in n.all_input_nodes] or [0])
            factor = min([out_factor, *(sharding.tensor_factor(traced.storage(a))
                                        for a in n.all_input_nodes)])
        else:
            work, factor = first_numel(val), out_factor
        flop = FLOP_PER_ELEMENT[kind] * work * factor
        bytes_written = tensor_bytes(val) * out_factor
        elements = math.ceil(first_numel(val) * out_factor)
    return Operator(
        id=op_id, name=n.name, target=str(n.target), kind=kind, phase=phase,
        batch=batch, m=m, k=k, n=nn, elements=elements, flop=flop,
        bytes_read=bytes_read, bytes_written=bytes_written, preds=tuple(sorted(preds)),
    )


def _attention_operator(traced: Traced, sharding: Sharding, n: Any, phase: Phase, op_id: int,
                        preds: tuple[int, ...], bytes_read: float,
                        skip_masked_blocks: bool, cp: int = 1) -> Operator:
    """A fused attention node (forward ``(q, k, v, causal, ...)`` or backward ``(dO, q, k, v,
    O, lse, causal, ...)``) as an ``ATTENTION`` operator: batch = micro-batch x local heads,
    m = s_q, k = head dim of Q and K, n = s_kv, v_dim = V's head dim when it differs (fields of
    :class:`Operator`).  With ``cp`` > 1 the traced lengths are the rank's s/cp tokens: n
    becomes the whole sequence and the ring fields are set (CP group stride = the TP width)."""
    backward = "backward" in op_name(n)
    q, key, value = (n.args[1], n.args[2], n.args[3]) if backward else n.args[:3]
    causal = bool(n.args[6] if backward else n.args[3])
    q_val, k_val, v_val = q.meta["val"], key.meta["val"], value.meta["val"]
    b, heads, s_q, d = (int(x) for x in q_val.shape)
    s_kv, d_v = int(k_val.shape[2]), int(v_val.shape[-1])
    factor = sharding.tensor_factor(traced.storage(q))
    val = n.meta.get("val")
    ring: dict[str, Any] = {}
    if cp > 1:
        ring = {"cp": cp, "cp_stride": sharding.tp,
                "ring_bytes": sum(tensor_bytes(t.meta["val"]) * sharding.tensor_factor(traced.storage(t))
                                  for t in (key, value))}
    op = Operator(
        id=op_id, name=n.name, target=str(n.target), kind=OpKind.ATTENTION, phase=phase,
        batch=math.ceil(b * heads * factor), m=s_q, k=d, n=s_kv * cp,
        elements=math.ceil(first_numel(val) * factor), flop=0.0, bytes_read=bytes_read,
        bytes_written=tensor_bytes(val) * sharding.tensor_factor(n), preds=preds, causal=causal,
        skip_masked_blocks=skip_masked_blocks, dtype_bytes=int(q_val.element_size()),
        v_dim=d_v if d_v != d else 0, **ring,
    )
    return dataclasses.replace(op, flop=attention_flop(op))


def _make_layer(traced: Traced, where: dict[Any, tuple[int, Phase]], sharding: Sharding, index: int,
                kind: LayerKind, options: ExtractOptions, hidden_size: int) -> tuple[Layer, set[Any]]:
    """The layer ``index`` of the traced graph and the parameter placeholders it holds."""
    fuse, seq_len = options.fuse, options.seq_len // options.cp  # the rank's tokens per sample
    fused_kernels = options.kernels is Kernels.FUSED
    mine = {n for n, (layer, _) in where.items() if layer == index}
    compute = [n for n in traced.calls if n in mine and traced.kind[n] is not None]
    fwd_nodes = [n for n in compute if where[n][1] is Phase.FWD]
    bwd_nodes = [n for n in compute if where[n][1] is Phase.BWD]
    skip = options.attention is Attention.FLASH
    groups = fuse_kernels(traced, fwd_nodes, bwd_nodes, hidden_size) if fused_kernels else []
    if kind is LayerKind.HEAD:
        groups = loss_kernels(traced, fwd_nodes, bwd_nodes, groups, options.loss)
    graphs = []
    for phase, nodes in ((Phase.FWD, fwd_nodes), (Phase.BWD, bwd_nodes)):
        graph = (renumber(_operators(traced, sharding, nodes, phase, skip, options.cp)) if nodes
                 else OpGraph(()))
        if groups:
            graph = merge_groups(graph, [g.fwd if phase is Phase.FWD else g.bwd for g in groups])
        graphs.append(fuse_elementwise(graph) if fuse else graph)

    params = {traced.storage(a) for n in fwd_nodes for a in n.all_input_nodes
              if traced.is_param(traced.storage(a))}
    # Saved for backward: forward results (or non-parameter inputs) read by this layer's backward.
    saved = {traced.storage(a) for n in bwd_nodes for a in n.all_input_nodes}
    raw_saved = {s for s in saved if not traced.is_param(s) and not s.meta.get("autograd_backward")}
    saved = fused_saved(traced, raw_saved, groups) if groups else raw_saved
    inputs = {traced.storage(a) for n in fwd_nodes for a in n.all_input_nodes}
    inputs = {s for s in inputs if not traced.is_param(s) and s not in mine}
    if fused_kernels:
        # A fused causal softmax (or FlashAttention) applies the mask by index and RoPE tables
        # are shared by every layer: full recompute keeps only the hidden-state input.
        inputs = {s for s in inputs if _last_dim(s) == hidden_size}
    # Boundary: this layer's forward results read by the forward of a later layer.
    later_fwd = [n for n, (layer, phase) in where.items() if layer > index and phase is Phase.FWD]
    outputs = {traced.storage(a) for n in later_fwd for a in n.all_input_nodes}
    outputs = {s for s in outputs if s in mine}

    fp8_store = swiglu_inputs(traced, fwd_nodes) if options.swiglu_fp8_input else set()

    def total(nodes: set[Any]) -> float:
        return float(sum((float(first_numel(s.meta.get("val"))) if s in fp8_store else _saved_bytes(s))
                         * sharding.tensor_factor(s) for s in nodes))

    # Selective recompute: the modules' regions, then core_attn's s x s tensors (Korthikanti sec. 5).
    batch, modules = options.micro_batch, options.recompute_modules
    checkpointed, discarded = (
        regions([n for n in where if n in mine and where[n][1] is Phase.FWD],
                traced.block_prefixes[index - 1], modules, traced.kind)
        if kind is LayerKind.BLOCK else (set(), set()))
    kept = kept_after(traced, raw_saved, bwd_nodes, checkpointed, discarded)
    if groups:
        kept = fused_saved(traced, kept, groups)
    square = RecomputeModule.CORE_ATTN in modules and any(_is_square(s, seq_len, batch) for s in saved)
    kept = {s for s in kept if not (square and _is_square(s, seq_len, batch))}
    rerun = {n for n in fwd_nodes if (square and _is_square(n, seq_len, batch))
             or n in checkpointed or n in discarded}

    # Under FP8 the linear GEMMs' inputs are saved in FP8 (with and without the recomputation).
    fp8_saving = fp8_saving_bytes(traced, saved, bwd_nodes, _saved_bytes, sharding.tensor_factor)
    fp8_kept = (fp8_saving if kept == saved else
                fp8_saving_bytes(traced, kept, bwd_nodes, _saved_bytes, sharding.tensor_factor))
    experts = _experts(traced, sharding, fwd_nodes, options.micro_batch * seq_len)
    if kind is LayerKind.HEAD and groups:  # the loss's passes (its footprint is the grouping's)
        graphs = with_loss_traffic(graphs, groups[-1], options.loss, sharding.tensor_factor)
    working = working_set_bytes(graphs)
    layer = Layer(
        name=kind.value, kind=kind, params=sum(_param_numel(traced, sharding, p) for p in params),
        fwd=graphs[0], bwd=graphs[1], activation_bytes=total(saved), input_bytes=total(inputs),
        boundary_bytes=total(outputs), working_bytes=working,
        selective_activation_bytes=total(kept), selective_ops=tuple(n.name for n in fwd_nodes if n in rerun),
        fp8_activation_saving_bytes=fp8_saving, selective_fp8_saving_bytes=fp8_kept, **experts,
    )
    return layer, params


def _experts(traced: Traced, sharding: Sharding, fwd_nodes: Sequence[Any], tokens: int) -> dict[str, int]:
    """Layer fields of the routed experts read by the grouped GEMMs among ``fwd_nodes`` (none for a
    dense layer): experts, experts per token, tokens per expert, expert parameters, routed tokens
    (per TP rank: its 1/tp of the tokens under sequence parallelism)."""
    grouped = [n for n in fwd_nodes if op_name(n) == experts_op.FORWARD_OP]
    if not grouped:
        return {}
    weights = {traced.storage(n.args[1]) for n in grouped}
    dims = matmul_dims(grouped[0], experts_op.FORWARD_OP)
    batch, m, _, _ = _split_dims(dims, sharding.split.get(grouped[0]), sharding.tp)
    routed = int(grouped[0].args[0].meta["val"].shape[0])
    share = math.ceil(routed * sharding.tensor_factor(traced.storage(grouped[0].args[0])))
    return {"experts": batch, "experts_per_token": routed // tokens, "tokens_per_expert": m,
            "expert_params": sum(_param_numel(traced, sharding, w) for w in weights),
            "routed_tokens": share}


def _saved_bytes(node: Any) -> float:
    """Bytes of a tensor as training keeps it.  Dropout traces as ``bernoulli_`` on an
    ``empty_like`` of its input, so its mask has the activation dtype; eager PyTorch's
    ``native_dropout`` keeps a bool mask, one byte per element (as Korthikanti et al.
    2022 count it), which is what is charged here."""
    val = node.meta.get("val")
    if op_name(node) in ("div_", "mul_") and node.args and hasattr(node.args[0], "target") \
            and op_name(node.args[0]) == "bernoulli_":
        return float(first_numel(val))
    return tensor_bytes(val)


def _last_dim(node: Any) -> int:
    val = node.meta.get("val")
    shape = getattr(val, "shape", None)
    return int(shape[-1]) if shape else -1


def _is_square(node: Any, seq_len: int, micro_batch: int) -> bool:
    """Whether a node's (first) result is attention scores: sequence x sequence trailing dims
    over more leading elements than the micro-batch (b x heads, or b x heads/t). The last
    condition keeps a [b, s, h] (or [b s, h]) activation out when the hidden size equals the
    sequence length (Llama-2-70B at 8,192 tokens, h = 8,192)."""
    val = node.meta.get("val")
    if isinstance(val, tuple | list):
        val = val[0] if val else None
    shape = getattr(val, "shape", None)
    if shape is None or len(shape) < 3 or tuple(shape[-2:]) != (seq_len, seq_len):
        return False
    return math.prod(int(d) for d in shape[:-2]) > micro_batch


__all__ = ["ExtractOptions", "check_tp", "derive_experts", "extract_chain", "traced_options",
           "ExtractionError"]
