"""Per-layer and per-matmul estimates: what ``archplace estimate`` prints.

Layer figures (for one micro-batch, per device of the TP group):

* ``single_core_s``: the layer's operators one after the other, each on ONE core
  of its type (Σ single-core latencies);
* ``all_cores_s``: one after the other, each on ALL cores of its type (Σ all-core
  latencies) -- what a chip that parallelises inside operators only achieves;
  the per-layer scheduler (scheduling/) overlaps operators and does better;
* ``bound``: the bound (compute, memory, communication) of the operators that
  take most of ``all_cores_s``;
* ``energy_j``: dynamic energy of the operators plus static power x ``all_cores_s``
  (:mod:`archplace.hw.power`);
* ``mfu``: the FLOP of the layer's matmuls / (``all_cores_s`` x peak FLOP/s): the peak counts
  the systolic arrays only, so the vector cores' work is left out of the numerator
  (:func:`archplace.cost.model.array_flop`); it is at most 1, since no matmul runs faster than
  all the arrays' MACs (checked: :class:`~archplace.base.errors.InternalError` otherwise);
* ``achieved_flop_per_s``: all the FLOP of the pass / ``all_cores_s``, and ``fraction_of_peak``
  that over the chip's peak; the same two figures per operator (``ops``).

A chip whose preset declares its efficiency (``efficiency`` section) is costed by
:mod:`archplace.cost.efficiency` (what cuBLAS, FlashAttention and NCCL sustain); any other
design runs on the cycle model, whose counts give its efficiency.  ``efficiency_model`` says which.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from archplace.base import limits
from archplace.base.errors import ConfigError, InternalError
from archplace.cost import gemm
from archplace.cost.model import EstimatingCostModel, array_flop
from archplace.cost.systolic import SystolicCostModel, matmul_estimate
from archplace.cost.types import Bound
from archplace.hw.accelerator import Accelerator, ArrayTiming, Dataflow, enum_member
from archplace.hw.cluster import Cluster
from archplace.hw.power import static_power_w
from archplace.workload.graph import OpGraph
from archplace.workload.layers import LayerChain

DECLARED = "declared"
CYCLE = "cycle"
EFFICIENCY_NOTES = {
    DECLARED: "declared efficiency (the preset's efficiency section: cuBLAS, FlashAttention, NCCL)",
    CYCLE: "cycle model (no declared efficiency: the cycle counts give it)",
}


@dataclass(frozen=True, slots=True)
class OpFigures:
    """One operator of a pass: its all-cores latency and what it achieves.

    Attributes:
        name, target, kind: the operator.
        all_cores_s: latency on all cores of its type, seconds.
        flop: its FLOP.
        achieved_flop_per_s: ``flop / all_cores_s`` (0 for a zero-time operator).
        fraction_of_peak: that over the chip's peak FLOP/s.
        bound: what limits it.
    """

    name: str
    target: str
    kind: str
    all_cores_s: float
    flop: float
    achieved_flop_per_s: float
    fraction_of_peak: float
    bound: Bound

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["bound"] = self.bound.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpFigures:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["name"]), str(data["target"]), str(data["kind"]), float(data["all_cores_s"]),
                   float(data["flop"]), float(data["achieved_flop_per_s"]), float(data["fraction_of_peak"]),
                   Bound(data["bound"]))


def _rate(flop: float, seconds: float) -> float:
    return flop / seconds if seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PhaseEstimate:
    """One layer's forward or backward pass (module docstring for the figures).

    Attributes:
        single_core_s, all_cores_s: seconds.
        bound: what limits most of ``all_cores_s``.
        seconds_by_bound: ``all_cores_s`` split by the operators' bounds.
        energy_j: dynamic + static energy, joules.
        flop: FLOP of the pass (matmuls and vector work).
        hbm_bytes: bytes moved between HBM and the chip.
        mfu: matmul FLOP / ``(all_cores_s · peak)``, 0 for an empty pass; in [0, 1].
        array_flop: FLOP of the pass's matmuls (:func:`archplace.cost.model.array_flop`).
        achieved_flop_per_s: ``flop / all_cores_s``; fraction_of_peak: that over the peak.
        ops: per-operator figures, in graph order.
    """

    single_core_s: float
    all_cores_s: float
    bound: Bound
    seconds_by_bound: dict[str, float]
    energy_j: float
    flop: float
    hbm_bytes: float
    mfu: float
    array_flop: float = 0.0
    achieved_flop_per_s: float = 0.0
    fraction_of_peak: float = 0.0
    ops: tuple[OpFigures, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["bound"] = self.bound.value
        d["ops"] = [o.to_dict() for o in self.ops]
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseEstimate:
        """Inverse of :meth:`to_dict`."""
        return cls(float(data["single_core_s"]), float(data["all_cores_s"]), Bound(data["bound"]),
                   {str(k): float(v) for k, v in data["seconds_by_bound"].items()}, float(data["energy_j"]),
                   float(data["flop"]), float(data["hbm_bytes"]), float(data["mfu"]),
                   float(data.get("array_flop", 0.0)), float(data.get("achieved_flop_per_s", 0.0)),
                   float(data.get("fraction_of_peak", 0.0)),
                   tuple(OpFigures.from_dict(o) for o in data.get("ops", ())))


@dataclass(frozen=True, slots=True)
class LayerEstimate:
    """A layer (or ``count`` identical layers, e.g. the transformer blocks)."""

    name: str
    count: int
    fwd: PhaseEstimate
    bwd: PhaseEstimate

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return {"name": self.name, "count": self.count, "fwd": self.fwd.to_dict(),
                "bwd": self.bwd.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerEstimate:
        """Inverse of :meth:`to_dict`."""
        return cls(str(data["name"]), int(data["count"]), PhaseEstimate.from_dict(data["fwd"]),
                   PhaseEstimate.from_dict(data["bwd"]))


@dataclass(frozen=True, slots=True)
class ModelEstimate:
    """Per-layer estimates of a model's layer chain on one accelerator.

    Attributes:
        model, hardware: names.
        tp, micro_batch, seq_len: what the chain was traced for.
        peak_flop_per_s: the accelerator's peak.
        layers: distinct layers in chain order (identical blocks collapsed, ``count`` > 1).
        efficiency_model: ``"declared"`` (the preset's efficiency section) or ``"cycle"``.
    """

    model: str
    hardware: str
    tp: int
    micro_batch: int
    seq_len: int
    peak_flop_per_s: float
    layers: tuple[LayerEstimate, ...]
    efficiency_model: str = CYCLE

    def total(self, phase: str, field: str) -> float:
        """Σ over the chain (counts included) of a phase's field, e.g. ``total("fwd", "all_cores_s")``."""
        return sum(layer.count * getattr(getattr(layer, phase), field) for layer in self.layers)

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the fields, the layers, and chain totals per phase."""
        totals: dict[str, Any] = {}
        for phase in ("fwd", "bwd"):
            seconds = self.total(phase, "all_cores_s")
            flop = self.total(phase, "flop")
            matmul = self.total(phase, "array_flop")
            totals[phase] = {
                "single_core_s": self.total(phase, "single_core_s"), "all_cores_s": seconds,
                "energy_j": self.total(phase, "energy_j"), "flop": flop,
                "mfu": utilisation("MFU", matmul, seconds * self.peak_flop_per_s),
                "achieved_flop_per_s": _rate(flop, seconds),
                "fraction_of_peak": _rate(flop, seconds) / self.peak_flop_per_s,
            }
        return {"model": self.model, "hardware": self.hardware, "tp": self.tp,
                "micro_batch": self.micro_batch, "seq_len": self.seq_len,
                "peak_flop_per_s": self.peak_flop_per_s, "efficiency_model": self.efficiency_model,
                "efficiency_note": EFFICIENCY_NOTES[self.efficiency_model],
                "layers": [layer.to_dict() for layer in self.layers], "total": totals}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelEstimate:
        """Inverse of :meth:`to_dict` (``efficiency_note`` and ``total`` are derived).

        Raises:
            ConfigError: a missing or invalid field.
        """
        try:
            efficiency = str(data.get("efficiency_model", CYCLE))
            if efficiency not in EFFICIENCY_NOTES:
                raise ValueError(f"efficiency_model must be {DECLARED!r} or {CYCLE!r}, got {efficiency!r}")
            return cls(str(data["model"]), str(data["hardware"]), int(data["tp"]), int(data["micro_batch"]),
                       int(data["seq_len"]), float(data["peak_flop_per_s"]),
                       tuple(LayerEstimate.from_dict(layer) for layer in data["layers"]), efficiency)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"invalid model estimate: {exc}") from None


def utilisation(what: str, done: float, capacity: float) -> float:
    """``done / capacity`` (0 when the capacity is 0), a fraction of the peak that cannot exceed 1.

    Raises:
        InternalError: the ratio exceeds 1 (beyond rounding): the cost model ran work faster than
            the hardware's peak, a bug.
    """
    if capacity <= 0:
        return 0.0
    ratio = done / capacity
    if not ratio <= 1.0 + 1e-9:
        raise InternalError(f"{what} {ratio:.6g} > 1: {done:.6g} done against a capacity of "
                            f"{capacity:.6g} (a bug in the cost model)")
    return min(ratio, 1.0)


def estimate_graph(graph: OpGraph, acc: Accelerator, cost: EstimatingCostModel) -> PhaseEstimate:
    """:class:`PhaseEstimate` of one layer graph on ``acc`` (module docstring).

    Raises:
        ConfigError: as the cost model (e.g. a collective without a cluster).
    """
    single = every = energy = hbm = 0.0
    by_bound = {b.value: 0.0 for b in Bound}
    rows: list[OpFigures] = []
    peak = acc.peak_flop_per_s
    for op in graph.ops:
        est = cost.estimate(op, acc)
        rate = _rate(op.flop, est.all_cores_s)
        rows.append(OpFigures(op.name, op.target, op.kind.value, est.all_cores_s, op.flop, rate,
                              rate / peak, est.bound_all))
        single += est.single_core_s
        every += est.all_cores_s
        energy += est.energy_j
        hbm += est.hbm_bytes
        by_bound[est.bound_all.value] += est.all_cores_s
    bound = Bound(max(by_bound, key=lambda b: by_bound[b]))
    energy += static_power_w(acc) * every
    matmul = array_flop(graph.ops)
    mfu = utilisation("MFU", matmul, every * acc.peak_flop_per_s)
    rate = _rate(graph.flop, every)
    return PhaseEstimate(single, every, bound, by_bound, energy, graph.flop, hbm, mfu, matmul, rate,
                         rate / peak, tuple(rows))


def estimate_layers(chain: LayerChain, acc: Accelerator, cost: EstimatingCostModel | None = None,
                    cluster: Cluster | None = None) -> ModelEstimate:
    """Estimate every distinct layer of ``chain`` on ``acc``.

    Args:
        chain: the model's layer chain (blocks sharing one graph are estimated once).
        acc: the accelerator.
        cost: the cost model (default: ``SystolicCostModel(cluster)``).
        cluster: links for TP collectives (only used to build the default cost model).

    Raises:
        ConfigError: as :func:`estimate_graph`.
    """
    model = cost if cost is not None else SystolicCostModel(cluster)
    layers: list[LayerEstimate] = []
    index: dict[tuple[int, int], int] = {}
    for layer in chain.layers:
        key = (id(layer.fwd), id(layer.bwd))
        if key in index:
            i = index[key]
            layers[i] = dataclasses.replace(layers[i], count=layers[i].count + 1)
            continue
        index[key] = len(layers)
        name = "block" if layer.kind.value == "block" else layer.name
        layers.append(LayerEstimate(name, 1, estimate_graph(layer.fwd, acc, model),
                                    estimate_graph(layer.bwd, acc, model)))
    return ModelEstimate(chain.model, acc.name, chain.tp, chain.micro_batch, chain.seq_len,
                         acc.peak_flop_per_s, tuple(layers),
                         CYCLE if acc.efficiency is None else DECLARED)


@dataclass(frozen=True, slots=True)
class MatmulEstimate:
    """One GEMM on ``cores`` arrays (``archplace estimate matmul``).

    Attributes:
        compute_cycles: cycles of the arrays (all ``cores`` of them).
        hbm_bytes: bytes between HBM and the buffer.
        latency_s: ``max(compute_cycles / clock + exposed transfer, hbm_bytes / bandwidth)``.
        compute_s, memory_s: the two sides of that maximum.
        bound: ``compute`` or ``memory``.
        utilization: useful MACs / (MACs x compute_cycles).
        energy_j: dynamic energy.
    """

    compute_cycles: int
    hbm_bytes: float
    latency_s: float
    compute_s: float
    memory_s: float
    bound: Bound
    utilization: float
    energy_j: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (infinite values never occur: an unbounded bandwidth gives 0 s)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["bound"] = self.bound.value
        return d


def estimate_matmul(m: int, k: int, n: int, rows: int, cols: int, *, batch: int = 1, cores: int = 1,
                    dataflow: str | Dataflow = Dataflow.WS, clock_hz: float = 1e9,
                    buffer_bytes: float = math.inf, hbm_bandwidth_bytes_per_s: float = math.inf,
                    bytes_per_element: int = 2,
                    array_timing: str | ArrayTiming = ArrayTiming.OVERLAPPED) -> MatmulEstimate:
    """Cycles, HBM bytes and latency of ``[batch, m, k] x [batch, k, n]`` on ``cores`` arrays of
    ``rows x cols`` (:mod:`archplace.cost.gemm`); an unbounded buffer and bandwidth by default.

    Raises:
        ConfigError: a size out of range (m, k, n and batch 1..2**31 - 1, rows and cols
            1..2**16, cores 1..2**20, bytes_per_element 1, 2, 4 or 8), a clock that is not
            positive and finite, a buffer or bandwidth that is not positive (infinite: unbounded),
            or an unknown dataflow or array timing.
    """
    for name, value, high in (("m", m, limits.MAX_GEMM_DIM), ("k", k, limits.MAX_GEMM_DIM),
                              ("n", n, limits.MAX_GEMM_DIM), ("batch", batch, limits.MAX_GEMM_DIM),
                              ("rows", rows, limits.MAX_ARRAY_DIM), ("cols", cols, limits.MAX_ARRAY_DIM),
                              ("cores", cores, limits.MAX_DEVICES)):
        limits.whole(f"matmul: {name}", value, 1, high)
    if bytes_per_element not in (1, 2, 4, 8) or isinstance(bytes_per_element, bool):
        raise ConfigError(f"matmul: bytes_per_element must be 1, 2, 4 or 8, got {bytes_per_element!r}")
    limits.finite("matmul: clock", clock_hz, 0.0, 1e15, low_open=True)
    for name, fvalue in (("buffer", buffer_bytes), ("hbm bandwidth", hbm_bandwidth_bytes_per_s)):
        if isinstance(fvalue, bool) or not isinstance(fvalue, int | float) or not fvalue > 0:
            raise ConfigError(f"matmul: {name} must be positive, got {fvalue!r}")
    flow = enum_member(Dataflow, dataflow, "matmul", "dataflow")
    timing = enum_member(ArrayTiming, array_timing, "matmul", "array_timing")
    os_ = flow is Dataflow.OS
    est = matmul_estimate(batch, m, k, n, rows=rows, cols=cols, cores=cores, output_stationary=os_,
                          clock_hz=clock_hz, buffer_bytes=buffer_bytes,
                          hbm_bandwidth_bytes_per_s=hbm_bandwidth_bytes_per_s,
                          bytes_per_element=bytes_per_element, array_timing=timing)
    cycles = gemm.matmul_cycles(batch, m, k, n, rows, cols, cores, os_, timing)
    utilization = utilisation("array utilisation", batch * m * k * n, cores * rows * cols * cycles)
    return MatmulEstimate(cycles, est.hbm_bytes, est.all_cores_s, est.compute_all_s, est.memory_s,
                          est.bound_all, utilization, est.energy_j)


def layer_rows(estimate: ModelEstimate) -> Iterable[dict[str, Any]]:
    """Flat rows (one per layer and phase) for a table."""
    for layer in estimate.layers:
        for phase in ("fwd", "bwd"):
            p: PhaseEstimate = getattr(layer, phase)
            yield {"layer": layer.name, "count": layer.count, "phase": phase,
                   "single_core_s": p.single_core_s, "all_cores_s": p.all_cores_s,
                   "bound": p.bound.value, "energy_j": p.energy_j, "mfu": p.mfu,
                   "achieved_flop_per_s": p.achieved_flop_per_s, "fraction_of_peak": p.fraction_of_peak}


def op_rows(estimate: ModelEstimate) -> Iterable[dict[str, Any]]:
    """Flat rows (one per operator of every distinct layer and phase) for a table."""
    for layer in estimate.layers:
        for phase in ("fwd", "bwd"):
            for o in getattr(layer, phase).ops:
                yield {"layer": layer.name, "phase": phase, **o.to_dict()}


@dataclass(frozen=True, slots=True)
class PresetMatmul:
    """One GEMM on a hardware preset (``archplace estimate matmul --hardware``).

    Attributes:
        hardware: the preset's chip name.
        efficiency_model: ``"declared"`` or ``"cycle"``.
        latency_s: all-cores latency; compute_s, memory_s: its two sides.
        bound: compute or memory.
        achieved_flop_per_s: ``2·batch·m·k·n / latency_s``; fraction_of_peak: over the peak.
        gemm_efficiency: the declared shape efficiency (None on the cycle model).
    """

    hardware: str
    efficiency_model: str
    latency_s: float
    compute_s: float
    memory_s: float
    bound: Bound
    achieved_flop_per_s: float
    fraction_of_peak: float
    gemm_efficiency: float | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["bound"] = self.bound.value
        return d


def preset_matmul(acc: Accelerator, m: int, k: int, n: int, *, batch: int = 1) -> PresetMatmul:
    """Latency and achieved FLOP/s of ``[batch, m, k] x [batch, k, n]`` on the chip of a hardware
    preset, with its declared efficiency when it has one (:mod:`archplace.cost.efficiency`).

    Raises:
        ConfigError: a size out of range (1..2**31 - 1).
    """
    from archplace.cost.efficiency import gemm_efficiency
    from archplace.workload.graph import Operator, OpKind, Phase

    for name, value in (("m", m), ("k", k), ("n", n), ("batch", batch)):
        limits.whole(f"matmul: {name}", value, 1, limits.MAX_GEMM_DIM)
    e = acc.bytes_per_element
    flop = 2.0 * batch * m * k * n
    op = Operator(id=0, name="matmul", target="aten.bmm.default", kind=OpKind.MATMUL, phase=Phase.FWD,
                  batch=batch, m=m, k=k, n=n, elements=batch * m * n, flop=flop,
                  bytes_read=float(e * batch * (m * k + k * n)), bytes_written=float(e * batch * m * n))
    est = SystolicCostModel().estimate(op, acc)
    rate = _rate(flop, est.all_cores_s)
    shape = None if acc.efficiency is None else gemm_efficiency(batch, m, n, acc.efficiency)
    return PresetMatmul(acc.name, CYCLE if acc.efficiency is None else DECLARED, est.all_cores_s,
                        est.compute_all_s, est.memory_s, est.bound_all, rate,
                        rate / acc.peak_flop_per_s, shape)
