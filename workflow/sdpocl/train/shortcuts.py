"""Exact shortcuts' helpers (see :mod:`sdpocl.train.trainers`): which batch rows may be dropped and how to
select them (the sampling-time log-probs that replace GRPO's second forward are
:mod:`sdpocl.generation.logps`')."""

from __future__ import annotations

import torch

#: per-row tensors whose columns are the completion tokens (right-padded)
COMPLETION_ALIGNED = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "sampling_per_token_logps",
    "ref_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
    "token_keep",
)
#: per-row tensors whose last columns are the completion tokens (a left-padded prompt before them)
ENDS_WITH_COMPLETION = ("teacher_input_ids", "teacher_attention_mask")
#: other per-row tensors (the prompt keeps its left padding: position ids count from column 0)
PER_ROW = ("prompt_ids", "prompt_mask", "advantages", "rewards", "raw_completion_lengths", "self_distillation_mask")
#: batch-level values, kept as they are
BATCH_LEVEL = ("num_items_in_batch", "full_completion_tokens")
SELECTABLE_KEYS = frozenset(COMPLETION_ALIGNED + ENDS_WITH_COMPLETION + PER_ROW + BATCH_LEVEL)


def rows_selectable(inputs: dict) -> bool:
    """Every entry of the batch has a known layout (a new TRL field switches the row shortcuts off)."""
    return set(inputs) <= SELECTABLE_KEYS


def select_rows(inputs: dict, rows: torch.Tensor) -> dict:
    """The batch restricted to ``rows``, with the completion columns that are padding in every kept row
    cut off the right (a causal model's outputs at the other positions do not depend on them)."""
    unknown = set(inputs) - SELECTABLE_KEYS
    if unknown:
        raise ValueError(f"select_rows: unknown batch entries {sorted(unknown)}")
    out = {k: (v if k in BATCH_LEVEL or v is None else v[rows]) for k, v in inputs.items()}
    width = inputs["completion_ids"].size(1)
    used = out["completion_mask"].any(dim=0).nonzero()
    keep = int(used.max()) + 1 if used.numel() else 1
    cut = width - keep
    if cut > 0:
        for k in COMPLETION_ALIGNED:
            v = out.get(k)
            if isinstance(v, torch.Tensor) and v.dim() == 2 and v.size(1) == width:
                out[k] = v[:, :keep]
        for k in ENDS_WITH_COMPLETION:
            if isinstance(out.get(k), torch.Tensor):
                out[k] = out[k][:, :-cut]
    return out
