"""Time of the placement engine (``plan_search``) on GPT-3 175B-sized problems.

Two figures (issue #6), each printed with its ratio to the target:

1. a 96-block chain (embedding + 96 blocks + head = 98 layers) with 4 TP widths (1, 2, 4, 8;
   micro-batch 1, no SP), 1024 devices, 8 per node, global batch 1536, every recompute policy,
   schedule (interleaved with v = 2 and 4), ZeRO-1 and DP overlap setting: target < 0.5 s;
2. GPT-3 175B on 1024 A100-80GB over all options: TP widths 1, 2, 4, 8 x micro-batch 1, 2, 4, 8
   x SP off/on (28 cost tables: SP only with TP > 1) x 3 recompute policies x 3 schedules
   (interleaved v = 2, 4) x ZeRO x overlap: target < 2 s.

For information it also times the same search with a padded batch (any DP degree) and with
4 GiB of HBM, where nothing fits and the closest candidate is reported; and the layer-DAG
planner (Piper's downset DP, ``dag_plan``) on two towers of 24 such blocks joined by the head
(677 downsets) on 256 devices, full recompute, with DP overlap off and on.

Layer figures are synthetic but of GPT-3 175B's size (h = 12288, 96 heads, sequence 2048,
vocabulary 51200) on an A100-80GB (312 TFLOP/s bf16 at 55 % efficiency, 2 TB/s HBM, NVLink
300 GB/s inside 8-GPU nodes, 25 GB/s InfiniBand between): parameters and FLOP from the model
shape, TP collectives (two all-reduces per block and pass, reduce-scatter + all-gather with SP)
on NVLink, and activations from Korthikanti et al. 2022, Table 2.

Run: ``.venv/bin/python benchmarks/bench_placement.py``
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from archplace.base.errors import InfeasibleError
from archplace.hw.cluster import Cluster
from archplace.placement.downset_dp import dag_plan
from archplace.placement.layer_graph import LayerGraph
from archplace.placement.plan import LayerCost, TrainingSetup
from archplace.placement.solver import plan_search

HIDDEN, HEADS, SEQ, VOCAB, BLOCKS = 12288, 96, 2048, 51200, 96
PEAK, EFFICIENCY, HBM_BW = 312e12, 0.55, 2.0e12
NVLINK_BW, NVLINK_LAT = 300e9, 5e-6
TARGET_CHAIN_S, TARGET_FULL_S = 0.5, 2.0


def gpt3_layers(tp: int, micro_batch: int, sp: bool) -> list[LayerCost]:
    """Synthetic GPT-3 175B layer chain for one TP width, micro-batch and SP flag (per TP rank)."""
    b, s, h, a, t = micro_batch, SEQ, HIDDEN, HEADS, tp
    sbh = s * b * h
    rate = PEAK * EFFICIENCY
    block_params = (12 * h * h + 13 * h) // t
    attention_flop = 4.0 * b * s * s * h / t
    block_fwd_flop = 2.0 * block_params * b * s + attention_flop
    # two all-reduces (or reduce-scatter + all-gather) of b s h bf16 values per pass
    comm = 0.0 if t == 1 else 2 * (2.0 * (t - 1) / t * 2.0 * sbh / NVLINK_BW + 2 * (t - 1) * NVLINK_LAT)
    softmax_s = 3 * 2.0 * b * a / t * s * s / HBM_BW
    fwd = block_fwd_flop / rate + softmax_s + comm
    bwd = 2 * block_fwd_flop / rate + 2 * softmax_s + comm
    if sp:
        act, selective = sbh / t * (34 + 5 * a * s / h), sbh * 34 / t
    else:
        act = sbh * (10 + 24 / t + 5 * a * s / (h * t))
        selective = sbh * (10 + 24 / t)
    boundary = 2.0 * sbh / (t if sp else 1)
    working = 2 * 2.0 * b * a / t * s * s
    layers = [LayerCost("embedding", fwd_s=4.0 * sbh / HBM_BW, bwd_s=8.0 * sbh / HBM_BW,
                        params=VOCAB * h // t + s * h, activation_bytes=3.0 * sbh / (t if sp else 1),
                        input_bytes=8.0 * b * s, boundary_bytes=boundary, working_bytes=2 * boundary,
                        fwd_flop=0.0, bwd_flop=0.0)]
    for k in range(BLOCKS):
        layers.append(LayerCost(
            f"block.{k}", fwd_s=fwd, bwd_s=bwd, params=block_params, activation_bytes=act,
            input_bytes=boundary, boundary_bytes=boundary, working_bytes=working,
            fwd_flop=block_fwd_flop, bwd_flop=2 * block_fwd_flop,
            selective_activation_bytes=selective,
            selective_recompute_s=attention_flop / rate + softmax_s,
            tp_comm_fwd_s=comm, tp_comm_bwd_s=comm))
    head_flop = 2.0 * b * s * h * VOCAB / t
    layers.append(LayerCost("head", fwd_s=head_flop / rate, bwd_s=2 * head_flop / rate,
                            params=VOCAB * h // t + 2 * h, activation_bytes=4.0 * b * s * VOCAB / t,
                            input_bytes=boundary, boundary_bytes=4.0 * b,
                            working_bytes=4.0 * b * s * VOCAB / t, fwd_flop=head_flop,
                            bwd_flop=2 * head_flop))
    return layers


def setup() -> TrainingSetup:
    cluster = Cluster(devices=1024, devices_per_node=8, intra_node_bandwidth_bytes_per_s=NVLINK_BW,
                      inter_node_bandwidth_bytes_per_s=25e9, intra_node_latency_s=NVLINK_LAT,
                      inter_node_latency_s=10e-6)
    return TrainingSetup(cluster=cluster, global_batch=1536, seq_len=SEQ, hbm_bytes=80 * 2.0**30,
                         hbm_bandwidth_bytes_per_s=HBM_BW, peak_flop_per_s=PEAK)


def timed(costs: dict[tuple[int, int, bool], list[LayerCost]], repeats: int = 3,
          problem: TrainingSetup | None = None) -> tuple[float, str]:
    runs, outcome = [], ""
    for _ in range(repeats):
        start = time.perf_counter()
        try:
            best = plan_search(costs, problem or setup())[0]
        except InfeasibleError as err:
            runs.append(time.perf_counter() - start)
            outcome = str(err)
            continue
        runs.append(time.perf_counter() - start)
        p = best.plan
        outcome = (f"tp={p.tp} pp={p.pp} dp={p.dp} b={p.micro_batch} {p.recompute.value} "
                   f"{p.schedule.value}{'x' + str(p.chunks) if p.chunks > 1 else ''}"
                   f"{' sp' if p.sp else ''}{f' zero{p.zero_stage}' if p.zero_stage else ''}"
                   f"{' overlap' if p.dp_overlap else ''}: {best.iteration_time_s:.2f} s/iter, "
                   f"MFU {best.mfu:.3f}")
    return statistics.median(runs), outcome


def two_towers(blocks: int = 24) -> LayerGraph:
    """Two towers (embedding + ``blocks`` GPT-3 blocks each, tp 1, micro-batch 1) feeding the head."""
    chain = gpt3_layers(1, 1, False)
    layers: list[LayerCost] = []
    edges: list[tuple[int, int]] = []
    ends = []
    for tower in ("a", "b"):
        for k, layer in enumerate([chain[0], *chain[1:blocks + 1]]):
            layers.append(dataclasses.replace(layer, name=f"{tower}.{layer.name}"))
            if k:
                edges.append((len(layers) - 2, len(layers) - 1))
        ends.append(len(layers) - 1)
    layers.append(chain[-1])
    edges += [(end, len(layers) - 1) for end in ends]
    return LayerGraph(tuple(layers), tuple(edges))


def main() -> None:
    chain = {(t, 1, False): gpt3_layers(t, 1, False) for t in (1, 2, 4, 8)}
    t_chain, outcome = timed(chain)
    print(f"96-block chain, 4 TP widths, 1024 devices: {t_chain:.3f} s "
          f"= {t_chain / TARGET_CHAIN_S:.2f} x the {TARGET_CHAIN_S} s target  [{outcome}]")
    full = {(t, b, sp): gpt3_layers(t, b, sp) for t in (1, 2, 4, 8) for b in (1, 2, 4, 8)
            for sp in (False, True) if t > 1 or not sp}  # sequence parallelism needs tp > 1
    t_full, outcome = timed(full)
    print(f"gpt3-175b, 1024 x A100-80GB, all options ({len(full)} cost tables): {t_full:.3f} s "
          f"= {t_full / TARGET_FULL_S:.2f} x the {TARGET_FULL_S} s target  [{outcome}]")
    padded = dataclasses.replace(setup(), dp_must_divide_batch=False)
    t_pad, outcome = timed(full, problem=padded)
    print(f"  (info) same, padded batch (any dp): {t_pad:.3f} s  [{outcome}]")
    small = dataclasses.replace(setup(), hbm_bytes=4 * 2.0**30)
    t_small, outcome = timed(full, repeats=1, problem=small)
    print(f"  (info) same, 4 GiB HBM: {t_small:.3f} s  [{outcome}]")
    graph = two_towers()
    problem = dataclasses.replace(setup(), cluster=dataclasses.replace(setup().cluster, devices=256))
    for overlap in (False, True):
        start = time.perf_counter()
        best = dag_plan(graph, problem, micro_batch=1, recompute="full", dp_overlap=overlap)
        p = best.plan
        print(f"  (info) layer DAG, 2 towers x 24 blocks, 256 devices, DP overlap "
              f"{'on' if overlap else 'off'}: {time.perf_counter() - start:.2f} s  "
              f"[pp={p.pp} dp={p.dp}: {best.iteration_time_s:.2f} s/iter]")


if __name__ == "__main__":
    main()
