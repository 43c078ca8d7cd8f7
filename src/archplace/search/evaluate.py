"""Evaluate one accelerator design: costs -> layer schedules -> placement, best plan.

Everything that does not depend on the design (the extracted layer chains) is
computed once by the caller and passed in; layer schedules depend on the core
configuration and the micro-batch but not on HBM size or recompute, so each
distinct layer graph is scheduled once per (design, micro-batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from archplace.cost.model import CostModel
from archplace.errors import InfeasibleError
from archplace.hardware.accelerator import Accelerator
from archplace.hardware.area import area_mm2
from archplace.hardware.cluster import Cluster
from archplace.hardware.power import tdp_w
from archplace.placement.costs import layer_costs
from archplace.placement.plan import LayerCost, PlanResult, Recompute, TrainingSetup
from archplace.placement.solver import optimal_plan
from archplace.workload.layers import LayerChain


@dataclass(frozen=True)
class DesignResult:
    """Outcome of evaluating one design.

    Attributes:
        accelerator: the design.
        area_mm2: its die area.
        best: its best plan over every micro-batch and recompute choice, or None.
        infeasible_reason: why no plan fits, when ``best`` is None.
    """

    accelerator: Accelerator
    area_mm2: float
    best: PlanResult | None
    infeasible_reason: str | None = None

    @property
    def throughput_samples_per_s(self) -> float:
        """Samples/s of the best plan, 0 when infeasible."""
        return self.best.throughput_samples_per_s if self.best else 0.0

    @property
    def tdp_w(self) -> float:
        """Thermal design power of one chip (:func:`archplace.hardware.power.tdp_w`)."""
        return tdp_w(self.accelerator)

    @property
    def throughput_per_watt(self) -> float:
        """Samples/s per watt of TDP of the devices the best plan uses (WHAM's objective); 0 when
        infeasible."""
        if self.best is None:
            return 0.0
        return self.best.throughput_samples_per_s / (self.tdp_w * self.best.plan.devices)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (issue #2 schema)."""
        out: dict[str, Any] = {"accelerator": self.accelerator.to_dict(), "area_mm2": self.area_mm2,
                               "tdp_w": self.tdp_w, "throughput_per_watt": self.throughput_per_watt}
        if self.best is None:
            out.update({"plan": None, "iteration_time_s": None, "throughput_samples_per_s": 0.0,
                        "mfu": 0.0, "infeasible_reason": self.infeasible_reason})
        else:
            out.update(self.best.to_dict())
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesignResult:
        """Inverse of :meth:`to_dict` (for results read back from a store)."""
        acc = Accelerator(**data["accelerator"])
        if data.get("plan") is None:
            return cls(acc, float(data["area_mm2"]), None, data.get("infeasible_reason"))
        return cls(acc, float(data["area_mm2"]), PlanResult.from_dict(data))


def core_key(acc: Accelerator) -> Accelerator:
    """The design without its name and HBM capacity: everything layer costs depend on.

    Designs with the same key share their layer schedules (HBM capacity only changes
    what fits, which placement checks).
    """
    return dataclasses.replace(acc, name="", hbm_bytes=1.0)


def evaluate_designs(
    accs: Sequence[Accelerator],
    chains: Mapping[int, LayerChain],
    cluster: Cluster,
    global_batch: int,
    recomputes: Sequence[Recompute],
    cost: CostModel,
) -> list[DesignResult]:
    """Best plan of each design over every micro-batch in ``chains`` and every recompute choice.

    Layer costs (costs and schedules of every layer graph) are computed once for the
    designs sharing a :func:`core_key` and reused for each of their HBM capacities.

    Args:
        accs: the designs.
        chains: layer chain per micro-batch size.
        cluster: devices and links.
        global_batch: samples per iteration.
        recomputes: recompute choices to try.
        cost: per-operator cost model.

    Returns:
        For each design, in order, its best plan (highest throughput; ties: fewer
        devices), or the reason nothing fits.
    """
    shared: dict[tuple[Accelerator, int], list[LayerCost]] = {}
    out = []
    for acc in accs:
        best: PlanResult | None = None
        reasons: list[str] = []
        for micro_batch, chain in sorted(chains.items()):
            if global_batch % micro_batch:
                reasons.append(f"micro-batch {micro_batch} does not divide global batch {global_batch}")
                continue
            key = (core_key(acc), micro_batch)
            if key not in shared:
                shared[key] = layer_costs(chain, acc, cost)
            setup = TrainingSetup(cluster, global_batch, chain.seq_len, acc.hbm_bytes,
                                  acc.hbm_bandwidth_bytes_per_s, acc.peak_flop_per_s)
            for recompute in recomputes:
                try:
                    result = optimal_plan(shared[key], setup, micro_batch=micro_batch, recompute=recompute)
                except InfeasibleError as exc:
                    reasons.append(f"b={micro_batch} recompute={recompute.value}: {exc}")
                    continue
                if best is None or _better(result, best):
                    best = result
        reason = None if best else (reasons[-1] if reasons else "no micro-batch to evaluate")
        out.append(DesignResult(acc, area_mm2(acc), best, reason))
    return out


def evaluate_design(acc: Accelerator, chains: Mapping[int, LayerChain], cluster: Cluster,
                    global_batch: int, recomputes: Sequence[Recompute], cost: CostModel) -> DesignResult:
    """:func:`evaluate_designs` of one design."""
    return evaluate_designs([acc], chains, cluster, global_batch, recomputes, cost)[0]


def _better(a: PlanResult, b: PlanResult) -> bool:
    if a.iteration_time_s != b.iteration_time_s:
        return a.iteration_time_s < b.iteration_time_s
    return a.plan.devices < b.plan.devices
