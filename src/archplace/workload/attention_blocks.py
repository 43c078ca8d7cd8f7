"""FlashAttention's score blocks and FLOP: properties of a fused attention operator.

An ``OpKind.ATTENTION`` operator (:mod:`archplace.workload.attention_op`) has ``batch`` =
micro-batch x heads B, ``m`` = query length s_q, ``k`` = head dim d, ``n`` = key length s_kv.
Which score blocks its kernel computes, and so its FLOP, follow from these dimensions and its
masking; the workload sets ``Operator.flop`` from them and the cost model
(:mod:`archplace.cost.attention`) times them. Sources are in that module's docstring: block edge
``BLOCK`` (assumption, Dao 2023 sec. 3.3), causal block skipping (Dao 2023 sec. 3.1.1), forward
``4·B·d·area`` and backward 2.5x (Dao 2023 sec. 4.1, Algorithm 2).
"""

from __future__ import annotations

import math

from archplace.workload.graph import Operator, Phase

BLOCK = 128
"""Score-block edge of FlashAttention-2 (assumption: Dao 2023 sec. 3.3 tunes blocks among
{64, 128}; the FlashAttention source, ``csrc/flash_api.cpp``, uses key blocks of 128 for head dims
up to 128)."""


def is_backward(op: Operator) -> bool:
    """Whether ``op`` is the backward attention operator (its phase; the one place that decides)."""
    return op.phase is Phase.BWD


def blocks(s_q: int, s_kv: int) -> tuple[int, int]:
    """FlashAttention-2's score block (rows, cols) for these lengths: ``BLOCK``, or the length."""
    return max(1, min(BLOCK, s_q)), max(1, min(BLOCK, s_kv))


def computed_area(s_q: int, s_kv: int, causal: bool, skip_masked_blocks: bool) -> tuple[int, int]:
    """(score elements computed, score blocks computed) of one head.

    Every block without skipping; under a causal mask with skipping (FlashAttention-2,
    Dao 2023 sec. 3.1.1), the blocks with at least one column at or below the diagonal
    (column j <= row i, queries and keys aligned at the end as in training, s_q == s_kv),
    each counted in full.
    """
    br, bc = blocks(s_q, s_kv)
    if not (causal and skip_masked_blocks):
        return s_q * s_kv, math.ceil(s_q / br) * math.ceil(s_kv / bc)
    offset = s_kv - s_q  # query i sees keys 0 .. i + offset
    area = count = 0
    for start in range(0, s_q, br):
        rows = min(br, s_q - start)
        last_key = start + rows - 1 + offset
        if last_key < 0:
            continue
        n_blocks = min(math.ceil(s_kv / bc), last_key // bc + 1)
        cols = min(n_blocks * bc, s_kv)
        area += rows * cols
        count += n_blocks
    return area, count


def computed_fraction(op: Operator) -> float:
    """Share of the s_q x s_kv score matrix the operator's kernel computes (0 when empty)."""
    if op.m <= 0 or op.n <= 0:
        return 0.0
    return computed_area(op.m, op.n, op.causal, op.skip_masked_blocks)[0] / (op.m * op.n)


def attention_flop(op: Operator) -> float:
    """Matmul FLOP of the operator (module docstring): ``4·B·d·area`` forward, 2.5 x that backward."""
    area, _ = computed_area(op.m, op.n, op.causal, op.skip_masked_blocks)
    forward = 4.0 * op.batch * op.k * area
    return 2.5 * forward if is_backward(op) else forward


__all__ = ["BLOCK", "attention_flop", "blocks", "computed_area", "computed_fraction", "is_backward"]
