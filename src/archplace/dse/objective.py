"""What a search maximises, and how designs are ranked.

* ``throughput``: samples/s of the design's best plan (PHAZE, Wang et al. ICML 2024).
* ``throughput-per-watt``: samples/s per watt of TDP of the devices the plan uses (WHAM,
  Adnan et al. 2024).
* ``pareto``: the Pareto front of (throughput up, die area down, TDP down); the front is
  listed by throughput, and "best" is its fastest member.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from archplace.dse.evaluate import DesignResult


class Objective(enum.StrEnum):
    """What the search maximises."""

    THROUGHPUT = "throughput"  # samples/s (PHAZE)
    PER_WATT = "throughput-per-watt"  # samples/s per watt of TDP of the devices used (WHAM)
    PARETO = "pareto"  # front of (throughput max, area min, TDP min)


def score(result: DesignResult, objective: Objective) -> float:
    """The scalar objective of a design (0 when infeasible); throughput for ``pareto``."""
    if objective is Objective.PER_WATT:
        return result.throughput_per_watt
    return result.throughput_samples_per_s


def pareto_key(result: DesignResult) -> tuple[float, float, float]:
    """(throughput samples/s, area mm², TDP W) of a design: maximise the first, minimise the others."""
    return (result.throughput_samples_per_s, result.area_mm2, result.tdp_w)


def dominates(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """True when ``a`` is at least as good as ``b`` in every figure and better in one
    (throughput up, area down, TDP down)."""
    no_worse = a[0] >= b[0] and a[1] <= b[1] and a[2] <= b[2]
    return no_worse and a != b


def pareto_front(results: Sequence[DesignResult]) -> tuple[DesignResult, ...]:
    """Feasible designs that no other feasible design dominates, by throughput (desc), then area.

    Designs with identical figures are all kept.  O(n²) in the number of feasible designs.
    """
    feasible = [r for r in results if r.best is not None]
    keys = [pareto_key(r) for r in feasible]
    front = [r for r, k in zip(feasible, keys, strict=True) if not any(dominates(o, k) for o in keys)]
    return tuple(sorted(front, key=lambda r: (-r.throughput_samples_per_s, r.area_mm2, r.tdp_w,
                                              r.accelerator.name)))


def rank(results: Sequence[DesignResult], objective: Objective = Objective.THROUGHPUT
         ) -> tuple[DesignResult, ...]:
    """Feasible designs by the objective (desc), ties by area (asc) then name; infeasible last.

    For ``pareto`` the front comes first (by throughput), then the dominated designs.
    """
    ordered = tuple(sorted(results, key=lambda r: (r.best is None, -score(r, objective),
                                                   r.area_mm2, r.accelerator.name)))
    if objective is not Objective.PARETO:
        return ordered
    front = pareto_front(ordered)
    names = {r.accelerator.name for r in front}
    return front + tuple(r for r in ordered if r.accelerator.name not in names)
