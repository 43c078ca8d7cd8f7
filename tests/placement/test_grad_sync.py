"""When the DP gradients are reduced (``Plan.grad_sync``, issue #26 item 4): hand-computed cases
on a chain of three identical layers, auto against each stage's explicit default, the plan search
against the brute force, and the command line.

The chain: three layers of 1,000 parameters, forward 1 s, backward 2 s, no activations to speak
of; 8 devices in one node at 1e3 B/s and 0.5 s a hop. On dp = 4 (one ring) an all-reduce costs
2 x 3 x 0.5 = 3 s + 2 x 3/4 / 1e3 = 1.5e-3 s per byte; a reduce-scatter or an all-gather half
of each (:mod:`archplace.placement.zero`). fp32 gradients: G = 4 B, W = 2 B per parameter. A
global batch of 8 at micro-batch 1 on dp = 4: m = 2 micro-batches.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_helpers import brute_force, chains, check_ranking, setups
from rich.console import Console

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.front import api
from archplace.hw.cluster import Cluster
from archplace.placement.downset_dp import dag_plan
from archplace.placement.layer_graph import LayerGraph
from archplace.placement.pipeline import evaluate_plan
from archplace.placement.plan import (
    CostKey,
    GradSync,
    LayerCost,
    PipelineSchedule,
    Plan,
    Recompute,
    TrainingSetup,
)
from archplace.placement.result import PlanResult
from archplace.placement.solver import plan_search
from archplace.placement.zero import reduces_every_micro_batch, shard_divisors
from archplace.reporting.plan_tables import plan_label, stage_time_table
from cli_helpers import run as cli

REL = 1e-12
CLUSTER = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e3,
                  inter_node_bandwidth_bytes_per_s=1e3, intra_node_latency_s=0.5, inter_node_latency_s=0.5)
SETUP = TrainingSetup(cluster=CLUSTER, global_batch=8, seq_len=10, hbm_bytes=1e12,
                      hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e12)
LAYERS = tuple(LayerCost(f"block{k}", fwd_s=1.0, bwd_s=2.0, params=1000, activation_bytes=10.0,
                         input_bytes=1.0, boundary_bytes=0.0, working_bytes=0.0, fwd_flop=1e12,
                         bwd_flop=2e12) for k in range(3))
M = 2  # micro-batches
COMPUTE = 3 * (1.0 + 2.0)  # the segment's forward and backward passes, per micro-batch
ALL_REDUCE = 3.0 + 1.5e-3 * (4 * 3000)  # the gradients of the chain: 21 s
REDUCE_SCATTER = 1.5 + 0.75e-3 * (4 * 3000)  # 10.5 s
ALL_GATHER = 1.5 + 0.75e-3 * (2 * 3000)  # the weights: 6 s
STEP = 30 * 3000 / 1e12  # Adam's step streams 30 B per parameter at 1e12 B/s


def run(zero_stage: int, grad_sync: GradSync, layers: tuple[LayerCost, ...] = LAYERS,
        setup: TrainingSetup = SETUP, **changes: object) -> PlanResult:
    """evaluate_plan of one stage of the three layers on dp = 4 (``changes``: other plan fields)."""
    plan = Plan(**{"tp": 1, "pp": 1, "dp": 4, "micro_batch": 1, "recompute": Recompute.NONE,
                   "stages": ((0, 2),), "zero_stage": zero_stage, "grad_sync": grad_sync,
                   **changes})  # type: ignore[arg-type]
    return evaluate_plan(layers, dataclasses.replace(setup, grad_sync=grad_sync), plan)


def test_when_each_stage_reduces() -> None:
    assert [reduces_every_micro_batch(z) for z in range(4)] == [False, False, True, True]
    assert [reduces_every_micro_batch(z, "iteration") for z in range(4)] == [False] * 4
    assert [reduces_every_micro_batch(z, GradSync.MICRO_BATCH) for z in range(4)] == [True] * 4
    # gradients accumulated over the micro-batches are held unsharded
    assert [shard_divisors(z, 4, GradSync.ITERATION) for z in range(4)] == [
        (1, 1, 1), (1, 1, 4), (1, 1, 4), (4, 1, 4)]
    assert [shard_divisors(z, 4, GradSync.MICRO_BATCH) for z in range(4)] == [
        shard_divisors(z, 4) for z in range(4)]


def test_stage_0_reducing_every_micro_batch_runs_m_all_reduces() -> None:
    """DDP without no_sync: each micro-batch all-reduces its 12,000 B of gradients (21 s) in the
    segment's time; the tail keeps the optimizer step only. Auto reduces once, in the tail."""
    every = run(0, GradSync.MICRO_BATCH)
    (time,) = every.stage_times
    assert (time.dp_comm_s, time.dp_comm_total_s) == (ALL_REDUCE, ALL_REDUCE)
    assert time.total_s == COMPUTE + ALL_REDUCE
    assert every.breakdown_s["dp_comm"] == M * ALL_REDUCE
    assert every.iteration_time_s == pytest.approx(M * (COMPUTE + ALL_REDUCE) + STEP, rel=REL)
    assert every.comm_s["dp"]["total"] == M * ALL_REDUCE
    once = run(0, GradSync.AUTO)
    assert once.breakdown_s["dp_comm"] == ALL_REDUCE and once.stage_times[0].dp_comm_s == 0.0
    assert once.iteration_time_s == pytest.approx(M * COMPUTE + ALL_REDUCE + STEP, rel=REL)
    # one bucket (Megatron-LM's 40M elements) holds the gradients: overlap hides none of it
    assert run(0, GradSync.MICRO_BATCH, dp_overlap=True).iteration_time_s == every.iteration_time_s
    assert every.memory == once.memory
    console = Console(width=300, record=True)
    console.print(stage_time_table(every))
    text = console.export_text()
    assert "DP comm" in text and "21000.000" in text  # ms


