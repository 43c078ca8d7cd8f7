"""Typed run specs: what to train, on what, and which plans (see :mod:`archplace.app`)."""

from archplace.specs.plan import Plan, PlanSpace
from archplace.specs.run import ClusterSpec, HardwareSpec, ModelSpec
from archplace.specs.runs import EvaluateRun, PlanRun

__all__ = ["ClusterSpec", "EvaluateRun", "HardwareSpec", "ModelSpec", "Plan", "PlanRun", "PlanSpace"]
