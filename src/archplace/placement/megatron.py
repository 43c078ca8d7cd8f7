"""Published Megatron-LM training measurements, for validating ``evaluate``.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, Table 1: GPT models (vocabulary 51,200, sequence
2048) on DGX A100 nodes (8 × A100-80GB, NVLink inside a node, 8 × 200 Gb/s
InfiniBand HDR between), trained with full activation recomputation and mixed
precision Adam; achieved teraFLOP/s per GPU counted with the paper's eq. (3),
which includes the recomputed forward pass.

The table does not give the micro-batch size, the pipeline schedule or the data-parallel
implementation of each row; they come from the paper's artifact scripts in the Megatron-LM
repository, ``examples/sc21/run_table_1.sh`` (per row: ``MBS``, ``DDP`` and
``--num-layers-per-virtual-pipeline-stage``) and ``examples/sc21/CONFIG.sh`` (``--fp16``,
``--seq-length 2048``). ``DDP=torch`` is PyTorch DistributedDataParallel, which all-reduces
gradient buckets while the backward pass runs (Li et al., "PyTorch Distributed", VLDB 2020);
``DDP=local`` is Megatron-LM's own wrapper, which all-reduces after the last backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MegatronRun:
    """One row of Narayanan et al. 2021, Table 1.

    Attributes:
        name: model size as the paper writes it.
        heads, hidden, layers: the GPT architecture.
        tp, pp: tensor- and pipeline-parallel sizes; dp = gpus / (tp * pp).
        gpus: A100 GPUs used.
        global_batch: samples per iteration.
        tflop_per_gpu: achieved teraFLOP/s per GPU (eq. 3).
        micro_batch: samples per micro-batch (``MBS`` of run_table_1.sh).
        chunks: model chunks per pipeline device, v = layers / (pp * layers per virtual stage)
            when the row uses the interleaved schedule, else 1 (1F1B).
        dp_overlap: the gradient all-reduce overlaps the backward pass (``DDP=torch``).
    """

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    tflop_per_gpu: float
    micro_batch: int
    chunks: int
    dp_overlap: bool

    seq_len: int = 2048
    vocab: int = 51200

    @property
    def dp(self) -> int:
        """Data-parallel degree."""
        return self.gpus // (self.tp * self.pp)

    @property
    def schedule(self) -> str:
        """Pipeline schedule: ``interleaved`` with several chunks per device, else ``1f1b``."""
        return "interleaved" if self.chunks > 1 else "1f1b"

    def hf_config(self) -> dict[str, Any]:
        """The model as an HF GPT-2 config (Megatron's GPT is GPT-2's architecture)."""
        return {"model_type": "gpt2", "n_layer": self.layers, "n_embd": self.hidden, "n_head": self.heads,
                "n_positions": self.seq_len, "vocab_size": self.vocab}

    def flop_per_iteration(self) -> float:
        """Eq. (3) of the paper: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), recomputation included."""
        b, s, n, h, v = self.global_batch, self.seq_len, self.layers, self.hidden, self.vocab
        return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))

    def tflop_per_gpu_of(self, iteration_time_s: float) -> float:
        """Achieved teraFLOP/s per GPU, as the paper counts it, for an iteration time."""
        return self.flop_per_iteration() / iteration_time_s / self.gpus / 1e12


TABLE_1 = (
    # name, heads, hidden, layers, tp, pp, gpus, batch, TFLOP/s, MBS, v, DDP=torch
    MegatronRun("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137.0, 16, 1, True),
    MegatronRun("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138.0, 16, 1, True),
    MegatronRun("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142.0, 16, 1, True),
    MegatronRun("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135.0, 8, 1, True),
    MegatronRun("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138.0, 4, 1, False),
    # 5 layers per virtual stage: 60 / (4 * 5) = 3 chunks per device
    MegatronRun("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140.0, 2, 3, False),
)