def test_the_per_micro_batch_reduction_sets_the_pipeline_pace() -> None:
    """pp = 2 (layer 0; layers 1-2), dp = 4 on ranks 2 apart (one ring in the node): each
    segment's time gains its own all-reduce per micro-batch (3 + 1.5e-3 x 4,000 = 9 s, 3 +
    1.5e-3 x 8,000 = 15 s), and the iteration is (m + p - 1) x the slower segment: the bubble
    pays it too. Auto all-reduces once, in the tail, the larger device's 15 s."""
    two = {"tp": 1, "pp": 2, "dp": 4, "micro_batch": 1, "stages": ((0, 0), (1, 2))}
    auto = evaluate_plan(LAYERS, SETUP, Plan(**two))  # type: ignore[arg-type]
    setup = dataclasses.replace(SETUP, grad_sync=GradSync.MICRO_BATCH)
    every = evaluate_plan(LAYERS, setup, Plan(**two, grad_sync=GradSync.MICRO_BATCH))  # type: ignore[arg-type]
    reductions = (9.0, 15.0)
    for was, now, reduce in zip(auto.stage_times, every.stage_times, reductions, strict=True):
        assert now.dp_comm_s == reduce and now.total_s == pytest.approx(was.total_s + reduce, rel=REL)
    slowest = max(t.total_s for t in every.stage_times)
    assert every.iteration_time_s == pytest.approx((M + 2 - 1) * slowest + 30 * 2000 / 1e12, rel=REL)
    assert every.breakdown_s["dp_comm"] == M * 15.0 and every.breakdown_s["bubble"] == slowest
    assert auto.breakdown_s["dp_comm"] == 15.0


def test_stage_1_reducing_every_micro_batch_keeps_one_all_gather() -> None:
    every = run(1, GradSync.MICRO_BATCH)
    assert every.stage_times[0].dp_comm_s == REDUCE_SCATTER
    assert every.breakdown_s["dp_comm"] == M * REDUCE_SCATTER + ALL_GATHER
    assert every.iteration_time_s == pytest.approx(M * (COMPUTE + REDUCE_SCATTER) + ALL_GATHER + STEP / 4,
                                                   rel=REL)
    assert run(1, GradSync.AUTO).breakdown_s["dp_comm"] == REDUCE_SCATTER + ALL_GATHER


def test_stage_2_reducing_once_holds_full_gradients_and_reduce_scatters_in_the_tail() -> None:
    """FSDP's no_sync at ZeRO-2: the 12,000 B of gradients are kept whole (auto: 3,000 B, a
    quarter), nothing is reduced per micro-batch, and the tail reduce-scatters them once (10.5 s)
    before the weights' all-gather (6 s): ZeRO-1's time and memory."""
    once = run(2, GradSync.ITERATION)
    (mem,) = once.memory
    assert (mem.weights, mem.gradients, mem.optimizer, mem.gathered) == (6000.0, 12000.0, 9000.0, 0.0)
    assert run(2, GradSync.AUTO).memory[0].gradients == 3000.0
    assert once.stage_times[0].dp_comm_s == 0.0 and once.stage_times[0].dp_comm_total_s == 0.0
    assert once.breakdown_s["dp_comm"] == REDUCE_SCATTER + ALL_GATHER
    assert once.iteration_time_s == pytest.approx(M * COMPUTE + REDUCE_SCATTER + ALL_GATHER + STEP / 4,
                                                  rel=REL)
    stage_1 = run(1, GradSync.AUTO)
    assert once.iteration_time_s == stage_1.iteration_time_s and once.memory == stage_1.memory
    assert plan_label(once).endswith(" zero2 sync=iteration") and "sync" not in plan_label(stage_1)


