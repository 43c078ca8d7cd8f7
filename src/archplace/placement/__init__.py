"""archplace.placement: the best parallel plan for a layer chain, its time and its memory.

Public API:

* :func:`evaluate_plan` -- iteration time, breakdown, throughput, MFU and memory of a plan;
* :func:`optimal_plan` -- the exact best plan for fixed options, over pipeline depth, DP degree
  and stages; :func:`plan_search` -- the exact top-k over every option;
* :func:`stage_memory`, :func:`interleaved_device_memory`, :func:`in_flight_micro_batches`,
  :func:`interleaved_in_flight_chunks`, :func:`interleaved_chunk_counts` -- per-device memory
  of a stage (or of an interleaved device);
* :mod:`archplace.placement.zero` -- ZeRO stages 0-3 and the DP traffic they add;
* :class:`Interference` -- the compute a collective hidden behind it takes
  (:mod:`archplace.placement.interference`; ``TrainingSetup.interference``);
* :mod:`archplace.placement.layout` -- the rank layout of a plan with context and expert
  parallelism (:class:`RankOrder`) and the links of its groups;
* the value objects and enums of :mod:`archplace.placement.plan`.
"""

from archplace.placement.interference import Interference
from archplace.placement.memory import (
    in_flight_micro_batches,
    interleaved_chunk_counts,
    interleaved_device_memory,
    interleaved_in_flight_chunks,
    stage_memory,
)
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import (
    ZERO_STAGES,
    GradReduceDtype,
    GradSync,
    LayerCost,
    Optimizer,
    PipelineSchedule,
    Plan,
    RankOrder,
    Recompute,
    TrainingSetup,
)
from archplace.placement.result import PlanResult, StageMemory
from archplace.placement.solver import optimal_plan, plan_search

__all__ = [
    "BREAKDOWN_KEYS",
    "ZERO_STAGES",
    "GradReduceDtype",
    "GradSync",
    "Interference",
    "LayerCost",
    "Optimizer",
    "PipelineSchedule",
    "Plan",
    "PlanResult",
    "RankOrder",
    "Recompute",
    "StageMemory",
    "TrainingSetup",
    "evaluate_plan",
    "in_flight_micro_batches",
    "interleaved_chunk_counts",
    "interleaved_device_memory",
    "interleaved_in_flight_chunks",
    "optimal_plan",
    "plan_search",
    "stage_memory",
]
