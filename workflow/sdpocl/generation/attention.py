"""Grouped-query attention on a CPU without copying the key/value heads: an attention implementation of its own
name (:data:`ATTENTION`), registered through transformers' ``AttentionInterface`` (its public extension point)
and chosen per model (``attn_implementation=ATTENTION`` when a model is loaded); transformers' ``sdpa`` stays
as it is.

transformers' ``sdpa`` attention repeats a GQA model's key and value heads (``repeat_kv``, a copy of
the whole KV cache, in every layer at every generated token) whenever an attention mask is given,
because CUDA's fused kernels take ``enable_gqa`` only without one. Every batch this workflow runs
is padded, so it always has a mask. torch's CPU kernel takes ``enable_gqa`` with a mask and returns
the same values (logits and gradients within 1e-5, the same sampled tokens:
tests/test_cpu_attention.py). :func:`cpu_gqa_sdpa_forward` passes it on a CPU and leaves every other case
(GPU, no mask, no grouping) to transformers' own ``sdpa`` function; its masks are ``sdpa``'s. The tiny
preset's generation, most of an evaluation and about half of a rollout step, spends less time per
token (``python bench/attention_speed.py`` prints the ratio).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

#: the attention implementation's name (``attn_implementation``)
ATTENTION = "sdpocl_cpu_gqa"


def cpu_gqa_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, with ``enable_gqa`` in place of ``repeat_kv`` on a CPU with a mask."""
    if (
        query.device.type != "cpu"
        or getattr(module, "num_key_value_groups", 1) <= 1
        or attention_mask is None
        or kwargs.get("position_bias") is not None
        or kwargs.get("output_attentions", False)
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    # With a mask transformers' function calls the kernel with is_causal=False (the mask holds causality).
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Register :func:`cpu_gqa_sdpa_forward` (with ``sdpa``'s masks) under :data:`ATTENTION`; idempotent.
    Nothing uses it until a model is loaded with ``attn_implementation=ATTENTION``."""
    AttentionInterface.register(ATTENTION, cpu_gqa_sdpa_forward)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
    return ATTENTION
