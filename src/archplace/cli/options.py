"""Command-line options shared by several commands (every command that traces a model; plan,
evaluate and search for the ZeRO stage, gradient dtype and precision), and the line every
command prints for a file it wrote."""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from archplace.errors import ArchplaceError, ConfigError

AttentionOption = Annotated[str, typer.Option(
    "--attention", metavar="eager|sdpa|flash",
    help="Attention as it is run: flash (FlashAttention-2), sdpa (fused, every score block "
         "computed, as with an explicit mask) "
         "or eager (HF's explicit scores and softmax).")]
AttentionKernelOption = Annotated[str | None, typer.Option(
    "--attention-kernel", metavar="FAMILY",
    help="Measured fused-attention kernel whose per-shape table costs attention on a known chip: "
         "flash2, flash3, cudnn or triton-flash1, where a table exists for the chip [the chip's own: "
         "flash2 on a100-80gb and h100-80gb].")]
TpCommOverlapOption = Annotated[bool | None, typer.Option(
    "--tp-comm-overlap/--no-tp-comm-overlap",
    help="The framework hides the TP collectives behind the GEMMs next to them (Transformer "
         "Engine's userbuffers overlap, NeMo's tp_comm_overlap) [the chip's own: off].")]
PpCommOverlapOption = Annotated[bool | None, typer.Option(
    "--pp-comm-overlap/--no-pp-comm-overlap",
    help="An interleaved plan's pipeline sends overlap the next chunk's computation "
         "(Megatron-Core's overlap_p2p_comm) [the chip's own: off].")]
KernelsOption = Annotated[str, typer.Option(
    "--kernels", metavar="fused|unfused",
    help="Element-wise kernels: fused (Megatron-LM's fused bias+GeLU, bias+dropout+add, "
         "norms, softmax) or unfused (HF's operators one by one).")]
CapacityFactorOption = Annotated[float, typer.Option(
    "--capacity-factor", help="Mixture-of-experts models: expert capacity over the balanced share of "
                              "routed tokens; 1.0 dropless, no padding (Megatron-Core's default), above 1 "
                              "every expert padded to it (GShard, Switch Transformer) [1.0].")]
LoadImbalanceOption = Annotated[float, typer.Option(
    "--expert-load-imbalance", help="Mixture-of-experts models: tokens the busiest expert-parallel rank "
                                    "receives over the mean, dropless routing; 1.0 balanced [1.0].")]
RankOrderOption = Annotated[str, typer.Option(
    "--rank-order", metavar="tp-cp-ep-pp-dp|tp-cp-ep-dp-pp",
    help="How the parallel groups are laid over the device ranks, fastest-varying first: tp-cp-ep-pp-dp "
         "(pipeline neighbours close, replicas outermost) or tp-cp-ep-dp-pp (Megatron-Core's default: "
         "replicas close, pipeline outermost) [tp-cp-ep-pp-dp].")]
ZeroStagesOption = Annotated[str | None, typer.Option(
    "--zero-stage", help="ZeRO stages to try: a comma list of 0-3 or 'all' (3 = FSDP) [all].")]
GradDtypeOption = Annotated[str, typer.Option(
    "--grad-reduce-dtype", help="Gradient buffer and DP reduction dtype: fp32 (Megatron-LM's bf16 "
                                "recipe) | bf16.")]

_PRECISION_HELP = ("Precision of the linear layers' GEMMs: bf16, or fp8 (Transformer Engine's FP8 recipe: "
                   "FP8 GEMM operands with delayed scaling, on chips with FP8 tensor cores)")
PrecisionsOption = Annotated[list[str] | None, typer.Option(
    "--precision", metavar="bf16|fp8", help=_PRECISION_HELP + "; repeatable, the plans of each are "
                                            "ranked together [bf16].")]
PrecisionOption = Annotated[str, typer.Option("--precision", metavar="bf16|fp8", help=_PRECISION_HELP + ".")]

_CP_HELP = "Context-parallel degree: each sample's sequence split over CP ranks (ring attention)"
_EP_HELP = "Expert-parallel degree: each MoE layer's routed experts sharded over EP ranks of the DP group"
CpsOption = Annotated[list[int] | None, typer.Option(
    "--cp", help=_CP_HELP + "; repeatable, the degrees to try [automatic].")]
EpsOption = Annotated[list[int] | None, typer.Option(
    "--ep", help=_EP_HELP + "; repeatable, the degrees to try [automatic].")]
SearchCpsOption = Annotated[list[int] | None, typer.Option(
    "--cp", help=_CP_HELP + "; repeatable, the degrees to try [1].")]
SearchEpsOption = Annotated[list[int] | None, typer.Option(
    "--ep", help=_EP_HELP + "; repeatable, the degrees to try [1].")]
CpOption = Annotated[int, typer.Option("--cp", help=_CP_HELP + ".")]
EpOption = Annotated[int, typer.Option("--ep", help=_EP_HELP + ".")]
_ETP_HELP = ("Expert-tensor-parallel width: each routed expert's weights split over ETP ranks "
             "(Megatron-Core's expert_tensor_parallel_size; MoE models)")
