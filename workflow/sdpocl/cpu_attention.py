"""Grouped-query attention on a CPU without copying the key/value heads.

transformers' ``sdpa`` attention repeats a GQA model's key and value heads (``repeat_kv``, a copy of
the whole KV cache, in every layer at every generated token) whenever an attention mask is given,
because CUDA's fused kernels take ``enable_gqa`` only without one. Every batch this workflow runs
is padded, so it always has a mask. torch's CPU kernel takes ``enable_gqa`` with a mask and returns
the same values (logits and gradients within 1e-5, the same sampled tokens:
tests/test_cpu_attention.py). ``use_cpu_gqa_attention`` registers an ``sdpa`` that passes it on a
CPU and leaves every other case (GPU, no mask, no grouping) to transformers' own function. The tiny
preset's generation, most of an evaluation and about half of a rollout step, spends less time per
token (``python bench/attention_speed.py`` prints the ratio).

On a GPU, ``use_workflow_attention`` also turns off torch's cuDNN attention kernel: on an H200 (torch
2.11, bf16 autocast, padded batches) it made the tiny preset's weights non-finite within 20-31 rollout
steps (GRPO and SDPO_0 alike, then a device-side assert in sampling), where the flash, memory-efficient
and math kernels trained the same stages cleanly (docs/paper-preset.md, "The rehearsal on a GPU").
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward


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


def use_cpu_gqa_attention() -> None:
    """Make ``sdpa`` (transformers' default attention) the function above, in this process; idempotent."""
    AttentionInterface.register("sdpa", cpu_gqa_sdpa_forward)


def use_workflow_attention() -> None:
    """The attention every job of the workflow runs with: the CPU function above, and on a GPU every
    ``scaled_dot_product_attention`` kernel but cuDNN's (see the module's docstring); idempotent."""
    use_cpu_gqa_attention()
    torch.backends.cuda.enable_cudnn_sdp(False)


def use_stock_sdpa_attention() -> None:
    """Undo ``use_cpu_gqa_attention`` (tests and the bench compare the two)."""
    AttentionInterface.register("sdpa", sdpa_attention_forward)
