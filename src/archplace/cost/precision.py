"""FP8 training: which GEMMs run in FP8, how fast, and what the scaling recipe adds
(docs/model.md, FP8 training).

Transformer Engine's FP8 recipe (NVIDIA Transformer Engine user guide, "Using FP8 with
Transformer Engine" and the ``DelayedScaling`` recipe of its common API) runs the GEMMs of the
linear layers (``te.Linear``, ``LayerNormLinear``, ``LayerNormMLP``) with FP8 operands and
keeps everything else in higher precision:

* **Which GEMMs.** The linear layers' GEMMs, forward and backward (the traced ``aten.mm`` /
  ``aten.addmm`` operators: fprop, dgrad, wgrad), and a mixture-of-experts block's grouped
  expert GEMMs (``archplace.grouped_mm`` and its ``_dgrad`` / ``_wgrad``; TE's
  ``GroupedLinear``). The router's small GEMM is an ``aten.mm`` too and is counted in FP8,
  although Megatron-Core computes it outside TE (a negligible difference). Not attention's
  score and value GEMMs (``aten.bmm``, or the fused attention operator: TE's
  ``DotProductAttention`` runs them in bf16 under the delayed-scaling recipe) and not the LM
  head: Megatron-Core's GPT output layer is its own ``tensor_parallel.ColumnParallelLinear``
  (``megatron/core/models/gpt/gpt_model.py``), not a TE module, so ``fp8_autocast`` leaves
  it in bf16.
* **Speed.** An FP8 GEMM runs at ``fp8_speedup`` x the bf16 rate of the arrays
  (:attr:`~archplace.hw.accelerator.Accelerator.fp8_speedup`; 2 on H100: 1,979 dense
  FP8 TFLOP/s against 989 bf16). Its operands are read at 1 byte per element; its output is
  written in bf16 (2 bytes).
* **Scaling overhead.** Every FP8 GEMM quantizes its two inputs from bf16 to FP8 with the
  scale of the delayed-scaling recipe (one read of the bf16 tensor, one write of the FP8 one;
  the amax is recorded during the same pass): memory-bound element-wise work of
  :data:`CAST_BYTES_PER_ELEMENT` bytes per input element, run before the GEMM::

      cast_s = 3 · batch · (m·k + k·n) / (hbm_bandwidth · hbm)

  (``hbm`` the chip's declared streaming fraction, 1 on the cycle model). This is an upper
  bound on TE's cast work: TE fuses some casts into the norm or activation that precedes
  the GEMM, and with FP8 weight caching casts the weights once per iteration rather than once
  per micro-batch. The amax-history and scale updates (a few scalars per tensor) are not timed.
* **Memory.** Master weights and optimizer state stay fp32 and the bf16 weights stay
  (TE's recipe keeps the high-precision parameters; ``fp8_model_init`` would drop them, for
  inference only); TE's FP8 weight caching keeps the FP8 copy of each FP8 GEMM's weight and its
  transpose (``cast_transpose``: Hopper's FP8 GEMMs take only the "TN" operand layout) for the
  whole iteration: :data:`FP8_WEIGHT_CACHE_BYTES_PER_PARAM` bytes per such weight.
  Activations saved for the backward pass: a linear GEMM's input is saved in FP8 (1 B per
  element) for its weight gradient, with a bf16 copy kept only where another operator's backward
  reads the same tensor (:mod:`archplace.workload.fp8_saved`, from Transformer Engine's
  ``_Linear.forward``); everything else at its traced dtype.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any

from archplace.base.errors import ConfigError
from archplace.cost import efficiency
from archplace.cost.model import EstimatingCostModel
from archplace.cost.systolic import matmul_estimate, op_key
from archplace.cost.types import OpEstimate, OpLatency
from archplace.hw.accelerator import Accelerator, Dataflow
from archplace.hw.power import HBM_PATH_ENERGY_J_PER_BYTE
from archplace.workload.graph import Operator, OpKind


class Precision(enum.StrEnum):
    """The precision of the linear layers' GEMMs: bf16 (mixed precision, Megatron-LM's bf16
    recipe) or fp8 (Transformer Engine's FP8 recipe; module docstring)."""

    BF16 = "bf16"
    FP8 = "fp8"


PRECISIONS = (Precision.BF16,)
"""Precisions ``plan`` and ``search`` try unless told otherwise."""

PRECISION_ORDER = (Precision.BF16, Precision.FP8)
"""Tie-break order of precisions (bf16 first)."""

CAST_BYTES_PER_ELEMENT = 3
"""Bytes moved to quantize one element: the bf16 value read (2) and the FP8 value written (1)."""

FP8_OPERAND_BYTES = 1
"""Bytes per element of an FP8 GEMM operand."""

FP8_WEIGHT_CACHE_BYTES_PER_PARAM = 2
"""FP8 copy (1 B) and its transpose (1 B) of each FP8 GEMM's weight, kept over the iteration."""

_FP8_TARGETS = ("aten.mm", "aten.addmm", "archplace.grouped_mm", "archplace.grouped_mm_dgrad",
                "archplace.grouped_mm_wgrad")


def is_fp8_gemm(op: Operator) -> bool:
    """Whether ``op`` is a linear layer's GEMM (``aten.mm`` / ``aten.addmm``, or the experts'
    grouped GEMMs), which the FP8 recipe runs in FP8; attention's batched GEMMs (``aten.bmm``)
    and every other operator stay in bf16."""
    return op.kind is OpKind.MATMUL and op.target.rsplit(".", 1)[0] in _FP8_TARGETS


def cast_bytes(op: Operator) -> float:
    """HBM bytes of quantizing the two inputs of the GEMM ``op`` to FP8:
    ``3 · batch · (m·k + k·n)``."""
    return float(CAST_BYTES_PER_ELEMENT * op.batch * (op.m * op.k + op.k * op.n))


def fp8_weight_params(ops: Iterable[Operator]) -> int:
    """Weight elements of the FP8 GEMMs among the forward operators ``ops``: ``batch · k · n`` of
    each ``[batch, m, k] x [batch, k, n]`` GEMM (a linear layer's weight, batch 1; the experts'
    stacked weights of a grouped GEMM, batch = experts), per rank."""
    return sum(op.batch * op.k * op.n for op in ops if is_fp8_gemm(op))


def check_precision(acc: Accelerator, precision: Precision) -> None:
    """Refuse FP8 on a chip without FP8 tensor cores.

    Raises:
        ConfigError: ``precision`` is fp8 and ``acc.fp8_speedup`` is None ("a100-80gb has no
            FP8 tensor cores ...").
    """
    if precision is Precision.FP8 and acc.fp8_speedup is None:
        raise ConfigError(f"{acc.name} has no FP8 tensor cores: use precision bf16, or give the "
                          f"hardware file's accelerator an fp8_speedup", fields=("precision",))


def fp8_gemm_estimate(op: Operator, acc: Accelerator) -> OpEstimate:
    """Estimate of the linear-layer GEMM ``op`` with FP8 operands on ``acc`` (module docstring).

    The GEMM: the cycle model's with the cycle counts divided by ``acc.fp8_speedup``, operands
    at 1 byte and the output at ``acc.bytes_per_element``; on a chip that declares its
    efficiency, :func:`archplace.cost.efficiency.estimate` at ``fp8_speedup`` x the peak. Then
    the quantization of its two inputs runs before it: ``cast_s`` (:func:`cast_bytes` over the
    streaming bandwidth) is added to both latencies, its bytes to the traffic and the energy.

    Raises:
        ConfigError: ``acc`` has no FP8 tensor cores (:func:`check_precision`).
    """
    check_precision(acc, Precision.FP8)
    speedup = float(acc.fp8_speedup or 1.0)
    gemm = matmul_estimate(
        op.batch, op.m, op.k, op.n, rows=acc.array_rows, cols=acc.array_cols, cores=acc.tensor_cores,
        output_stationary=acc.dataflow is Dataflow.OS, clock_hz=acc.clock_hz,
        buffer_bytes=acc.buffer_bytes, hbm_bandwidth_bytes_per_s=acc.hbm_bandwidth_bytes_per_s,
        bytes_per_element=FP8_OPERAND_BYTES, traced_bytes=op.bytes_read + op.bytes_written,
        traced_bytes_per_element=acc.bytes_per_element, output_bytes_per_element=acc.bytes_per_element,
        fused_elements=int(op.fused_elements or 0), vector_cores=acc.vector_cores,
        vector_lanes=acc.vector_lanes, array_timing=acc.array_timing, speedup=speedup)
    if acc.efficiency is not None:
        gemm = efficiency.estimate(op, acc, gemm, speedup=speedup)
    streaming = acc.hbm_bandwidth_bytes_per_s * (acc.efficiency.hbm if acc.efficiency is not None else 1.0)
    moved = cast_bytes(op)
    cast_s = moved / streaming
    return OpEstimate(gemm.single_core_s + cast_s, gemm.all_cores_s + cast_s, gemm.compute_single_s,
                      gemm.compute_all_s, gemm.memory_s + cast_s, 0.0, gemm.hbm_bytes + moved,
                      gemm.energy_j + moved * HBM_PATH_ENERGY_J_PER_BYTE, gemm.bound_single, gemm.bound_all)


class Fp8CostModel:
    """:class:`~archplace.cost.model.CostModel` of FP8 training: the linear layers' GEMMs
    (:func:`is_fp8_gemm`) by :func:`fp8_gemm_estimate`, every other operator by ``inner``.

    Args:
        inner: the bf16 cost model (anything with ``estimate(op, acc)``, such as
            :class:`~archplace.cost.systolic.SystolicCostModel`; its cluster prices the collectives).
    """

    def __init__(self, inner: EstimatingCostModel) -> None:
        self.inner = inner
        self._cache: dict[tuple[Any, ...], OpEstimate] = {}

    def latency(self, op: Operator, acc: Accelerator) -> OpLatency:
        """Latency of ``op`` on one core and on all cores of its type of ``acc``.

        Raises:
            ConfigError: an FP8 GEMM on a chip without FP8 tensor cores; as ``inner``.
        """
        return self.estimate(op, acc).latency

    def estimate(self, op: Operator, acc: Accelerator) -> OpEstimate:
        """Latency, traffic, bound and energy of ``op`` on ``acc`` (errors as :meth:`latency`)."""
        if not is_fp8_gemm(op):
            return self.inner.estimate(op, acc)
        key = (op_key(op), acc)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = fp8_gemm_estimate(op, acc)
        return cached
