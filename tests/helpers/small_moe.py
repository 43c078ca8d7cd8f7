"""Small configs of every mixture-of-experts architecture archplace traces (mixtral, qwen2_moe,
qwen3_moe, deepseek_v3 with multi-head latent attention), each traced in about a second: shared by
the MoE config checks' tests and the CLI fuzz test's hostile inputs."""

from __future__ import annotations

from typing import Any

MIXTRAL: dict[str, Any] = {
    "model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 256, "num_local_experts": 4, "num_experts_per_tok": 2,
    "vocab_size": 500, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
QWEN2: dict[str, Any] = {
    "model_type": "qwen2_moe", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 256, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 128, "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 500,
    "max_position_embeddings": 512, "hidden_act": "silu", "rms_norm_eps": 1e-6, "decoder_sparse_step": 1,
    "mlp_only_layers": []}
QWEN3: dict[str, Any] = dict(QWEN2, model_type="qwen3_moe", head_dim=32)
del QWEN3["shared_expert_intermediate_size"]
DEEPSEEK: dict[str, Any] = {
    "model_type": "deepseek_v3", "num_hidden_layers": 3, "first_k_dense_replace": 1, "hidden_size": 128,
    "intermediate_size": 256, "moe_intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2,
    "n_group": 2, "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": 500, "max_position_embeddings": 512,
    "hidden_act": "silu", "rms_norm_eps": 1e-6}

MOE_BASES = (MIXTRAL, QWEN2, QWEN3, DEEPSEEK)
"""One small config per MoE architecture."""
