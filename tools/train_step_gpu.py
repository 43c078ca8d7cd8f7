"""Time Hugging Face training steps on one GPU: the measured side of archplace's single-GPU
validation (docs/validation.md, "One GPU, measured here").

For each model config (a Hugging Face ``config.json``), the model is built from the config with
random weights on the GPU in bf16 (no download), with ``attn_implementation="sdpa"`` (PyTorch's
FlashAttention-2 kernel for a causal mask without padding) and HF's own element-wise operators,
and trained on random tokens: ``global_batch / micro_batch`` forward and backward passes with
gradient accumulation, then one fused AdamW step.  After ``warmup`` steps, steps are timed with
CUDA events until both ``iterations`` steps and ``seconds`` seconds have passed (the board is
then at its power limit); each step's forward + backward time, optimizer time, NVML SM clock and
board power are written as one JSON object per model.  With ``--profile``, one more step runs
under ``torch.profiler`` and the object adds the GPU kernels' summed time by class (GEMM,
attention, other) and their count: with one stream, the step's wall time less that sum is the
time the GPU waited for the host to launch kernels.

    python tools/train_step_gpu.py --config a.json [--config b.json ...] --micro-batch 4 \
        --global-batch 32 --seq-len 2048 --out results.json [--device cuda] [--seconds 30]

Needs torch and transformers (the GPU machine's own); not part of the archplace package.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _nvml(torch: Any, device: Any) -> tuple[float, float]:
    """(SM clock MHz, board power W) from NVML; NaN where unreadable (the CPU)."""
    try:
        return float(torch.cuda.clock_rate(device)), float(torch.cuda.power_draw(device)) / 1e3
    except Exception:  # no NVML, or the CPU
        return float("nan"), float("nan")


def measure(config_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(config_path.read_text())
    config = AutoConfig.for_model(**raw)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    with device:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model = model.to(dtype=torch.bfloat16).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=cuda)
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (args.micro_batch, args.seq_len), device=device)
    accumulation = args.global_batch // args.micro_batch

    def step() -> tuple[float, float]:
        if cuda:
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            marks[0].record()
        begin = time.perf_counter()
        for _ in range(accumulation):
            model(input_ids=ids, labels=ids).loss.backward()
        if cuda:
            marks[1].record()
        middle = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            marks[2].record()
            torch.cuda.synchronize(device)
            return marks[0].elapsed_time(marks[1]) / 1e3, marks[1].elapsed_time(marks[2]) / 1e3
        return middle - begin, time.perf_counter() - middle

    for _ in range(args.warmup):
        step()
    steps: list[dict[str, float]] = []
    start = time.perf_counter()
    while len(steps) < args.iterations or time.perf_counter() - start < args.seconds:
        fwd_bwd_s, optimizer_s = step()
        clock_mhz, power_w = _nvml(torch, device)
        steps.append({"fwd_bwd_s": fwd_bwd_s, "optimizer_s": optimizer_s, "sm_clock_mhz": clock_mhz,
                      "power_w": power_w})
    late = steps[len(steps) // 2:]
    kernels = _profiled_step(torch, step) if args.profile else None
    return {"kernels": kernels,
        "config": config_path.name, "model_type": config.model_type, "parameters": params,
        "micro_batch": args.micro_batch, "global_batch": args.global_batch, "seq_len": args.seq_len,
        "dtype": "bf16 parameters, gradients and AdamW states (torch.optim.AdamW, fused)",
        "attention": "sdpa", "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__, "transformers": __import__("transformers").__version__,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "fwd_bwd_s_median_second_half": statistics.median(s["fwd_bwd_s"] for s in late),
        "optimizer_s_median_second_half": statistics.median(s["optimizer_s"] for s in late),
        "steps": steps,
    }


def _kind(name: str) -> str:
    """The class of a CUDA kernel by its name: cuBLAS/CUTLASS GEMMs, FlashAttention/cuDNN
    attention, the rest."""
    low = name.lower()
    if "flash" in low or "fmha" in low or "attention" in low:
        return "attention"
    if any(word in low for word in ("gemm", "nvjet", "cutlass", "xmma", "cublas")):
        return "gemm"
    return "other"


def _profiled_step(torch: Any, step: Any) -> dict[str, Any]:
    """One step under torch.profiler: the kernels' summed device time (s) and count by class,
    the step's wall time, the 20 longest kernel names (device seconds) and the 60 operators
    (``aten::mul``, ...) whose kernels took longest: [name, device seconds, calls]."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        wall = sum(step())
    by_kind: dict[str, list[float]] = {}
    names: dict[str, float] = {}
    ops: dict[str, list[float]] = {}
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "self_cuda_time_total", 0.0)
        if not device_us or getattr(event, "is_legacy", False):
            continue
        if str(getattr(event, "device_type", "")).endswith("CPU"):  # an operator: its kernels' time
            total, count = ops.get(event.key, [0.0, 0.0])
            ops[event.key] = [total + device_us / 1e6, count + event.count]
            continue
        kind = _kind(event.key)
        total, count = by_kind.get(kind, [0.0, 0.0])
        by_kind[kind] = [total + device_us / 1e6, count + event.count]
        names[event.key] = names.get(event.key, 0.0) + device_us / 1e6
    longest = sorted(names.items(), key=lambda item: -item[1])[:20]
    by_op = sorted(([k, v[0], int(v[1])] for k, v in ops.items()), key=lambda item: -item[1])[:60]
    return {"step_wall_s": wall, "by_kind": {k: {"device_s": v[0], "kernels": int(v[1])}
                                            for k, v in sorted(by_kind.items())},
            "device_s": sum(v[0] for v in by_kind.values()), "longest": longest,
            "by_operator": by_op}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, action="append", required=True)
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--global-batch", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--profile", action="store_true", help="one more step under torch.profiler")
    args = parser.parse_args()
    if args.global_batch % args.micro_batch:
        parser.error("--global-batch must be a multiple of --micro-batch")
    results = []
    for path in args.config:
        result = measure(path, args)
        results.append(result)
        sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "steps"}) + "\n")
        sys.stdout.flush()
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
