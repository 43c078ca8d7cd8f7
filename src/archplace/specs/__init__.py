"""Typed run specs: what to train, on what, which plans, and which searches (a YAML file's fields,
checked; see :mod:`archplace.app`)."""

from archplace.specs.plan import Plan, PlanSpace
from archplace.specs.run import ClusterSpec, HardwareSpec, ModelSpec
from archplace.specs.runs import EvaluateRun, PlanRun
from archplace.specs.search import SearchSpec

__all__ = ["ClusterSpec", "EvaluateRun", "HardwareSpec", "ModelSpec", "Plan", "PlanRun", "PlanSpace",
           "SearchSpec"]
