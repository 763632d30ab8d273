"""sdpocl.kv_cache: a cache that writes new tokens into spare room holds what transformers' ``DynamicCache``
holds after every operation ``generate`` and the prefill sharing use, so ``generate`` samples the same
tokens with the same scores (through a regrowth of its buffers too), and the shared-prefill ``generate``
of evaluation, rollouts and the teacher check runs on it."""

from __future__ import annotations

import torch
from test_prefill import prompts, sample, tiny_model
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

from sdpocl.generation import kv_cache
from sdpocl.generation.kv_cache import GrowingCache, GrowingLayer
from sdpocl.generation.prefill import share_generation_prefill


def test_a_layer_holds_what_a_dynamic_layer_holds_through_every_operation():
    gen = torch.Generator().manual_seed(0)
    grown, plain = GrowingLayer(), DynamicLayer()

    def both(op, *args):
        getattr(grown, op)(*args)
        getattr(plain, op)(*args)

    def write(tokens):
        rows = plain.keys.size(0) if plain.is_initialized else 4
        k, v = torch.randn(rows, 2, tokens, 8, generator=gen), torch.randn(rows, 2, tokens, 8, generator=gen)
        got, want = grown.update(k, v), plain.update(k, v)
        assert all(torch.equal(a, b) for a, b in zip(got, want))

    write(9)  # a prefill
    views = [(grown.keys, grown.keys.clone())]
    for _ in range(kv_cache.SPARE + 5):  # one token at a time, past the first buffer's room
        write(1)
        views.append((grown.keys, grown.keys.clone()))
    assert all(torch.equal(view, copy) for view, copy in views)  # a later write leaves earlier views alone
    both("reorder_cache", torch.tensor([2, 2, 0, 1]))
    write(1)
    both("crop", -3)
    write(2)
    both("batch_select_indices", torch.tensor([0, 3]))
    write(1)
    both("batch_repeat_interleave", 2)
    write(1)
    assert torch.equal(grown.keys, plain.keys) and torch.equal(grown.values, plain.values)
    assert grown.get_seq_length() == plain.get_seq_length() == 9 + kv_cache.SPARE + 5 + 1 - 3 + 2 + 1 + 1


def fixed_length(model, ids, mask, new_tokens, **kw):
    """:func:`test_prefill.sample` of exactly ``new_tokens`` tokens (no row stops early)."""
    return sample(model, ids, mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kw)


def test_generate_samples_the_same_tokens_on_it_through_a_regrowth():
    model = tiny_model()
    ids, mask = prompts()
    new = kv_cache.SPARE + 20  # past the first buffer's room
    want = fixed_length(model, ids, mask, new)
    got = fixed_length(model, ids, mask, new, past_key_values=GrowingCache())
    assert got.sequences.size(1) == ids.size(1) + new
    assert torch.equal(got.sequences, want.sequences)
    assert all(torch.equal(a, b) for a, b in zip(got.scores, want.scores))


def test_the_shared_prefill_generates_on_it(monkeypatch):
    caches = []
    orig = Qwen3ForCausalLM.forward

    def spy(self, *a, **k):
        caches.append(type(k.get("past_key_values")))
        return orig(self, *a, **k)

    monkeypatch.setattr(Qwen3ForCausalLM, "forward", spy)
    for grow in (True, False):
        model = tiny_model()
        assert share_generation_prefill(model, grow_cache=grow)
        for samples in (4, 1):  # prompts shared, and none to share
            caches.clear()
            sample(model, *prompts(samples=samples))
            assert caches and all((c is GrowingCache) == grow for c in caches)


def test_a_sliding_window_layer_keeps_transformers_class_and_generate_its_tokens():
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128, eos_token_id=5, pad_token_id=0,
        use_sliding_window=True, sliding_window=6, layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    model = Qwen3ForCausalLM(config).eval()
    cache = GrowingCache(model.config)
    assert [type(layer) for layer in cache.layers] == [DynamicSlidingWindowLayer, GrowingLayer]
    ids, mask = prompts()
    want = fixed_length(model, ids, mask, 12)
    got = fixed_length(model, ids, mask, 12, past_key_values=cache)
    assert torch.equal(got.sequences, want.sequences)
