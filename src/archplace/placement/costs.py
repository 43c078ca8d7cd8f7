"""Layer costs for placement: a layer chain on one chip -> one :class:`LayerCost` per layer.

Each distinct layer graph (the repeated blocks share one) is scheduled once on
the chip's cores; its makespan is the layer's forward or backward time per
micro-batch.  The part of it spent in TP collectives, the part spent in the expert-parallel
all-to-alls (collectives whose target is ``all_to_all``), and the time selective
recomputation needs to re-run the attention core, are attributed here too. Under the framework's
``ep_comm_overlap`` a layer's two passes are priced as a pair run beside another micro-batch's
(:mod:`archplace.placement.ep_overlap`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from archplace.cost.model import CostModel, EstimatingCostModel, array_flop
from archplace.cost.precision import fp8_weight_params
from archplace.hw.accelerator import Accelerator
from archplace.placement.ep_overlap import paired_passes
from archplace.placement.interference import Interference
from archplace.placement.plan import CostKey, LayerCost
from archplace.placement.tp_overlap import overlapped_tp
from archplace.scheduling.list_scheduler import list_schedule_makespan_s
from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.expert_parallel import ALL_TO_ALL
from archplace.workload.graph import OpGraph, OpKind, renumber
from archplace.workload.layers import Layer, LayerChain, LayerKind

Makespan = Callable[[ScheduleProblem], float]


def list_makespan_s(problem: ScheduleProblem) -> float:
    """Makespan of the critical-path list schedule, in seconds (the default scheduler)."""
    return list_schedule_makespan_s(problem)


@dataclass(frozen=True)
class _GraphTimes:
    makespan_s: float
    collective_s: float
    ep_collective_s: float = 0.0
    ring_s: float = 0.0
    ep_wire_bytes: float = 0.0


def _ring_exposed_s(model: CostModel, graph: OpGraph, acc: Accelerator) -> float:
    """Exposed ring-attention communication of the graph's attention operators under context
    parallelism (their estimates' ``communication_s``, :func:`archplace.cost.attention.with_ring`);
    0 without CP, or for a cost model that reports no communication (not an
    :class:`~archplace.cost.model.EstimatingCostModel`)."""
    if not isinstance(model, EstimatingCostModel):
        return 0.0
    return float(sum(model.estimate(op, acc).communication_s for op in graph.ops
                     if op.kind is OpKind.ATTENTION and op.cp > 1))


def _subgraph(graph: OpGraph, names: Iterable[str]) -> OpGraph:
    """Operators of ``graph`` named in ``names`` (or having one of them fused in)."""
    wanted = set(names)
    return renumber([op for op in graph.ops if op.name in wanted or wanted.intersection(op.fused)])


def layer_costs(chain: LayerChain, acc: Accelerator, cost: CostModel,
                makespan: Makespan = list_makespan_s, *,
                fp8_cost: CostModel | None = None) -> list[LayerCost]:
    """One :class:`LayerCost` per layer of ``chain`` on ``acc`` (per micro-batch, per device).

    Args:
        chain: layers for one (micro-batch, sequence, TP width).
        acc: the chip.
        cost: per-operator cost model (with a cluster when the graphs hold TP collectives).
        makespan: scheduler giving a layer graph's makespan (default: list scheduler).
        fp8_cost: FP8 training (:class:`archplace.cost.precision.Fp8CostModel`): every layer but
            the head (the LM head stays bf16, :mod:`archplace.cost.precision`) is costed by it,
            ``fp8_params`` counts the weights of its FP8 GEMMs, and its saved bytes lose its
            ``fp8_activation_saving_bytes`` (GEMM inputs kept in FP8,
            :mod:`archplace.workload.fp8_saved`); None: bf16.

    Returns:
        Layer costs in chain order. ``tp_comm_*_s`` is the TP collectives' summed latency
        (at most the makespan); ``ep_comm_*_s`` the expert all-to-alls' (at most what the TP
        share leaves of the makespan); ``cp_comm_*_s`` the exposed ring-attention communication
        of a chain traced with context parallelism (at most what the TP and EP shares leave);
        ``expert_params`` the routed experts' parameters the layer holds per rank
        (:attr:`archplace.workload.layers.Layer.expert_params`);
        ``selective_recompute_s`` the makespan of the forward operators selective recomputation
        reruns (``selective_ops``: the recompute modules') and ``selective_recompute_flop``
        their matmul FLOP (for HFU);
        ``fwd_flop`` / ``bwd_flop`` the FLOP of the matmuls (:func:`archplace.cost.model.array_flop`,
        what MFU counts) less the expert padding, which ``padding_fwd_flop`` /
        ``padding_bwd_flop`` hold (:attr:`archplace.workload.layers.Layer.padding_fwd_flop`; HFU
        counts it).
    """
    times: dict[tuple[int, bool], _GraphTimes] = {}
    overlap = acc.efficiency is not None and acc.efficiency.tp_comm_overlap
    ep_overlap = acc.efficiency is not None and acc.efficiency.ep_comm_overlap
    interference = Interference.of(acc)
    sm_share = interference.sm_share
    backward_graphs = {id(layer.bwd) for layer in chain.layers}

    def graph_times(graph: OpGraph, fp8: bool = False) -> _GraphTimes:
        key = (id(graph), fp8)
        if key not in times:
            if not graph.ops:
                times[key] = _GraphTimes(0.0, 0.0, 0.0)
            else:
                model = fp8_cost if fp8 and fp8_cost is not None else cost
                problem = ScheduleProblem.from_graph(graph, acc, model)
                span = makespan(problem)
                tp_ops = [op.id for op in graph.ops
                          if op.kind is OpKind.COLLECTIVE and op.target != ALL_TO_ALL]
                comm = sum((problem.ops[i].single_s for i in tp_ops), 0.0)
                if overlap and tp_ops:  # userbuffers: each hides behind its GEMMs (tp_overlap)
                    hidden = overlapped_tp(graph, [p.single_s for p in problem.ops], tp_ops=tp_ops,
                                           backward=id(graph) in backward_graphs, sm_share=sm_share)
                    cut = min(comm, span)
                    span = span - cut + min(cut, hidden.exposed_s) + hidden.slowed_s
                    comm = min(cut, hidden.exposed_s)
                a2a = [(p, op) for p, op in zip(problem.ops, graph.ops, strict=True)
                       if op.kind is OpKind.COLLECTIVE and op.target == ALL_TO_ALL]
                ep_comm = sum((p.single_s for p, _ in a2a), 0.0)
                # bytes an all-to-all of a b-byte buffer over g ranks sends on a device's links
                wire = sum((op.bytes_read * (op.group - 1) / op.group for _, op in a2a if op.group > 1), 0.0)
                ring = _ring_exposed_s(model, graph, acc)
                tp_s = min(comm, span)
                ep_s = min(ep_comm, span - tp_s)
                times[key] = _GraphTimes(span, tp_s, ep_s, min(ring, span - tp_s - ep_s), wire)
        return times[key]

    selective: dict[tuple[int, bool], tuple[float, float]] = {}

    def selective_core(layer: Layer, fp8: bool) -> tuple[float, float]:
        """(makespan s, tensor-core FLOP) of the attention core selective recompute reruns."""
        key = (id(layer.fwd), fp8)
        if key not in selective:
            core = _subgraph(layer.fwd, layer.selective_ops) if layer.selective_ops else OpGraph(())
            selective[key] = ((graph_times(core, fp8).makespan_s, array_flop(core.ops)) if core.ops
                              else (0.0, 0.0))
        return selective[key]

    flop: dict[int, float] = {}

    def matmul_flop(graph: OpGraph) -> float:
        """:func:`array_flop` of a graph, once per graph (the repeated blocks share theirs)."""
        found = flop.get(id(graph))
        if found is None:
            found = flop[id(graph)] = array_flop(graph.ops)
        return found

    out = []
    for layer in chain.layers:
        fp8 = fp8_cost is not None and layer.kind is not LayerKind.HEAD
        fwd, bwd = graph_times(layer.fwd, fp8), graph_times(layer.bwd, fp8)
        recompute_s, recompute_flop = selective_core(layer, fp8)
        saving = layer.fp8_activation_saving_bytes if fp8 else 0.0  # GEMM inputs kept in FP8
        selective_saving = (layer.selective_fp8_saving_bytes or 0.0) if fp8 else 0.0
        fwd_s, bwd_s = fwd.makespan_s, bwd.makespan_s
        ep_fwd_s, ep_bwd_s = fwd.ep_collective_s, bwd.ep_collective_s
        hidden_s = slowed_s = 0.0
        if ep_overlap:  # the passes run beside another micro-batch's (ep_overlap)
            lost = float(interference.lost_for_wire_s(ep_fwd_s + ep_bwd_s,
                                                      fwd.ep_wire_bytes + bwd.ep_wire_bytes))
            pair = paired_passes(fwd_s, bwd_s, ep_fwd_s, ep_bwd_s, lost)
            fwd_s, bwd_s, ep_fwd_s, ep_bwd_s = pair.fwd_s, pair.bwd_s, pair.ep_fwd_s, pair.ep_bwd_s
            hidden_s, slowed_s = pair.hidden_s, pair.slowed_s
        out.append(LayerCost(
            name=layer.name, fwd_s=fwd_s, bwd_s=bwd_s, params=layer.params,
            activation_bytes=layer.activation_bytes - saving, input_bytes=layer.input_bytes,
            boundary_bytes=layer.boundary_bytes, working_bytes=layer.working_bytes,
            fwd_flop=max(0.0, matmul_flop(layer.fwd) - layer.padding_fwd_flop),
            bwd_flop=max(0.0, matmul_flop(layer.bwd) - layer.padding_bwd_flop),
            padding_fwd_flop=layer.padding_fwd_flop, padding_bwd_flop=layer.padding_bwd_flop,
            selective_activation_bytes=layer.selective_activation_bytes - selective_saving,
            selective_recompute_s=recompute_s, selective_recompute_flop=recompute_flop,
            tp_comm_fwd_s=fwd.collective_s, tp_comm_bwd_s=bwd.collective_s,
            cp_comm_fwd_s=fwd.ring_s, cp_comm_bwd_s=bwd.ring_s,
            fp8_params=fp8_weight_params(layer.fwd.ops) if fp8 else 0,
            expert_params=layer.expert_params, ep_comm_fwd_s=ep_fwd_s, ep_comm_bwd_s=ep_bwd_s,
            ep_comm_hidden_s=hidden_s, ep_overlap_slowed_s=slowed_s,
        ))
    return out


def costs_by_key(chains: Mapping[CostKey, LayerChain], acc: Accelerator, cost: CostModel,
                 makespan: Makespan = list_makespan_s, *, fp8_cost: CostModel | None = None
                 ) -> dict[CostKey, list[LayerCost]]:
    """:func:`layer_costs` of every chain, keyed like ``chains`` by :class:`CostKey` (TP, micro-batch,
    SP, CP, EP, expert-TP)."""
    return {key: layer_costs(chain, acc, cost, makespan, fp8_cost=fp8_cost) for key, chain in chains.items()}
