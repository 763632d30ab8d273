"""sdpocl.prefill: ``generate`` with each distinct prompt prefilled once samples the tokens that the plain
``generate`` samples from the same seed (left-padded prompts of several lengths, rows that stop early),
computes the prefill over the distinct rows only, and keeps the plain path where sharing would not be
exact or has nothing to share."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from sdpocl.generation.prefill import share_generation_prefill

EOS = 5


def tiny_model(dropout: float = 0.0) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128, attention_dropout=dropout,
        eos_token_id=EOS, pad_token_id=0,
    )  # fmt: skip
    return Qwen3ForCausalLM(config).eval()


def prompts(groups=3, samples=4, width=9, seed=1):
    """``samples`` copies of each of ``groups`` prompts, left-padded to ``width`` (group g has 2g pads)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(6, 97, (groups, width), generator=gen)
    mask = torch.ones_like(ids)
    for g in range(groups):
        ids[g, : 2 * g] = 0
        mask[g, : 2 * g] = 0
    return ids.repeat_interleave(samples, 0), mask.repeat_interleave(samples, 0)


def sample(model, ids, mask, **kw):
    """``generate`` from seed 0, 16 new tokens unless ``kw`` says otherwise, with the scores."""
    torch.manual_seed(0)
    kw = {"max_new_tokens": 16, **kw}
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        top_k=0,
        output_scores=True,
        return_dict_in_generate=True,
        **kw,
    )


def prefill_rows(monkeypatch, model) -> list[int]:
    """The batch size of every forward of the decoder that ``generate`` did not make itself."""
    rows, orig = [], type(model.base_model).forward

    def spy(self, *a, **k):
        rows.append(k["input_ids"].size(0) if k.get("input_ids") is not None else -1)
        return orig(self, *a, **k)

    monkeypatch.setattr(type(model.base_model), "forward", spy)
    return rows


def test_the_same_tokens_from_one_prefill_per_prompt(monkeypatch):
    plain, shared = tiny_model(), tiny_model()
    assert share_generation_prefill(shared)
    ids, mask = prompts()
    want = sample(plain, ids, mask)
    rows = prefill_rows(monkeypatch, shared)
    got = sample(shared, ids, mask)
    assert rows[0] == 3  # the prefill: one row per distinct prompt, then generate's own forwards over all 12
    assert all(r == ids.size(0) for r in rows[1:]) and len(rows) == len(got.scores) + 1
    assert torch.equal(got.sequences, want.sequences)
    assert (got.sequences[:, ids.size(1) :] == EOS).any()  # some rows stopped early: the padding after EOS agrees
    rows.clear()
    torch.manual_seed(0)
    positional = shared.generate(ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=16)
    assert rows[0] == 3 and torch.equal(positional, want.sequences)  # generate(ids, ...) shares too
    for a, b in zip(want.scores, got.scores):
        finite = torch.isfinite(a)
        assert torch.equal(finite, torch.isfinite(b))
        assert torch.allclose(a[finite], b[finite], atol=1e-5, rtol=1e-5)


def test_nothing_shared_and_other_modes_keep_generates_own_path(monkeypatch):
    shared = tiny_model()
    assert share_generation_prefill(shared)
    assert not share_generation_prefill(shared)  # installed once
    rows = prefill_rows(monkeypatch, shared)
    ids, mask = prompts(samples=1)  # every row its own prompt
    sample(shared, ids, mask)
    assert set(rows) == {3}  # generate's own forwards only
    rows.clear()
    ids, mask = prompts(samples=2)
    sample(shared, ids, mask, num_return_sequences=2)  # generate expands the 6 rows to 12 itself
    assert set(rows) == {12}


@pytest.mark.parametrize("case", ["dropout", "sharded"])
def test_not_installed_where_it_would_not_be_exact(case, monkeypatch):
    import sdpocl.generation.prefill as prefill

    model = tiny_model(dropout=0.1 if case == "dropout" else 0.0)
    if case == "sharded":  # FSDP2's parameters are DTensors; its decoder cannot run outside the root's forward
        monkeypatch.setattr(prefill, "_sharded", lambda m: True)
    assert not share_generation_prefill(model)
    assert "generate" not in model.__dict__
