"""Per-device stage memory: 18 B/param Adam state, 1F1B in-flight counts, recompute."""

from __future__ import annotations

import pytest

from archplace.errors import ConfigError
from archplace.placement.memory import (
    MODEL_STATE_BYTES_PER_PARAM,
    in_flight_micro_batches,
    stage_memory,
)
from archplace.placement.plan import LayerCost, Recompute


def layer(name: str, params: int, act: float, inp: float, work: float) -> LayerCost:
    return LayerCost(name, fwd_s=1.0, bwd_s=2.0, params=params, activation_bytes=act,
                     input_bytes=inp, boundary_bytes=inp, working_bytes=work,
                     fwd_flop=1.0, bwd_flop=2.0)


def test_mixed_precision_adam_is_18_bytes_per_param():
    assert MODEL_STATE_BYTES_PER_PARAM == 18
    mem = stage_memory([layer("a", 1_000_000, 0.0, 0.0, 0.0)], stage=0, in_flight=1,
                       recompute=Recompute.NONE)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2e6, 4e6, 12e6)
    assert mem.weights + mem.gradients + mem.optimizer == 18 * 1_000_000
    assert mem.total == 18e6


@pytest.mark.parametrize(("pp", "m", "expected"), [
    (1, 1, [1]),
    (1, 8, [1]),
    (4, 8, [4, 3, 2, 1]),
    (4, 4, [4, 3, 2, 1]),
    (4, 2, [2, 2, 2, 1]),
    (5, 1, [1, 1, 1, 1, 1]),
    (3, 100, [3, 2, 1]),
])
def test_one_f_one_b_in_flight_counts(pp, m, expected):
    assert [in_flight_micro_batches(j, pp, m) for j in range(pp)] == expected


@pytest.mark.parametrize(("stage", "pp", "m"), [(-1, 2, 2), (2, 2, 2), (0, 0, 1), (0, 2, 0)])
def test_in_flight_rejects_bad_arguments(stage, pp, m):
    with pytest.raises(ConfigError):
        in_flight_micro_batches(stage, pp, m)


def test_activations_without_and_with_full_recompute():
    layers = [layer("a", 10, act=100.0, inp=7.0, work=30.0),
              layer("b", 20, act=300.0, inp=11.0, work=50.0),
              layer("c", 5, act=200.0, inp=13.0, work=40.0)]
    none = stage_memory(layers, stage=2, in_flight=3, recompute=Recompute.NONE)
    assert none.stage == 2
    assert none.activations == 3 * 600.0
    assert none.working == 50.0
    assert none.weights == 70.0 and none.gradients == 140.0 and none.optimizer == 420.0
    assert none.total == 70.0 + 140.0 + 420.0 + 1800.0 + 50.0
    full = stage_memory(layers, stage=2, in_flight=3, recompute=Recompute.FULL)
    # inputs of every in-flight micro-batch, plus the largest layer re-materialised
    assert full.activations == 3 * 31.0 + 300.0
    assert full.total == 70.0 + 140.0 + 420.0 + 393.0 + 50.0
    assert full.to_dict()["total"] == full.total


def test_stage_memory_rejects_empty_stage_and_zero_in_flight():
    with pytest.raises(ConfigError):
        stage_memory([], stage=0, in_flight=1, recompute=Recompute.NONE)
    with pytest.raises(ConfigError):
        stage_memory([layer("a", 1, 1.0, 1.0, 1.0)], stage=0, in_flight=0,
                     recompute=Recompute.NONE)
