"""The shapes ``archplace profile`` times: one frozen :class:`Grid` per size (``full``,
``quick``, ``smoke``).

Sizes are in elements (GEMM and attention dimensions) or bytes (element-wise tensors, the
copy).  Where the grid follows a published benchmark it says so, so that a profiled table can
be set beside the published one row by row:

* attention follows the FlashAttention-2 paper's benchmark (T. Dao, "FlashAttention-2",
  arXiv:2307.08691, sec. 4.1): sequence 512 ... 16k, batch chosen so that batch x sequence is
  16k tokens, hidden 2048 (heads = 2048 / head dimension), head dimension 64 or 128, causal or
  not, forward and backward;
* GEMMs span powers of two in m, n and k, as OpenXLA's ``matmul_interpolator_data.h`` H100
  table does (256 ... 4096 there; 128 ... 16384 here, to reach both the launch-bound and the
  peak-bound ends);
* element-wise tensors span 64 KiB ... 1 GiB, the range in which the LLMCompass A100 curves
  (``ae/figure5/{cf,de,g}``) go from launch-bound to bandwidth-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from archplace.base.errors import ConfigError

#: The kernel classes the profiler times, in the order it times them.
KERNELS = ("gemm", "attention", "softmax", "layernorm", "gelu", "copy")

#: The grid sizes: ``full`` (tens of minutes on an H100 at most), ``quick`` (a few minutes),
#: ``smoke`` (seconds, also on a CPU: the plumbing only).
GRIDS = ("full", "quick", "smoke")

#: Tokens per attention batch and model width of the FlashAttention-2 benchmark
#: (arXiv:2307.08691 sec. 4.1: "batch size so that the total number of tokens is 16k",
#: "hidden dimension ... 2048").
FA2_TOKENS = 16 * 1024
FA2_HIDDEN = 2048


@dataclass(frozen=True, slots=True)
class GemmPoint:
    """One GEMM ``[batch, m, k] x [batch, k, n]`` (elements)."""

    m: int
    n: int
    k: int
    batch: int = 1

    @property
    def flop(self) -> float:
        """``2 * batch * m * n * k``."""
        return 2.0 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class AttentionPoint:
    """One attention call ``[batch, heads, seq, head_dim]`` (elements), forward or backward."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    direction: str  # "fwd" or "bwd"


@dataclass(frozen=True, slots=True)
class RowwisePoint:
    """Softmax or layer norm over the last dimension (``cols``) of a ``rows x cols`` tensor."""

    rows: int
    cols: int


@dataclass(frozen=True, slots=True)
class Grid:
    """The shapes of one profiling run.

    Attributes:
        name: ``full``, ``quick`` or ``smoke``.
        gemm: GEMM shapes.
        attention: attention calls.
        rowwise: softmax and layer-norm shapes (both classes use the same ones).
        elements: gelu tensor sizes, in elements.
        copy_bytes: bytes of each copy (read once and written once).
        warmup: untimed calls before the timed ones.
        repeats: timed calls; the median is the table's latency.
    """

    name: str
    gemm: tuple[GemmPoint, ...]
    attention: tuple[AttentionPoint, ...]
    rowwise: tuple[RowwisePoint, ...]
    elements: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    warmup: int
    repeats: int

    def points(self, kernel: str) -> int:
        """How many shapes of ``kernel`` the grid holds."""
        return len(self.shapes(kernel))

    def shapes(self, kernel: str) -> tuple[object, ...]:
        """The shapes of one kernel class (:data:`KERNELS`), in the order they are timed.

        Raises:
            ConfigError: an unknown kernel class.
        """
        by_kernel: dict[str, tuple[object, ...]] = {
            "gemm": self.gemm, "attention": self.attention, "softmax": self.rowwise,
            "layernorm": self.rowwise, "gelu": self.elements, "copy": self.copy_bytes}
        if kernel not in by_kernel:
            raise ConfigError(f"profile: unknown kernel class {kernel!r}; choose from {', '.join(KERNELS)}")
        return by_kernel[kernel]


def _powers(low: int, high: int, step: int = 2) -> tuple[int, ...]:
    """``low, low*step, ...`` up to ``high`` inclusive."""
    out = [low]
    while out[-1] * step <= high:
        out.append(out[-1] * step)
    return tuple(out)


def _cube(sizes: tuple[int, ...]) -> tuple[GemmPoint, ...]:
    return tuple(GemmPoint(m, n, k) for m in sizes for n in sizes for k in sizes)


def _attention(seqs: tuple[int, ...], head_dims: tuple[int, ...], causals: tuple[bool, ...],
               tokens: int = FA2_TOKENS, hidden: int = FA2_HIDDEN) -> tuple[AttentionPoint, ...]:
    return tuple(AttentionPoint(max(1, tokens // seq), hidden // head_dim, seq, head_dim, causal, direction)
                 for head_dim in head_dims for causal in causals for seq in seqs
                 for direction in ("fwd", "bwd"))


def _rowwise(sizes_bytes: tuple[int, ...], cols: tuple[int, ...],
             element_bytes: int) -> tuple[RowwisePoint, ...]:
    return tuple(RowwisePoint(max(1, size // element_bytes // c), c) for c in cols for size in sizes_bytes)


KIB = 1024
GIB = 1024**3


def grid(name: str, element_bytes: int = 2) -> Grid:
    """The grid called ``name`` (:data:`GRIDS`), element-wise sizes for ``element_bytes``-byte
    elements (2 for bf16 and fp16, 4 for fp32).

    Raises:
        ConfigError: an unknown grid name or a non-positive element width.
    """
    if element_bytes < 1:
        raise ConfigError(f"profile: element_bytes {element_bytes} is not positive")
    if name == "full":
        sizes = _powers(64 * KIB, GIB)
        return Grid("full", _cube(_powers(128, 16384)),
                    _attention(_powers(512, 16384), (64, 128), (False, True)),
                    _rowwise(sizes, (1024, 4096), element_bytes),
                    tuple(s // element_bytes for s in sizes), sizes, warmup=5, repeats=20)
    if name == "quick":
        sizes = _powers(64 * KIB, GIB, 4)
        return Grid("quick", _cube((256, 1024, 4096, 16384)),
                    _attention((512, 2048, 8192), (128,), (False, True)),
                    _rowwise(sizes, (4096,), element_bytes),
                    tuple(s // element_bytes for s in sizes), sizes, warmup=3, repeats=10)
    if name == "smoke":
        sizes = (4 * KIB, 16 * KIB)
        return Grid("smoke", _cube((16, 32)),
                    _attention((32, 64), (16,), (True,), tokens=128, hidden=32),
                    _rowwise(sizes, (256,), element_bytes),
                    tuple(s // element_bytes for s in sizes), sizes, warmup=1, repeats=3)
    raise ConfigError(f"profile: unknown grid {name!r}; choose from {', '.join(GRIDS)}")
