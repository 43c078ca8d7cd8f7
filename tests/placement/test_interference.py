"""Overlap that costs: the interference model, its charge in the time model, and the optimizer
step at the chip's HBM fraction."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.base.errors import ConfigError
from archplace.hw.cluster import Cluster
from archplace.hw.presets import load_accelerator
from archplace.placement.interference import HBM_BYTES_PER_WIRE_BYTE, NO_INTERFERENCE, Interference, slowed_s
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, Plan, Recompute, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.placement.zero import dp_tail_comm_s, segment_zero_comm_s

REL = 1e-12


def pair_time(c: float, t: float, f: float) -> float:
    """A collective of c s beside compute of t s (alone) that runs at rate 1 - f while the
    collective runs, simulated: when the pair ends."""
    if c * (1.0 - f) >= t:  # the compute finishes while the collective runs
        return c
    return c + (t - c * (1.0 - f))  # the rest of the compute runs alone


@pytest.mark.parametrize(("c", "t", "f", "exposed", "slowed"), [
    (2.0, 10.0, 0.25, 0.0, 0.5),   # hidden whole: still costs f c
    (10.0, 4.0, 0.25, 6.0, 0.0),   # sticks out by 6 > f c = 2.5: the slowed compute hides under it
    (5.0, 4.0, 0.5, 1.0, 1.5),     # sticks out by 1 < f c = 2.5: 4 + 1 + 1.5 = t + f c
    (3.0, 5.0, 0.0, 0.0, 0.0),     # no interference: free, as before
    (0.0, 5.0, 0.5, 0.0, 0.0),     # no collective, no slowdown
])
def test_one_collective_beside_one_compute_interval_by_hand(c, t, f, exposed, slowed):
    e = max(0.0, c - t)
    assert e == exposed
    got = float(slowed_s(f * c, e))
    assert got == slowed
    assert t + e + got == pytest.approx(pair_time(c, t, f), rel=REL)


@given(c=st.floats(0.0, 1e3), t=st.floats(0.0, 1e3), f=st.floats(0.0, 0.99))
def test_pair_formula_equals_the_simulation(c, t, f):
    e = max(0.0, c - t)
    assert t + e + float(slowed_s(f * c, e)) == pytest.approx(pair_time(c, t, f), rel=1e-9, abs=1e-9)


@given(c=st.floats(0.0, 1e3), extra=st.floats(0.0, 1e3), t=st.floats(0.0, 1e3), f=st.floats(0.0, 0.99))
def test_pair_time_never_decreases_when_comm_grows(c, extra, t, f):
    def charged(comm: float) -> float:
        e = max(0.0, comm - t)
        return t + e + float(slowed_s(f * comm, e))
    assert charged(c + extra) >= charged(c) - 1e-9 * max(1.0, c + extra + t)


def test_lost_compute_by_hand():
    # SM share alone: 20 of 100 SMs take 0.2 of a 3 s collective
    assert float(Interference(sm_share=0.2).lost_s(3.0, 2.0, (1.0, 1e-9), 8)) == pytest.approx(0.6, rel=REL)
    # a ring of 4 at 1.5e-9 s per byte of an all-reduce carries 2 * 3/4 / 1.5e-9 = 1e9 B/s on
    # each device's links; 2 s of transfer: 2e9 B, 6e9 B of HBM traffic, 0.6 s of 1e10 B/s.
    # phi = 0.5, 3 s in all: L = 0.5 * 0.2 * 3 + 0.5 * min(3, 0.6) = 0.6 s
    mixed = Interference(sm_share=0.2, memory_bound_share=0.5, hbm_bandwidth_bytes_per_s=1e10)
    assert HBM_BYTES_PER_WIRE_BYTE == 3.0
    assert mixed.wire_rate_bytes_per_s((0.0, 1.5e-9), 4) == pytest.approx(1e9, rel=REL)
    assert float(mixed.lost_s(3.0, 2.0, (1.0, 1.5e-9), 4)) == pytest.approx(0.6, rel=REL)
    # the HBM term is capped by the collective's own time: a 10x slower HBM, min(3, 6) = 3
    slow_hbm = dataclasses.replace(mixed, hbm_bandwidth_bytes_per_s=1e9)
    assert float(slow_hbm.lost_s(3.0, 2.0, (1.0, 1.5e-9), 4)) == pytest.approx(0.3 + 1.5, rel=REL)
    # one rank: no collective
    assert float(mixed.lost_s(3.0, 2.0, (1.0, 1.5e-9), 1)) == 0.0
    assert NO_INTERFERENCE.free and not mixed.free


@pytest.mark.parametrize("kwargs", [dict(sm_share=1.0), dict(sm_share=-0.1), dict(memory_bound_share=1.5),
                                    dict(hbm_bandwidth_bytes_per_s=0.0), dict(sm_share=math.nan)])
def test_bad_interference_is_refused(kwargs):
    with pytest.raises(ConfigError, match="interference: "):
        Interference(**kwargs)


def test_a_known_chip_and_a_design():
    a100 = load_accelerator("a100-80gb")
    assert a100.efficiency is not None
    got = Interference.of(a100)
    assert got.sm_share == 20 / 108
    assert got.memory_bound_share == 0.0
    assert got.hbm_bandwidth_bytes_per_s == a100.hbm_bandwidth_bytes_per_s * a100.efficiency.hbm
    # no efficiency section (a search-space design): free overlap
    assert Interference.of(dataclasses.replace(a100, efficiency=None)) == NO_INTERFERENCE
    # comm_sms = 0: free overlap
    none = dataclasses.replace(a100, efficiency=dataclasses.replace(a100.efficiency, collective_sms=0))
    assert Interference.of(none).free
    with pytest.raises(ConfigError, match="collective_sms must be in"):
        dataclasses.replace(a100.efficiency, collective_sms=108)


def test_bucketed_reduction_slows_the_backward_pass_by_hand():
    # 1e8 fp32 gradients (4e8 B) over dp = 8 at 1e-9 s per byte (an all-reduce): 0.4 s in three
    # buckets of 1.6e8, 1.6e8 and 0.8e8 B (Megatron's 40M-element bucket); over a 10 s backward
    # pass only the last bucket's 0.08 s is exposed. f = 0.5: 0.5 * 0.4 - 0.08 = 0.12 s slowed.
    kw = dict(zero_stage=0, grad_bytes=4, dp=8, params=1e8, backward_s=10.0)
    free = dp_tail_comm_s((0.0, 1e-9), overlap=True, **kw)
    assert float(free.exposed) == pytest.approx(0.08, rel=REL) and float(free.slowed) == 0.0
    costly = dp_tail_comm_s((0.0, 1e-9), overlap=True, interference=Interference(sm_share=0.5), **kw)
    assert float(costly.exposed) == float(free.exposed)
    assert float(costly.total) == pytest.approx(0.4, rel=REL)
    assert float(costly.slowed) == pytest.approx(0.12, rel=REL)
    # without overlap the reduction is exposed whole and slows nothing
    plain = dp_tail_comm_s((0.0, 1e-9), overlap=False, interference=Interference(sm_share=0.5), **kw)
    assert float(plain.exposed) == pytest.approx(0.4, rel=REL) and float(plain.slowed) == 0.0


def test_zero3_layer_collectives_by_hand():
    # an all-reduce of 3 s + 1.5e-3 s per byte (a ring of 4 at 0.5 s, 1e3 B/s); three layers of
    # 1000 parameters: AG = 1.5 + 0.75e-3 * 2000 = 3 s, RS = 1.5 + 0.75e-3 * 4000 = 4.5 s each,
    # and f = 0.5: each AG takes 1.5 compute-seconds while it runs, each RS 2.25.
    kw = dict(zero_stage=3, grad_bytes=4, dp=4, params=[1000.0] * 3)
    # fwd 10 s, bwd 20 s: forward AG0 0-3 exposed, AG1 3-6 and AG2 13-16 hidden: 3 exposed, 4.5 -
    # 3 = 1.5 slowed; backward AG2 0-3 and the last RS0 63-67.5 exposed (7.5), the rest hidden:
    # 3 x 3.75 - 7.5 = 3.75 slowed
    hidden = segment_zero_comm_s((3.0, 1.5e-3), fwd_s=[10.0] * 3, backward_s=[20.0] * 3,
                                 interference=Interference(sm_share=0.5), **kw)
    assert float(hidden.exposed[0, 2]) == 3.0 + 7.5
    assert float(hidden.total[0, 2]) == 3 * 10.5
    assert float(hidden.slowed[0, 2]) == pytest.approx(1.5 + 3.75, rel=REL)
    # fwd 1 s, bwd 2 s: the stream sets the pace (forward ends at 10, backward at 22.5): 7 + 16.5
    # exposed, more than the collectives' compute-seconds: nothing slowed
    exposed = segment_zero_comm_s((3.0, 1.5e-3), fwd_s=[1.0] * 3, backward_s=[2.0] * 3,
                                  interference=Interference(sm_share=0.5), **kw)
    assert float(exposed.exposed[0, 2]) == 7.0 + 16.5 and float(exposed.slowed[0, 2]) == 0.0
    # ZeRO-2: the RS after each backward, the last (60-64.5) exposed: 6.75 - 4.5 = 2.25 slowed
    two = segment_zero_comm_s((3.0, 1.5e-3), fwd_s=[10.0] * 3, backward_s=[20.0] * 3,
                              interference=Interference(sm_share=0.5), **{**kw, "zero_stage": 2})
    assert float(two.exposed[0, 2]) == 4.5 and float(two.slowed[0, 2]) == pytest.approx(2.25, rel=REL)


CLUSTER = Cluster(devices=4, devices_per_node=4, intra_node_bandwidth_bytes_per_s=1e3,
                  inter_node_bandwidth_bytes_per_s=1e3, intra_node_latency_s=0.5,
                  inter_node_latency_s=0.5)


def setup(**kw) -> TrainingSetup:
    return TrainingSetup(cluster=kw.pop("cluster", CLUSTER), global_batch=8, seq_len=10, hbm_bytes=1e12,
                         hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e12, **kw)


LAYERS = (
    LayerCost("a", fwd_s=10.0, bwd_s=20.0, params=1000, activation_bytes=10.0, input_bytes=1.0,
              boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12),
)


FSDP_LAYERS = tuple(dataclasses.replace(LAYERS[0], name=name) for name in "abc")
"""The three layers of test_zero3_layer_collectives_by_hand."""


def test_fsdp_plan_charges_the_slowed_compute_by_hand():
    # one stage of three layers, dp = 4, ZeRO-3 (test_zero3_layer_collectives_by_hand): per
    # micro-batch 90 s of compute, 10.5 s exposed (each pass's first AG, the last RS), 5.25 s
    # slowed; m = 2 micro-batches; the optimizer step 30 B * 3000 / 4 at 1e12 B/s x hbm_fraction 0.5
    plan = Plan(tp=1, pp=1, dp=4, micro_batch=1, recompute=Recompute.NONE, stages=((0, 2),), zero_stage=3)
    r = evaluate_plan(FSDP_LAYERS, setup(interference=Interference(sm_share=0.5), hbm_fraction=0.5), plan)
    (t,) = r.stage_times
    assert (t.dp_comm_s, t.dp_slowed_s) == (10.5, pytest.approx(5.25, rel=REL))
    assert t.total_s == pytest.approx(90.0 + 10.5 + 5.25, rel=REL)
    assert r.breakdown_s["overlap_slowdown"] == pytest.approx(2 * 5.25, rel=REL)
    step = 30 * 3000 / 4 / 0.5e12
    assert r.breakdown_s["optimizer"] == pytest.approx(step, rel=REL)
    assert r.iteration_time_s == pytest.approx(2 * 105.75 + step, rel=REL)
    assert r.comm_s["dp"] == pytest.approx({"total": 2 * 31.5, "exposed": 2 * 10.5, "hidden": 2 * 21.0,
                                            "slowed": 2 * 5.25}, rel=REL)
    assert list(r.breakdown_s) == list(BREAKDOWN_KEYS)
    assert PlanResult.from_dict(r.to_dict()) == r
    # the same plan with free overlap: nothing slowed
    free = evaluate_plan(FSDP_LAYERS, setup(), plan)
    assert free.breakdown_s["overlap_slowdown"] == 0.0
    assert free.iteration_time_s == pytest.approx(2 * 100.5 + 30 * 3000 / 4 / 1e12, rel=REL)


CHAIN = tuple(
    LayerCost(f"block.{k}", fwd_s=0.3 + 0.1 * k, bwd_s=0.6 + 0.2 * k, params=2000 + 500 * k,
              activation_bytes=10.0, input_bytes=1.0, boundary_bytes=100.0, working_bytes=0.0,
              fwd_flop=1e9, bwd_flop=2e9)
    for k in range(4))

PLANS = st.builds(
    lambda pp, zero, overlap: Plan(tp=1, pp=pp, dp=4 // pp, micro_batch=1, recompute=Recompute.NONE,
                                   stages=((0, 1), (2, 3)) if pp == 2 else ((0, 3),),
                                   zero_stage=zero, dp_overlap=overlap),
    st.sampled_from([1, 2]), st.sampled_from([0, 1, 2, 3]), st.booleans())


@settings(max_examples=60, deadline=None)
@given(plan=PLANS, bandwidth=st.sampled_from([1e4, 1e5, 1e6, 1e7]), slower=st.sampled_from([1.5, 4.0, 100.0]),
       share=st.sampled_from([0.0, 0.1, 0.3]), phi=st.sampled_from([0.0, 0.5, 1.0]))
def test_iteration_time_never_decreases_when_comm_grows(plan, bandwidth, slower, share, phi):
    interference = Interference(sm_share=share, memory_bound_share=phi, hbm_bandwidth_bytes_per_s=1e8)

    def time(bw: float) -> float:
        cluster = Cluster(devices=4, devices_per_node=2, intra_node_bandwidth_bytes_per_s=bw,
                          inter_node_bandwidth_bytes_per_s=bw / 2, intra_node_latency_s=1e-3,
                          inter_node_latency_s=1e-2)
        return evaluate_plan(CHAIN, setup(cluster=cluster, interference=interference), plan).iteration_time_s

    assert time(bandwidth / slower) >= time(bandwidth) * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(plan=PLANS, low=st.sampled_from([0.0, 0.05, 0.2]), more=st.sampled_from([0.0, 0.1, 0.5]))
def test_iteration_time_never_decreases_with_interference_and_zero_is_free(plan, low, more):
    base = evaluate_plan(CHAIN, setup(), plan)
    zero = evaluate_plan(CHAIN, setup(interference=Interference(sm_share=0.0, memory_bound_share=0.0,
                                                                hbm_bandwidth_bytes_per_s=1e8)), plan)
    assert zero == base  # comm_sms = 0: exactly today's numbers
    small = evaluate_plan(CHAIN, setup(interference=Interference(sm_share=low)), plan)
    large = evaluate_plan(CHAIN, setup(interference=Interference(sm_share=min(0.9, low + more))), plan)
    assert base.iteration_time_s <= small.iteration_time_s <= large.iteration_time_s * (1 + 1e-12)
    for result in (small, large):
        assert math.fsum(result.breakdown_s.values()) == pytest.approx(result.iteration_time_s, rel=1e-12)
        # hiding never costs more than it hides
        assert result.breakdown_s["overlap_slowdown"] <= result.comm_s["dp"]["hidden"] + 1e-12


def test_training_setup_refuses_a_bad_hbm_fraction():
    with pytest.raises(ConfigError, match="hbm_fraction must be a fraction"):
        setup(hbm_fraction=0.0)


def test_a_preset_file_may_set_the_overlap_fields(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "src/archplace/hw/presets/a100-80gb.yaml").read_text()
    path = tmp_path / "mine.yaml"
    path.write_text(text + '  collective_sms: {value: 16, source: "NCCL_DEBUG=INFO: 16 coll channels"}\n'
                           '  overlap_memory_bound_share: {value: 0.25, source: "a profile of our run"}\n')
    eff = load_accelerator(str(path)).efficiency
    assert eff is not None and (eff.collective_sms, eff.overlap_memory_bound_share) == (16, 0.25)
    path.write_text(text + "  collective_sms: 16\n")  # a figure without its source
    with pytest.raises(ConfigError, match="collective_sms"):
        load_accelerator(str(path))
    # the efficiency section round-trips through its dict, and older dicts without the fields load
    a100 = load_accelerator("a100-80gb").efficiency
    assert a100 is not None
    assert type(a100).from_dict(a100.to_dict()) == a100
    newer = ("collective_sms", "overlap_memory_bound_share")
    older = {k: v for k, v in a100.to_dict().items() if k not in newer}
    assert type(a100).from_dict(older) == a100
