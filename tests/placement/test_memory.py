"""Per-device stage memory: model state per parameter (Megatron-LM, ZeRO), in-flight counts
per schedule, recomputation, and Korthikanti et al. 2022's activation formulas."""

from __future__ import annotations

import dataclasses

import pytest

from archplace.base.errors import ConfigError
from archplace.hw.cluster import Cluster
from archplace.placement.memory import (
    MODEL_STATE_BYTES_PER_PARAM,
    in_flight_micro_batches,
    interleaved_chunk_counts,
    interleaved_device_memory,
    interleaved_in_flight_chunks,
    model_state_bytes,
    stage_memory,
)
from archplace.placement.pipeline import plan_memory
from archplace.placement.plan import (
    LayerCost,
    Optimizer,
    PipelineSchedule,
    Plan,
    Recompute,
    TrainingSetup,
)
from archplace.placement.timing import micro_batch_group_size


def layer(name: str, params: int, act: float, inp: float, work: float, sel=None) -> LayerCost:
    return LayerCost(name, fwd_s=1.0, bwd_s=2.0, params=params, activation_bytes=act,
                     input_bytes=inp, boundary_bytes=inp, working_bytes=work,
                     fwd_flop=1.0, bwd_flop=2.0, selective_activation_bytes=sel)


def test_mixed_precision_adam_is_18_bytes_per_param():
    assert MODEL_STATE_BYTES_PER_PARAM == 18
    mem = stage_memory([layer("a", 1_000_000, 0.0, 0.0, 0.0)], stage=0, in_flight=1,
                       recompute=Recompute.NONE)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2e6, 4e6, 12e6)
    assert mem.total == 18e6


@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_zero1_and_sgd_bytes_per_param(d):
    # Megatron-LM distributed optimizer (bf16 params, fp32 grads): 6 + 12/d bytes per parameter
    adam = model_state_bytes(1000, Optimizer.ADAM, zero_stage=1, dp=d)
    assert sum(adam) == pytest.approx(1000 * (6 + 12 / d))
    # SGD with momentum: 2 + 4 + 8 (fp32 master + momentum), 6 + 8/d sharded
    assert sum(model_state_bytes(1000, Optimizer.SGD)) == 14000.0
    sgd = model_state_bytes(1000, Optimizer.SGD, zero_stage=1, dp=d)
    assert sum(sgd) == pytest.approx(1000 * (6 + 8 / d))
    # Adam with bf16 moments (DeepSeek-V3 sec. 3.3.3): 2 + 4 + (4 + 2 + 2), 6 + 8/d sharded
    bf16 = model_state_bytes(1000, Optimizer.ADAM_BF16, zero_stage=1, dp=d)
    assert bf16 == (2000.0, 4000.0, 8000.0 / d)


@pytest.mark.parametrize("d", [1, 4, 64, 124])
@pytest.mark.parametrize("k", [12, 8])
def test_zero_stages_are_the_papers_forms(d, k):
    # Rajbhandari et al. 2020, Fig. 1, with fp16 gradients (G = 2): baseline (2 + 2 + K) Psi,
    # P_os (2 + 2) Psi + K Psi / Nd, P_os+g 2 Psi + (2 + K) Psi / Nd, P_os+g+p (2 + 2 + K) Psi / Nd
    optimizer = Optimizer.ADAM if k == 12 else Optimizer.SGD
    psi = 7_500_000_000
    forms = {0: (2 + 2 + k) * psi, 1: (2 + 2) * psi + k * psi / d, 2: 2 * psi + (2 + k) * psi / d,
             3: (2 + 2 + k) * psi / d}
    for stage, expected in forms.items():
        parts = model_state_bytes(psi, optimizer, zero_stage=stage, dp=d, grad_bytes=2)
        assert parts[0] + parts[1] + parts[2] == expected
    # archplace's default fp32 gradient buffer (Megatron-LM's bf16 recipe): G = 4
    w, g, o = model_state_bytes(psi, optimizer, zero_stage=2, dp=d)
    assert (w, g, o) == (2 * psi, 4 * psi / d, k * psi / d)


