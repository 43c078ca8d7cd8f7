"""WHAM's critical-path growth heuristic, as a beam search over the design grid.

Source.  Adnan et al., "Workload-Aware Hardware Accelerator Mining for Distributed Deep Learning
Training" (arXiv 2404.14632, 2024), abstract and sections 4-5: starting from a small
configuration, WHAM repeatedly gives more of a resource (tensor cores, their dimensions, vector
cores, buffer) to the operators on the critical path, within the area and power budgets; for
pipeline- and tensor-parallel training a local search keeps the top-k designs of every stage,
and a global search picks, from those sets, the design that maximises training throughput (or
throughput per TDP) across the stages.  We did not find WHAM's search code among the sources
we could read (the ``wham`` package vendored in github.com/msr-fiddle/phaze holds only its
operator scheduler), so the rule below follows the paper's description, adapted as follows.

Adaptation (ours):

* Moves.  A design is a point of the grid (tensor cores, array size, vector cores, buffer,
  HBM).  A move grows one of the first four resources by one step: the next larger value of
  that field present in ``ctx.designs`` with the other fields unchanged.  If that design is not
  in ``ctx.designs`` the move goes to the nearest larger value that is (this only skips designs
  removed by a lower area bound, such as PHAZE's ``0.3 * A_max`` floor; with an upper area or
  power budget a larger value is over budget too, so the move is simply blocked).
* Benefit of a move (local search).  As in WHAM, a move is judged by how much it shortens the
  bottleneck pipeline stage: for a beam design, its best plan is kept fixed and re-timed on
  every move's design (``ctx.pace``: the layers of that plan's TP width and micro-batch are
  re-costed and list-scheduled on the grown chip, and the slowest stage per micro-batch is
  taken; no plan search).  The moves that shorten it (for ``throughput-per-watt``: that raise
  pace^-1 / TDP) are ranked by the gain and the best ``moves_per_design`` of each beam design
  are kept (WHAM's top-k per stage).  Without ``ctx.pace``, or while the beam design has no
  feasible plan, every move is kept.
* Global search.  The kept moves are evaluated in full (one batch, in parallel): the placement
  engine re-balances the stages and re-chooses TP, PP, DP, micro-batch and recompute for every
  design, which is WHAM's choice across stages.  The beam is the best ``beam`` of them by
  ``ctx.score``; ties go to smaller die area, then name (WHAM prefers spending fewer
  resources).
* Start.  WHAM starts from the smallest configuration.  Here the start is the set of *minimal*
  designs of ``ctx.designs`` (those with no other candidate at most as large in every
  resource), all with the largest HBM capacity; when the smallest grid point is a candidate it
  is the only minimal design, as in WHAM.  With a lower area bound the smallest point is
  excluded and several minimal designs replace it; starting from all of them keeps every
  candidate reachable by growth (area and power grow with every resource, so the designs
  between a minimal design and a candidate are candidates too).  They are evaluated as the
  first batch and the best ``beam`` of them form the beam.
* HBM.  HBM capacity adds no die area (``archplace.hw.area``) and no power
  (``archplace.hw.power`` depends on HBM bandwidth, not capacity), and more capacity
  never removes a plan, so every design is taken at the largest capacity offered and HBM is
  not a resource the search grows.  (For ``throughput-per-watt`` a larger HBM can, rarely,
  make the solver prefer a faster plan on more devices; we accept that.)  The capacity is the
  largest offered for the same resources, normally the largest of the space.
* Stop.  After each step the search stops when no evaluated move beats the incumbent (the best
  score so far; while nothing feasible has been found every move counts as progress), when no
  move is left, or when ``ctx.budget`` designs have been evaluated.  The result is the best
  evaluated design.  For ``pareto`` the beam is ranked by throughput (``ctx.score``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from archplace.dse.evaluate import DesignResult
from archplace.dse.objective import Objective
from archplace.dse.strategy import StrategyContext, StrategyOutcome
from archplace.hw.accelerator import Accelerator
from archplace.hw.area import area_mm2
from archplace.hw.power import tdp_w

log = logging.getLogger(__name__)

DEFAULT_BEAM = 3
"""Designs kept per step (the paper keeps several designs per stage)."""

DEFAULT_MOVES = 2
"""Moves kept per beam design by their estimated shortening of the bottleneck stage (top-k)."""

# (tensor cores, (array rows, array cols), vector cores, buffer bytes): the resources WHAM grows.
GridKey = tuple[Any, ...]

RESOURCES = ("tensor_cores", "array", "vector_cores", "buffer")
"""The resources a move can grow, in the order candidates are listed."""


def grid_key(acc: Accelerator) -> GridKey:
    """The grown resources of a design (HBM capacity excluded)."""
    return (acc.tensor_cores, (acc.array_rows, acc.array_cols), acc.vector_cores, acc.buffer_bytes)


def _size(value: Any) -> tuple[float, ...]:
    """Sort key of a resource value: arrays by MACs, then rows; the others by value."""
    if isinstance(value, tuple):
        return (value[0] * value[1], value[0], value[1])
    return (float(value),)


class ResourceGrid:
    """The candidates indexed by their resources, each at the largest HBM capacity it is offered with.

    Args:
        designs: the candidates (``ctx.designs``); of designs with the same resources and HBM
            capacity, the first is kept.
    """

    def __init__(self, designs: Sequence[Accelerator]) -> None:
        self.by_key: dict[GridKey, Accelerator] = {}
        for acc in designs:
            kept = self.by_key.get(grid_key(acc))
            if kept is None or acc.hbm_bytes > kept.hbm_bytes:
                self.by_key[grid_key(acc)] = acc
        self.values: list[list[Any]] = [sorted({key[axis] for key in self.by_key}, key=_size)
                                        for axis in range(len(RESOURCES))]
        self._rank = [{value: i for i, value in enumerate(values)} for values in self.values]
        self._area = {acc: area_mm2(acc) for acc in self.by_key.values()}

    def area(self, acc: Accelerator) -> float:
        """Die area of a candidate, mm²."""
        return self._area[acc]

    def minimal(self) -> list[Accelerator]:
        """Candidates no other candidate is at most as large as in every resource, by area."""
        positions = {key: tuple(self._rank[axis][key[axis]] for axis in range(len(RESOURCES)))
                     for key in self.by_key}
        out = [acc for key, acc in self.by_key.items()
               if not any(other != key and all(a <= b for a, b in zip(pos, positions[key], strict=True))
                          for other, pos in positions.items())]
        return sorted(out, key=lambda acc: (self.area(acc), acc.name))

    def moves(self, acc: Accelerator) -> list[Accelerator]:
        """Designs one resource step larger than ``acc`` (order: :data:`RESOURCES`)."""
        key = grid_key(acc)
        out = []
        for axis in range(len(RESOURCES)):
            for value in self.values[axis][self._rank[axis][key[axis]] + 1:]:
                found = self.by_key.get(key[:axis] + (value,) + key[axis + 1:])
                if found is not None:
                    out.append(found)
                    break
        return out


class WhamStrategy:
    """WHAM's growth heuristic as a beam search (module docstring).

    Args:
        beam: designs kept per step.
        moves_per_design: moves of each beam design evaluated per step, the ones that shorten
            its bottleneck stage most (top-k).

    Raises:
        ValueError: a beam or move count smaller than 1.
    """

    name = "wham"

    def __init__(self, beam: int = DEFAULT_BEAM, moves_per_design: int = DEFAULT_MOVES) -> None:
        if beam < 1:
            raise ValueError(f"wham: beam must be at least 1, got {beam}")
        if moves_per_design < 1:
            raise ValueError(f"wham: moves_per_design must be at least 1, got {moves_per_design}")
        self.beam = beam
        self.moves_per_design = moves_per_design

    def _promising(self, ctx: StrategyContext, beam: list[DesignResult], grid: ResourceGrid,
                   seen: set[Accelerator]) -> tuple[list[Accelerator], int]:
        """The moves of the beam worth a full evaluation (module docstring: local search), and
        the number of moves estimated."""
        moves = {id(member): [m for m in grid.moves(member.accelerator) if m not in seen] for member in beam}
        timed = [member for member in beam if ctx.pace is not None and member.best is not None]
        timed_ids = {id(member) for member in timed}
        pairs = [(acc, member) for member in timed for acc in (member.accelerator, *moves[id(member)])]
        paces = iter(ctx.pace(pairs) if ctx.pace is not None and pairs else [])
        kept: list[Accelerator] = []
        for member in beam:
            if id(member) not in timed_ids:
                kept.extend(moves[id(member)])
                continue
            base = next(paces)
            gains = []
            for acc in moves[id(member)]:
                pace = next(paces)
                if base is None or pace is None or pace <= 0:
                    continue
                gain = base / pace
                if ctx.objective is Objective.PER_WATT:
                    gain *= tdp_w(member.accelerator) / tdp_w(acc)
                if gain > 1.0:
                    gains.append((-gain, grid.area(acc), acc.name, acc))
            kept.extend(entry[3] for entry in sorted(gains)[: self.moves_per_design])
        return kept, len(pairs) - len(timed)

    def run(self, ctx: StrategyContext) -> StrategyOutcome:
        """Grow the beam one resource step at a time until no move improves the best design."""
        grid = ResourceGrid(ctx.designs)
        budget = ctx.budget
        results: list[DesignResult] = []
        seen: set[Accelerator] = set()

        def rank_key(result: DesignResult) -> tuple[float, float, str]:
            return (-ctx.score(result), grid.area(result.accelerator), result.accelerator.name)

        def evaluate(candidates: list[Accelerator]) -> list[DesignResult]:
            fresh = [acc for acc in dict.fromkeys(candidates) if acc not in seen]
            if budget is not None:
                fresh = fresh[: max(0, budget - len(results))]
            seen.update(fresh)
            out = ctx.evaluate(fresh) if fresh else []
            results.extend(out)
            return out

        def exhausted() -> bool:
            return budget is not None and len(results) >= budget

        starts = grid.minimal()
        step = evaluate(starts)
        incumbent = max((ctx.score(r) for r in step), default=0.0)
        steps = estimated = 0
        reason = "no candidate design" if not starts else ""
        while not reason:
            if exhausted():
                reason = f"budget of {budget} designs exhausted"
                break
            beam = sorted(step, key=rank_key)[: self.beam]
            candidates, count = self._promising(ctx, beam, grid, seen)
            estimated += count
            if not candidates:
                reason = ("no move shortens the bottleneck stage" if count else
                          "no move left within the budgets")
                break
            step = evaluate(candidates)
            steps += 1
            best = max(ctx.score(r) for r in step)
            if best > incumbent or incumbent == 0.0:  # nothing feasible yet: keep growing
                incumbent = max(incumbent, best)
            elif exhausted():
                reason = f"budget of {budget} designs exhausted"
            else:
                reason = "no move improves the best design"
        pareto = " (pareto: grown by throughput)" if ctx.objective is Objective.PARETO else ""
        note = (f"stopped after {steps} growth steps and {len(results)} designs (beam {self.beam}, "
                f"{len(starts)} start designs, {estimated} moves timed): {reason}{pareto}")
        log.info("wham: %s", note)
        return StrategyOutcome(tuple(results), note=note)
