"""The bounds of :mod:`archplace.dse.bounds` for many core configurations at once, in NumPy.

:func:`design_bounds` returns, for U core configurations, exactly the :class:`DesignBound` that
:func:`~archplace.dse.bounds.design_bound` returns for each one (bit for bit;
``tests/dse/test_bounds_many.py`` checks it).  What depends on a layer graph's structure --
its ancestor and descendant sets, its order -- is computed once per graph; what depends on the
design -- every operator's two latencies -- is one array of length U per operator, from the
vectorised cost path (:meth:`~archplace.cost.systolic.SystolicCostModel.estimate_many`; the FP8
GEMMs by :func:`fp8_gemm_latencies`).

Bit-identical means the same floating-point operations in the same order per design:

* the longest paths in and out of each operator are the same max/add recurrences, one array
  operation per edge;
* the work bound of an ancestor (descendant) set is a sum in increasing operator id, starting at
  0.0 (:func:`archplace.scheduling.bounds._work_s`): here operator i's term is added, for i in
  increasing order, to the running sums of every operator whose set holds i, so each running sum
  sees the same additions in the same order;
* a chain's floor is :func:`math.fsum` of its layers' floors, per design.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from archplace.base.errors import ConfigError
from archplace.cost import batched
from archplace.cost.configs import CoreConfigArray
from archplace.cost.precision import FP8_OPERAND_BYTES, cast_bytes, fp8_gemm_estimate, is_fp8_gemm
from archplace.cost.systolic import SystolicCostModel, op_key
from archplace.cost.vector import SIMPLE_CYCLES_PER_ELEMENT
from archplace.dse.bounds import DesignBound, memory_floor_bytes
from archplace.dse.comm_floor import ChainShape, PlanLimits, plan_bounds
from archplace.hw.accelerator import Accelerator
from archplace.placement.costs import CostKey
from archplace.placement.memory import GRADIENT_BYTES_PER_PARAM
from archplace.placement.plan import Optimizer
from archplace.workload.graph import CoreType, Operator, OpGraph
from archplace.workload.layers import LayerChain, LayerKind

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class _Structure:
    """What the lower bound needs of a graph's shape (n operators).

    Attributes:
        preds: predecessors of each operator, as :class:`~archplace.scheduling.problem.SchedOp`
            holds them (sorted, distinct).
        succs: successors of each operator, ascending.
        below: ``below[i]``: ids of the operators that have i among their ancestors (i's
            descendants), ascending.
        above: ``above[i]``: ids of the operators that have i among their descendants (i's
            ancestors), ascending.
        tensor, vector: which operators hold a tensor (vector) core in single mode.
    """

    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    below: tuple[IntArray, ...]
    above: tuple[IntArray, ...]
    tensor: tuple[bool, ...]
    vector: tuple[bool, ...]

    @classmethod
    def of(cls, graph: OpGraph) -> _Structure:
        ops = graph.ops
        n = len(ops)
        preds = []
        for i, op in enumerate(ops):
            if op.id != i:
                raise ConfigError(f"schedule problem: op with id {op.id} at position {i}")
            if not isinstance(op.core_type, CoreType):
                raise ConfigError(f"op {op.id}: core type {op.core_type!r} is not supported by the scheduler "
                                  f"(tensor, vector or fused)")
            these = tuple(sorted(set(op.preds)))
            if any(not 0 <= p < i for p in these):
                raise ConfigError(f"op {op.id}: predecessors {these} must be in [0, {i})")
            preds.append(these)
        succs: list[list[int]] = [[] for _ in range(n)]
        for i, these in enumerate(preds):
            for p in these:
                succs[p].append(i)
        ancestors = [0] * n
        for i, these in enumerate(preds):
            for p in these:
                ancestors[i] |= ancestors[p] | (1 << p)
        below: list[list[int]] = [[] for _ in range(n)]
        above: list[list[int]] = [[] for _ in range(n)]
        for j in range(n):
            for i in range(j):
                if ancestors[j] >> i & 1:
                    below[i].append(j)
                    above[j].append(i)
        fused = CoreType.FUSED
        return cls(tuple(preds), tuple(tuple(s) for s in succs),
                   tuple(np.array(b, dtype=np.int64) for b in below),
                   tuple(np.array(a, dtype=np.int64) for a in above),
                   tuple(op.core_type in (CoreType.TENSOR, fused) for op in ops),
                   tuple(op.core_type in (CoreType.VECTOR, fused) for op in ops))


def graph_floors_s(structure: _Structure, single_s: FloatArray, all_s: FloatArray,
                   tensor_cores: IntArray, vector_cores: IntArray) -> FloatArray:
    """:func:`archplace.scheduling.bounds.lower_bound_s` of one graph on U designs, bit for bit.

    Args:
        structure: the graph's shape (n operators, n >= 1).
        single_s, all_s: (n, U) latencies of each operator on each design (s).
        tensor_cores, vector_cores: (U,) core counts.

    Returns:
        (U,) lower bounds of the makespan (s).
    """
    n, count = single_s.shape
    min_s = np.minimum(single_s, all_s)
    terms = {}
    for name, cores, flags in (("tensor", tensor_cores, structure.tensor),
                               ("vector", vector_cores, structure.vector)):
        terms[name] = (np.minimum(single_s / cores, all_s), flags)
    path_in = np.zeros((n, count))
    for i, these in enumerate(structure.preds):
        for p in these:
            np.maximum(path_in[i], path_in[p] + min_s[p], out=path_in[i])
    path_out = np.zeros((n, count))
    for i in range(n - 1, -1, -1):
        for s in structure.succs[i]:
            np.maximum(path_out[i], path_out[s] + min_s[s], out=path_out[i])
    work_in = {name: np.zeros((n, count)) for name in terms}
    work_out = {name: np.zeros((n, count)) for name in terms}
    total = {name: np.zeros(count) for name in terms}
    for name, (term, flags) in terms.items():
        for i in range(n):
            if not flags[i]:
                continue
            total[name] += term[i]
            below, above = structure.below[i], structure.above[i]
            if len(below):
                work_in[name][below] += term[i]
            if len(above):
                work_out[name][above] += term[i]
    heads = np.maximum(path_in, np.maximum(work_in["tensor"], work_in["vector"]))
    tails = np.maximum(path_out, np.maximum(work_out["tensor"], work_out["vector"]))
    through = (heads + min_s + tails).max(axis=0)
    result: FloatArray = np.maximum(through, np.maximum(total["tensor"], total["vector"]))
    return result


def fp8_gemm_latencies(op: Operator, accs: Sequence[Accelerator], configs: CoreConfigArray,
                       speedup: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(single_s, all_s) of :func:`~archplace.cost.precision.fp8_gemm_estimate` of the FP8 GEMM
    ``op`` on each design (bit for bit), for designs that do not declare an efficiency (those are
    costed one by one by the scalar function).

    Args:
        op: a linear layer's GEMM (:func:`~archplace.cost.precision.is_fp8_gemm`).
        accs: the U designs (each with FP8 tensor cores).
        configs: their columns.
        speedup: (U,) each design's ``fp8_speedup``.
    """
    count = len(accs)
    single = np.zeros(count)
    every = np.zeros(count)
    b, m, k, n = op.batch, op.m, op.k, op.n
    if b > 0 and m > 0 and k > 0 and n > 0:
        single, every = _fp8_gemm(op, configs, speedup)
    cast_s = cast_bytes(op) / configs.hbm_bandwidth_bytes_per_s
    single = single + cast_s
    every = every + cast_s
    if configs.efficiencies:
        for i, acc in enumerate(accs):
            if acc.efficiency is not None:
                one = fp8_gemm_estimate(op, acc)
                single[i], every[i] = one.single_core_s, one.all_cores_s
    return single, every


