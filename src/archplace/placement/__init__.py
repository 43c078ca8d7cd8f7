"""archplace.placement: the best parallel plan for a layer chain, its time and its memory.

Public API:

* :func:`evaluate_plan` -- iteration time, breakdown, throughput, MFU and memory of a plan;
* :func:`optimal_plan` -- the exact best plan over pipeline depth, DP degree and stages;
* :func:`stage_memory`, :func:`in_flight_micro_batches` -- per-device memory of a stage;
* the value objects of :mod:`archplace.placement.plan`.
"""

from archplace.placement.memory import in_flight_micro_batches, stage_memory
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import (
    LayerCost,
    Plan,
    PlanResult,
    Recompute,
    StageMemory,
    TrainingSetup,
)
from archplace.placement.solver import optimal_plan

__all__ = [
    "LayerCost",
    "Plan",
    "PlanResult",
    "Recompute",
    "StageMemory",
    "TrainingSetup",
    "evaluate_plan",
    "in_flight_micro_batches",
    "optimal_plan",
    "stage_memory",
]
