"""LayerCost's checks: Python ints and floats pass a fast path and are stored as given; every other
value (NumPy scalars, ints in float fields, bools, NaN, inf, negatives) takes the full conversion."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from archplace.base.errors import ConfigError
from archplace.placement.plan import LayerCost

FIELDS: dict[str, object] = dict(name="block.0", fwd_s=1.5e-3, bwd_s=3.0e-3, params=1000,
                                 activation_bytes=4096.0, input_bytes=512.0, boundary_bytes=512.0,
                                 working_bytes=2048.0, fwd_flop=1e9, bwd_flop=2e9,
                                 selective_recompute_s=2e-4, tp_comm_fwd_s=1e-4, tp_comm_bwd_s=2e-4,
                                 fp8_params=10, expert_params=20)

FLOATS = ("fwd_s", "bwd_s", "activation_bytes", "input_bytes", "boundary_bytes", "working_bytes",
          "fwd_flop", "bwd_flop", "selective_recompute_s", "tp_comm_fwd_s", "tp_comm_bwd_s",
          "selective_recompute_flop", "cp_comm_fwd_s", "cp_comm_bwd_s", "ep_comm_fwd_s", "ep_comm_bwd_s",
          "padding_fwd_flop", "padding_bwd_flop")


def _types(cost: LayerCost) -> dict[str, type]:
    return {name: type(getattr(cost, name)) for name in (*FLOATS, "params", "fp8_params", "expert_params")}


def test_python_numbers_stored_as_given():
    cost = LayerCost(**FIELDS)  # type: ignore[arg-type]
    assert all(getattr(cost, name) == value for name, value in FIELDS.items())
    assert set(_types(cost).items()) == {(name, float) for name in FLOATS} | {
        ("params", int), ("fp8_params", int), ("expert_params", int)}


def test_numpy_scalars_and_ints_converted():
    converted = {name: (np.float64(value) if isinstance(value, float) else np.int64(value)
                        if isinstance(value, int) else value) for name, value in FIELDS.items()}
    converted["activation_bytes"] = 4096  # an int in a float field
    cost = LayerCost(**converted)  # type: ignore[arg-type]
    assert cost == LayerCost(**FIELDS)  # type: ignore[arg-type]
    assert _types(cost) == _types(LayerCost(**FIELDS))  # type: ignore[arg-type]
    assert repr(cost) == repr(LayerCost(**FIELDS))  # type: ignore[arg-type]


def test_largest_float_accepted():
    assert LayerCost(**{**FIELDS, "working_bytes": sys.float_info.max}).working_bytes == sys.float_info.max


@pytest.mark.parametrize("name", ["fwd_s", "working_bytes", "ep_comm_bwd_s", "padding_fwd_flop"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1e-300, np.float64(math.nan), "1.0", True])
def test_bad_figures_refused(name: str, value: object):
    with pytest.raises(ConfigError, match=rf"^layer 'block.0': {name} must be a finite number >= 0, got "):
        LayerCost(**{**FIELDS, name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["params", "fp8_params", "expert_params"])
@pytest.mark.parametrize("value", [-1, True, 1.0, np.int64(-3)])
def test_bad_counts_refused(name: str, value: object):
    with pytest.raises(ConfigError, match=rf"^layer 'block.0': {name} must be an integer >= 0, got "):
        LayerCost(**{**FIELDS, name: value})  # type: ignore[arg-type]
