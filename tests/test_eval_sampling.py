"""sdpocl.evaluate.sampling: the evaluation's sampler keeps transformers' temperature -> top-k -> top-p
distribution (compared with transformers' own warpers), draws each token with its probability, and is
wired into ``generate`` only where it applies."""

from __future__ import annotations

import pytest
import torch
from test_prefill import prompts, tiny_model
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from sdpocl.generation.prefill import share_generation_prefill
from sdpocl.generation.sampling import TopKTopPSampler, sample_over_top_k, top_k_top_p


def transformers_probs(scores, temperature, top_k, top_p):
    """The distribution transformers' ``generate`` samples from with these settings (its own warpers)."""
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p))
    return warpers(None, scores.clone()).softmax(dim=-1)


def full(ids, probs, vocab):
    return torch.zeros(ids.size(0), vocab).scatter_(-1, ids, probs)


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(0.6, 50, 0.95), (1.0, 50, 0.95), (0.6, 0, 0.95), (0.6, 50, 1.0), (1.3, 7, 0.5), (0.6, 500, 0.9), (0.2, 50, 0.01)],
)
def test_distribution_is_transformers_warpers(temperature, top_k, top_p):
    torch.manual_seed(0)
    scores = torch.randn(256, 400) * 3
    ids, probs = top_k_top_p(scores, temperature, top_k, top_p)
    expected = transformers_probs(scores, temperature, top_k, top_p)
    ours = full(ids, probs, 400)
    assert torch.equal(ours > 0, expected > 0), "another set of tokens kept"
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=1e-5)


def test_sampler_draws_each_token_with_its_probability():
    torch.manual_seed(0)
    scores = torch.randn(1, 400) * 2
    expected = transformers_probs(scores, 0.6, 50, 0.95)[0]
    n = 40_000
    torch.manual_seed(1)
    out = TopKTopPSampler(0.6, 50, 0.95)(None, scores.expand(n, 400).contiguous())
    assert torch.all((out == 0).sum(-1) == 1) and torch.all(torch.isinf(out).sum(-1) == 399)
    freq = torch.bincount(out.argmax(-1), minlength=400).float() / n
    assert torch.all(freq[expected == 0] == 0), "a token outside top-k/top-p was drawn"
    # each frequency within 5 binomial standard deviations of its probability
    sd = (expected * (1 - expected) / n).sqrt()
    assert torch.all((freq - expected).abs() <= 5 * sd + 1e-9), (freq - expected).abs().max()


def test_models_that_agree_draw_alike_from_one_seed():
    """A random number belongs to a token id, not to a rank: two distributions that differ only in which of
    two near-equal tokens leads draw the same token in most rows from the same seed (a paired change's common
    random numbers), where drawing by rank would swap the two in every row that takes the leader."""
    n = 20_000
    first = torch.full((n, 400), 1e-9)
    first[:, 10], first[:, 20], first[:, 30] = 0.41, 0.39, 0.20  # probabilities
    second = first.clone()
    second[:, 10], second[:, 20] = 0.39, 0.41
    draws = []
    for scores in (first, second):
        torch.manual_seed(3)
        draws.append(TopKTopPSampler(1.0, 50, 1.0)(None, scores.log()).argmax(-1))
    assert set(draws[0].unique().tolist()) == {10, 20, 30}
    assert (draws[0] == draws[1]).float().mean() > 0.9


def test_generate_samples_with_it_and_top_k_1_is_greedy():
    model = tiny_model()
    ids, mask = prompts()
    greedy = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12)
    sample_over_top_k(model)
    calls = []
    orig = TopKTopPSampler.__call__

    def spy(self, input_ids, scores):
        calls.append((self.temperature, self.top_k, self.top_p))
        return orig(self, input_ids, scores)

    TopKTopPSampler.__call__ = spy
    try:
        torch.manual_seed(0)
        top1 = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=1, max_new_tokens=12)
        torch.manual_seed(0)
        sampled = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.6, top_p=0.95, max_new_tokens=12
        )
        n_sampled = len(calls)
        plain = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12)
    finally:
        TopKTopPSampler.__call__ = orig
    assert torch.equal(top1, greedy), "top_k=1 must take the most likely token"
    assert calls[0] == (1.0, 1, 1.0) and calls[-1] == (0.6, 50, 0.95)  # transformers' default top_k 50
    assert len(calls) == n_sampled, "greedy decoding must not sample"
    assert torch.equal(plain, greedy)
    assert not torch.equal(sampled, greedy)


def test_it_stacks_on_the_shared_prefill_and_keeps_other_warpers_to_transformers():
    model = tiny_model()
    ids, mask = prompts()
    assert share_generation_prefill(model)
    sample_over_top_k(model)
    torch.manual_seed(0)
    ours = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=1, max_new_tokens=8)
    assert torch.equal(ours, model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=8))
    torch.manual_seed(0)
    with_min_p = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, min_p=0.1, max_new_tokens=8)
    other = tiny_model()
    torch.manual_seed(0)
    plain = other.generate(input_ids=ids, attention_mask=mask, do_sample=True, min_p=0.1, max_new_tokens=8)
    assert torch.equal(with_min_p, plain), "min_p is transformers' to apply: the plain sampling path"
    torch.manual_seed(0)
    two = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, num_return_sequences=2, max_new_tokens=4)
    assert two.size(0) == 2 * ids.size(0), "several sequences a row: transformers' own sampling"


def test_sampling_needs_a_positive_temperature():
    with pytest.raises(ValueError, match="temperature"):
        TopKTopPSampler(0.0, 50, 0.95)
