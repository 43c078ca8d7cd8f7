"""The list scheduler gives exactly the schedules of its reference implementation (the code
before the issue-15 speed-ups, ``reference_list_scheduler``): same start and end times, modes,
cores and makespans, bit for bit, on random DAGs and on real traced layer graphs."""

from __future__ import annotations

import dataclasses

import pytest
import reference_list_scheduler as reference
from hypothesis import given, settings
from schedule_helpers import problems, synthetic_layer

from archplace.cost.model import SystolicCostModel
from archplace.hw.presets import load_accelerator
from archplace.scheduling.list_scheduler import (
    _Graph,
    _greedy_pass,
    _replay_s,
    list_schedule,
    list_schedule_makespan_s,
    quick_lower_bound_s,
)
from archplace.scheduling.problem import ScheduleProblem
from archplace.workload.extract import ExtractOptions, extract_chain
from archplace.workload.zoo import load_model


def _check(problem: ScheduleProblem) -> None:
    expected = reference.list_schedule(problem)
    assert list_schedule(problem) == expected
    assert list_schedule_makespan_s(problem) == expected.makespan_s
    assert quick_lower_bound_s(problem) == reference.quick_lower_bound_s(problem)
    for targets in (0, 1):
        assert list_schedule(problem, max_targets=targets) == reference.list_schedule(
            problem, max_targets=targets)


# 120 examples in the default run, 400 in the slow one (CI runs both)
test_equal_to_the_reference_on_random_dags = settings(max_examples=120, deadline=None)(
    given(problems(max_ops=30))(_check))
test_equal_to_the_reference_on_random_dags_more = pytest.mark.slow(settings(max_examples=400, deadline=None)(
    given(problems(max_ops=30))(_check)))


@settings(max_examples=100, deadline=None)
@given(problems(max_ops=12, max_cores=2))
def test_every_pass_ends_no_earlier_than_the_path_floor(problem: ScheduleProblem) -> None:
    # the early stop's premise: no replayed pass ends before the floor, in floating point
    if not problem.ops:
        return
    graph = _Graph(problem)
    floor = graph.floor_s()
    (order, modes), greedy_s = _greedy_pass(graph, graph.levels())
    assert greedy_s >= floor
    assert _replay_s(graph, (order, modes)) == greedy_s
    assert reference._greedy(problem, problem.successors()).makespan_s == greedy_s
    target = quick_lower_bound_s(problem)
    for forward in (True, False):
        old = reference._profile_pass(problem, problem.successors(), target, forward)
        assert old.makespan_s >= floor


def test_equal_on_a_synthetic_layer() -> None:
    _check(synthetic_layer())


@pytest.mark.parametrize("model", [pytest.param("gpt2-xl", marks=pytest.mark.slow), "llama2-7b"])
def test_equal_on_traced_layer_graphs(model: str) -> None:
    spec = load_model(model).with_seq_len(512)
    tpu = load_accelerator("tpuv4")
    cost = SystolicCostModel()
    chips = [tpu, dataclasses.replace(tpu, tensor_cores=8, vector_cores=4),
             dataclasses.replace(tpu, tensor_cores=64, vector_cores=1024, array_rows=32, array_cols=32),
             dataclasses.replace(tpu, tensor_cores=1, vector_cores=1)]
    for micro_batch in (1, 4):
        chain = extract_chain(spec, ExtractOptions.of(micro_batch, 512))
        graphs = {id(g): g for layer in chain.layers for g in (layer.fwd, layer.bwd) if g.ops}
        for graph in graphs.values():
            for chip in chips:
                _check(ScheduleProblem.from_graph(graph, chip, cost))
