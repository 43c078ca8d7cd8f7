"""PHAZE's architecture exploration: designs in descending area, stopped by PHAZE's convergence rule.

Source.  Wang et al., "Integrated Hardware Architecture and Device Placement Search" (ICML
2024), section 4 (the solver iterates over the valid architecture configurations), and the
reference implementation github.com/msr-fiddle/phaze, ``Solver/solver.py``
(``sort_acc_configs_by_area`` and ``get_next_acc_config``), which we read to find the exact rule:

1. The designs are grouped into *area buckets* of a fixed width (``acc_group_range`` =
   10 000 µm² = 0.01 mm² there; our ``bucket_mm2``) and the buckets are visited from the
   largest area down; every design of a bucket is evaluated.
2. Each bucket keeps the best throughput of its feasible designs (-1 there when none is
   feasible; 0 here, the score of an infeasible design).
3. When a bucket is finished and another one remains, the search has *converged* when at least
   ``hysteresis`` buckets (``hysterisis_level`` = 5 there) have been visited and the bucket
   maxima of the last ``hysteresis`` buckets never increase (each >= the next, in visiting
   order).  Then it stops; the next bucket is not evaluated.  Otherwise it goes on, until every
   bucket is visited.

So the rule is not "no new incumbent for N designs" but "the per-area best has been
non-increasing for N consecutive area buckets": shrinking the chip has stopped paying off.

Adaptations (ours):

* Score.  PHAZE ranks by throughput averaged over the models of a run; we use ``ctx.score``
  (throughput, or throughput per watt for that objective; throughput for ``pareto``).
* Feasibility guard.  In PHAZE a run whose largest ``hysteresis`` buckets are all infeasible
  converges at once (-1 >= -1 ...) and returns nothing; here the rule only applies once a
  feasible design has been found (a positive incumbent), so such a run keeps going.
* Batches.  PHAZE evaluates one design at a time.  The rule is only checked at bucket
  boundaries, so evaluating a whole bucket at once changes nothing; to use parallel workers we
  also evaluate ahead: each call to ``ctx.evaluate`` gets whole buckets until it holds at least
  ``batch`` designs (default ``ctx.parallelism``), and the rule is then replayed bucket by
  bucket in order.  The stopping point is PHAZE's, and the designs of the same batch after it
  (fewer than ``batch`` plus one bucket) are set aside, not returned (nor named in the note;
  the search's result lists only the designs a strategy returns): the result is PHAZE's
  sequential one whatever the batch, so it never depends on the number of workers.  ``batch=1``
  (the default when ``ctx.parallelism`` is 1) reproduces PHAZE's evaluation calls exactly.
* Budget.  PHAZE has none; with ``ctx.budget`` the search also stops after that many designs,
  cutting the last bucket short if needed.
* Order inside a bucket: descending area, then name (PHAZE keeps its file order).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2

log = logging.getLogger(__name__)

DEFAULT_HYSTERESIS = 5
"""Buckets whose maxima must be non-increasing to stop (``hysterisis_level`` in PHAZE's solver)."""

DEFAULT_BUCKET_MM2 = 0.01
"""Width of an area bucket, mm² (``acc_group_range`` = 10 000 µm² in PHAZE's solver)."""

def area_buckets(designs: Sequence[Accelerator], bucket_mm2: float) -> list[list[Accelerator]]:
    """Designs grouped by ``floor(area / bucket_mm2)``, largest area first (PHAZE's order).

    Inside a bucket: descending area, then name.  Repeated designs are kept once.
    """
    unique = list(dict.fromkeys(designs))
    areas = {acc: area_mm2(acc) for acc in unique}
    ordered = sorted(unique, key=lambda acc: (-areas[acc], acc.name))
    buckets: list[list[Accelerator]] = []
    last_key: int | None = None
    for acc in ordered:
        key = math.floor(areas[acc] / bucket_mm2)
        if key != last_key:
            buckets.append([])
            last_key = key
        buckets[-1].append(acc)
    return buckets


def converged(maxima: Sequence[float], hysteresis: int) -> bool:
    """PHAZE's test: the last ``hysteresis`` bucket maxima never increase (and there are enough)."""
    if len(maxima) < hysteresis:
        return False
    window = maxima[-hysteresis:]
    return all(earlier >= later for earlier, later in zip(window, window[1:], strict=False))


class PhazeStrategy:
    """PHAZE's area-descending exploration with its convergence rule (module docstring).

    Args:
        hysteresis: number of consecutive area buckets whose best scores must be non-increasing
            to stop (PHAZE: 5).
        bucket_mm2: width of an area bucket in mm² (PHAZE: 0.01 mm²; in our spaces almost every
            bucket holds one design, or the HBM variants of one die, which have the same area).
        batch: least number of designs per ``ctx.evaluate`` call (whole buckets are added until it
            is reached; 1: exactly PHAZE's sequence); None: ``ctx.parallelism``.

    Raises:
        ValueError: a non-positive parameter.
    """

    name = "phaze"

    def __init__(self, hysteresis: int = DEFAULT_HYSTERESIS, bucket_mm2: float = DEFAULT_BUCKET_MM2,
                 batch: int | None = None) -> None:
        if hysteresis < 1 or (batch is not None and batch < 1) or not bucket_mm2 > 0:
            raise ValueError(f"phaze: hysteresis, bucket_mm2 and batch must be positive, got "
                             f"{hysteresis}, {bucket_mm2}, {batch}")
        self.hysteresis = hysteresis
        self.bucket_mm2 = bucket_mm2
        self.batch = batch

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        """Visit area buckets from the largest down until PHAZE's rule (or the budget) stops."""
        buckets = area_buckets(ctx.designs, self.bucket_mm2)
        total = sum(len(b) for b in buckets)
        budget = total if ctx.budget is None else max(0, min(ctx.budget, total))
        batch = self.batch if self.batch is not None else max(1, ctx.parallelism)
        results: list[DesignResult] = []
        maxima: list[float] = []  # best score of each finished bucket, in visiting order
        incumbent = 0.0
        queued = 0  # buckets whose designs have been sent for evaluation
        checked = 0  # buckets already replayed through the rule
        stop_after: int | None = None  # designs PHAZE would have evaluated when it stopped
        while stop_after is None and queued < len(buckets) and len(results) < budget:
            chunk: list[Accelerator] = []
            while queued < len(buckets) and len(chunk) < batch and len(results) + len(chunk) < budget:
                chunk.extend(buckets[queued][: budget - len(results) - len(chunk)])
                queued += 1
            start = len(results)
            results.extend(ctx.evaluate(chunk))
            scores = [ctx.score(r) for r in results[start:]]
            position = start
            while checked < queued:  # replay the rule bucket by bucket
                size = len(buckets[checked])
                done = scores[position - start: position - start + size]
                position += len(done)
                if len(done) < size:  # the budget cut this bucket short
                    break
                maxima.append(max(done))
                incumbent = max(incumbent, maxima[-1])
                checked += 1
                if checked < len(buckets) and incumbent > 0 and converged(maxima, self.hysteresis):
                    stop_after = position
                    break
        note = self._note(ctx, results, total, budget, stop_after, checked)
        log.info("phaze: %s", note)
        return StrategyOutcome(tuple(results[:stop_after]), note=note)

    def _note(self, ctx: StrategyContext, results: list[DesignResult], total: int, budget: int,
              stop_after: int | None, checked: int) -> str:
        pareto = (" (pareto: explored by throughput; the caller builds the front)"
                  if ctx.objective is Objective.PARETO else "")
        if stop_after is not None:
            ahead = len(results) - stop_after
            if ahead:  # logged, not in the note: the note, like the result, is the same for any batch
                log.info("phaze: %d designs evaluated ahead in the last batch set aside", ahead)
            return (f"converged after {checked} area buckets ({stop_after} of {total} designs): best "
                    f"score non-increasing over the last {self.hysteresis} buckets{pareto}")
        if len(results) >= total:
            return f"every design explored ({total}) without convergence{pareto}"
        return f"budget of {budget} designs exhausted ({len(results)} of {total} evaluated){pareto}"