def test_stage_2_reducing_once_is_bucketed_as_stage_1() -> None:
    """With dp_overlap the once-per-iteration reduce-scatter runs bucket by bucket over the last
    backward pass exactly as ZeRO-1's: 3e8 parameters fill 7.5 of Megatron-LM's 160 MB buckets,
    and on fast links all but the last hide behind the 6 s backward pass."""
    big = tuple(dataclasses.replace(layer, params=100_000_000) for layer in LAYERS)
    fast = dataclasses.replace(SETUP, cluster=Cluster(8, 8, 1e11, 1e11, 1e-5, 1e-5))
    once = run(2, GradSync.ITERATION, layers=big, setup=fast, dp_overlap=True)
    stage_1 = run(1, GradSync.AUTO, layers=big, setup=fast, dp_overlap=True)
    assert once.breakdown_s == stage_1.breakdown_s and once.comm_s == stage_1.comm_s
    exposed = run(2, GradSync.ITERATION, layers=big, setup=fast).breakdown_s["dp_comm"]
    assert once.breakdown_s["dp_comm"] < exposed


def test_stage_3_reducing_once_keeps_the_all_gathers() -> None:
    """ZeRO-3 with no_sync: every micro-batch still all-gathers each layer's weights before its
    forward and its backward pass (3 s each), prefetched as FSDP does, but reduce-scatters nothing.
    Forward: AG0 0-3, F0 3-4, AG1 3-6, F1 6-7, AG2 6-9 (layer 0's weights freed at 4), F2 9-10:
    10 - 3 = 7 s exposed. Backward: AG2 0-3, B2 3-5, AG1 3-6, B1 6-8, AG0 6-9, B0 9-11: 11 - 6 =
    5 s. The tail reduce-scatters the 12,000 B of whole gradients once (10.5 s)."""
    once = run(3, GradSync.ITERATION)
    (time,) = once.stage_times
    assert (time.dp_comm_s, time.dp_comm_total_s) == (7.0 + 5.0, 6 * 3.0)
    assert once.breakdown_s["dp_comm"] == M * 12.0 + REDUCE_SCATTER
    assert once.iteration_time_s == pytest.approx(M * (COMPUTE + 12.0) + REDUCE_SCATTER + STEP / 4, rel=REL)
    (mem,) = once.memory  # weights and optimizer sharded, gradients whole, the window of two layers
    assert (mem.weights, mem.gradients, mem.optimizer, mem.gathered) == (1500.0, 12000.0, 9000.0, 8000.0)
    auto = run(3, GradSync.AUTO)  # + each layer's reduce-scatter of 4,000 B (4.5 s) per micro-batch
    assert auto.stage_times[0].dp_comm_total_s == 3 * (3.0 + 3.0 + 4.5) and auto.memory[0].gradients == 3000.0
    assert auto.breakdown_s["dp_comm"] == M * auto.stage_times[0].dp_comm_s


@pytest.mark.parametrize("zero_stage", [0, 1, 2, 3])
@pytest.mark.parametrize("overlap", [False, True])
def test_auto_is_each_stages_default(zero_stage: int, overlap: bool) -> None:
    """auto is iteration at ZeRO 0 and 1, micro_batch at 2 and 3, figure for figure (pp = 2, with
    interference); only the plan's own field differs, and auto is left out of its JSON."""
    explicit = GradSync.ITERATION if zero_stage <= 1 else GradSync.MICRO_BATCH
    setup = dataclasses.replace(SETUP, interference=dataclasses.replace(SETUP.interference, sm_share=0.2))
    two = {"pp": 2, "stages": ((0, 0), (1, 2)), "dp_overlap": overlap}
    auto = run(zero_stage, GradSync.AUTO, setup=setup, **two)
    same = run(zero_stage, explicit, setup=setup, **two)
    assert {**auto.to_dict(), "plan": None} == {**same.to_dict(), "plan": None}
    assert "grad_sync" not in auto.plan.to_dict() and same.plan.to_dict()["grad_sync"] == explicit.value
    assert Plan.from_dict(same.plan.to_dict()) == same.plan


