"""Grouped-query attention that stays grouped while decoding.

Qwen2.5 has 16 query heads over 2 key/value heads (3B; 28 over 4 at 7B). SDPA computes that without copying keys
and values per query head (`enable_gqa`) only without an attention mask on CUDA, and the generator always passes one
(its rows are left-padded). Otherwise transformers repeats the keys and values of the whole cache to every query head
(`repeat_kv`) in every layer at every decode step: 8× the cache's bytes copied and read, per token generated.

A decode step has one query per row, so the query heads of a group can stand as that group's queries instead:
(B, heads, 1, d) → (B, kv_heads, group, d), attending over the group's own (B, kv_heads, W, d) keys with the row's
one mask row (B, 1, 1, W) broadcast over them — the same numbers, no copy, any mask (transformers 5.23 does the
same, `pack_gqa`; this keeps it whatever version is installed). Prefill (several queries) goes to transformers'
SDPA as before. `use(model)` switches a model that runs SDPA to it.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "sas_sdpa_gqa"
# Calls that took the grouped path (the tests read it: decode steps must take it, not repeat_kv).
stats = {"grouped_decode_calls": 0}


def grouped_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: (B, heads, q, d) queries, (B, kv_heads, W, d) keys and values."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    B, H, q, D = query.shape
    one_mask_row = attention_mask is None or (
        attention_mask.dim() == 4 and attention_mask.shape[1] == 1 and attention_mask.shape[2] == 1
    )
    if (
        q != 1
        or groups == 1
        or not one_mask_row
        or kwargs.get("position_bias") is not None
        or key.shape[1] * groups != H
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    stats["grouped_decode_calls"] += 1
    grouped = query.reshape(B, key.shape[1], groups, D)  # query head h = kv head (h // groups), member h % groups
    out = torch.nn.functional.scaled_dot_product_attention(
        grouped, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling
    )
    return out.reshape(B, H, 1, D).transpose(1, 2).contiguous(), None


def register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def use(model: Any) -> bool:
    """Switches `model` (a Hugging Face model running "sdpa") to the grouped decode path; False when it runs another
    attention (eager, flash attention: left as it is)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    register()
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        setter(NAME)
    else:  # pragma: no cover - transformers without set_attn_implementation
        config._attn_implementation = NAME
    return True
