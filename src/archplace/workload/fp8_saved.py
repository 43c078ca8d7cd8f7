"""Activation memory under FP8 training: the GEMM inputs Transformer Engine keeps in FP8.

With the FP8 recipe (:mod:`archplace.cost.precision`), a linear layer's forward pass casts its
input to FP8 for the GEMM and saves that FP8 tensor (1 byte per element), not the bf16 input,
for its weight-gradient GEMM: Transformer Engine's ``_Linear.forward`` saves ``inputmat`` or
``inputmat_t`` (the FP8 cast or its transpose) when FP8 is on and the wgrad GEMM is not
overridden to higher precision, and the bf16 ``inputmat_no_fp8`` only without FP8
(NVIDIA/TransformerEngine ``transformer_engine/pytorch/module/linear.py``, the
``if is_grad_enabled:`` block of ``_Linear.forward``, commit
0004dbd0231cb02d7b47d45344900a494fa13f46; ``LayerNormLinear`` and ``LayerNormMLP`` save their
GEMM inputs the same way). A tensor that another operator's backward pass also reads (the
attention output, which the fused attention kernel's backward reads too) stays saved in bf16
for that operator, and the linear layer keeps its own FP8 copy beside it.

So, per tensor the traced backward pass reads (``saved``), with ``b`` its bytes as traced
(bf16) and ``n`` its elements, both per device:

* read only by linear-layer GEMMs (``mm``, ``addmm``, the experts' grouped GEMMs): ``n``
  bytes instead of ``b`` -- a saving of ``b - n``;
* read by such a GEMM and by another operator: ``b + n`` -- ``n`` more;
* otherwise ``b``, unchanged.

:func:`fp8_saving_bytes` is the sum of those differences over a layer's saved tensors; the
placement engine subtracts it from the layer's saved bytes when the plan runs in FP8
(:func:`archplace.placement.costs.layer_costs`). The LM head stays bf16 (its GEMM is not a TE
module), which the engine applies by layer kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from archplace.workload.trace import Traced, first_numel, op_name

LINEAR_GEMM_OPS = frozenset({"mm", "addmm", "grouped_mm", "grouped_mm_dgrad", "grouped_mm_wgrad"})
"""Operators (:func:`~archplace.workload.trace.op_name`) the FP8 recipe runs in FP8: the linear
layers' GEMMs and the routed experts' grouped GEMMs; attention's batched GEMMs (``bmm``) and the
fused attention operator stay in bf16."""


def fp8_saving_bytes(traced: Traced, saved: Iterable[Any], bwd_nodes: Iterable[Any],
                     saved_bytes: Callable[[Any], float], factor: Callable[[Any], float]) -> float:
    """Bytes fewer that a layer saves for its backward pass when its linear GEMMs run in FP8
    (module docstring); negative when its FP8 copies beside bf16 tensors outweigh the savings.

    Args:
        traced: the traced graph (its ``storage`` follows views to the tensor that owns them).
        saved: the storages (graph nodes) the layer's backward pass reads.
        bwd_nodes: the layer's backward operators (graph nodes).
        saved_bytes: bytes of one storage as traced (whole tensor).
        factor: the share of a storage one device holds (tensor-parallel sharding).
    """
    readers: dict[Any, set[bool]] = {}
    wanted = set(saved)
    for node in bwd_nodes:
        gemm = op_name(node) in LINEAR_GEMM_OPS
        for arg in node.all_input_nodes:
            storage = traced.storage(arg)
            if storage in wanted:
                readers.setdefault(storage, set()).add(gemm)
    total = 0.0
    for storage, kinds in readers.items():
        if True not in kinds:
            continue
        elements = float(first_numel(storage.meta.get("val"))) * factor(storage)
        total += saved_bytes(storage) * factor(storage) - elements if kinds == {True} else -elements
    return total


def swiglu_inputs(traced: Traced, fwd_nodes: Iterable[Any]) -> set[Any]:
    """The storages (graph nodes) of a layer's SwiGLU inputs: the linear GEMM outputs that a
    gated SiLU reads, ``silu(gate) * up`` (the gate and the up projection, or the two halves of
    one fused projection, the routed experts' grouped GEMM among them).

    With Megatron-Core's ``activation_func_fp8_input_store`` ("Store the input of MLP activation
    function in FP8 for backprop to save memory", SwiGLU only; NVIDIA/Megatron-LM @ d98e8a64dd
    ``megatron/core/transformer/transformer_config.py``) and in DeepSeek-V3 (technical report,
    arXiv:2412.19437, sec. 3.3.3: "we cache the inputs of the SwiGLU operator ... These
    activations are also stored in FP8") these are kept for the backward pass in FP8, one byte
    an element."""
    nodes = set(fwd_nodes)
    found: set[Any] = set()
    for node in nodes:
        if op_name(node) != "silu" or not node.args:
            continue
        gates = [u for u in node.users if u in nodes and op_name(u) == "mul"]
        if not gates:
            continue  # SiLU without a gate: Megatron-Core stores only SwiGLU's input in FP8
        operands = [node.args[0], *(a for u in gates for a in u.all_input_nodes if a is not node)]
        found |= {s for s in (traced.storage(a) for a in operands) if op_name(s) in LINEAR_GEMM_OPS}
    return found
