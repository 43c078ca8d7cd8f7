"""Entry points of per-layer scheduling: the backends by name, and the Python API
(``solve_problem``, ``layer_problem``, ``schedule_layer``) behind ``archplace schedule``.

Backends (all behind :class:`~archplace.schedule.base.Scheduler`, chosen by name from the
registry :data:`SCHEDULER_FACTORIES`):

* ``list`` -- the critical-path list scheduler (:mod:`archplace.schedule.list_scheduler`);
  ``optimal`` only when it meets the lower bound;
* ``cpsat`` -- exact, OR-Tools CP-SAT (:mod:`archplace.schedule.cpsat`);
* ``highs`` -- PHAZE's MILP on HiGHS (:mod:`archplace.schedule.milp`);
* ``gurobi`` -- PHAZE's MILP on Gurobi, when ``gurobipy`` is installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from archplace import limits
from archplace.errors import ConfigError
from archplace.schedule.base import Scheduler, ScheduleResult, SolveOptions
from archplace.schedule.list_scheduler import list_schedule, lower_bound_s
from archplace.schedule.problem import ScheduleProblem

LAYERS = ("embedding", "block", "head")
PHASES = ("fwd", "bwd")


class ListScheduler:
    """The list scheduler as a :class:`~archplace.schedule.base.Scheduler` (ignores options)."""

    name = "list"

    def solve(self, problem: ScheduleProblem, options: SolveOptions) -> ScheduleResult:
        """List-schedule ``problem``; ``optimal`` iff the makespan meets the lower bound."""
        started = time.perf_counter()
        schedule = list_schedule(problem)
        bound = min(lower_bound_s(problem), schedule.makespan_s)
        return ScheduleResult(self.name, schedule.makespan_s, bound,
                              schedule.makespan_s <= bound, schedule,
                              time.perf_counter() - started)


def _list() -> Scheduler:
    return ListScheduler()


def _cpsat() -> Scheduler:
    from archplace.schedule.cpsat import CpSatScheduler

    return CpSatScheduler()


def _highs() -> Scheduler:
    from archplace.schedule.milp import HighsScheduler

    return HighsScheduler()


def _gurobi() -> Scheduler:
    from archplace.schedule.milp import GurobiScheduler

    return GurobiScheduler()


SCHEDULER_FACTORIES: Mapping[str, Callable[[], Scheduler]] = MappingProxyType({
    "list": _list,
    "cpsat": _cpsat,
    "highs": _highs,
    "gurobi": _gurobi,
})
"""Every scheduling backend by name: a read-only mapping of name -> factory of its
:class:`~archplace.schedule.base.Scheduler` (each factory imports its solver's module when
called)."""

BACKENDS: tuple[str, ...] = tuple(SCHEDULER_FACTORIES)
"""The backend names, in registry order."""


def get_scheduler(backend: str) -> Scheduler:
    """The scheduler called ``backend`` (a key of :data:`SCHEDULER_FACTORIES`).

    Raises:
        ConfigError: an unknown name (the message lists the registry's names).
    """
    factory = SCHEDULER_FACTORIES.get(backend)
    if factory is None:
        raise ConfigError(f"unknown schedule backend {backend!r}; choose from {', '.join(BACKENDS)}")
    return factory()


def solve_problem(problem: ScheduleProblem, backend: str = "cpsat",
                  options: SolveOptions | None = None) -> ScheduleResult:
    """Schedule ``problem`` with ``backend`` (default CP-SAT; ``options`` default
    :class:`SolveOptions()`, a 10 s limit).  Never raises on a time-out.

    Raises:
        ConfigError: an unknown backend, or ``gurobi`` without gurobipy.
        SolverError: a solver failed (not a time-out).
    """
    return get_scheduler(backend).solve(problem, options or SolveOptions())


def layer_problem(model: str, hardware: str = "tpuv4", layer: str = "block", phase: str = "fwd",
                  *, tp: int = 1, micro_batch: int = 1, seq_len: int | None = None,
                  attention: str = "flash", kernels: str = "fused") -> ScheduleProblem:
    """The scheduling problem of one layer's forward or backward graph.

    Args:
        model: model preset or path of an HF config.json.
        hardware: accelerator preset or YAML file (its cluster prices the TP collectives).
        layer: ``embedding``, ``block`` or ``head``.
        phase: ``fwd`` or ``bwd``.
        tp: tensor-parallel width.
        micro_batch: samples per micro-batch.
        seq_len: tokens per sample [the model's default].
        attention, kernels: eager | sdpa | flash and fused | unfused
            (:class:`archplace.workload.extract.ExtractOptions`).

    Raises:
        ConfigError: an unknown layer or phase, a bad model or hardware, a size out of range
            (:mod:`archplace.limits`), a TP width the model does not allow, or tp > 1 on
            hardware without a cluster section.
        ExtractionError: the model cannot be traced.
    """
    from archplace.cost.model import SystolicCostModel
    from archplace.hardware.presets import load_accelerator, load_cluster
    from archplace.workload.extract import ExtractOptions, extract_chain
    from archplace.workload.options import parse_attention, parse_kernels
    from archplace.workload.zoo import load_model

    attention_kind, kernel_kind = parse_attention(attention), parse_kernels(kernels)
    if layer not in LAYERS:
        raise ConfigError(f"unknown layer {layer!r}; choose from {', '.join(LAYERS)}")
    if phase not in PHASES:
        raise ConfigError(f"unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    limits.whole("tp", tp, 1, limits.MAX_DEVICES)
    limits.whole("micro_batch", micro_batch, 1, limits.MAX_MICRO_BATCH)
    limits.optional_whole("seq_len", seq_len, 1, limits.MAX_SEQ_LEN)
    spec = load_model(model)
    if seq_len is not None:
        spec = spec.with_seq_len(seq_len)
    limits.micro_batch_tokens(micro_batch, spec.seq_len)
    acc = load_accelerator(hardware)
    cost = SystolicCostModel(cluster=load_cluster(hardware, tp)) if tp > 1 else SystolicCostModel()
    chain = extract_chain(spec, ExtractOptions(micro_batch, spec.seq_len, tp=tp,
                                               attention=attention_kind, kernels=kernel_kind))
    chosen = next(item for item in chain.layers if item.kind.value == layer)
    return ScheduleProblem.from_graph(chosen.fwd if phase == "fwd" else chosen.bwd, acc, cost)


def schedule_layer(model: str, hardware: str = "tpuv4", layer: str = "block", phase: str = "fwd",
                   *, tp: int = 1, micro_batch: int = 1, seq_len: int | None = None,
                   backend: str = "cpsat", options: SolveOptions | None = None,
                   attention: str = "flash", kernels: str = "fused") -> ScheduleResult:
    """Build the problem of one layer (:func:`layer_problem`) and schedule it
    (:func:`solve_problem`).

    Raises:
        ConfigError, ExtractionError, SolverError: as those two functions.
    """
    problem = layer_problem(model, hardware, layer, phase, tp=tp, micro_batch=micro_batch,
                            seq_len=seq_len, attention=attention, kernels=kernels)
    return solve_problem(problem, backend, options)
