"""Exact shortcuts' helpers (see :mod:`sdpocl.train.trainers`): which batch rows may be dropped, how to
select them, and the sampling-time log-probs that replace GRPO's second forward."""

from __future__ import annotations

import torch
from torch import nn

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


class GenerationLogps:
    """While ``generate`` samples, the log-probability of each sampled token under log_softmax(logits / T):
    a forward hook on the model reads the raw last-position logits of every decoding step (before any
    logits processor) and gathers the token that the next step receives, so one (rows x vocab) matrix is
    held at a time. :meth:`finish` returns ``(tokens, logps)`` of the generated columns, or None when the
    hook did not see exactly one forward per generated token."""

    def __init__(self, model: nn.Module, temperature: float):
        self.temperature = float(temperature)
        self.prev = None
        self.tokens, self.logps = [], []
        self.valid = True
        self.handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        logits = getattr(output, "logits", None)
        if ids is None or logits is None or logits.dim() != 3:
            self.valid = False
            return
        if self.prev is not None:
            self._take(ids[:, -1])
        self.prev = torch.log_softmax(logits[:, -1].float() / self.temperature, dim=-1)

    def _take(self, token: torch.Tensor) -> None:
        self.tokens.append(token)
        self.logps.append(self.prev.gather(-1, token[:, None]).squeeze(-1))
        self.prev = None

    def finish(self, sequences: torch.Tensor):
        self.handle.remove()
        if self.prev is not None:
            self._take(sequences[:, -1])
        n = len(self.tokens)
        if not self.valid or n == 0 or n > sequences.size(1):
            return None
        tokens = torch.stack(self.tokens, dim=1)
        if not torch.equal(tokens, sequences[:, -n:]):
            return None
        return tokens, torch.stack(self.logps, dim=1)
