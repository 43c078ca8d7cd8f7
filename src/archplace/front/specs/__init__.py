"""Typed run specs: what to train, on what, which plans, and which searches (a YAML file's fields,
checked; see :mod:`archplace.front.app`)."""

from archplace.front.specs.plan import Plan, PlanSpace
from archplace.front.specs.run import ClusterSpec, HardwareSpec, ModelSpec
from archplace.front.specs.runs import EvaluateRun, PlanRun
from archplace.front.specs.search import SearchSpec

__all__ = ["ClusterSpec", "EvaluateRun", "HardwareSpec", "ModelSpec", "Plan", "PlanRun", "PlanSpace",
           "SearchSpec"]
