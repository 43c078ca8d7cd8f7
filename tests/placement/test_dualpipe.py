"""DualPipe (archplace.placement.dualpipe, dualpipe_time): the chunk order played out against a
timeline worked by hand, the README's bubble and activation counts, evaluate_plan on a hand
chain, the rules and the refusals, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archplace.base.errors import ConfigError
from archplace.cli import main
from archplace.hw.cluster import Cluster
from archplace.placement.dualpipe import in_flight_peak, rank_order, simulate_dualpipe
from archplace.placement.pipeline import BREAKDOWN_KEYS, evaluate_plan
from archplace.placement.plan import LayerCost, PipelineSchedule, Plan, TrainingSetup
from archplace.placement.solver import plan_search

REL = 1e-12
DUALPIPE = PipelineSchedule.DUALPIPE


def test_two_ranks_four_micro_batches_by_hand() -> None:
    """P = 2, m = 4, F = 1, B = 2 (W = 1), a forward and a backward overlapped in 2.5.

    Rank 0 runs F(a0) F(r0) F(a1) B(r0) [F(r1) & B(a0)] B(r1) B*(a1) W (a: the forward
    direction, entering at rank 0; r: the reverse one; B* defers its weight gradients to W);
    rank 1 the mirror image. Rank 0: F(a0) 0-1; F(r0) waits for rank 1's F(r0) (0-1): 1-2;
    F(a1) 2-3; B(r0), its last stage, 3-5; the pair waits for rank 1's B(a0) (3-5): 5-7.5;
    B(r1) 7.5-9.5; B*(a1) waits for rank 1's B(a1) (7.5-9.5): 9.5-10.5; W 10.5-11.5."""
    order = [(c.kind, c.phase, c.deferred) for c in rank_order(0, 2, 4)]
    assert order == [("F", 0, False), ("F", 1, False), ("F", 0, False), ("B", 1, False), ("FB", 1, False),
                     ("B", 1, False), ("B", 0, True), ("W", 0, False)]
    timeline = simulate_dualpipe([1.0, 1.0], [2.0, 2.0], [1.0, 1.0], micro_batches=4,
                                 paired_s=lambda a, b: 2.5)
    assert timeline.makespan_s == 11.5
    assert timeline.busy_s == (11.5, 11.5)  # neither rank idles


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 12), (8, 20), (8, 40), (16, 64)])
@pytest.mark.parametrize(("f", "b"), [(1.0, 2.0), (2.0, 4.0), (1.5, 3.0)])
def test_readme_bubble_when_input_gradients_cost_a_forward(pp: int, m: int, f: float, b: float) -> None:
    """deepseek-ai/DualPipe README: bubble (PP/2 - 1)(F&B + B - 3W). With F&B = F + B (nothing
    hidden) and the input gradients costing a forward (W = B - F), every rank's m forward and m
    backward chunks plus that bubble make the makespan: 8 ranks, 20 micro-batches (the README's
    figure), F 1, B 2: 20 x 3 + 3 x (3 + 2 - 3) = 66."""
    w = b - f
    timeline = simulate_dualpipe([f] * pp, [b] * pp, [w] * pp, micro_batches=m)
    assert timeline.makespan_s == pytest.approx(m * (f + b) + (pp / 2 - 1) * (f + b + b - 3 * w), rel=REL)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (8, 20), (8, 40)])
def test_overlapped_pairs_shorten_the_steady_state(pp: int, m: int) -> None:
    """A pair saving s = 0.5 of F + B = 3 (F&B = 2.5, W = B - F): the README's bubble with that
    F&B, and the m - P - 1 pairs of the critical path each 0.5 shorter (the warm-up and cool-down
    chunks run alone): 8 ranks, 20 micro-batches: 60 + 3 x 1.5 - 11 x 0.5 = 59."""
    timeline = simulate_dualpipe([1.0] * pp, [2.0] * pp, [1.0] * pp, micro_batches=m,
                                 paired_s=lambda a, b: 2.5)
    expected = m * 3.0 + (pp / 2 - 1) * (2.5 + 2.0 - 3.0) - (m - pp - 1) * 0.5
    assert timeline.makespan_s == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize(("pp", "m"), [(4, 8), (8, 20)])