EtpsOption = Annotated[list[int] | None, typer.Option(
    "--etp", help=_ETP_HELP + "; repeatable, the widths to try [automatic: 1 and the TP width].")]
SearchEtpsOption = Annotated[list[int] | None, typer.Option(
    "--etp", help=_ETP_HELP + "; repeatable, the widths to try [1].")]
EtpOption = Annotated[int, typer.Option("--etp", help=_ETP_HELP + ".")]


# Options of the run that plan and evaluate share.
Model = Annotated[str | None, typer.Option("--model", help="Model preset or path of an HF config.json.")]
Hardware = Annotated[str | None, typer.Option(
    "--hardware", help="Hardware preset or YAML file (with cluster links).")]
Devices = Annotated[int | None, typer.Option("--devices", help="Accelerators in the cluster.")]
GlobalBatch = Annotated[int | None, typer.Option("--global-batch", help="Samples per iteration.")]
SeqLen = Annotated[int | None, typer.Option(help="Tokens per sample [model's context].")]
Optim = Annotated[str, typer.Option(help="adam (18 B/param) | sgd.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Fuse = Annotated[bool, typer.Option(
    "--fuse", help="Cost layers with element-wise ops fused into the matmul producing their input.")]
DpOverlap = Annotated[bool, typer.Option(
    "--dp-overlap", help="Reduce gradients bucket by bucket during the last backward pass (only what "
                         "is left after it is exposed); without it the whole reduction is exposed.")]


_FLAGS = {"tps": "--tp", "micro_batches": "--micro-batch", "top_k": "--top", "zero_stages": "--zero-stage",
          "recomputes": "--recompute", "schedules": "--schedule", "precisions": "--precision",
          "cps": "--cp", "eps": "--ep", "etps": "--etp"}


def flag_of(field: str) -> str:
    """The command-line option of an input field: ``plan.micro_batch`` -> ``--micro-batch``,
    ``top_k`` -> ``--top``."""
    name = field.rsplit(".", 1)[-1]
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def cli_message(exc: ArchplaceError) -> str:
    """The message of ``exc`` as the CLI shows it: each field a :class:`ConfigError` names
    (its ``fields``) spelled as the option that sets it."""
    message = str(exc)
    for field in getattr(exc, "fields", ()) if isinstance(exc, ConfigError) else ():
        message = re.sub(rf"(?<![\w.-]){re.escape(field)}(?![\w])", flag_of(field), message)
    return message


def plain_console(width: int | None = None, *, stderr: bool = False) -> Console:
    """A rich console for the CLI's tables, ``width`` columns wide (None: the terminal's), on
    stdout (or ``stderr``); it prints strings as they are, never reading markup (``[bold]``) or
    emoji codes (``:smile:``) in them -- names come from the user's files."""
    return Console(width=width, stderr=stderr, markup=False, emoji=False)


def table_console(width: int) -> Console:
    """:func:`plain_console` on stdout: the terminal's width, or ``width`` when stdout is not a terminal."""
    return plain_console(None if sys.stdout.isatty() else width)


MAX_ERROR_CHARS = 1000
"""Most characters of the message on the CLI's error line; a longer one loses its middle."""


def _visible(char: str) -> str:
    """``char`` itself, or ``\\x1b``-style for a control character (a terminal would act on it)."""
    if unicodedata.category(char) != "Cc" or char == "\t":
        return char
    return char.encode("unicode_escape").decode("ascii")


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` as one line of a terminal: line breaks (of any kind) become one space each, other
    control characters are shown escaped (``\\x1b``), and with a ``limit`` a longer text keeps
    its start and end around ``…(N characters left out)…``."""
    flat = "".join(_visible(c) for c in " ".join(text.splitlines()))
    if limit is None or len(flat) <= limit:
        return flat
    tail = limit // 4
    head = limit - tail
    while True:  # the marker's count grows as the head shrinks: shrink until all fits
        marker = f" …({len(flat) - head - tail:,} characters left out)… "
        if head + len(marker) + tail <= limit or head == 0:
            break
        head = max(0, limit - tail - len(marker))
    return f"{flat[:head]}{marker}{flat[len(flat) - tail:]}"


def error_line(message: str) -> str:
    """The CLI's error line for ``message``: ``archplace: error: MESSAGE`` and a newline, the
    message on one line and at most :data:`MAX_ERROR_CHARS` long (:func:`one_line`)."""
    return f"archplace: error: {one_line(message, MAX_ERROR_CHARS)}\n"


def say_wrote(path: Path) -> None:
    """``wrote PATH`` on stderr, on one line and verbatim (but for control characters, shown
    escaped): not through rich, which wraps a long path at the console's width and reads
    ``[...]`` in a file name as markup."""
    sys.stderr.write(f"wrote {one_line(str(path))}\n")
