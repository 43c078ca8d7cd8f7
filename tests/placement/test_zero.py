"""ZeRO stages 2 and 3, the bucketed gradient reduction, HFU and the exposed communication."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.hw.cluster import Cluster
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import GradReduceDtype, LayerCost, Plan, Recompute, TrainingSetup
from archplace.placement.result import PlanResult
from archplace.placement.zero import bucketed_exposed_s, dp_tail_comm_s, segment_zero_comm_s

REL = 1e-12


def simulate_buckets(const_s: float, per_byte_s: float, total: float, bucket: float,
                     backward_s: float) -> float:
    """Bucket by bucket, on one stream: bucket i (its gradients produced evenly over the backward
    pass) starts when it is ready and the previous reduction is done; what is left after the
    backward pass."""
    count = math.ceil(total / bucket)
    clock = 0.0
    produced = 0.0
    for _ in range(count):
        size = min(bucket, total - produced)
        produced += size
        ready = backward_s * produced / total
        clock = max(clock, ready) + const_s + per_byte_s * size
    return max(0.0, clock - backward_s)


@given(const_s=st.sampled_from([0.0, 1e-5, 1e-3]), per_byte_s=st.sampled_from([1e-10, 1e-9, 5e-9]),
       total=st.integers(1, 10**9), bucket=st.sampled_from([1e6, 4e7, 1.6e8]),
       backward_s=st.sampled_from([0.0, 1e-3, 0.05, 0.5, 3.0]))
def test_bucketed_overlap_equals_a_bucket_by_bucket_simulation(const_s, per_byte_s, total, bucket,
                                                               backward_s):
    got = float(bucketed_exposed_s(const_s, per_byte_s, float(total), bucket, backward_s))
    want = simulate_buckets(const_s, per_byte_s, float(total), bucket, backward_s)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-15)
    # nothing to reduce without gradients
    assert float(bucketed_exposed_s(const_s, per_byte_s, 0.0, bucket, backward_s)) == 0.0


def test_bucketed_overlap_by_hand():
    # 10 buckets of 100 B at 1 s + 0.01 s/B (2 s each), produced over a 10 s backward pass: bucket
    # i is ready at i + 1 s, the stream is busy 20 s from t = 1: 11 s left after the backward pass
    assert float(bucketed_exposed_s(1.0, 0.01, 1000.0, 100.0, 10.0)) == 11.0
    # a 100 s backward pass hides all but the last bucket's 2 s
    assert float(bucketed_exposed_s(1.0, 0.01, 1000.0, 100.0, 100.0)) == 2.0


def test_tail_traffic_per_stage():
    cost = (2.0, 0.01)  # an all-reduce: 2 s + 0.01 s per byte; reduce-scatter / all-gather half
    kw = dict(grad_bytes=4, dp=8, params=100.0, backward_s=0.0, overlap=False)
    # (exposed, total, slowed): nothing hidden without overlap, so nothing slowed
    assert dp_tail_comm_s(cost, zero_stage=0, **kw) == (2.0 + 4.0, 2.0 + 4.0, 0.0)  # all-reduce of 400 B
    # RS 400 B + AG 200 B
    assert dp_tail_comm_s(cost, zero_stage=1, **kw) == (*(1.0 + 2.0 + 1.0 + 1.0,) * 2, 0.0)
    assert dp_tail_comm_s(cost, zero_stage=2, **kw) == (*(1.0 + 1.0,) * 2, 0.0)  # AG of the weights only
    assert dp_tail_comm_s(cost, zero_stage=3, **kw) == (0.0, 0.0, 0.0)
    assert dp_tail_comm_s(cost, zero_stage=1, **{**kw, "dp": 1}) == (0.0, 0.0, 0.0)
    bf16 = dp_tail_comm_s(cost, zero_stage=0, **{**kw, "grad_bytes": 2})
    assert bf16 == (2.0 + 2.0, 2.0 + 2.0, 0.0)


def test_segment_collectives_of_stages_2_and_3_by_hand():
    """Three layers of 100 parameters on 8 ranks, an all-reduce of 2 s + 0.01 s per byte: AG =
    1 + 0.005 * 200 = 2 s, RS = 1 + 0.005 * 400 = 3 s; forward 1, 4, 1 s, backward 2, 6, 2 s.

    Stage 3, forward: AG0 0-2, F0 2-3; AG1 2-4 (two layers gathered), F1 4-8; AG2 waits for F0
    to free its weights (3), runs 4-6 behind AG1, F2 8-9: 9 - 6 = 3 s exposed. Backward: AG2 0-2,
    B2 2-4; AG1 issued as B2 starts, 2-4; RS2 4-7; B1 4-10; AG0 issued at 4, behind RS2: 7-9;
    RS1 10-13; B0 10-12; RS0 13-16: 16 - 10 = 6 s exposed. 9 s in all (pairing each layer's
    collectives with its own compute gave 2 + 6 = 8), of 3 x (2 + 2 + 3) = 21 s of collectives.
    Stage 2: no gathers; RS2 4-7, RS1 8-11, RS0 11-14 after B0's end at 10: 4 s."""
    cost = (2.0, 0.01)
    kw = dict(grad_bytes=4, dp=8, params=np.array([100.0] * 3), fwd_s=np.array([1.0, 4.0, 1.0]),
              backward_s=np.array([2.0, 6.0, 2.0]))
    exposed, total, _ = segment_zero_comm_s(cost, zero_stage=3, **kw)
    assert exposed[0, 2] == 9.0 and total[0, 2] == 21.0
    assert exposed[1, 1] == 2.0 + 2.0 + 3.0  # one layer hides nothing: each pass's first AG, its last RS
    assert exposed[0, 1] == 3.0 + 6.0 and exposed[1, 2] == 2.0 + 5.0
    assert not np.tril(exposed, -1).any() and not np.tril(total, -1).any()
    exposed, total, _ = segment_zero_comm_s(cost, zero_stage=2, **kw)
    assert exposed[0, 2] == 4.0 and total[0, 2] == 9.0 and exposed[2, 2] == 3.0
    for stage in (0, 1):
        exposed, total, _ = segment_zero_comm_s(cost, zero_stage=stage, **kw)
        assert not exposed.any() and not total.any()


