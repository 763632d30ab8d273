"""sdpocl.multinomial: the vectorised one-sample draw gives torch.multinomial's tokens and leaves its
generator where torch's does; it stands in for torch's function only inside ``single_draws`` and only for
the calls it covers; ``generate`` through the workflow's prefill samples the plain ``generate``'s tokens."""

from __future__ import annotations

import pytest
import torch
from test_prefill import prompts, sample, tiny_model

import sdpocl.multinomial as mn
from sdpocl.prefill import share_generation_prefill


def tables(seed: int, rows: int = 128, vocab: int = 400) -> torch.Tensor:
    """Softmax rows from logits of several scales: flat, peaked, and rows with exact zeros."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=gen) * torch.tensor([0.1, 1.0, 4.0, 30.0]).repeat(rows // 4)[:, None]
    probs = logits.softmax(-1)
    probs[::3, ::7] = 0.0  # top-k / top-p leave zeros
    return probs


def test_this_torch_draws_as_the_module_says():
    assert mn.exact_here()


def test_exponential_variates_as_torchs_in_float32():
    torch.manual_seed(3)
    theirs = torch.empty(10**6).exponential_()
    torch.manual_seed(3)
    ours = torch.rand(10**6, dtype=torch.float64).neg_().log1p_().neg_().float()
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("seed", range(4))
def test_same_tokens_and_generator_state(seed):
    a, b = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    for step in range(20):  # one stream of draws, as a generate loop makes them
        probs = tables(100 * seed + step)
        assert torch.equal(torch.multinomial(probs, 1, generator=a), mn.draw_one(probs, generator=b)), step
    assert torch.equal(a.get_state(), b.get_state())
    # and on the global generator, as transformers draws
    probs = tables(seed)
    torch.manual_seed(seed)
    theirs, after = torch.multinomial(probs, 1), torch.rand(3)
    torch.manual_seed(seed)
    assert torch.equal(mn.draw_one(probs), theirs) and torch.equal(torch.rand(3), after)


def test_only_inside_the_block_and_put_back():
    original = torch.multinomial
    with mn.single_draws():
        assert torch.multinomial is not original
        with mn.single_draws():  # nested: the outer one stays
            inner = torch.multinomial
        assert torch.multinomial is inner
    assert torch.multinomial is original
    with pytest.raises(KeyError), mn.single_draws():
        raise KeyError("x")
    assert torch.multinomial is original


def test_calls_it_does_not_cover_go_to_torch(monkeypatch):
    calls = []
    monkeypatch.setattr(mn, "draw_one", lambda *a, **k: calls.append(1) or torch.zeros(1, 1, dtype=torch.long))
    probs = tables(0, rows=4, vocab=10)
    with mn.single_draws():
        torch.multinomial(probs, 1)
        assert len(calls) == 1
        assert torch.multinomial(probs, 2).shape == (4, 2)  # two samples
        assert torch.multinomial(probs[0], 1).shape == (1,)  # one row
        assert torch.multinomial(probs.double(), 1).shape == (4, 1)  # float64: vectorised log1p rounds otherwise
        assert torch.multinomial(probs[:0], 1).shape == (0, 1)  # no rows
        for bad, message in [(probs.clone().fill_(0), "sum of probabilities"), (-probs, "element < 0")]:
            with pytest.raises(RuntimeError, match=message):  # torch's own errors, before any draw
                torch.multinomial(bad, 1)
        bad = probs.clone()
        bad[1, 1] = float("nan")
        with pytest.raises(RuntimeError, match="inf"):
            torch.multinomial(bad, 1)
    assert len(calls) == 1


def test_generate_samples_the_plain_tokens(monkeypatch):
    ids, mask = prompts()
    plain = sample(tiny_model(), ids, mask)
    model = tiny_model()
    assert share_generation_prefill(model)
    draws = []
    real = mn.draw_one
    monkeypatch.setattr(mn, "draw_one", lambda *a, **k: draws.append(1) or real(*a, **k))
    shared = sample(model, ids, mask)
    assert draws, "generate did not draw through sdpocl.multinomial"
    assert torch.equal(plain.sequences, shared.sequences)
    assert torch.multinomial is mn._original()