def _fp8_gemm(op: Operator, configs: CoreConfigArray, speedup: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The GEMM part of :func:`fp8_gemm_latencies` (:func:`archplace.cost.systolic.matmul_estimate`
    with 1-byte operands, the output and traced bytes at the design's width, the cycles sped up)."""
    b, m, k, n = op.batch, op.m, op.k, op.n
    rows, cols, cores = configs.array_rows, configs.array_cols, configs.tensor_cores
    os_, clock, bw = configs.output_stationary, configs.clock_hz, configs.hbm_bandwidth_bytes_per_s
    e = FP8_OPERAND_BYTES
    width = configs.bytes_per_element
    tasks = batched.task_count(b, m, k, n, rows, cols, os_)
    cap = batched.buffer_elements(configs.buffer_bytes, np.full(len(rows), e, dtype=np.int64))
    traffic = batched.matmul_hbm_elements(b, m, k, n, rows, cols, cap)
    extra = np.maximum(0.0, (op.bytes_read + op.bytes_written) - width * (b * (m * k + k * n + m * n)))
    hbm_bytes = e * traffic + extra
    hbm_bytes = np.where(width != e, hbm_bytes + (width - e) * (b * m * n), hbm_bytes)
    memory_s = hbm_bytes / bw
    exposed_s = e * batched.exposed_elements(m, k, n, rows, cols, os_) / bw
    rate = np.where(speedup == 1.0, clock, clock * speedup)
    single_cyc, all_cyc = batched.matmul_cycles(b, m, k, n, rows, cols, cores, os_, configs.scalesim_timing)
    compute_single = single_cyc / rate + exposed_s
    compute_all = all_cyc / rate + exposed_s * np.minimum(cores, tasks)
    fused = int(op.fused_elements or 0)
    if fused > 0:
        lanes = configs.vector_lanes
        compute_single = np.maximum(compute_single, batched.vector_cycles(
            fused, lanes, 1, SIMPLE_CYCLES_PER_ELEMENT) / clock)
        compute_all = np.maximum(compute_all, batched.vector_cycles(
            fused, lanes, configs.vector_cores, SIMPLE_CYCLES_PER_ELEMENT) / clock)
    return np.maximum(compute_single, memory_s), np.maximum(compute_all, memory_s)


class _Latencies:
    """Each operator's (single_s, all_s) on the U designs, costed once per operator and precision."""

    def __init__(self, accs: Sequence[Accelerator], cost: SystolicCostModel) -> None:
        self.accs = accs
        self.cost = cost
        self.configs = CoreConfigArray.from_accelerators(accs)
        self.speedup = np.array([float(a.fp8_speedup or 1.0) for a in accs])
        self._seen: dict[tuple[object, ...], tuple[FloatArray, FloatArray]] = {}

    def of(self, op: Operator, fp8: bool) -> tuple[FloatArray, FloatArray]:
        fp8 = fp8 and is_fp8_gemm(op)
        key = (fp8, op_key(op))
        found = self._seen.get(key)
        if found is None:
            if fp8:
                found = fp8_gemm_latencies(op, self.accs, self.configs, self.speedup)
            else:
                found = self.cost.latency_many(op, self.configs)
            self._seen[key] = found
        return found


def _graph_floor(graph: OpGraph, latencies: _Latencies, fp8: bool, shapes: dict[int, _Structure],
                 count: int) -> FloatArray:
    if not graph.ops:
        return np.zeros(count)
    structure = shapes.get(id(graph))
    if structure is None:
        structure = shapes[id(graph)] = _Structure.of(graph)
    pairs = [latencies.of(op, fp8) for op in graph.ops]
    single = np.stack([p[0] for p in pairs])
    every = np.stack([p[1] for p in pairs])
    bad = ~(np.isfinite(single) & np.isfinite(every) & (single >= 0) & (every >= 0))
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        raise ConfigError(f"op {i}: latencies must be finite and >= 0, got "
                          f"({single[i, j]!r}, {every[i, j]!r}) on {latencies.accs[j].name or 'a design'}")
    configs = latencies.configs
    return graph_floors_s(structure, single, every, configs.tensor_cores, configs.vector_cores)


def chain_floors_s(chain: LayerChain, latencies: _Latencies, fp8: bool,
                   shapes: dict[int, _Structure] | None = None) -> FloatArray:
    """:func:`archplace.dse.bounds.chain_floor_s` on each of the U designs of ``latencies``
    (with ``fp8``: every layer but the head at FP8), bit for bit; (U,) seconds."""
    shapes = {} if shapes is None else shapes
    count = len(latencies.accs)
    per_graph: dict[tuple[int, bool], FloatArray] = {}

    def floor(graph: OpGraph, at_fp8: bool) -> FloatArray:
        key = (id(graph), at_fp8)
        if key not in per_graph:
            per_graph[key] = _graph_floor(graph, latencies, at_fp8, shapes, count)
        return per_graph[key]

    columns = []
    for layer in chain.layers:
        at_fp8 = fp8 and layer.kind is not LayerKind.HEAD
        columns.append(floor(layer.fwd, at_fp8) + floor(layer.bwd, at_fp8))
    if not columns:
        return np.zeros(count)
    table = np.column_stack(columns).tolist()
    return np.array([math.fsum(row) for row in table], dtype=np.float64)


def design_bounds(accs: Sequence[Accelerator], chains: Mapping[CostKey, LayerChain], devices: int,
                  cost: SystolicCostModel, optimizer: Optimizer = Optimizer.ADAM,
                  grad_bytes: int = GRADIENT_BYTES_PER_PARAM, *, fp8: bool = False,
                  bf16: bool = True, limits: PlanLimits | None = None) -> list[DesignBound]:
    """:func:`archplace.dse.bounds.design_bound` of each of ``accs`` (U core configurations),
    equal bit for bit; ``fp8`` stands for its ``fp8_cost`` (an
    :class:`~archplace.cost.precision.Fp8CostModel` around ``cost``), ``limits`` as there.

    Raises:
        ValueError: ``chains`` is empty.
        ConfigError: an operator whose latency is not finite.
    """
    if not chains:
        raise ValueError("design_bound needs at least one layer chain")
    if not accs:
        return []
    floor_bytes = memory_floor_bytes(chains, devices, optimizer, grad_bytes)
    with_fp8 = np.array([a.fp8_speedup is not None for a in accs]) if fp8 else np.zeros(len(accs), dtype=bool)
    per_device = np.zeros(len(accs))
    rate = np.zeros(len(accs))
    latencies = _Latencies(accs, cost)
    fp8_index = np.flatnonzero(with_fp8)
    fp8_latencies = _Latencies([accs[i] for i in fp8_index.tolist()], cost) if len(fp8_index) else None
    shapes: dict[int, _Structure] = {}
    for key, chain in chains.items():
        floors: list[tuple[FloatArray, IntArray | None]] = []
        if bf16:
            floors.append((chain_floors_s(chain, latencies, False, shapes), None))
        if fp8_latencies is not None:
            floors.append((chain_floors_s(chain, fp8_latencies, True, shapes), fp8_index))
        if limits is not None:
            fastest = np.full(len(accs), math.inf)
            for floor_s, index in floors:
                if index is None:
                    fastest = np.minimum(fastest, floor_s)
                else:
                    fastest[index] = np.minimum(fastest[index], floor_s)
            key_rate, key_per_device = plan_bounds(fastest, CostKey.of(key), ChainShape.of(chain.layers),
                                                   limits)
            np.maximum(rate, key_rate, out=rate)
            np.maximum(per_device, key_per_device, out=per_device)
            continue
        tp, micro_batch = key[0], key[1]
        for floor_s, index in floors:
            positive = np.where(floor_s <= 0, 1.0, floor_s)
            value = np.where(floor_s <= 0, math.inf, micro_batch / (tp * positive))
            if index is None:
                np.maximum(per_device, value, out=per_device)
            else:
                per_device[index] = np.maximum(per_device[index], value)
    if limits is None:
        rate = per_device * devices
    return [DesignBound(float(r), float(v), floor_bytes)
            for r, v in zip(rate.tolist(), per_device.tolist(), strict=True)]