def test_zero3_device_memory_adds_the_gathered_window():
    # two layers of 10 and 30 parameters (per TP rank), d = 5, fp32 gradients: sharded state
    # 18 * 40 / 5; the window holds two gathered layers' bf16 weights and one unsharded fp32
    # gradient of the largest layer: (2 * 2 + 4) * 30
    layers = [layer("a", 10, 100.0, 1.0, 5.0), layer("c", 30, 300.0, 3.0, 7.0)]
    mem = stage_memory(layers, stage=0, in_flight=2, recompute=Recompute.NONE, zero_stage=3, dp=5)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2 * 40 / 5, 4 * 40 / 5, 12 * 40 / 5)
    assert mem.gathered == 8 * 30 and mem.activations == 2 * 400.0
    assert mem.total == 18 * 40 / 5 + 800.0 + 7.0 + 240.0
    for stage in (0, 1, 2):
        assert stage_memory(layers, stage=0, in_flight=2, recompute=Recompute.NONE, zero_stage=stage,
                            dp=5).gathered == 0.0


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
    assert [in_flight_micro_batches(j, pp, m, PipelineSchedule.GPIPE) for j in range(pp)] == [m] * pp


@pytest.mark.parametrize(("pp", "v", "m", "expected"), [
    # 2 (p - j - 1) + (v - 1) p + 1, capped at m v
    (4, 2, 8, [11, 9, 7, 5]),
    (4, 2, 4, [8, 8, 7, 5]),
    (2, 4, 6, [9, 7]),
    (8, 2, 16, [23, 21, 19, 17, 15, 13, 11, 9]),
    # pp does not divide m: 2 (p - j - 1) + (v - 1) N + 1 with Megatron-Core's group size N
    (4, 2, 9, [12, 10, 8, 6]),  # N = 5 (9 % 4 = 1 < 4, 9 % 5 = 4 >= 4)
    (4, 2, 6, [12, 11, 9, 7]),  # N = 6: one group
    (4, 3, 10, [17, 15, 13, 11]),  # N = 5
])
def test_interleaved_in_flight_chunks(pp, v, m, expected):
    assert [interleaved_in_flight_chunks(j, pp, m, v) for j in range(pp)] == expected
    # the first device holds p (1 + (p - 1)/(p v)) stage-micro-batches (Korthikanti et al. 2022)
    if m >= 2 * pp and m % pp == 0:
        assert expected[0] / v == pytest.approx(pp * (1 + (pp - 1) / (pp * v)))


@pytest.mark.parametrize(("stage", "pp", "m"), [(-1, 2, 2), (2, 2, 2), (0, 0, 1), (0, 2, 0)])
def test_in_flight_rejects_bad_arguments(stage, pp, m):
    with pytest.raises(ConfigError):
        in_flight_micro_batches(stage, pp, m)


@pytest.mark.parametrize(("device", "pp", "m", "v"), [(0, 2, 1, 2), (0, 1, 2, 2), (2, 2, 2, 2),
                                                      (0, 2, 2, 1)])
def test_interleaved_in_flight_rejects_bad_arguments(device, pp, m, v):
    with pytest.raises(ConfigError):
        interleaved_in_flight_chunks(device, pp, m, v)


