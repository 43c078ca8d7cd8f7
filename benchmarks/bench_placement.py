"""Time per call of the placement solver on a gpt2-xl-sized problem.

The search calls ``optimal_plan`` for every (design, micro-batch, recompute): about
50 designs x 8 combinations with a 50-layer chain (embedding, 48 blocks, head),
1024 devices and a global batch of 4096. Target: <= ~50 ms per call on one core.

Layer figures are synthetic but of gpt2-xl's size (h = 1600, s = 1024, vocabulary
50257): a block has about 31 M parameters, takes about 30 ms forward and twice that
backward per sample, and saves about 1 GB of activations per sample.

Run: ``.venv/bin/python benchmarks/bench_placement.py``
"""
# ruff: noqa: T201  (a benchmark reports by printing)

from __future__ import annotations

import statistics
import time

from archplace.errors import InfeasibleError
from archplace.hardware.cluster import Cluster
from archplace.placement.plan import LayerCost, Recompute, TrainingSetup
from archplace.placement.solver import optimal_plan

TARGET_S = 0.050
HIDDEN, SEQ, VOCAB, BLOCKS = 1600, 1024, 50257, 48


def gpt2_xl_layers(micro_batch: int) -> list[LayerCost]:
    """Synthetic gpt2-xl layer chain for one micro-batch size (TP width 1)."""
    b = micro_batch
    boundary = 2.0 * b * SEQ * HIDDEN  # bf16 hidden states
    block_params = 12 * HIDDEN * HIDDEN + 13 * HIDDEN
    block_flop = 2.0 * block_params * b * SEQ + 4.0 * b * SEQ * SEQ * HIDDEN
    emb_params = VOCAB * HIDDEN + SEQ * HIDDEN
    head_params = VOCAB * HIDDEN + 2 * HIDDEN
    head_flop = 2.0 * head_params * b * SEQ
    layers = [LayerCost("embedding", fwd_s=0.5e-3 * b, bwd_s=1.0e-3 * b, params=emb_params,
                        activation_bytes=8.0 * b * SEQ, input_bytes=8.0 * b * SEQ,
                        boundary_bytes=boundary, working_bytes=2.0 * boundary,
                        fwd_flop=0.0, bwd_flop=0.0)]
    for k in range(BLOCKS):
        layers.append(LayerCost(f"block.{k}", fwd_s=30e-3 * b, bwd_s=60e-3 * b,
                                params=block_params, activation_bytes=1.0e9 * b,
                                input_bytes=boundary, boundary_bytes=boundary,
                                working_bytes=0.2e9 * b, fwd_flop=block_flop,
                                bwd_flop=2.0 * block_flop))
    layers.append(LayerCost("head", fwd_s=75e-3 * b, bwd_s=150e-3 * b, params=head_params,
                            activation_bytes=4.0 * b * SEQ * VOCAB, input_bytes=boundary,
                            boundary_bytes=4.0 * b, working_bytes=4.0 * b * SEQ * VOCAB,
                            fwd_flop=head_flop, bwd_flop=2.0 * head_flop))
    return layers


def main() -> None:
    cluster = Cluster(devices=1024, devices_per_node=8,
                      intra_node_bandwidth_bytes_per_s=300e9, inter_node_bandwidth_bytes_per_s=25e9,
                      intra_node_latency_s=5e-6, inter_node_latency_s=10e-6)
    chains = {b: gpt2_xl_layers(b) for b in (1, 2, 4, 8)}
    print(f"{'HBM':>7} {'b':>2} {'recompute':>9} {'ms/call':>8} {'/target':>8}  result")
    all_times = []
    for hbm_gib in (32, 80):
        setup = TrainingSetup(cluster=cluster, global_batch=4096, seq_len=SEQ,
                              hbm_bytes=hbm_gib * 2.0**30, hbm_bandwidth_bytes_per_s=1.2e12,
                              # a small design of the search space: ~30 ms per block
                              peak_flop_per_s=4e12)
        for b, layers in chains.items():
            for recompute in (Recompute.NONE, Recompute.FULL):
                runs = []
                outcome = ""
                for _ in range(5):
                    start = time.perf_counter()
                    try:
                        result = optimal_plan(layers, setup, micro_batch=b, recompute=recompute)
                        outcome = (f"pp={result.plan.pp} dp={result.plan.dp} "
                                   f"{result.iteration_time_s:.2f} s MFU {result.mfu:.2f}")
                    except InfeasibleError as err:
                        outcome = f"infeasible: {err}"
                    runs.append(time.perf_counter() - start)
                t = statistics.median(runs)
                all_times.append(t)
                print(f"{hbm_gib:>4}GiB {b:>2} {recompute.value:>9} {1e3 * t:8.1f} "
                      f"{t / TARGET_S:8.2f}  {outcome}")
    mean = statistics.fmean(all_times)
    print(f"mean {1e3 * mean:.1f} ms per call = {mean / TARGET_S:.2f} x the {1e3 * TARGET_S:.0f} ms "
          f"target; a 50-design x 8-combination search spends {400 * mean:.1f} s in placement")


if __name__ == "__main__":
    main()