def test_a_plan_must_agree_with_the_setup() -> None:
    with pytest.raises(ConfigError, match="plan: grad_sync iteration but the setup prices auto"):
        evaluate_plan(LAYERS, SETUP, Plan(tp=1, pp=1, dp=4, micro_batch=1, stages=((0, 2),),
                                          grad_sync=GradSync.ITERATION))
    with pytest.raises(ConfigError, match="plan.grad_sync: unknown grad_sync 'never'"):
        Plan(tp=1, pp=1, dp=4, micro_batch=1, grad_sync="never")  # type: ignore[arg-type]


@pytest.mark.parametrize("sync", [GradSync.ITERATION, GradSync.MICRO_BATCH])
def test_the_search_of_the_hand_chain_is_the_brute_forces(sync: GradSync) -> None:
    setup = dataclasses.replace(SETUP, grad_sync=sync)
    costs = {CostKey(1, 1, False): list(LAYERS)}
    options = {"recomputes": [Recompute.NONE], "schedules": [PipelineSchedule.ONE_F_ONE_B],
               "chunks": (2,), "zero_stages": (0, 1, 2, 3), "dp_overlap": (False, True)}
    brute = brute_force(costs, setup, recomputes=options["recomputes"], schedules=options["schedules"],
                        zeros=options["zero_stages"], overlaps=options["dp_overlap"])
    found = plan_search(costs, SETUP, top_k=4, grad_sync=sync.value, **options)  # type: ignore[arg-type]
    check_ranking(found, brute, 4)
    assert all(result.plan.grad_sync is sync for result in found)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_search_with_grad_sync_given_is_the_brute_forces(data: st.DataObject) -> None:
    layers = data.draw(chains(max_layers=4))
    setup = data.draw(setups(layers, max_devices=6, grad_syncs=(GradSync.ITERATION, GradSync.MICRO_BATCH)))
    costs = {CostKey(1, 1, False): layers}
    schedules = [PipelineSchedule.ONE_F_ONE_B, PipelineSchedule.INTERLEAVED]
    brute = brute_force(costs, setup, recomputes=[Recompute.NONE], schedules=schedules, chunks=(2,),
                        zeros=(0, 1, 2, 3), overlaps=(False, True))
    event("a plan" if brute.ranked else "none")
    if not brute.ranked:
        return
    found = plan_search(costs, setup, recomputes=[Recompute.NONE], schedules=schedules, chunks=(2,),
                        zero_stages=(0, 1, 2, 3), dp_overlap=(False, True), top_k=2)
    check_ranking(found, brute, 2)


def test_layer_graph_plans_refuse_a_reduction_every_micro_batch() -> None:
    graph = LayerGraph(LAYERS, ((0, 1), (1, 2)))
    setup = dataclasses.replace(SETUP, grad_sync=GradSync.MICRO_BATCH)
    with pytest.raises(ConfigError, match="grad_sync micro_batch: layer-graph plans") as info:
        dag_plan(graph, setup, micro_batch=1, recompute="none")
    assert info.value.fields == ("grad_sync",)
    once = dag_plan(graph, dataclasses.replace(SETUP, grad_sync=GradSync.ITERATION), micro_batch=1,
                    recompute="none", zero_stage=1)
    assert once.plan.grad_sync is GradSync.ITERATION
    assert once.iteration_time_s == dag_plan(graph, SETUP, micro_batch=1, recompute="none",
                                             zero_stage=1).iteration_time_s


class _Probe(Exception):
    """Raised in place of the engine: the run the command line built."""


@pytest.mark.parametrize("command", ["evaluate", "plan", "search"])
def test_the_command_line_takes_grad_sync(command: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``--grad-sync iteration`` reaches the run of ``evaluate`` (its plan), ``plan`` (its plan
    space) and ``search`` (its spec); a bad value is one line and exit status 2."""
    def probe(run: object, **_: object) -> None:
        raise _Probe(run)

    target = {"evaluate": "evaluate_run", "plan": "plan_run", "search": "search"}[command]
    monkeypatch.setattr(api, target, probe)
    cluster = ["--devices", "8", "--global-batch", "8"]
    chip = ["--model", "gpt2", "--hardware", "a100-80gb", *cluster]
    fixed = ["--tp", "1", "--pp", "1", "--dp", "8", "--micro-batch", "1", "--zero-stage", "2"]
    base = {"evaluate": [*chip, *fixed], "plan": chip, "search": ["--model", "gpt2", *cluster]}[command]
    with pytest.raises(_Probe) as caught:
        main([command, *base, "--grad-sync", "iteration"])
    run = caught.value.args[0]
    holder = run.plan if command == "evaluate" else run.space if command == "plan" else run
    assert holder.grad_sync is GradSync.ITERATION
    code, out, err = cli([command, *base, "--grad-sync", "sometimes"], capsys)
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "'sometimes'" in err and "grad" in err
