"""FlashAttention's score blocks and FLOP: properties of a fused attention operator.

An ``OpKind.ATTENTION`` operator (:mod:`archplace.workload.attention_op`) has ``batch`` =
micro-batch x heads B, ``m`` = query length s_q, ``k`` = head dim d (of Q and K), ``n`` = key
length s_kv, and ``v_dim`` the head dim d_v of V and O when it differs from d (multi-head latent
attention).  Which score blocks its kernel computes, and so its FLOP, follow from these
dimensions and its masking; the workload sets ``Operator.flop`` from them and the cost model
(:mod:`archplace.cost.attention`) times them. Sources are in that module's docstring: block edge
``BLOCK`` (assumption, Dao 2023 sec. 3.3), causal block skipping (Dao 2023 sec. 3.1.1), forward
``2·B·(d + d_v)·area`` (Q K^T over d, P V over d_v; ``4·B·d·area`` when d_v = d) and backward
``2·B·(3·d + 2·d_v)·area`` (S = Q K^T, dQ = dS K and dK = dS^T Q over d; dP = dO V^T and
dV = P^T dO over d_v; 2.5x the forward when d_v = d; Dao 2023 sec. 4.1, Algorithm 2).

**Ring attention (context parallelism, ``op.cp`` = c > 1).**  Each of the c ranks holds s/c
queries (``m``) and computes them against the keys of the whole sequence (``n`` = s), which
arrive block by block around the ring in c steps.  Under a causal mask the sequence is cut into
2c chunks of q = s/(2c) tokens and rank i holds chunks i and 2c-1-i (the load balancing of
Megatron-Core's context parallelism: its "Context parallelism overview" user-guide page and
``get_batch_on_this_cp_rank``, with the attention of Transformer Engine's
``attn_forward_func_with_cp``;
Llama 3, Dubey et al. 2024 sec. 3.3.2, balances the same way with an all-gather of K and V).
Step 0 uses the rank's own K and V: chunk 2c-1-i against chunk i in full and each chunk against
itself under the causal mask, ``q² + 2·tri(q)`` score elements, with ``tri(q)`` the causal
area of a q x q diagonal block (:func:`computed_area`, block skipping included).  Each of the
c-1 later steps brings the K and V of another rank j: for j < i both local query chunks see
j's first chunk in full, for j > i the second local chunk sees both of j's chunks in full:
``2·q²`` either way.  A rank computes ``(2c-1)·q² + 2·tri(q)``, exactly 1/c of the causal
area of the whole sequence when q is a multiple of the block edge (the c ranks' chunks tile
it).  Without a causal mask every step is the full ``(s/c)²``.
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


def value_dim(op: Operator) -> int:
    """Head dim d_v of V and O: ``op.v_dim``, or ``op.k`` when it is 0 (they are equal)."""
    return op.v_dim or op.k


def chunk_len(op: Operator) -> int:
    """Edge of the score tiles one ring step's kernels work on (module docstring): the
    chunk q = s_q / 2 under a causal mask, the rank's s_q otherwise; s_q without CP."""
    if op.cp <= 1:
        return op.m
    return op.m // 2 if op.causal else op.m


def ring_steps(op: Operator) -> tuple[tuple[int, int], ...]:
    """(score elements, score blocks) computed at each of the c steps of the ring, step 0 (the
    rank's own K and V) first (module docstring); one step, the whole operator, without CP."""
    if op.cp <= 1:
        return (computed_area(op.m, op.n, op.causal, op.skip_masked_blocks),)
    q = chunk_len(op)
    if not op.causal:
        one = computed_area(q, q, False, op.skip_masked_blocks)
        return (one,) * op.cp
    br, bc = blocks(q, q)
    full = (q * q, math.ceil(q / br) * math.ceil(q / bc))
    tri_area, tri_count = computed_area(q, q, True, op.skip_masked_blocks)
    first = (full[0] + 2 * tri_area, full[1] + 2 * tri_count)
    return (first, *((2 * full[0], 2 * full[1]) for _ in range(op.cp - 1)))


def op_area(op: Operator) -> tuple[int, int]:
    """(score elements, score blocks) the operator computes per head, over every ring step."""
    steps = ring_steps(op)
    return sum(a for a, _ in steps), sum(c for _, c in steps)


def op_blocks(op: Operator) -> tuple[int, int]:
    """FlashAttention-2's score block (rows, cols) of the operator's kernels (:func:`blocks`
    of the query and key lengths, of the chunks under CP)."""
    if op.cp <= 1:
        return blocks(op.m, op.n)
    q = chunk_len(op)
    return blocks(q, q)


def computed_fraction(op: Operator) -> float:
    """Share of the s_q x s_kv score matrix the operator's kernel computes (0 when empty)."""
    if op.m <= 0 or op.n <= 0:
        return 0.0
    return op_area(op)[0] / (op.m * op.n)


def attention_flop(op: Operator) -> float:
    """Matmul FLOP of the operator (module docstring): ``2·B·(d + d_v)·area`` forward,
    ``2·B·(3·d + 2·d_v)·area`` backward (``4·B·d·area`` and 2.5 x that when d_v = d)."""
    area, _ = op_area(op)
    d, d_v = op.k, value_dim(op)
    if d_v == d:  # the same arithmetic as ever, so figures stay bit-identical
        forward = 4.0 * op.batch * d * area
        return 2.5 * forward if is_backward(op) else forward
    per_element = 3 * d + 2 * d_v if is_backward(op) else d + d_v
    return 2.0 * op.batch * per_element * area


__all__ = ["BLOCK", "attention_flop", "blocks", "chunk_len", "computed_area", "computed_fraction",
           "is_backward", "op_area", "op_blocks", "ring_steps", "value_dim"]