def test_a_layer_without_parameters_gathers_nothing_and_waits_for_nothing():
    """A layer without parameters between two with 100 (as above): it gathers and reduces nothing
    and its compute waits for no collective. Forward: AG0 0-2, F0 2-3, F1 3-7; AG2 waits for F0
    to free its weights (3), 3-5; F2 7-8: 2 s exposed. Backward: AG2 0-2, B2 2-4, RS2 4-7; B1
    4-10, the gather of layer 0 issued as it starts, behind RS2: 7-9; B0 10-12, RS0 12-15: 5 s."""
    cost = (2.0, 0.01)
    kw = dict(grad_bytes=4, dp=8, fwd_s=np.array([1.0, 4.0, 1.0]), backward_s=np.array([2.0, 6.0, 2.0]))
    exposed, total, _ = segment_zero_comm_s(cost, zero_stage=3, params=np.array([100.0, 0.0, 100.0]), **kw)
    assert exposed[0, 2] == 2.0 + 5.0 and total[0, 2] == 2 * (2.0 + 2.0 + 3.0)
    assert exposed[1, 1] == 0.0 and total[1, 1] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 50.0, 100.0, 400.0]), st.floats(0.0, 8.0),
                          st.floats(0.0, 8.0)), min_size=1, max_size=7), st.sampled_from([2, 3]))
