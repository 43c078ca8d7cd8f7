"""The torch call behind each grid point of :mod:`archplace.profiling.grid`.

Each builder allocates the operands on the device once and returns a function running the
kernel once, so the timer (:mod:`archplace.profiling.timer`) times the kernel and nothing else:

* ``gemm``: ``torch.matmul`` of ``[m, k] x [k, n]`` (cuBLAS on CUDA); ``fp8`` is
  ``torch._scaled_mm`` of e4m3 operands (unit scales, bf16 output), the FP8 GEMM PyTorch offers;
* ``attention``: ``torch.nn.functional.scaled_dot_product_attention`` of ``[batch, heads, seq,
  head_dim]`` q, k, v with one backend only (:func:`attention_backend`: FLASH_ATTENTION,
  FlashAttention-2 on CUDA, for the ``flash2`` family; CUDNN_ATTENTION, cuDNN's fused attention,
  for ``cudnn``); ``bwd`` times the backward pass alone
  (``out.backward(grad, retain_graph=True)`` of one forward pass);
* ``softmax``: ``torch.softmax`` over the last dimension; ``layernorm``:
  ``torch.nn.functional.layer_norm`` over the last dimension, no weight or bias (as the
  LLMCompass A100 measurements); ``gelu``: ``torch.nn.functional.gelu(approximate="tanh")``
  (as LLMCompass); ``copy``: ``dst.copy_(src)`` of two byte tensors (each byte read once and
  written once).

torch is passed in, never imported here.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from archplace.base.errors import ConfigError
from archplace.profiling.grid import AttentionPoint, GemmPoint, RowwisePoint

#: The dtypes ``archplace profile`` times, as the tables name them.
DTYPES = ("bf16", "fp16", "fp32", "fp8")

#: Bytes per element of each dtype.
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}

#: What each kernel class calls, for the table's ``library`` header line.
LIBRARY = {
    "gemm": "torch.matmul",
    "gemm-fp8": "torch._scaled_mm, float8_e4m3fn operands, unit scales, bf16 output",
    "attention": "torch.nn.functional.scaled_dot_product_attention, FLASH_ATTENTION backend only",
    "attention-cudnn": "torch.nn.functional.scaled_dot_product_attention, CUDNN_ATTENTION backend only",
    "softmax": "torch.softmax over the last dimension",
    "layernorm": "torch.nn.functional.layer_norm over the last dimension, no weight or bias",
    "gelu": "torch.nn.functional.gelu(approximate='tanh')",
    "copy": "torch.Tensor.copy_ between two uint8 tensors",
}

Call = Callable[[], object]


def torch_dtype(torch: Any, dtype: str) -> Any:
    """The torch dtype of a table dtype name (:data:`DTYPES`).

    Raises:
        ConfigError: an unknown name.
    """
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
             "fp8": torch.float8_e4m3fn}
    if dtype not in table:
        raise ConfigError(f"profile: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return table[dtype]


def kernel_dtype(kernel: str, dtype: str) -> str:
    """The dtype a kernel class is timed in for a run asked in ``dtype``: fp8 exists for GEMMs
    only (``torch._scaled_mm``); with ``fp8`` every other class is timed in bf16, the dtype
    around FP8 GEMMs in Transformer Engine's recipe.  Attention is timed in 16 bits: with
    ``fp32`` (or ``fp8``) in bf16, as FlashAttention-2 has only fp16 and bf16 kernels."""
    if kernel == "attention" and dtype in ("fp32", "fp8"):
        return "bf16"
    return "bf16" if dtype == "fp8" and kernel != "gemm" else dtype


#: The attention kernel families ``archplace profile`` can time, and the SDPA backend of each
#: (``torch.nn.attention.SDPBackend``): ``flash2``, PyTorch's FlashAttention-2 kernels (in SDPA
#: since PyTorch 2.2); ``cudnn``, cuDNN's fused attention (CUDA only; the attention Transformer
#: Engine prefers on Hopper).
ATTENTION_BACKENDS = MappingProxyType({"flash2": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"})


def attention_family(cuda: bool, family: str = "flash2") -> str:
    """The kernel family of the attention rows (the tables' ``family`` header): ``family``
    (:data:`ATTENTION_BACKENDS`) on CUDA; ``cpu-flash`` (PyTorch's CPU flash kernel) elsewhere."""
    return family if cuda else "cpu-flash"


def attention_library(family: str) -> str:
    """The ``library`` words of an attention table of ``family``."""
    return LIBRARY["attention" if family == "flash2" else f"attention-{family}"]


def attention_backend(torch: Any, family: str = "flash2") -> Any:
    """A context in which scaled_dot_product_attention runs the backend of ``family`` only
    (``torch.nn.attention.sdpa_kernel``), so the rows are of one kernel family; a shape it
    cannot run fails (and is skipped) instead of silently using another backend.

    Raises:
        ConfigError: an unknown family.
    """
    if family not in ATTENTION_BACKENDS:
        raise ConfigError(f"profile: attention family {family!r} is not one of "
                          f"{', '.join(ATTENTION_BACKENDS)}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, ATTENTION_BACKENDS[family])])


def gemm_call(torch: Any, device: Any, point: GemmPoint, dtype: str) -> Call:
    """One GEMM ``[m, k] x [k, n]`` in ``dtype`` (``batch`` > 1: ``torch.bmm``)."""
    if dtype == "fp8":
        a = torch.randn(point.m, point.k, device=device).to(torch.float8_e4m3fn)
        b = torch.randn(point.n, point.k, device=device).to(torch.float8_e4m3fn).t()  # column-major
        one = torch.ones((), device=device)
        if point.batch != 1:
            raise ConfigError("profile: fp8 GEMMs are timed with batch 1 only")
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    kind = torch_dtype(torch, dtype)
    if point.batch == 1:
        a = torch.randn(point.m, point.k, device=device, dtype=kind)
        b = torch.randn(point.k, point.n, device=device, dtype=kind)
        return lambda: torch.matmul(a, b)
    a = torch.randn(point.batch, point.m, point.k, device=device, dtype=kind)
    b = torch.randn(point.batch, point.k, point.n, device=device, dtype=kind)
    return lambda: torch.bmm(a, b)


def attention_call(torch: Any, device: Any, point: AttentionPoint, dtype: str) -> Call:
    """One attention forward, or one backward of a forward made once here."""
    kind = torch_dtype(torch, dtype)
    shape = (point.batch, point.heads, point.seq, point.head_dim)
    backward = point.direction == "bwd"
    q, k, v = (torch.randn(shape, device=device, dtype=kind, requires_grad=backward) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if not backward:
        def forward() -> object:
            with torch.no_grad():
                return sdpa(q, k, v, is_causal=point.causal)
        return forward
    out = sdpa(q, k, v, is_causal=point.causal)
    grad = torch.randn_like(out)

    def backward_pass() -> object:
        q.grad = k.grad = v.grad = None
        out.backward(grad, retain_graph=True)
        return None

    return backward_pass


def rowwise_call(torch: Any, device: Any, kernel: str, point: RowwisePoint, dtype: str) -> Call:
    """Softmax or layer norm over the last dimension of a ``rows x cols`` tensor."""
    x = torch.randn(point.rows, point.cols, device=device, dtype=torch_dtype(torch, dtype))
    if kernel == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    if kernel == "layernorm":
        return lambda: torch.nn.functional.layer_norm(x, (point.cols,))
    raise ConfigError(f"profile: {kernel!r} is not a row-wise kernel (softmax, layernorm)")


def gelu_call(torch: Any, device: Any, elements: int, dtype: str) -> Call:
    """GeLU (tanh approximation) of a 1-D tensor of ``elements``."""
    x = torch.randn(elements, device=device, dtype=torch_dtype(torch, dtype))
    return lambda: torch.nn.functional.gelu(x, approximate="tanh")


def copy_call(torch: Any, device: Any, size_bytes: int) -> Call:
    """A device-to-device copy of ``size_bytes`` bytes."""
    src = torch.ones(size_bytes, device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)
