"""archplace: joint search of a training accelerator's architecture and the parallel placement
(TP/PP/DP, micro-batch, recompute, ZeRO) of a large model.

The public API is what this package exports (``__all__``)::

    import archplace
    report = archplace.plan(model="llama2-7b", hardware="a100-80gb", devices=64, global_batch=512)
    print(report.plan, report.mfu)             # the best plan; report.ranked: every plan asked for
    result = archplace.search(archplace.SearchSpec(models=("gpt2-xl",), devices=1024,
                                                   global_batch=4096))
    print(result.best.accelerator.name)

* functions: :func:`plan`, :func:`evaluate`, :func:`search`, :func:`schedule`,
  :func:`estimate`, :func:`graph`, :func:`models`, :func:`hardware`, :func:`results`,
  :func:`report` (the HTML report of a result store), :func:`profile` (time kernels on this
  machine's GPU and write kernel tables), :func:`calibrate` (a chip's efficiency parameters
  fitted to measured runs);
* the specs (frozen, self-validating, ``to_dict()`` / ``from_dict()``): :class:`ModelSpec`,
  :class:`HardwareSpec`, :class:`ClusterSpec`, :class:`PlanSpace`, :class:`Plan`, the run files
  :class:`PlanRun` (``archplace plan --config``), :class:`EvaluateRun` (``archplace evaluate
  --plan``) and :class:`SearchSpec` (``archplace search --config``);
* result classes (each with ``to_dict()`` / ``from_dict()``): :class:`PlanReport`,
  :class:`PlanResult`, :class:`SearchResult`, :class:`DesignResult`, :class:`StoredResult`,
  :class:`ScheduleResult`, :class:`ModelEstimate`, :class:`ProfileResult`; :class:`Tick` (a
  search's progress);
* errors: :class:`ArchplaceError` and its kinds;
* ``__version__``.

Everything else -- every submodule and every name not listed here -- is private by convention:
it may change without notice.  Importing the package is cheap: the functions and classes are
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from archplace._version import __version__
from archplace.base.errors import (
    ArchplaceError,
    ConfigError,
    ExtractionError,
    InfeasibleError,
    InternalError,
    MissingSectionError,
    OutOfMemoryError,
    SolverError,
)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and documentation
    from archplace.cost.estimate import ModelEstimate
    from archplace.dse.evaluate import DesignResult
    from archplace.dse.request import SearchResult
    from archplace.dse.runner import Tick
    from archplace.dse.store import StoredResult
    from archplace.front.api import calibrate, evaluate, graph, hardware, models, report, results, search
    from archplace.front.api import plan_report as plan
    from archplace.front.api import schedule_layer as schedule
    from archplace.front.specs import (
        ClusterSpec,
        EvaluateRun,
        HardwareSpec,
        ModelSpec,
        Plan,
        PlanRun,
        PlanSpace,
        SearchSpec,
    )
    from archplace.placement.ranked import PlanReport
    from archplace.placement.result import PlanResult
    from archplace.profiling import ProfileResult, profile
    from archplace.scheduling.base import ScheduleResult

__all__ = [
    "ArchplaceError", "ClusterSpec", "ConfigError", "DesignResult", "EvaluateRun", "ExtractionError",
    "HardwareSpec", "InfeasibleError", "InternalError", "MissingSectionError", "ModelEstimate",
    "ModelSpec", "OutOfMemoryError", "Plan", "PlanReport", "PlanResult", "PlanRun", "PlanSpace",
    "ProfileResult", "ScheduleResult", "SearchResult", "SearchSpec", "SolverError", "StoredResult", "Tick",
    "__version__", "calibrate", "estimate", "evaluate", "graph", "hardware", "models", "plan", "profile",
    "report", "results", "schedule", "search",
]

# name -> (module, attribute): loaded on first access (PEP 562)
_LAZY: dict[str, tuple[str, str]] = {
    "plan": ("archplace.front.api", "plan_report"),
    "evaluate": ("archplace.front.api", "evaluate"),
    "calibrate": ("archplace.front.api", "calibrate"),
    "search": ("archplace.front.api", "search"),
    "schedule": ("archplace.front.api", "schedule_layer"),
    "estimate": ("archplace.front.api", "estimate_model"),
    "graph": ("archplace.front.api", "graph"),
    "models": ("archplace.front.api", "models"),
    "hardware": ("archplace.front.api", "hardware"),
    "results": ("archplace.front.api", "results"),
    "report": ("archplace.front.api", "report"),
    "profile": ("archplace.profiling", "profile"),
    "ProfileResult": ("archplace.profiling", "ProfileResult"),
    "ModelSpec": ("archplace.front.specs", "ModelSpec"),
    "HardwareSpec": ("archplace.front.specs", "HardwareSpec"),
    "ClusterSpec": ("archplace.front.specs", "ClusterSpec"),
    "PlanSpace": ("archplace.front.specs", "PlanSpace"),
    "Plan": ("archplace.front.specs", "Plan"),
    "PlanRun": ("archplace.front.specs", "PlanRun"),
    "EvaluateRun": ("archplace.front.specs", "EvaluateRun"),
    "SearchSpec": ("archplace.front.specs", "SearchSpec"),
    "PlanReport": ("archplace.placement.ranked", "PlanReport"),
    "PlanResult": ("archplace.placement.result", "PlanResult"),
    "SearchResult": ("archplace.dse.request", "SearchResult"),
    "DesignResult": ("archplace.dse.evaluate", "DesignResult"),
    "StoredResult": ("archplace.dse.store", "StoredResult"),
    "ScheduleResult": ("archplace.scheduling.base", "ScheduleResult"),
    "ModelEstimate": ("archplace.cost.estimate", "ModelEstimate"),
    "Tick": ("archplace.dse.runner", "Tick"),
}


def _load(name: str) -> Any:
    """The public object ``name`` of :data:`_LAZY`, importing its module on first use."""
    module_name, attribute = _LAZY[name]
    return getattr(importlib.import_module(module_name), attribute)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'archplace' has no attribute {name!r}")
    return _load(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