def test_a_segment_is_bounded_by_its_streams_and_independent_of_the_rest(layers, stage):
    """Exposed per micro-batch of any segment: at least what the stream holds beyond the compute
    of each pass and at most all of the collectives; and the tables' entry for a segment is
    what the segment alone gives (the evaluator computes each stage on its own)."""
    params, fwd, bwd = (np.array(column) for column in zip(*layers, strict=True))
    cost = (2.0, 0.01)
    zero = segment_zero_comm_s(cost, zero_stage=stage, grad_bytes=4, dp=8, params=params, fwd_s=fwd,
                               backward_s=bwd)
    rs = np.where(params > 0, 1.0 + 0.005 * 4 * params, 0.0)
    ag = np.where(params > 0, 1.0 + 0.005 * 2 * params, 0.0) if stage == 3 else np.zeros_like(rs)
    n = len(layers)
    for i in range(n):
        for j in range(i, n):
            sl = slice(i, j + 1)
            low = (max(0.0, ag[sl].sum() - fwd[sl].sum())
                   + max(0.0, ag[sl].sum() + rs[sl].sum() - bwd[sl].sum()))
            assert low - 1e-9 <= zero.exposed[i, j] <= zero.total[i, j] + 1e-9
            alone = segment_zero_comm_s(cost, zero_stage=stage, grad_bytes=4, dp=8, params=params[sl],
                                        fwd_s=fwd[sl], backward_s=bwd[sl])
            assert alone.exposed[0, -1] == zero.exposed[i, j] and alone.total[0, -1] == zero.total[i, j]


CLUSTER = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e3,
                  inter_node_bandwidth_bytes_per_s=1e3, intra_node_latency_s=0.5,
                  inter_node_latency_s=0.5)
SETUP = TrainingSetup(cluster=CLUSTER, global_batch=8, seq_len=10, hbm_bytes=1e12,
                      hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e12)
LAYERS = (
    LayerCost("a", fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=10.0, input_bytes=1.0,
              boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12,
              selective_recompute_s=0.25, selective_recompute_flop=0.2e12),
    LayerCost("b", fwd_s=1.0, bwd_s=2.0, params=3000, activation_bytes=10.0, input_bytes=1.0,
              boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12),
)


def test_fsdp_plan_by_hand():
    # one stage, dp = 4 (a ring of 4 in one node): an all-reduce costs 2 * 3 * 0.5 = 3 s +
    # 2 * 3/4 / 1e3 = 1.5e-3 s per byte; all-gather and reduce-scatter half of each.
    # Layer a: AG = 1.5 + 0.75e-3 * 2000 = 3, RS = 1.5 + 0.75e-3 * 4000 = 4.5; layer b: AG 6, RS 10.5.
    # Per micro-batch, prefetched (zero.segment_zero_comm_s): forward AG_a 0-3, F_a 3-4, AG_b 3-9,
    # F_b 9-10: 10 - 2 = 8 exposed; backward AG_b 0-6, B_b 6-8, AG_a 6-9, RS_b 9-19.5, B_a 9-11,
    # RS_a 19.5-24: 24 - 4 = 20 exposed; 28 s of the 33 s of collectives.
    plan = Plan(tp=1, pp=1, dp=4, micro_batch=1, recompute=Recompute.NONE, stages=((0, 1),),
                zero_stage=3)
    r = evaluate_plan(LAYERS, SETUP, plan)
    (t,) = r.stage_times
    assert t.dp_comm_s == pytest.approx(28.0, rel=REL)
    assert t.dp_comm_total_s == pytest.approx((3 + 3 + 4.5) + (6 + 6 + 10.5), rel=REL)
    m = 2  # micro-batches: 8 / (1 * 4)
    assert r.breakdown_s["dp_comm"] == pytest.approx(m * 28.0, rel=REL)
    assert r.comm_s["dp"] == pytest.approx({"total": m * 33.0, "exposed": m * 28.0, "hidden": m * 5.0,
                                            "slowed": 0.0}, rel=REL)
    assert r.iteration_time_s == pytest.approx(m * (6.0 + 28.0) + 30 * 4000 / 4 / 1e12, rel=REL)
    (mem,) = r.memory  # 18 B / 4 per parameter + the window (2 * 2 + 4) * 3000
    assert (mem.weights, mem.gradients, mem.optimizer, mem.gathered) == (2000.0, 4000.0, 12000.0, 24000.0)
    # ZeRO-2: the reduce-scatters on the stream after each backward: B_b 0-2, RS_b 2-12.5, B_a
    # 2-4, RS_a 12.5-17: 17 - 4 = 13 exposed; the weights' all-gather once per iteration:
    # 1.5 + 0.75e-3 * 8000 = 7.5
    two = evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, zero_stage=2))
    assert two.stage_times[0].dp_comm_s == pytest.approx(13.0, rel=REL)
    assert two.breakdown_s["dp_comm"] == pytest.approx(m * 13.0 + 7.5, rel=REL)
    assert two.memory[0].gathered == 0.0 and two.memory[0].weights == 8000.0
    assert PlanResult.from_dict(r.to_dict()) == r


