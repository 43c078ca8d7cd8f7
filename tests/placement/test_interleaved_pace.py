"""The analytical pace of an interleaved pipeline (a device's pace the mean of its chunks,
archplace.placement.pipeline) against Megatron-LM's schedule played out op by op
(archplace.placement.pipeline_timeline.simulate_pipeline)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from archplace.placement.pipeline_timeline import simulate_pipeline
from archplace.placement.plan import PipelineSchedule, Recompute


def _pace_s(forward: list[float], backward: list[float], pp: int, micro_batches: int) -> float:
    """(v m + p - 1) x the slowest device's mean chunk time (forward + backward)."""
    v = len(forward) // pp
    totals = [f + b for f, b in zip(forward, backward, strict=True)]
    return (v * micro_batches + pp - 1) * max(sum(totals[j::pp]) / v for j in range(pp))


def _simulated_s(forward: list[float], backward: list[float], pp: int, micro_batches: int) -> float:
    return simulate_pipeline(forward, backward, pp=pp, micro_batches=micro_batches,
                             schedule=PipelineSchedule.INTERLEAVED).makespan_s


SHAPES = st.tuples(st.sampled_from([2, 3, 4, 8]), st.sampled_from([2, 3, 4, 5]), st.sampled_from([1, 2, 4]))


@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, forward=st.floats(0.1, 10.0), ratio=st.floats(1.0, 3.0))
def test_exact_for_equal_chunks(shape: tuple[int, int, int], forward: float, ratio: float) -> None:
    pp, v, rounds = shape
    s, m = pp * v, pp * rounds
    f, b = [forward] * s, [forward * ratio] * s
    assert _pace_s(f, b, pp, m) == pytest.approx(_simulated_s(f, b, pp, m), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, data=st.data())
def test_within_10_percent_when_chunks_differ_by_at_most_10_percent(shape: tuple[int, int, int],
                                                                   data: st.DataObject) -> None:
    pp, v, rounds = shape
    s, m = pp * v, pp * rounds
    f = data.draw(st.lists(st.floats(1.0, 1.1), min_size=s, max_size=s))
    b = [2.0 * x for x in f]
    assert _pace_s(f, b, pp, m) == pytest.approx(_simulated_s(f, b, pp, m), rel=0.10)


def test_one_block_per_chunk_with_a_heavy_head_as_in_the_published_runs() -> None:
    """Nemotron-22B's shape (p 4, v 10, 16 micro-batches): 40 equal chunks but the last, which
    holds the LM head (3.6 x a block), and the first, with the embedding: within 1 %, where
    charging every slot at the slowest chunk is 2.9 x too slow."""
    pp, v, m = 4, 10, 16
    f = [1.0] * (pp * v)
    f[0], f[-1] = 1.05, 3.6
    b = [2.0 * x for x in f]
    simulated = _simulated_s(f, b, pp, m)
    assert _pace_s(f, b, pp, m) == pytest.approx(simulated, rel=0.01)
    assert (v * m + pp - 1) * max(x + y for x, y in zip(f, b, strict=True)) > 2.8 * simulated


@settings(max_examples=60, deadline=None)
@given(shape=SHAPES, extra=st.integers(1, 7), forward=st.floats(0.1, 10.0), ratio=st.floats(1.0, 3.0))
def test_exact_for_equal_chunks_when_pp_does_not_divide_m(shape: tuple[int, int, int], extra: int,
                                                           forward: float, ratio: float) -> None:
    """Megatron-Core's groups of N micro-batches (timing.micro_batch_group_size) for any m >= pp:
    the same (v m + p - 1) slots as when pp divides m, played out op by op."""
    pp, v, rounds = shape
    s, m = pp * v, pp * rounds + extra
    f, b = [forward] * s, [forward * ratio] * s
    assert _pace_s(f, b, pp, m) == pytest.approx(_simulated_s(f, b, pp, m), rel=1e-9)


GROUPS = [(8, 4, 4), (9, 4, 5), (6, 4, 6), (7, 4, 7), (10, 4, 5), (13, 4, 7), (20, 8, 10), (24, 16, 24),
          (40, 16, 20), (5, 5, 5)]
"""(m, pp, N) worked by hand from Megatron-Core's rule."""


@pytest.mark.parametrize(("m", "pp", "group"), GROUPS)
def test_the_group_size_is_the_smallest_megatron_core_accepts(m: int, pp: int, group: int) -> None:
    from archplace.placement.timing import micro_batch_group_size

    assert micro_batch_group_size(m, pp) == group
    assert m % group == 0 or m % group >= pp  # Megatron-Core's rule
    assert all(0 < m % n < pp for n in range(pp, group))  # and none smaller passes it


def test_the_search_finds_a_plan_whose_larger_m_runs_a_smaller_group() -> None:
    """Megatron-Core's group size N is not monotone in m (pp 2: m = 3 runs N = 3, m = 4 N = 2;
    pp 4: m = 6 runs N = 6, m = 12 N = 4), so neither is an interleaved device's in-flight count,
    2 (pp - 1) + (v - 1) N + 1 capped at v m. Eight one-layer chunks of 1e6 saved bytes, 12
    samples, room for 11.5e6 (ZeRO off: d shards nothing): at pp 2 (two layers a chunk), d = 4
    (m = 3) holds 6 chunk-micro-batches, 12e6 bytes, and does not fit, while d = 3 (m = 4) holds
    5, 10e6, and does; a search that took "d = 4 does not fit" to rule out every smaller d found
    no plan at all. The search and the brute force agree."""
    from test_cp_ep_engine import check_against_brute_force

    from archplace.hw.cluster import Cluster
    from archplace.placement.layer_cost import LayerCost
    from archplace.placement.memory import interleaved_in_flight_chunks
    from archplace.placement.plan import TrainingSetup
    from archplace.placement.solver import plan_search
    from archplace.workload.key import CostKey

    assert [interleaved_in_flight_chunks(0, 2, m, 2) for m in (3, 4)] == [6, 5]
    assert [interleaved_in_flight_chunks(0, 4, m, 2) for m in (6, 12)] == [12, 11]
    act = 1e6
    layers = [LayerCost(f"l{k}", fwd_s=1.0, bwd_s=2.0, params=1, activation_bytes=act,
                        input_bytes=act, boundary_bytes=1.0, working_bytes=0.0, fwd_flop=1e9,
                        bwd_flop=2e9) for k in range(8)]
    cluster = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e12,
                      inter_node_bandwidth_bytes_per_s=1e12, intra_node_latency_s=1e-9,
                      inter_node_latency_s=1e-9)
    setup = TrainingSetup(cluster=cluster, global_batch=12, seq_len=128, hbm_bytes=11.5 * act + 1e3,
                          hbm_bandwidth_bytes_per_s=1e15, peak_flop_per_s=1e12, dp_must_divide_batch=True)
    costs = {CostKey(1, 1, False): layers}
    options = dict(recomputes=[Recompute.NONE], schedules=[PipelineSchedule.INTERLEAVED], chunks=(2,),
                   zero_stages=(0,), dp_overlap=(False,))
    (best,) = plan_search(costs, setup, **options)
    assert (best.plan.pp, best.plan.dp, best.plan.chunks) == (2, 3, 2)
    check_against_brute_force((costs, setup, options, 3), note=lambda _: None)
