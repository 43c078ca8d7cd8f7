"""Print `evaluate`'s error against Megatron-LM's published Table 1 (Narayanan et al., SC 2021).

Run: .venv/bin/python benchmarks/validate_megatron.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from archplace import api
from archplace.placement.megatron import TABLE_1


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for run in TABLE_1:
            path = Path(tmp) / f"gpt-{run.name}" / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(run.hf_config()))
            result = api.evaluate(str(path), "a100-80gb", devices=run.gpus, global_batch=run.global_batch,
                                  tp=run.tp, pp=run.pp, dp=run.dp, micro_batch=run.micro_batch,
                                  recompute="full", schedule=run.schedule, chunks=run.chunks,
                                  dp_overlap=run.dp_overlap)
            ours = run.tflop_per_gpu_of(result.iteration_time_s)
            error = (ours - run.tflop_per_gpu) / run.tflop_per_gpu
            print(f"{run.name:>6} t={run.tp} p={run.pp} d={run.dp:<3} {run.gpus:>5} GPUs: "
                  f"ours {ours:6.1f} vs published {run.tflop_per_gpu:5.0f} TFLOP/s per GPU "
                  f"({error:+.1%}); iteration {result.iteration_time_s:.2f} s, MFU {result.mfu:.1%}")


if __name__ == "__main__":
    main()
