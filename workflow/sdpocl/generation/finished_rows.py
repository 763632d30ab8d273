"""Generation that stops computing the rows that have ended (wraps one model instance's ``forward`` and its
``_prepare_special_tokens`` while one ``generate`` runs: the one private transformers method the workflow
touches, for the gain measured in :mod:`sdpocl.generation`).

``generate`` runs its whole batch until the last row ends: a row that has sampled an end-of-sequence
token gets padding from then on, but the decoder still computes it at every step. On the tiny preset a
rollout batch's or an evaluation batch's rows end well before its longest one. While one ``generate``
runs, :class:`FinishedRows` stands in front of the model's ``forward``: once a quarter of the rows it
computes have ended, it drops them from the key/value cache, gives the decoder only the other rows'
inputs, and hands ``generate`` logits for the whole batch back (zeros for the dropped rows, whose sampled
token ``generate`` replaces by padding). The random numbers a step draws do not change (transformers'
``multinomial`` and :mod:`sdpocl.generation.sampling` draw for every row of the batch).

A row's logits are the same floats in a batch of >= ``MIN_ROWS`` rows whatever the other rows are, on
the CPUs this runs on (a matrix product of fewer rows takes another kernel, which rounds differently:
``tests/test_finished_rows.py`` checks both on the machine that runs it), so the batch never shrinks
below ``MIN_ROWS`` rows and the tokens are those of the full batch. Where a device rounds otherwise,
the samples are still drawn from the model's distribution, but are not the full batch's to the bit.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from sdpocl.generation.kv_cache import GrowingCache

#: the fewest rows a decoding step computes once rows are dropped (see the module docstring)
MIN_ROWS = 16
#: rows are dropped once this share of the rows computed has ended (a drop copies the cache once)
DROP_SHARE = 0.25
#: the inputs of a decoding step that hold one row per batch row
PER_ROW = ("input_ids", "attention_mask", "position_ids", "token_type_ids")


class FinishedRows:
    """One ``generate`` call's row bookkeeping; :meth:`forward` wraps the model's ``forward``."""

    def __init__(self, batch: int, eos: torch.Tensor):
        self.batch = batch
        self.eos = eos.reshape(-1)
        self.ended = torch.zeros(batch, dtype=torch.bool)
        self.rows: torch.Tensor | None = None  # batch rows the cache holds, in order; None: all of them
        self.calls = 0
        self.row_steps = [0, 0]  # rows computed, rows in the batch, summed over decoding steps (for the bench)

    def forward(self, forward, *args, **kwargs):
        ids, cache = kwargs.get("input_ids"), kwargs.get("past_key_values")
        simple = (
            not args
            and ids is not None
            and ids.size(0) == self.batch
            and isinstance(cache, GrowingCache)
            and not any(kwargs.get(k) for k in ("output_attentions", "output_hidden_states"))
            and all(k in PER_ROW or not _per_row(v, self.batch) for k, v in kwargs.items())
        )
        if not simple:
            return forward(*args, **kwargs)
        if self.calls:  # the token fed now was sampled at the last step
            self.ended |= torch.isin(ids[:, -1], self.eos.to(ids.device)).cpu()
        self.calls += 1
        self._drop_ended(cache)
        if self.rows is None:
            self.row_steps[0] += self.batch
            self.row_steps[1] += self.batch
            return forward(**kwargs)
        rows = self.rows.to(ids.device)
        sub = {k: (v[rows] if k in PER_ROW and _per_row(v, self.batch) else v) for k, v in kwargs.items()}
        out = forward(**sub)
        logits = out.logits.new_zeros((self.batch, *out.logits.shape[1:]))
        logits[rows] = out.logits
        out.logits = logits
        self.row_steps[0] += rows.numel()
        self.row_steps[1] += self.batch
        return out

    def _drop_ended(self, cache: GrowingCache) -> None:
        present = torch.arange(self.batch) if self.rows is None else self.rows
        ended = self.ended[present]
        if present.numel() <= MIN_ROWS or ended.sum() < max(1.0, DROP_SHARE * present.numel()):
            return
        keep = ~ended
        short = MIN_ROWS - int(keep.sum())
        if short > 0:  # ended rows fill the batch up to MIN_ROWS
            keep[ended.nonzero().squeeze(1)[:short]] = True
        cache.batch_select_indices(keep.nonzero().squeeze(1).to(_cache_device(cache)))
        self.rows = present[keep]


def _per_row(value, batch: int) -> bool:
    return torch.is_tensor(value) and value.dim() > 0 and value.size(0) == batch


def _cache_device(cache: GrowingCache):
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if torch.is_tensor(keys) and keys.dim() == 4:
            return keys.device
    return torch.device("cpu")


def generate_dropping_ended_rows(model: nn.Module, generate, **kwargs):
    """``generate(**kwargs)`` (its cache a :class:`GrowingCache`) with :class:`FinishedRows` in front of
    ``model.forward``. The end-of-sequence ids are the ones ``generate`` itself resolves (its stopping
    criterion's), read where it resolves them; without them nothing is dropped."""
    if "_prepare_special_tokens" in model.__dict__ or not hasattr(model, "_prepare_special_tokens"):
        return generate(**kwargs)  # another wrapper's, or a transformers without it: every row to the end
    model.__dict__.pop("last_generate_row_steps", None)
    # the forward generate calls: the class's, or one a trainer set on the instance (TRL's fused LM head)
    own_forward = model.__dict__.get("forward")
    original_forward, prepare = model.forward, model._prepare_special_tokens
    state: dict = {}

    def prepare_and_hook(generation_config, *a, batch_size=None, **kw):
        prepare(generation_config, *a, batch_size=batch_size, **kw)
        eos = getattr(generation_config, "_eos_token_tensor", None)
        scores_asked = generation_config.return_dict_in_generate and (
            generation_config.output_scores or generation_config.output_logits
        )  # every row's scores, as transformers computes them
        if eos is not None and batch_size and batch_size > MIN_ROWS and not scores_asked and not state:
            state["rows"] = rows = FinishedRows(batch_size, eos.cpu())
            # generate reads forward's signature (which inputs to pass): the wrapper keeps it
            model.forward = functools.wraps(original_forward)(functools.partial(rows.forward, original_forward))

    model._prepare_special_tokens = prepare_and_hook
    try:
        return generate(**kwargs)
    finally:
        model.__dict__.pop("forward", None)
        if own_forward is not None:
            model.forward = own_forward
        model.__dict__.pop("_prepare_special_tokens", None)
        if "rows" in state:
            model.last_generate_row_steps = tuple(state["rows"].row_steps)
