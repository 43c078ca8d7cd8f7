"""The plan search drops the variants whose plans all have a twin that is as fast, fits
whenever they do and ranks first (GPipe beside 1F1B; DP overlap at ZeRO 2 and 3 reducing every
micro-batch without hybrid sharding): the top plan is the same with and without them."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_helpers import chains, setups

from archplace.base.errors import InfeasibleError
from archplace.placement import solver
from archplace.placement.candidates import Variant
from archplace.placement.plan import CostKey, GradSync, PipelineSchedule
from archplace.placement.solver import plan_search, undominated

ONE, GPIPE, INTER = PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.GPIPE, PipelineSchedule.INTERLEAVED


def test_which_variants_are_dropped() -> None:
    every = [Variant(s, v, z, o) for s, v in ((ONE, 1), (GPIPE, 1), (INTER, 2))
             for z in range(4) for o in (False, True)]
    kept = undominated(every)
    assert all(v.schedule is not GPIPE for v in kept)
    assert {(v.zero_stage, v.overlap) for v in kept if v.schedule is ONE} == {
        (0, False), (0, True), (1, False), (1, True), (2, False), (3, False)}
    assert len(kept) == 2 * 6
    # nothing to fall back on: GPipe alone, overlap alone, are kept
    alone = [Variant(GPIPE, 1, 3, True), Variant(INTER, 2, 2, True)]
    assert undominated(alone) == alone


def test_overlap_is_kept_where_the_tail_has_a_reduction() -> None:
    """Reducing once per iteration (grad_sync iteration) or all-reducing across hybrid-sharding
    replicas, ZeRO 2 and 3 have a bucketed reduction in the tail: overlap changes the time."""
    once = [Variant(ONE, 1, z, o, GradSync.ITERATION) for z in (2, 3) for o in (False, True)]
    assert undominated(once) == once
    every = [Variant(ONE, 1, z, o) for z in (2, 3) for o in (False, True)]
    assert undominated(every, replicas=2) == every
    assert [v.overlap for v in undominated(every)] == [False, False]


def _top(costs: dict[CostKey, list], setup) -> object:
    try:
        (best,) = plan_search(costs, setup, top_k=1)
    except InfeasibleError as exc:
        return type(exc).__name__
    return best.plan, best.iteration_time_s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_top_plan_is_the_same_with_every_variant(data: st.DataObject) -> None:
    layers = data.draw(chains(max_layers=5))
    setup = data.draw(setups(layers, max_devices=8))
    setup = replace(setup, grad_sync=data.draw(st.sampled_from(list(GradSync))))
    costs = {CostKey(data.draw(st.sampled_from([1, 2])), data.draw(st.sampled_from([1, 2])), False): layers}
    fast = _top(costs, setup)
    event("a plan" if isinstance(fast, tuple) else "infeasible")
    with mock.patch.object(solver, "undominated", lambda variants, replicas=1: list(variants)):
        every = _top(costs, setup)
    assert fast == every
