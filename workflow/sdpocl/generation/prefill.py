"""Generation that prefills each distinct prompt once (replaces ``model.generate`` on one model instance).

A rollout batch holds each prompt ``num_generations`` times and an lm-eval batch each prompt ``samples``
times, and ``generate``'s first forward (the prefill) runs every copy: on the tiny preset about as many
positions as the decoding that follows. :func:`share_generation_prefill` makes a model's ``generate`` compute
the key/value cache of each distinct prompt once, index it out to the rows, and sample from there: the same
tokens from the same seed (tests/test_prefill.py). The trainers' forwards share prompts the same way
(:mod:`sdpocl.generation.prefix`). The cache it generates on is a
:class:`~sdpocl.generation.kv_cache.GrowingCache` (new tokens written into spare room, not concatenated: the
same tokens again), whether or not the batch had prompts to share; rows that have ended leave it
(:mod:`sdpocl.generation.finished_rows`). Measured gain: :mod:`sdpocl.generation`.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from sdpocl.generation.finished_rows import generate_dropping_ended_rows
from sdpocl.generation.kv_cache import GrowingCache


def distinct_prefixes(input_ids: torch.Tensor, attention_mask: torch.Tensor, width: int):
    """(distinct prefix ids, their mask, row -> distinct index) of the first ``width`` columns."""
    key = torch.cat([input_ids[:, :width], attention_mask[:, :width].to(input_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    return distinct[:, :width], distinct[:, width:].to(attention_mask.dtype), inverse


def dropout_free(model: nn.Module) -> bool:
    """No dropout acts in training mode: a forward over fewer rows draws no random numbers either way."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    rates = (getattr(text, k, 0.0) for k in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop"))
    if any(isinstance(r, (int, float)) and r > 0 for r in rates):
        return False
    return not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())


def prefilled_cache(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, grow: bool = True):
    """The key/value cache a prefill over all columns but the last would leave, each distinct row computed
    once (positions from the attention mask, as ``generate`` counts them); None when no two rows share
    those columns. ``generate`` then runs only the last prompt column on it: the prefill's own logits
    are never read, so the cache comes from the decoder alone (``model.base_model``) and hooks on the
    model see the forwards ``generate`` makes. ``grow``: a :class:`GrowingCache` (else transformers' own)."""
    width = input_ids.size(1) - 1
    if width <= 0:
        return None
    ids, mask, inverse = distinct_prefixes(input_ids, attention_mask, width)
    if ids.size(0) == input_ids.size(0):
        return None
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with torch.no_grad():
        out = model.base_model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            past_key_values=GrowingCache(model.config) if grow else None,
        )
    cache = out.past_key_values
    cache.reorder_cache(inverse)
    return cache


def _prefilled_generate(model: nn.Module, generate, grow: bool, drop_ended: bool, *args, **kwargs):
    if len(args) == 1 and torch.is_tensor(args[0]) and "input_ids" not in kwargs:
        (kwargs["input_ids"],), args = args, ()  # generate(ids, ...): the prompt ids
    input_ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    config = kwargs.get("generation_config") or model.generation_config
    plain = (
        args
        or input_ids is None
        or mask is None
        or kwargs.get("past_key_values") is not None
        or kwargs.get("inputs_embeds") is not None
        or max(kwargs.get("num_return_sequences") or 1, config.num_return_sequences or 1) > 1
        or max(kwargs.get("num_beams") or 1, config.num_beams or 1) > 1
    )
    if plain:
        return generate(*args, **kwargs)
    cache = prefilled_cache(model, input_ids, mask, grow)
    if cache is None and grow:
        cache = GrowingCache(model.config)  # nothing to share: generate fills it from the first column
    if grow and drop_ended:
        return generate_dropping_ended_rows(model, generate, **kwargs, past_key_values=cache)
    return generate(**kwargs, past_key_values=cache)


def share_generation_prefill(model: nn.Module, grow_cache: bool = True, drop_ended: bool = True) -> bool:
    """Make ``model.generate`` prefill each distinct prompt row once (an instance attribute; see the module
    docstring); False, and nothing changed, where that would not be exact: a sharded (FSDP) model, whose
    decoder cannot run outside the root module's forward, or dropout, whose prefill would draw other random
    numbers. ``generate`` keeps its own path for beams, several sequences per row, an explicit cache or
    embeddings (``generate`` runs without gradients either way). ``grow_cache``: generate on a
    :class:`GrowingCache` (the default; False keeps transformers' cache, for the bench). ``drop_ended``: on that
    cache, rows that have ended leave the batch (:mod:`sdpocl.generation.finished_rows`; False: every row to
    the end)."""
    if "generate" in model.__dict__ or not hasattr(model, "base_model") or not dropout_free(model):
        return False
    if _sharded(model):
        return False
    model.generate = functools.partial(_prefilled_generate, model, model.generate, grow_cache, drop_ended)
    return True


def _sharded(model: nn.Module) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())
