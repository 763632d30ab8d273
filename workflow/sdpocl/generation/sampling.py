"""Evaluation's sampling on a CPU: transformers' temperature -> top-k -> top-p distribution, drawn over its top-k.

transformers samples a row by sorting every vocabulary entry for top-p, and ``torch.multinomial`` draws an
exponential variate for each entry (an exponential race: the token with the largest p / E wins). At the
tiny preset's evaluation batch that is about a sixth of an evaluation's time (``python bench/eval_speed.py``),
spent on the vocabulary's tail that top-k has already set to zero. :class:`TopKTopPSampler` keeps
transformers' distribution (the same warpers in the same order: temperature, top-k, top-p with at least
one token kept; tests/test_eval_sampling.py compares the probabilities with transformers' own warpers) and
runs the same race over the top-k candidates only. Its variates are uniform numbers drawn for the whole
vocabulary (a sixth of the exponentials' cost) and read at the candidates' token ids, so, as with
``torch.multinomial``, a random number belongs to a token: two models evaluated from one seed draw the same
token where their distributions agree. A stage's change is paired (the same prompts, the same seed, before
and after), and these common random numbers are part of its precision: drawn by rank instead (the inverse
CDF over the sorted top-k), half as many responses matched between a base and its trained model and the
paired stderr grew ~20%. Random numbers come from torch's global generator
(seeded by lm-eval): another draw of the same distribution than transformers', reproducibly.
``sample_over_top_k`` installs it on a model's ``generate`` as a logits processor that leaves only the drawn
token, which greedy decoding then takes.

Evaluation only: training's rollouts keep transformers' sampling (their draws are the trained models').
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from transformers import LogitsProcessor, LogitsProcessorList

#: generation settings that would add a warper this sampler does not apply: with any of them set,
#: ``generate`` keeps transformers' own sampling
_OTHER_WARPERS = {"min_p": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None}


def top_k_top_p(scores: torch.Tensor, temperature: float, top_k: int, top_p: float):
    """(token ids, probabilities), each ``[rows, min(top_k, vocab)]`` with the most likely first: the
    distribution of transformers' TemperatureLogitsWarper, TopKLogitsWarper and TopPLogitsWarper
    (min_tokens_to_keep 1) then softmax; tokens top-p removes have probability 0."""
    k = scores.size(-1) if top_k is None or top_k <= 0 else min(int(top_k), scores.size(-1))
    values, ids = (scores / temperature).topk(k, dim=-1)
    probs = values.softmax(dim=-1)
    if top_p is not None and top_p < 1.0:
        # transformers removes a token when the (ascending) cumulative probability up to it is <= 1 - top_p,
        # i.e. when the tokens above it already hold >= top_p; the most likely token always stays
        above = probs.cumsum(dim=-1) - probs
        drop = above >= top_p
        drop[..., 0] = False
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return ids, probs


class TopKTopPSampler(LogitsProcessor):
    """Draws each row's next token from :func:`top_k_top_p` by an exponential race; returns scores that
    are -inf everywhere but at the drawn token (0), so greedy decoding takes it."""

    def __init__(self, temperature: float, top_k: int, top_p: float):
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 to sample, got {temperature}")
        self.temperature, self.top_k, self.top_p = float(temperature), top_k, top_p

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        ids, probs = top_k_top_p(scores.float(), self.temperature, self.top_k, self.top_p)
        # an exponential race, as torch.multinomial runs it (the largest p / E wins, E ~ Exp(1)), with each
        # row's variates drawn over the whole vocabulary and read at the candidates' token ids: the same
        # random number meets the same token in every model, so two models evaluated from one seed draw alike
        # where their distributions agree (a paired change's common random numbers)
        uniform = torch.rand(scores.shape, device=scores.device, dtype=probs.dtype).gather(-1, ids)
        race = (probs / -torch.log1p(-uniform)).masked_fill(probs == 0, -1.0)
        token = ids.gather(-1, race.argmax(dim=-1, keepdim=True))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, token, 0.0)


def _setting(model: nn.Module, kwargs: dict, name: str):
    """A generation setting as ``generate`` resolves it: its argument, else the model's generation
    config, else transformers' global default."""
    from transformers import GenerationConfig

    for value in (kwargs.get(name), getattr(model.generation_config, name, None)):
        if value is not None:
            return value
    return GenerationConfig._get_default_generation_params().get(name)


def _sampling_generate(model: nn.Module, generate, *args, **kwargs):
    names = ("do_sample", "num_beams", "num_return_sequences", *_OTHER_WARPERS)
    settings = {name: _setting(model, kwargs, name) for name in names}
    if (
        "generation_config" in kwargs
        or not settings["do_sample"]
        or (settings["num_beams"] or 1) > 1
        or (settings["num_return_sequences"] or 1) > 1  # greedy decoding returns one sequence a row
        or any(settings[name] not in (None, off) for name, off in _OTHER_WARPERS.items())
    ):
        return generate(*args, **kwargs)
    sampler = TopKTopPSampler(*(_setting(model, kwargs, name) for name in ("temperature", "top_k", "top_p")))
    processors = LogitsProcessorList([*(kwargs.pop("logits_processor", None) or []), sampler])
    # greedy decoding takes the sampler's token; transformers' own warpers off
    kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    return generate(*args, **kwargs, logits_processor=processors)


def sample_over_top_k(model: nn.Module) -> None:
    """Make ``model.generate`` (as it is now, e.g. sdpocl.generation.prefill's) sample with :class:`TopKTopPSampler`
    whenever it would sample with temperature, top-k and top-p only; everything else as before."""
    model.generate = functools.partial(_sampling_generate, model, model.generate)
