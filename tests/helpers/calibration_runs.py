"""Synthetic measured runs for the calibration tests (tests/calibration): small GPT models on a100-80gb whose
"measured" iteration times are archplace's own predictions on the preset with known parameter
values written in, so a calibration from the preset's values must find those values again."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from archplace.calibration.fit import RunSet, with_values
from archplace.calibration.parameters import PARAMETERS
from archplace.front.specs.resolved import ResolvedHardware
from archplace.validation.runs import load_runs

HARDWARE = "a100-80gb"


def _run(case: str, hidden: int, heads: int, seq_len: int, *, gpus: int = 1, tp: int = 1,
         micro_batch: int = 1, global_batch: int = 4, attention: str = "flash",
         kernels: str = "fused") -> dict[str, Any]:
    return {
        "case": case, "source": f"synthetic {case}, test", "hardware": HARDWARE,
        "model": {"layers": 2, "hidden": hidden, "heads": heads, "vocab": 1024, "seq_len": seq_len},
        "plan": {"gpus": gpus, "tp": tp, "pp": 1, "micro_batch": micro_batch,
                 "global_batch": global_batch, "recompute": "none", "schedule": "1f1b", "chunks": 1,
                 "sp": False, "zero_stage": 0, "dp_overlap": False, "attention": attention,
                 "kernels": kernels},
        "published": {"value": 1.0, "unit": "iteration_time_s", "flop_formula": "narayanan_eq3"},
    }


RUNS = (
    # GEMM-heavy: wide layers, FlashAttention, fused kernels
    _run("wide", 1024, 8, 512, micro_batch=4, global_batch=8),
    # streaming-heavy: narrow layers, long sequences, explicit scores and unfused kernels
    _run("narrow-eager", 256, 4, 2048, attention="eager", kernels="unfused"),
    # tensor-parallel over 2 GPUs, data-parallel over 2 of those pairs
    _run("tp2", 512, 8, 1024, gpus=4, tp=2, micro_batch=2, global_batch=8),
)


def write_runs(path: Path, truth: Mapping[str, float], runs: tuple[dict[str, Any], ...] = RUNS) -> Path:
    """Write ``runs`` to ``path`` with the iteration times a100-80gb predicts with the values
    ``truth`` (parameter name -> value) as their measured times; return ``path``."""
    entries = [dict(entry) for entry in runs]
    path.write_text(yaml.safe_dump({"runs": entries}))
    hardware = ResolvedHardware.load(HARDWARE)
    names = list(truth)
    true = with_values(hardware, [PARAMETERS[n] for n in names], [truth[n] for n in names])
    with tempfile.TemporaryDirectory() as directory:
        run_set = RunSet(load_runs(path), Path(directory), "as-trained")
        times = run_set.predict(range(len(entries)), true)
    for entry, time_s in zip(entries, times, strict=True):
        entry["published"] = {**entry["published"], "value": float(time_s)}
    path.write_text(yaml.safe_dump({"runs": entries}))
    return path


TRUTH = {"sustained_clock": 1.1e9, "kernel_floor": 8e-6}
"""The known values the synthetic runs are measured with (inside the registry's bounds, away
from the preset's 0.859 and 0.90)."""

