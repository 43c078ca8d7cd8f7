"""Command-line options shared by every command that traces a model."""

from __future__ import annotations

from typing import Annotated

import typer

AttentionOption = Annotated[str, typer.Option(
    "--attention", metavar="eager|sdpa|flash",
    help="Attention as it is run: flash (FlashAttention-2), sdpa (fused, no block skipping) "
         "or eager (HF's explicit scores and softmax).")]
KernelsOption = Annotated[str, typer.Option(
    "--kernels", metavar="fused|unfused",
    help="Element-wise kernels: fused (Megatron-LM's fused bias+GeLU, bias+dropout+add, "
         "norms, softmax) or unfused (HF's operators one by one).")]