def test_every_rank_runs_each_of_its_chunks_once(pp: int, m: int) -> None:
    """With unequal stages and nothing hidden, rank j is busy m/2 x (F + B) of each of its two
    stages: every forward, input-gradient and weight-gradient chunk charged once, the weight
    chunks for the backward that deferred them (DualPipe's queue), whatever their step's label."""
    forward = [1.0 + 0.25 * i for i in range(pp)]
    backward = [2.0 + 0.5 * i for i in range(pp)]
    weight = [0.3 + 0.2 * i for i in range(pp)]
    timeline = simulate_dualpipe(forward, backward, weight, micro_batches=m)
    for j in range(pp):
        work = m / 2 * sum(forward[c] + backward[c] for c in (j, pp - 1 - j))
        assert timeline.busy_s[j] == pytest.approx(work, rel=REL)


def test_every_rank_holds_pp_plus_one_micro_batches() -> None:
    """The README's activation count, PP + 1 per device, on every rank; weighted by each
    direction's bytes the end ranks peak with their own stage mostly."""
    assert [in_flight_peak(r, 8, 20) for r in range(8)] == [9.0] * 8
    assert [in_flight_peak(r, 4, 8) for r in range(4)] == [5.0] * 4
    # rank 0 of 8: at its peak 8 forward-direction and 1 reverse-direction micro-batches
    assert in_flight_peak(0, 8, 20, (10.0, 1.0)) == 8 * 10.0 + 1.0


def test_schedule_rules() -> None:
    with pytest.raises(ConfigError, match=r"dualpipe needs an even plan.pp >= 2"):
        Plan(tp=1, pp=3, dp=1, micro_batch=1, schedule=DUALPIPE)
    with pytest.raises(ConfigError, match=r"even number of micro-batches >= 2 pp = 8, got 6"):
        simulate_dualpipe([1.0] * 4, [2.0] * 4, [1.0] * 4, micro_batches=6)
    with pytest.raises(ConfigError, match=r"even number of micro-batches >= 2 pp = 4, got 5"):
        simulate_dualpipe([1.0] * 2, [2.0] * 2, [1.0] * 2, micro_batches=5)


CLUSTER = Cluster(devices=8, devices_per_node=8, intra_node_bandwidth_bytes_per_s=1e11,
                  inter_node_bandwidth_bytes_per_s=1e10, intra_node_latency_s=1e-6,
                  inter_node_latency_s=1e-5)
SETUP = TrainingSetup(cluster=CLUSTER, global_batch=4, seq_len=100, hbm_bytes=1e12,
                      hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e13)
LAYERS = (
    LayerCost("l0", fwd_s=1.0, bwd_s=2.0, params=0, activation_bytes=100.0, input_bytes=1.0,
              boundary_bytes=1e3, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12),
    LayerCost("l1", fwd_s=1.0, bwd_s=2.0, params=0, activation_bytes=10.0, input_bytes=1.0,
              boundary_bytes=1e3, working_bytes=0.0, fwd_flop=1e12, bwd_flop=2e12),
)


