"""Evaluate one accelerator design: costs -> layer schedules -> placement, best plan.

Everything that does not depend on the design (the extracted layer chains) is
computed once by the caller and passed in; layer schedules depend on the core
configuration, the TP width, the micro-batch and SP but not on HBM size or recompute, so
each distinct layer graph is scheduled once per (core configuration, tp, micro-batch, sp).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from archplace.base.errors import InfeasibleError
from archplace.cost.model import EstimatingCostModel
from archplace.cost.precision import PRECISION_ORDER, Fp8CostModel, Precision
from archplace.cost.systolic import SystolicCostModel
from archplace.cost.tabulated import TabulatedCostModel
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.cluster import Cluster
from archplace.hw.power import tdp_w
from archplace.placement.costs import CostKey, Makespan, costs_by_key, list_makespan_s
from archplace.placement.interference import Interference
from archplace.placement.plan import LayerCost, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.placement.solver import plan_search
from archplace.placement.workflow import PlanGrid, search_options
from archplace.workload.layers import LayerChain

TABLE_MIN_CORES = 8
"""Core configurations from which :func:`evaluate_designs` costs operators through the vectorised
path (measured on gpt2-xl: slower than the scalar path below about 5, 2.4x faster at 16, 5x at
256 core configurations per call)."""


@dataclass(frozen=True)
class DesignResult:
    """Outcome of evaluating one design.

    Attributes:
        accelerator: the design.
        area_mm2: its die area.
        best: its best plan over every micro-batch and recompute choice, or None.
        infeasible_reason: why no plan fits, when ``best`` is None.
        model: the model trained ("" when the search has one model).
        components: for a search over several models, the result of each model; then
            ``best`` is the first model's plan (None unless every model fits) and the
            figures are geometric means over the models (so the ranking does not depend on
            each model's scale).
    """

    accelerator: Accelerator
    area_mm2: float
    best: PlanResult | None
    infeasible_reason: str | None = None
    model: str = ""
    components: tuple[DesignResult, ...] = ()

    @classmethod
    def combine(cls, parts: Sequence[DesignResult]) -> DesignResult:
        """One result of a design from its results on several models (same design)."""
        first = parts[0]
        failed = [p for p in parts if p.best is None]
        reason = f"{failed[0].model}: {failed[0].infeasible_reason}" if failed else None
        return cls(first.accelerator, first.area_mm2, None if failed else first.best, reason,
                   components=tuple(parts))

    @property
    def throughput_samples_per_s(self) -> float:
        """Samples/s of the best plan, 0 when infeasible (geometric mean over models)."""
        if self.components:
            return geomean([c.throughput_samples_per_s for c in self.components])
        return self.best.throughput_samples_per_s if self.best else 0.0

    @property
    def tdp_w(self) -> float:
        """Thermal design power of one chip (:func:`archplace.hw.power.tdp_w`)."""
        return tdp_w(self.accelerator)

    @property
    def throughput_per_watt(self) -> float:
        """Samples/s per watt of TDP of the devices the best plan uses (WHAM's objective); 0 when
        infeasible."""
        if self.components:
            return geomean([c.throughput_per_watt for c in self.components])
        if self.best is None:
            return 0.0
        return self.best.throughput_samples_per_s / (self.tdp_w * self.best.plan.devices)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (issue #2 schema; with several models, the geometric means and ``models``:
        the result of each model)."""
        out: dict[str, Any] = {"accelerator": self.accelerator.to_dict(), "area_mm2": self.area_mm2,
                               "tdp_w": self.tdp_w, "throughput_per_watt": self.throughput_per_watt}
        if self.model:
            out["model"] = self.model
        if self.components:
            out.update({"throughput_samples_per_s": self.throughput_samples_per_s,
                        "feasible": self.best is not None, "infeasible_reason": self.infeasible_reason,
                        "models": [c.to_dict() for c in self.components]})
        elif self.best is None:
            out.update({"plan": None, "iteration_time_s": None, "throughput_samples_per_s": 0.0,
                        "mfu": 0.0, "infeasible_reason": self.infeasible_reason})
        else:
            out.update(self.best.to_dict())
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesignResult:
        """Inverse of :meth:`to_dict` (for results read back from a store)."""
        acc = Accelerator(**data["accelerator"])
        model = str(data.get("model", ""))
        if "models" in data:
            return cls.combine([cls.from_dict(part) for part in data["models"]])
        if data.get("plan") is None:
            return cls(acc, float(data["area_mm2"]), None, data.get("infeasible_reason"), model)
        return cls(acc, float(data["area_mm2"]), PlanResult.from_dict(data), model=model)


def geomean(values: Sequence[float]) -> float:
    """Geometric mean; 0 when any value is 0; a single value exactly (exp(log(v)) may not be v)."""
    if any(v <= 0 for v in values):
        return 0.0
    if len(values) == 1:
        return float(values[0])
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def core_key(acc: Accelerator) -> Accelerator:
    """The design without its name and HBM capacity: everything layer costs depend on.

    Designs with the same key share their layer schedules (HBM capacity only changes
    what fits, which placement checks).
    """
    return dataclasses.replace(acc, name="", hbm_bytes=1.0)


def evaluate_designs(
    accs: Sequence[Accelerator],
    chains: Mapping[CostKey, LayerChain],
    cluster: Cluster,
    global_batch: int,
    space: PlanGrid,
    cost: EstimatingCostModel,
    makespan: Makespan = list_makespan_s,
) -> list[DesignResult]:
    """Best plan of each design over the plan space (every chain of ``chains`` and every option
    of ``space`` except its TP widths and micro-batches, which ``chains``' keys fix).

    Layer costs (costs and schedules of every layer graph) are computed once for the
    designs sharing a :func:`core_key` and reused for each of their HBM capacities.  With
    several core configurations (at least :data:`TABLE_MIN_CORES`) and a
    :class:`~archplace.cost.systolic.SystolicCostModel`, each operator is costed once for all of
    them through the vectorised path (:class:`~archplace.cost.tabulated.TabulatedCostModel`: the
    same floats).

    Args:
        accs: the designs.
        chains: layer chain per :class:`~archplace.placement.plan.CostKey` (TP, micro-batch, SP, CP,
            EP, expert-TP).
        cluster: devices and links.
        global_batch: samples per iteration.
        space: recompute policies, schedules, chunks, ZeRO stages, DP-overlap settings and
            precisions to try, and the gradient dtype. A design without FP8 tensor cores tries
            bf16 only (none: infeasible, "... has no FP8 tensor cores"); fp8 plans are scored
            against the FP8 peak (:func:`archplace.placement.workflow.precision_setup`).
        cost: per-operator cost model (with fp8, wrapped in
            :class:`~archplace.cost.precision.Fp8CostModel`).
        makespan: layer scheduler (default: the list scheduler; CP-SAT for exact figures).

    Returns:
        For each design, in order, its best plan (:func:`archplace.placement.solver.plan_search`:
        fastest; ties: fewer devices, ...), or the reason nothing fits.
    """
    shared: dict[tuple[Accelerator, Precision], dict[CostKey, list[LayerCost]]] = {}
    fp8_cost = Fp8CostModel(cost) if Precision.FP8 in space.precisions else None
    op_cost: EstimatingCostModel = cost
    if isinstance(cost, SystolicCostModel) and len({core_key(acc) for acc in accs}) >= TABLE_MIN_CORES:
        op_cost = TabulatedCostModel(accs, cost)
    out = []
    for acc in accs:
        precisions = [p for p in PRECISION_ORDER if p in space.precisions
                      and (p is Precision.BF16 or acc.fp8_speedup is not None)]
        if not precisions:
            out.append(DesignResult(acc, area_mm2(acc), None, f"{acc.name} has no FP8 tensor cores"))
            continue
        found: list[tuple[float, int, PlanResult]] = []
        refusal = ""
        for order, precision in enumerate(precisions):
            key = (core_key(acc), precision)
            if key not in shared:
                shared[key] = (costs_by_key(chains, acc, op_cost, makespan) if precision is Precision.BF16
                               else costs_by_key(chains, acc, op_cost, makespan, fp8_cost=fp8_cost))
            peak = acc.peak_flop_per_s
            if precision is Precision.FP8:
                peak *= float(acc.fp8_speedup or 1.0)
            setup = TrainingSetup(cluster, global_batch, _seq_len(chains), acc.hbm_bytes,
                                  acc.hbm_bandwidth_bytes_per_s, peak,
                                  grad_reduce_dtype=space.grad_reduce_dtype,
                                  interference=Interference.of(acc),
                                  hbm_fraction=acc.efficiency.hbm if acc.efficiency is not None else 1.0,
                                  pp_comm_overlap=(acc.efficiency is not None
                                                   and acc.efficiency.pp_comm_overlap))
            try:
                (best,) = plan_search(shared[key], setup, top_k=1, **search_options(space))
            except InfeasibleError as exc:
                refusal = refusal or str(exc)
                continue
            if precision is not Precision.BF16:
                best = dataclasses.replace(best, plan=dataclasses.replace(best.plan, precision=precision))
            found.append((best.iteration_time_s, order, best))
        if not found:
            out.append(DesignResult(acc, area_mm2(acc), None, refusal))
            continue
        out.append(DesignResult(acc, area_mm2(acc), min(found, key=lambda row: row[:2])[2]))
    return out


def _seq_len(chains: Mapping[CostKey, LayerChain]) -> int:
    lengths = {chain.seq_len for chain in chains.values()}
    if len(lengths) != 1:
        raise ValueError(f"layer chains of one evaluation must share a sequence length, got {lengths}")
    return lengths.pop()