def test_activations_without_and_with_recompute():
    layers = [layer("a", 10, act=100.0, inp=7.0, work=30.0, sel=20.0),
              layer("b", 20, act=300.0, inp=11.0, work=50.0, sel=60.0),
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
    selective = stage_memory(layers, stage=2, in_flight=3, recompute=Recompute.SELECTIVE)
    # selective bytes where given, else the full activations
    assert selective.activations == 3 * (20.0 + 60.0 + 200.0)
    assert full.to_dict()["total"] == full.total


def test_interleaved_chunk_counts_follow_megatrons_order():
    # pp = 2, v = 2, m = 4 (8 chunk forward passes). Device 0 warms up with W = 2 + 2 = 4
    # forward passes (chunk 0 twice, chunk 1 twice); the steady state runs forward 5, 6, 7, 8
    # (chunks 0, 0, 1, 1), each followed by a backward pass, which runs chunk 1 first:
    # after forward 5: (3, 2); backward (chunk 1) then forward 6: (4, 1); then (4, 1); (3, 2).
    assert interleaved_chunk_counts(0, 2, 4, 2) == [(3, 2), (4, 1), (4, 1), (3, 2)]
    # device 1: W = 2 (chunk 0 twice), then forward 3 (chunk 1): (2, 1), ...
    assert interleaved_chunk_counts(1, 2, 4, 2) == [(2, 1), (2, 1), (3, 0), (3, 0)]
    for device in range(4):
        for snapshot in interleaved_chunk_counts(device, 4, 8, 3):
            assert sum(snapshot) == interleaved_in_flight_chunks(device, 4, 8, 3)


def test_interleaved_device_memory_sums_its_chunks():
    # device 0 of pp = 2 with two chunks of 10 and 30 parameters saving 100 and 300 B per
    # micro-batch, m = 4: the peak of 3 * 100 + 2 * 300 = 900 B (snapshots above), not v copies
    # of the heavier chunk (2 * 5/2 * 300) nor the average (5/2 * 400)
    chunks = [[layer("a", 10, 100.0, 1.0, 5.0)], [layer("c", 30, 300.0, 3.0, 7.0)]]
    mem = interleaved_device_memory(chunks, device=0, pp=2, micro_batches=4,
                                    recompute=Recompute.NONE, zero_stage=1, dp=2)
    assert (mem.weights, mem.gradients, mem.optimizer) == (80.0, 160.0, 240.0)
    assert mem.activations == 900.0 and mem.working == 7.0
    assert mem.total == 80.0 + 160.0 + 240.0 + 900.0 + 7.0


def test_stage_memory_rejects_empty_stage_and_zero_in_flight():
    with pytest.raises(ConfigError):
        stage_memory([], stage=0, in_flight=1, recompute=Recompute.NONE)
    with pytest.raises(ConfigError):
        stage_memory([layer("a", 1, 1.0, 1.0, 1.0)], stage=0, in_flight=0,
                     recompute=Recompute.NONE)


# ---------------------------------------------------------------- Korthikanti et al. 2022

@dataclasses.dataclass(frozen=True)
class Gpt:
    """A GPT configuration of Korthikanti et al. 2022, Table 3 (s = 2048, micro-batch 1)."""

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    vocab: int = 51200
    seq: int = 2048


MODELS = [Gpt("175B", 96, 12288, 96, 8, 8), Gpt("530B", 128, 20480, 105, 8, 35),
          Gpt("1T", 160, 25600, 128, 8, 64)]


def block_activation_bytes(g: Gpt, *, sp: bool, selective: bool, b: int = 1) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes of one transformer layer per TP rank."""
    s, h, a, t = g.seq, g.hidden, g.heads, g.tp
    sbh = s * b * h
    if sp:
        return sbh * 34 / t if selective else sbh / t * (34 + 5 * a * s / h)
    return sbh * (10 + 24 / t) if selective else sbh * (10 + 24 / t + 5 * a * s / (h * t))


def gpt_chain(g: Gpt, *, sp: bool) -> list[LayerCost]:
    """Embedding + blocks + output layer, per TP rank, with the paper's activation figures:
    blocks from Table 2; the embedding keeps its dropout mask, s b h bytes (/t with SP); output
    layer and loss 4 s b h / t (1 + v / h) (section 4.3)."""
    s, h, t, v = g.seq, g.hidden, g.tp, g.vocab
    shard = t if sp else 1
    blocks = [LayerCost(f"block.{k}", fwd_s=1.0, bwd_s=2.0, params=(12 * h * h + 13 * h) // t,
                        activation_bytes=block_activation_bytes(g, sp=sp, selective=False),
                        input_bytes=2.0 * s * h / shard, boundary_bytes=2.0 * s * h / shard,
                        working_bytes=0.0, fwd_flop=1.0, bwd_flop=2.0,
                        selective_activation_bytes=block_activation_bytes(g, sp=sp, selective=True))
              for k in range(g.layers)]
    embedding = LayerCost("embedding", fwd_s=0.1, bwd_s=0.2, params=v * h // t + s * h,
                          activation_bytes=1.0 * s * h / shard, input_bytes=8.0 * s,
                          boundary_bytes=2.0 * s * h / shard, working_bytes=0.0, fwd_flop=0.0,
                          bwd_flop=0.0)
    head = LayerCost("head", fwd_s=0.1, bwd_s=0.2, params=v * h // t + 2 * h,
                     activation_bytes=4.0 * s * h / t * (1 + v / h), input_bytes=2.0 * s * h / shard,
                     boundary_bytes=4.0, working_bytes=0.0, fwd_flop=1.0, bwd_flop=2.0)
    return [embedding, *blocks, head]


def megatron_stages(n_blocks: int, segments: int) -> tuple[tuple[int, int], ...]:
    """Blocks divided evenly, the embedding on the first segment and the head on the last."""
    per = n_blocks // segments
    assert per * segments == n_blocks
    return tuple((0 if j == 0 else 1 + j * per, n_blocks + 1 if j == segments - 1 else (j + 1) * per)
                 for j in range(segments))


def gpt_setup(g: Gpt, dp: int = 1) -> TrainingSetup:
    cluster = Cluster(devices=g.tp * g.pp * dp, devices_per_node=8,
                      intra_node_bandwidth_bytes_per_s=3e11, inter_node_bandwidth_bytes_per_s=2.5e10,
                      intra_node_latency_s=5e-6, inter_node_latency_s=1e-5)
    return TrainingSetup(cluster=cluster, global_batch=4 * g.pp * dp, seq_len=g.seq,
                         hbm_bytes=80 * 2.0**30, hbm_bandwidth_bytes_per_s=2e12,
                         peak_flop_per_s=312e12)


@pytest.mark.parametrize("g", MODELS, ids=lambda g: g.name)
@pytest.mark.parametrize(("sp", "selective"), [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_first_stage_activations_match_korthikanti(g, sp, selective):
    """The first pipeline stage holds p micro-batches of L/p layers: L layers' worth (section
    4.2.3, eq. 5 and its TP / SP / selective variants of Table 2), plus p micro-batches of the
    embedding dropout mask, s b h p (/t with SP) (section 4.3)."""
    chain = gpt_chain(g, sp=sp)
    plan = Plan(tp=g.tp, pp=g.pp, dp=1, micro_batch=1,
                recompute=Recompute.SELECTIVE if selective else Recompute.NONE,
                stages=megatron_stages(g.layers, g.pp), sp=sp)
    first = plan_memory(chain, gpt_setup(g), plan)[0]
    paper = (g.layers * block_activation_bytes(g, sp=sp, selective=selective)
             + g.pp * g.seq * g.hidden / (g.tp if sp else 1))
    assert first.activations == pytest.approx(paper, rel=0.02)


@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_first_device_matches_korthikanti(v):
    """Interleaving multiplies the first stage's activations by 1 + (p - 1)/(p v)."""
    g = MODELS[0]  # 175B: 96 layers, p = 8
    if g.layers % (g.pp * v):
        pytest.skip("uneven chunks")
    chain = gpt_chain(g, sp=True)
    plan = Plan(tp=g.tp, pp=g.pp, dp=1, micro_batch=1, recompute=Recompute.NONE,
                stages=megatron_stages(g.layers, g.pp * v), schedule=PipelineSchedule.INTERLEAVED,
                chunks=v, sp=True)
    first = plan_memory(chain, gpt_setup(g), plan)[0]
    paper = (g.layers * block_activation_bytes(g, sp=True, selective=False)
             * (1 + (g.pp - 1) / (g.pp * v)))
    assert first.activations == pytest.approx(paper, rel=0.02)


