"""Issue #12's long-context check: Llama-2-70B at 8,192 tokens on 1,024 H100.

With FlashAttention (no s x s tensor saved) selective recompute and no recompute fit, so the plan
space no longer collapses to full recompute, and the best plan's MFU lies in the range published
for dense training on H100 (0.3-0.6; e.g. Llama 3 405B: 38-43 %, Dubey et al. 2024, Table 4).
"""

from __future__ import annotations

import pytest

from archplace.base.errors import InfeasibleError
from archplace.front import api

pytestmark = pytest.mark.slow

COMMON = dict(devices=1024, global_batch=1024, seq_len=8192)


def test_llama2_70b_at_8k_keeps_cheap_recompute_and_a_realistic_mfu() -> None:
    best = api.plan("llama2-70b", "h100-80gb", **COMMON)[0]
    assert 0.3 <= best.mfu <= 0.6
    assert best.plan.recompute.value in ("none", "selective")
    for policy in ("none", "selective"):
        fitted = api.plan("llama2-70b", "h100-80gb", recomputes=[policy], **COMMON)[0]
        assert fitted.plan.recompute.value == policy
        assert max(stage.total for stage in fitted.memory) <= 80 * 2**30



def test_eager_attention_at_8k_cannot_skip_recompute_and_is_slower() -> None:
    """PHAZE-style eager attention saves the s x s scores and runs them as memory-bound operators:
    without recompute nothing fits in 80 GiB, and its best plan is slower than FlashAttention's."""
    with pytest.raises(InfeasibleError, match="no plan fits in 80.0 GiB HBM"):
        api.plan("llama2-70b", "h100-80gb", recomputes=["none"], attention="eager", **COMMON)
    eager = api.plan("llama2-70b", "h100-80gb", attention="eager", **COMMON)[0]
    flash = api.plan("llama2-70b", "h100-80gb", **COMMON)[0]
    assert flash.iteration_time_s < 0.8 * eager.iteration_time_s
