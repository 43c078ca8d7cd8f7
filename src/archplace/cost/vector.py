"""Cycle counts of element-wise, reduction, softmax and normalisation ops on vector cores.

A vector core has ``lanes`` lanes; each lane handles one element per pass.  An
op of ``elements`` output elements on ``cores`` cores takes
``⌈elements / (lanes · cores)⌉ · cycles_per_element`` cycles
(docs/model.md, Vector operators).

Cycles per element -- an ASSUMPTION of this first-fidelity model, to be
replaced by measured or synthesised figures:

* a lane does one simple operation (add, multiply, compare, max, select) per
  cycle, so element-wise ops, reductions and gathers cost 1;
* a transcendental function (exp, log, tanh, erf, sigmoid, (r)sqrt, pow, ...)
  costs ``TRANSCENDENTAL_CYCLES_PER_ELEMENT`` = 4, the ratio of FP32 FMA to
  special-function throughput of a GPU SM (CUDA C++ Programming Guide,
  arithmetic-instruction throughput table: 64 vs 16 results per clock per SM
  for compute capability 7.x and 8.0);
* softmax = max pass (1) + subtract (1) + exp (4) + sum pass (1) + scale by the
  reciprocal (1) = 8; its backward ``y·(g − Σ g·y)`` = multiply, sum, subtract,
  multiply = 4;
* layer/RMS norm = mean (1) + centred square-sum (2) + normalise (2) +
  affine (1) = 6; its backward recomputes the statistics and needs two more
  reductions: 8;
* collectives do not run on the vector cores (their time comes from the link
  model), so they cost 0 cycles here.

HBM bytes of a vector op are its ``bytes_read + bytes_written``, except for two
families the tracer records as element-wise (:func:`vector_hbm_bytes`):

* allocations (``empty``, ``empty_like``, ...) only reserve memory: no cycles, no bytes;
* generators and fills (``bernoulli_``, ``fill_``, ``zeros_like``, ``rand``, ...) only
  write their output: the tensor they are given is overwritten, not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from archplace.workload.graph import OpKind

# One simple operation per lane per cycle (assumption, see the module docstring).
SIMPLE_CYCLES_PER_ELEMENT = 1

# exp/log/tanh/erf/...: 4 cycles = FP32 FMA : special-function throughput of an NVIDIA SM
# (CUDA C++ Programming Guide throughput table, 64 vs 16 per clock, cc 7.x/8.0); an assumption.
TRANSCENDENTAL_CYCLES_PER_ELEMENT = 4

# Forward (and default) cycles per element by kind (derivations in the module docstring).
CYCLES_PER_ELEMENT: Mapping[OpKind, int] = MappingProxyType({
    OpKind.ELEMENTWISE: SIMPLE_CYCLES_PER_ELEMENT,
    OpKind.REDUCTION: SIMPLE_CYCLES_PER_ELEMENT,
    OpKind.EMBEDDING: SIMPLE_CYCLES_PER_ELEMENT,
    OpKind.SOFTMAX: 8,
    OpKind.NORM: 6,
    OpKind.COLLECTIVE: 0,
})

# Backward-pass variants, used when the aten target's name contains "backward".
BACKWARD_CYCLES_PER_ELEMENT: Mapping[OpKind, int] = MappingProxyType({
    OpKind.SOFTMAX: 4,
    OpKind.NORM: 8,
})

# aten op names (or "_"-separated parts of them) evaluated with a transcendental function.
TRANSCENDENTAL_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "tanh", "sigmoid", "silu",
    "gelu", "erf", "erfc", "erfinv", "sqrt", "rsqrt", "pow", "sin", "cos", "softplus",
    "mish", "elu", "selu", "celu", "logsumexp",
})


# Ops that only allocate (no work, no traffic).
ALLOCATION_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

# Ops that write their output without reading an input tensor.
WRITE_ONLY_OPS = frozenset({
    "bernoulli", "bernoulli_", "fill", "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "new_zeros", "new_ones", "new_full", "rand", "rand_like", "randn",
    "randn_like", "uniform_", "normal_", "arange", "scalar_tensor",
})


def vector_hbm_bytes(target: str, bytes_read: float, bytes_written: float) -> float:
    """HBM bytes a vector op moves: 0 for an allocation, the written bytes for a generator or
    fill, ``bytes_read + bytes_written`` otherwise (module docstring)."""
    name = aten_op_name(target)
    if name in ALLOCATION_OPS:
        return 0.0
    if name in WRITE_ONLY_OPS:
        return float(bytes_written)
    return float(bytes_read + bytes_written)


def aten_op_name(target: str) -> str:
    """The op name of an aten target: ``"aten.gelu_backward.default"`` -> ``"gelu_backward"``.

    Anything that is not ``namespace.name[.overload]`` is returned as is.
    """
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 else target


def is_transcendental(target: str) -> bool:
    """Whether the target's op name, or one of its ``_``-separated parts, is in TRANSCENDENTAL_OPS.

    ``aten.exp.default``, ``aten.gelu_backward.default`` and ``aten.rsqrt.default`` are;
    ``aten.add.Tensor`` and ``aten.expand.default`` are not.
    """
    name = aten_op_name(target).strip("_")
    return name in TRANSCENDENTAL_OPS or any(p in TRANSCENDENTAL_OPS for p in name.split("_"))


def cycles_per_element(kind: OpKind, target: str = "") -> int:
    """Cycles a lane spends per output element of a vector op (table in the module docstring);
    0 for an allocation.

    Raises:
        ValueError: ``kind`` is MATMUL (matmuls run on the tensor cores) or has no entry.
    """
    if kind is OpKind.MATMUL:
        raise ValueError("matmul is not a vector op")
    if aten_op_name(target) in ALLOCATION_OPS:
        return 0
    if "backward" in target and kind in BACKWARD_CYCLES_PER_ELEMENT:
        return BACKWARD_CYCLES_PER_ELEMENT[kind]
    base = CYCLES_PER_ELEMENT.get(kind)
    if base is None:
        raise ValueError(f"no vector cost for operator kind {kind!r}")
    if kind in (OpKind.ELEMENTWISE, OpKind.REDUCTION) and is_transcendental(target):
        return max(base, TRANSCENDENTAL_CYCLES_PER_ELEMENT)
    return base


def vector_cycles(elements: int, lanes: int, cores: int, cycles_per_elem: int) -> int:
    """``⌈elements / (lanes · cores)⌉ · cycles_per_elem``; 0 for no elements.

    Raises:
        ValueError: non-positive lanes or cores, or negative cycles per element.
    """
    if lanes <= 0 or cores <= 0:
        raise ValueError(f"lanes and cores must be positive, got {lanes} and {cores}")
    if cycles_per_elem < 0:
        raise ValueError(f"cycles per element must be >= 0, got {cycles_per_elem}")
    if elements <= 0:
        return 0
    return -(-elements // (lanes * cores)) * cycles_per_elem