@pytest.mark.parametrize("g", MODELS, ids=lambda g: g.name)
def test_full_recompute_keeps_layer_inputs(g):
    """Full recomputation stores 2 s b h / t (with SP) per layer input (section 4.2.3); the
    model adds the one layer re-materialised during its backward pass, which the paper's total
    leaves out."""
    chain = gpt_chain(g, sp=True)
    plan = Plan(tp=g.tp, pp=g.pp, dp=1, micro_batch=1, recompute=Recompute.FULL,
                stages=megatron_stages(g.layers, g.pp), sp=True)
    first = plan_memory(chain, gpt_setup(g), plan)[0]
    inputs = g.layers * 2.0 * g.seq * g.hidden / g.tp
    rematerialised = block_activation_bytes(g, sp=True, selective=False)
    assert first.activations == pytest.approx(inputs + rematerialised, rel=0.02)


@pytest.mark.parametrize("g", MODELS, ids=lambda g: g.name)
def test_model_state_is_18_bytes_per_parameter(g):
    """Megatron-LM (Narayanan et al. 2021): 18 B per parameter; P = 12 l h^2 (1 + 13/(12 h) +
    (V + s)/(12 l h)) over tp * pp devices (the output layer keeps its own copy of the
    embedding matrix, which the formula counts once)."""
    chain = gpt_chain(g, sp=True)
    plan = Plan(tp=g.tp, pp=g.pp, dp=1, micro_batch=1, recompute=Recompute.NONE,
                stages=megatron_stages(g.layers, g.pp), sp=True)
    memory = plan_memory(chain, gpt_setup(g), plan)
    state = sum(m.weights + m.gradients + m.optimizer for m in memory) * g.tp
    n_layers, h, v, s = g.layers, g.hidden, g.vocab, g.seq
    params = 12 * n_layers * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * n_layers * h))
    extra_copy = v * h  # the head's copy of the (tied) embedding matrix
    assert state == pytest.approx(18 * (params + extra_copy), rel=0.02)
    # with ZeRO-1 over d = 16 replicas: 6 + 12/16 bytes per parameter
    zero = plan_memory(chain, gpt_setup(g, dp=16),
                       dataclasses.replace(plan, dp=16, zero_stage=1))
    state = sum(m.weights + m.gradients + m.optimizer for m in zero) * g.tp
    assert state == pytest.approx((6 + 12 / 16) * (params + extra_copy), rel=0.02)


