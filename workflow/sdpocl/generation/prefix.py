"""A forward over prompt + completion rows that computes each distinct prompt once.

GRPO's training forward and SDPO's student and teacher forwards run ``num_generations`` rows per prompt
that share their prompt columns (the prompt; SDPO's teacher's re-prompt, whose demonstration most of a group
shares; TRL shuffles GRPO's rollout batch into its mini-batches, so a mini-batch holds fewer rows per prompt).
A causal model's outputs at the prompt positions do not depend on the completion, so the distinct
prompts go through the model once, their key/value cache is indexed out to the rows (autograd sums
the rows' gradients into the shared prompt, as the full forward's sum over identical copies does),
and the completion columns run on top. Positions and attention mask are the full forward's (the
prompt keeps its left padding; positions count from column 0 in both), so the logits are the full
forward's up to float rounding. On the tiny preset most of a step's forward positions are prompt
positions. Generation shares its prefill the same way (:mod:`sdpocl.generation.prefill`). A plain function
the trainers call (:mod:`sdpocl.train.grpo`, :mod:`sdpocl.train.sdpo`): it replaces nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from sdpocl.generation.prefill import distinct_prefixes


def shared_prefix_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> torch.Tensor | None:
    """The logits a full forward gives at the positions that predict the last ``logits_to_keep`` tokens
    (``model(input_ids).logits[:, :-1][:, -logits_to_keep:]``), with each distinct prefix (all columns
    before those tokens) forwarded once; None when no two rows share a prefix (nothing to save)."""
    rows, width = input_ids.size(0), input_ids.size(1) - logits_to_keep
    if width <= 0 or logits_to_keep <= 0:
        return None
    prefix_ids, prefix_mask, inverse = distinct_prefixes(input_ids, attention_mask, width)
    if prefix_ids.size(0) == rows:
        return None
    # DDP expects one forward per backward: the prefix runs on the module it wraps, the tail through it
    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    head = inner(input_ids=prefix_ids, attention_mask=prefix_mask, use_cache=True, logits_to_keep=1)
    first = head.logits[inverse]  # predicts the first completion token
    if logits_to_keep == 1:
        return first
    cache = head.past_key_values
    cache.reorder_cache(inverse)
    # the last completion token predicts nothing that is kept: leave it out
    tail = model(
        input_ids=input_ids[:, width:-1],
        attention_mask=attention_mask[:, :-1],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=0,
    )
    return torch.cat([first, tail.logits], dim=1)


def prefix_sharable(model: nn.Module, model_kwarg_keys) -> bool:
    """The model takes a cache and ``logits_to_keep`` and keeps a cache in this mode (gradient checkpointing
    drops it). DDP and FSDP2 need nothing more: tests/dist/frozen_ranks.py's ``prefix`` case checks both
    on two ranks (tests/test_two_process.py's stages run micro-batches of one completion: nothing shared)."""
    if not {"past_key_values", "logits_to_keep"} <= set(model_kwarg_keys or ()):
        return False
    return not getattr(getattr(model, "module", model), "is_gradient_checkpointing", False)
