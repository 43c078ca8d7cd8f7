"""EP all-to-alls hidden behind another micro-batch's passes (``ep_comm_overlap``,
archplace.placement.ep_overlap): the pair formula, the unpaired warm-up slots, evaluate_plan on
a hand-computed chain, the search and the refusals, and the switch from the CLI on a small MoE
model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.small_moe import QWEN3

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.front import api
from archplace.hw.cluster import Cluster
from archplace.placement.ep_overlap import paired_passes, unpaired_slots
from archplace.placement.interference import Interference
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, PipelineSchedule, Plan, Recompute, TrainingSetup
from archplace.placement.solver import plan_search

REL = 1e-12


def test_compute_bound_pair_hides_everything_and_pays_the_sm_share() -> None:
    # F 10 s (4 of all-to-all), B 20 s (6): c = 10, t = 20, all hidden; L = 0.15 x 10 = 1.5
    # slowed, attributed 0.4 : 0.6 to the passes
    pair = paired_passes(10.0, 20.0, 4.0, 6.0, lost=1.5)
    assert pair.ep_fwd_s == 0.0 and pair.ep_bwd_s == 0.0
    assert pair.fwd_s == pytest.approx(10 - 4 + 0.6, rel=REL)
    assert pair.bwd_s == pytest.approx(20 - 6 + 0.9, rel=REL)
    assert (pair.hidden_s, pair.slowed_s) == (10.0, 1.5)
    assert pair.saving_s == pytest.approx(8.5, rel=REL)


def test_communication_bound_pair_takes_the_all_to_alls() -> None:
    # F 5 (4), B 8 (6): t = 3 < c = 10, exposed 7 (2.8 + 4.2), L = 1.5 < 7 slows nothing
    pair = paired_passes(5.0, 8.0, 4.0, 6.0, lost=1.5)
    assert pair.fwd_s + pair.bwd_s == pytest.approx(10.0, rel=REL)
    assert pair.ep_fwd_s == pytest.approx(2.8, rel=REL) and pair.ep_bwd_s == pytest.approx(4.2, rel=REL)
    assert (pair.hidden_s, pair.slowed_s) == (3.0, 0.0)


def test_a_dense_layer_is_left_as_it_is() -> None:
    pair = paired_passes(1.0, 2.0, 0.0, 0.0, lost=0.0)
    assert (pair.fwd_s, pair.bwd_s, pair.hidden_s, pair.saving_s) == (1.0, 2.0, 0.0, 0.0)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0),
       st.floats(0.0, 0.99))
def test_the_pair_takes_max_of_comm_and_compute_plus_lost(compute_f: float, compute_b: float,
                                                          ep_f: float, ep_b: float, share: float) -> None:
    """The pair takes max(c, t + L) (interference's formula), never more than the passes alone,
    and saves hidden - slowed."""
    fwd, bwd = compute_f + ep_f, compute_b + ep_b
    lost = share * (ep_f + ep_b)
    pair = paired_passes(fwd, bwd, ep_f, ep_b, lost)
    c, t = ep_f + ep_b, compute_f + compute_b
    assert pair.fwd_s + pair.bwd_s == pytest.approx(max(c, t + lost), rel=1e-9, abs=1e-12)
    assert pair.fwd_s + pair.bwd_s <= fwd + bwd + 1e-12
    assert fwd + bwd - (pair.fwd_s + pair.bwd_s) == pytest.approx(pair.saving_s, rel=1e-9, abs=1e-12)


def test_lost_time_of_the_sm_share_and_of_hbm() -> None:
    # 20 of 132 SMs; phi 0.5 and 3 x 1e9 wire bytes over 1e12 B/s HBM = 3 ms
    sms = Interference(sm_share=20 / 132)
    assert sms.lost_for_wire_s(0.01, 1e9) == pytest.approx(20 / 132 * 0.01, rel=REL)
    both = Interference(sm_share=20 / 132, memory_bound_share=0.5, hbm_bandwidth_bytes_per_s=1e12)
    assert both.lost_for_wire_s(0.01, 1e9) == pytest.approx(0.5 * 20 / 132 * 0.01 + 0.5 * 0.003, rel=REL)


def test_unpaired_slots_follow_megatron_cores_warm_up() -> None:
    interleaved = PipelineSchedule.INTERLEAVED
    # 2 (p - 1) + (v - 1) N + 1: p 4, v 2, N 4 -> 11 of the 16 chunk slots
    assert unpaired_slots(interleaved, 4, 2, 8, 4) == 11
    assert unpaired_slots(interleaved, 4, 3, 4, 4) == 12  # 6 + 8 + 1 = 15: the warm-up is every slot
    assert unpaired_slots(interleaved, 8, 4, 8, 8) == min(32, 14 + 24 + 1)
    assert unpaired_slots(PipelineSchedule.ONE_F_ONE_B, 1, 1, 64, 1) == 1  # the no-pipelining schedule
    assert unpaired_slots(PipelineSchedule.ONE_F_ONE_B, 4, 1, 64, 4) == 4
    assert unpaired_slots(PipelineSchedule.ONE_F_ONE_B, 4, 1, 2, 4) == 2
    assert unpaired_slots(PipelineSchedule.GPIPE, 4, 1, 8, 4) == 8 + 3


# Two MoE layers under the overlap (their LayerCost as costs.layer_costs writes it): paired passes
# of 3 + 6 s, of which the pair hid 2 s of all-to-all and slowed the computation by 0.5 s.
CLUSTER = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e11,
                  inter_node_bandwidth_bytes_per_s=1e10, intra_node_latency_s=1e-6,
                  inter_node_latency_s=1e-5)
SETUP = TrainingSetup(cluster=CLUSTER, global_batch=8, seq_len=100, hbm_bytes=1e12,
                      hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e13)


def _moe(name: str, hidden_s: float = 2.0, slowed_s: float = 0.5) -> LayerCost:
    return LayerCost(name, fwd_s=3.0, bwd_s=6.0, params=0, activation_bytes=10.0, input_bytes=1.0,
                     boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12,
                     ep_comm_fwd_s=0.25, ep_comm_bwd_s=0.5, ep_comm_hidden_s=hidden_s,
                     ep_overlap_slowed_s=slowed_s)


PAIRED = (_moe("l0"), _moe("l1"))


def test_one_device_pays_its_first_forward_and_last_backward_unpaired() -> None:
    # pp 1, dp 1, micro-batch 1: m = 8 slots of 18 s (2 x (3 + 6)); W0 = 1 slot runs unpaired,
    # adding its saving 2 x (2 - 0.5) = 3 s: 8 x 18 + 3 = 147 s (no parameters: no DP tail)
    result = evaluate_plan(PAIRED, SETUP, Plan(tp=1, pp=1, dp=1, micro_batch=1, stages=((0, 1),)))
    assert result.iteration_time_s == pytest.approx(147.0, rel=REL)
    b = result.breakdown_s
    assert b["ep_comm"] == pytest.approx(8 * 1.5 + 1 * 4.0, rel=REL)  # exposed + the slot's hidden
    assert b["overlap_slowdown"] == pytest.approx(7 * 1.0, rel=REL)  # the paired slots' slowdown
    assert b["compute"] == pytest.approx(8 * (18 - 1.5 - 1.0), rel=REL)
    assert sum(b[key] for key in BREAKDOWN_KEYS) == pytest.approx(result.iteration_time_s, rel=REL)
    ep = result.comm_s["ep"]
    assert ep["total"] == pytest.approx(8 * 5.5, rel=REL) and ep["exposed"] == pytest.approx(16.0, rel=REL)
    assert ep["slowed"] == pytest.approx(7.0, rel=REL)


def test_pipelined_devices_pay_their_warm_up_unpaired() -> None:
    # pp 2 (one layer each), 1F1B: T = 9 s + the empty boundary's 2 x 1 us, m = 8,
    # W0 = min(m, p) = 2 slots of saving 1.5 s: (8 + 1) x 9.000002 + 2 x 1.5 s
    plan = Plan(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 0), (1, 1)))
    assert evaluate_plan(PAIRED, SETUP, plan).iteration_time_s == pytest.approx(9 * 9.000002 + 3.0, rel=REL)
    gpipe = evaluate_plan(PAIRED, SETUP, Plan(tp=1, pp=2, dp=1, micro_batch=1, stages=((0, 0), (1, 1)),
                                              schedule=PipelineSchedule.GPIPE))
    # GPipe pairs nothing: (8 + 1) slots of the passes alone, 9.000002 + 1.5 s
    assert gpipe.iteration_time_s == pytest.approx(9 * 10.500002, rel=REL)


FULL = Plan(tp=1, pp=1, dp=1, micro_batch=1, recompute=Recompute.FULL, stages=((0, 1),))


def test_full_recompute_is_refused_and_left_out_of_the_search() -> None:
    with pytest.raises(ConfigError, match=r"^ep_comm_overlap does not run with full recomputation"):
        evaluate_plan(PAIRED, SETUP, FULL)
    found = plan_search({(1, 1, False): list(PAIRED)}, SETUP, recomputes=("none", "full"),
                        schedules=("1f1b",), top_k=5)
    assert found and all(r.plan.recompute is Recompute.NONE for r in found)
    with pytest.raises(ConfigError, match=r"^ep_comm_overlap does not run with full recomputation"):
        plan_search({(1, 1, False): list(PAIRED)}, SETUP, recomputes=("full",), schedules=("1f1b",))
    # layers without hidden all-to-alls keep full recomputation
    plain = [_moe("l0", 0.0, 0.0), _moe("l1", 0.0, 0.0)]
    evaluate_plan(plain, SETUP, FULL)


SMALL_RUN = {"hardware": "h100-80gb", "devices": 8, "global_batch": 64, "seq_len": 256, "tp": 1,
             "pp": 1, "dp": 8, "ep": 4, "micro_batch": 1, "zero_stage": 1}


def test_the_switch_hides_the_all_to_alls_of_a_traced_model(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A small Qwen3-MoE config at ep 4: the CLI's ``--ep-comm-overlap`` reaches the plan, hides
    most of the all-to-all time, and the iteration saves less than what it hides (the SMs the
    all-to-alls take, the unpaired slot)."""
    model = tmp_path / "config.json"
    model.write_text(json.dumps(QWEN3))
    argv = ["evaluate", "--model", str(model), "--hardware", "h100-80gb", "--devices", "8",
            "--global-batch", "64", "--seq-len", "256", "--tp", "1", "--pp", "1", "--dp", "8", "--ep", "4",
            "--micro-batch", "1", "--json"]
    out = {}
    for flag in ("--no-ep-comm-overlap", "--ep-comm-overlap"):
        with pytest.raises(SystemExit) as exc:
            main([*argv, flag])
        assert exc.value.code in (0, None)
        out[flag] = json.loads(capsys.readouterr().out)
        assert out[flag]["ep_comm_overlap"] is (flag == "--ep-comm-overlap")
    on, off = out["--ep-comm-overlap"], out["--no-ep-comm-overlap"]
    assert off["comm_s"]["ep"]["hidden"] == 0.0 and off["comm_s"]["ep"]["exposed"] > 0
    assert on["comm_s"]["ep"]["hidden"] > 0.5 * on["comm_s"]["ep"]["total"]
    assert on["comm_s"]["ep"]["total"] == pytest.approx(off["comm_s"]["ep"]["total"], rel=1e-9)
    saved = off["iteration_time_s"] - on["iteration_time_s"]
    assert 0 < saved < on["comm_s"]["ep"]["hidden"]
    with pytest.raises(ConfigError, match=r"^ep_comm_overlap: tpuv4 has no efficiency section"):
        api.evaluate(model=str(model), **{**SMALL_RUN, "hardware": "tpuv4"}, ep_comm_overlap=True)
    with pytest.raises(ConfigError, match=r"^ep_comm_overlap does not run with full recomputation"):
        api.evaluate(model=str(model), **SMALL_RUN, recompute="full", ep_comm_overlap=True)