@pytest.mark.parametrize(("pp", "v", "m"), [(4, 2, 9), (4, 3, 10), (4, 2, 6), (2, 2, 5), (8, 4, 20)])
def test_chunk_counts_when_pp_does_not_divide_m_follow_the_played_schedule(pp, v, m):
    """Megatron-Core's groups of N micro-batches per chunk (N > pp when pp does not divide m):
    the per-chunk counts after each steady-state forward pass of the schedule as the timeline
    plays it (archplace.placement.pipeline_timeline) are the snapshots, and each sums to the
    in-flight count."""
    from archplace.placement.pipeline_timeline import simulate_pipeline

    timeline = simulate_pipeline([1.0] * (pp * v), [2.0] * (pp * v), pp=pp, micro_batches=m,
                                 schedule=PipelineSchedule.INTERLEAVED)
    for device in range(pp):
        passes = sorted((b for b in timeline.blocks if b.device == device), key=lambda b: b.start_s)
        held, seen, played = [0] * v, 0, []
        for block in passes:
            held[block.segment // pp] += -1 if block.backward else 1
            seen += not block.backward
            warm = min(2 * (pp - device - 1) + (v - 1) * micro_batch_group_size(m, pp), m * v)
            if not block.backward and seen >= warm + (warm < m * v):
                played.append(tuple(held))
        expected = interleaved_chunk_counts(device, pp, m, v)
        assert list(dict.fromkeys(played)) == expected
        assert {sum(s) for s in expected} == {interleaved_in_flight_chunks(device, pp, m, v)}
