"""Typed run specs: what to train, on what, and which plans (see :mod:`archplace.app`)."""

from archplace.specs.plan import Plan, PlanSpace
from archplace.specs.run import ClusterSpec, HardwareSpec, ModelSpec

__all__ = ["ClusterSpec", "HardwareSpec", "ModelSpec", "Plan", "PlanSpace"]