def test_hfu_counts_recomputed_flop_and_bf16_gradients_halve_the_buffer():
    plan = Plan(tp=1, pp=1, dp=4, micro_batch=1, recompute=Recompute.FULL, stages=((0, 1),))
    r = evaluate_plan(LAYERS, SETUP, plan)
    model_flop = 8 * 6e12  # 8 micro-batches of 1 sample across the replicas
    assert r.mfu == pytest.approx(model_flop / (r.iteration_time_s * 4 * 1e12), rel=REL)
    assert r.hfu == pytest.approx((model_flop + 8 * 2e12) / (r.iteration_time_s * 4 * 1e12), rel=REL)
    assert r.model_flop_per_s_per_device == pytest.approx(r.mfu * 1e12, rel=REL)
    selective = evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, recompute=Recompute.SELECTIVE))
    assert selective.hfu == pytest.approx((model_flop + 8 * 0.2e12) / (selective.iteration_time_s * 4e12),
                                          rel=REL)
    none = evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, recompute=Recompute.NONE))
    assert none.hfu == none.mfu
    bf16 = evaluate_plan(LAYERS, dataclasses.replace(SETUP, grad_reduce_dtype=GradReduceDtype.BF16),
                         dataclasses.replace(plan, grad_reduce_dtype=GradReduceDtype.BF16))
    assert bf16.memory[0].gradients == 2 * 4000 and r.memory[0].gradients == 4 * 4000
    # all-reduce of 2 B instead of 4 B per parameter: 3 + 1.5e-3 * 8000 vs 3 + 1.5e-3 * 16000
    assert bf16.breakdown_s["dp_comm"] == pytest.approx(15.0, rel=REL)
    assert r.breakdown_s["dp_comm"] == pytest.approx(27.0, rel=REL)


def test_the_stage_table_shows_the_zero_collectives_and_adds_up():
    """The per-segment table of ``evaluate`` and ``plan`` (issue #26: every segment's
    communication) has a ZeRO column with ZeRO-2/3, and its compute, recompute, p2p and ZeRO
    cells add up to the segment's total; without ZeRO-2/3 the column is left out."""
    from rich.console import Console

    from archplace.reporting.plan_tables import stage_time_table

    def rows(result: PlanResult) -> tuple[list[str], list[list[str]]]:
        console = Console(width=300, record=True)
        console.print(stage_time_table(result))
        lines = [line for line in console.export_text().splitlines() if "│" in line or "┃" in line]
        cells = [[cell.strip() for cell in line.strip("│┃ ").replace("┃", "│").split("│")] for line in lines]
        return cells[0], cells[1:]

    plan = Plan(tp=1, pp=1, dp=4, micro_batch=1, recompute=Recompute.NONE, stages=((0, 1),), zero_stage=3)
    header, body = rows(evaluate_plan(LAYERS, SETUP, plan))
    assert header == ["segment", "device", "layers", "compute", "of it TP comm", "recompute", "p2p",
                      "ZeRO comm", "total"]
    (row,) = body
    assert row[header.index("ZeRO comm")] == "28000.000"  # ms: test_fsdp_plan_by_hand's 28 s
    parts = sum(float(row[header.index(name)]) for name in ("compute", "recompute", "p2p", "ZeRO comm"))
    assert parts == pytest.approx(float(row[-1].rstrip(" *")), rel=1e-9)
    header, _ = rows(evaluate_plan(LAYERS, SETUP, dataclasses.replace(plan, zero_stage=1)))
    assert "ZeRO comm" not in header