def test_evaluate_plan_on_two_stages() -> None:
    """pp 2, m 4, one layer a stage (no parameters: no DP tail): the hand timeline above
    without overlap (pairs take F + B = 3): 12 s; the pipeline sends are hidden; each device
    keeps PP + 1 = 3 micro-batches, at its peak 2 of the direction it starts and 1 of the other:
    rank 0 starts the forward direction (its stage 0, 100 bytes a micro-batch), rank 1 the reverse
    one, whose first stage is also layer 0 (stage pp - 1 - 1): 2 x 100 + 10 bytes on both."""
    plan = Plan(tp=1, pp=2, dp=1, micro_batch=1, schedule=DUALPIPE, stages=((0, 0), (1, 1)))
    result = evaluate_plan(LAYERS, SETUP, plan)
    assert result.iteration_time_s == pytest.approx(12.0, rel=REL)
    b = result.breakdown_s
    assert b["pp_comm"] == 0.0 and result.comm_s["pp"]["hidden"] > 0
    assert b["compute"] == pytest.approx(12.0, rel=REL) and b["bubble"] == pytest.approx(0.0, abs=1e-12)
    assert sum(b[key] for key in BREAKDOWN_KEYS) == pytest.approx(result.iteration_time_s, rel=REL)
    assert [m.activations for m in result.memory] == [2 * 100.0 + 10.0, 2 * 100.0 + 10.0]
    with pytest.raises(ConfigError, match=r"even number of micro-batches >= 2 pp = 4, got 2"):
        evaluate_plan(LAYERS, TrainingSetup(cluster=CLUSTER, global_batch=2, seq_len=100, hbm_bytes=1e12,
                                            hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e13), plan)


def test_both_stages_parameters_on_every_device() -> None:
    layers = tuple(LayerCost(f"l{i}", fwd_s=1.0, bwd_s=2.0, params=1000 * (i + 1), activation_bytes=1.0,
                             input_bytes=1.0, boundary_bytes=1.0, working_bytes=0.0, fwd_flop=1e12,
                             bwd_flop=2e12) for i in range(4))
    plan = Plan(tp=1, pp=4, dp=1, micro_batch=1, schedule=DUALPIPE, stages=((0, 0), (1, 1), (2, 2), (3, 3)))
    setup = TrainingSetup(cluster=CLUSTER, global_batch=8, seq_len=100, hbm_bytes=1e12,
                          hbm_bandwidth_bytes_per_s=1e12, peak_flop_per_s=1e13)
    memory = evaluate_plan(layers, setup, plan).memory
    # device j: stages j and 3 - j, 2 bytes of bf16 weights per parameter
    assert [m.weights for m in memory] == [2.0 * 5000, 2.0 * 5000, 2.0 * 5000, 2.0 * 5000]


def test_the_search_does_not_try_it_yet() -> None:
    with pytest.raises(ConfigError, match=r"dualpipe schedule is priced for a given plan"):
        plan_search({(1, 1, False): list(LAYERS)}, SETUP, schedules=("dualpipe",))


def test_cli_evaluates_a_dualpipe_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "config.json"
    model.write_text(json.dumps({"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4,
                                 "n_positions": 256, "vocab_size": 2048}))
    argv = ["evaluate", "--model", str(model), "--hardware", "h100-80gb", "--devices", "4",
            "--global-batch", "8", "--tp", "1", "--pp", "2", "--dp", "2", "--micro-batch", "1", "--json"]
    out = {}
    for schedule in ("1f1b", "dualpipe"):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--schedule", schedule])
        assert exc.value.code in (0, None)
        out[schedule] = json.loads(capsys.readouterr().out)
    assert out["dualpipe"]["plan"]["schedule"] == "dualpipe"
    # both stages' weights on each device: more than 1F1B's one stage
    weights = {name: result["memory_per_device_bytes"][0]["weights"] for name, result in out.items()}
    assert weights["dualpipe"] > weights["1f1b"]
    with pytest.raises(SystemExit) as exc:  # the tables name both stages of every device
        main([*argv[:-1], "--schedule", "dualpipe"])
    assert exc.value.code in (0, None)
    stages = out["dualpipe"]["plan"]["stages"]
    both = ", ".join(f"{first}–{last}" for first, last in stages)
    text = capsys.readouterr().out
    assert "0, 1" in text and both in text
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--pp", "3", "--dp", "1", "--schedule", "dualpipe"])
    assert exc.value.code == 2
    assert "dualpipe needs an even --pp >= 2" in capsys.readouterr().err
