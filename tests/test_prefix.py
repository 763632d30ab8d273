"""sdpocl.train.prefix: a forward that computes each distinct prompt once gives the full forward's
logits and gradients (left-padded prompts, right-padded completions, groups of rows sharing a prompt,
the teacher's case of two prompts in one group), and steps aside where it has nothing to share or
the model cannot keep a cache."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from sdpocl.generation.prefill import distinct_prefixes
from sdpocl.generation.prefix import prefix_sharable, shared_prefix_logits


def tiny_model() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
    )  # fmt: skip
    return Qwen3ForCausalLM(config).train()


def batch(groups=3, samples=4, prompt=11, completion=7, split_group=True, seed=1):
    """``samples`` rows per left-padded prompt; in the first group, with ``split_group``, one row reads
    another prompt (a teacher re-prompt whose demonstration is another sample); completions right-padded."""
    gen = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 97, (groups, prompt), generator=gen)
    prompt_mask = torch.ones_like(prompts)
    for g in range(groups):
        prompts[g, : 2 * g] = 0
        prompt_mask[g, : 2 * g] = 0
    ids = prompts.repeat_interleave(samples, 0)
    mask = prompt_mask.repeat_interleave(samples, 0)
    if split_group:
        ids[1, -1] = (ids[1, -1] + 1) % 97
    ids = torch.cat([ids, torch.randint(3, 97, (groups * samples, completion), generator=gen)], 1)
    tail = torch.ones(groups * samples, completion, dtype=torch.long)
    for r in range(groups * samples):
        tail[r, 1 + r % completion :] = 0
    return ids, torch.cat([mask, tail], 1), completion


def full_logits(model, ids, mask, keep):
    return model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, :-1][:, -keep:]


def test_distinct_prefixes_group_rows_by_ids_and_mask():
    ids, mask, keep = batch()
    prefix_ids, prefix_mask, inverse = distinct_prefixes(ids, mask, ids.size(1) - keep)
    assert prefix_ids.size(0) == 4  # three prompts, one of them in two versions
    assert torch.equal(prefix_ids[inverse], ids[:, :-keep]) and torch.equal(prefix_mask[inverse], mask[:, :-keep])


@pytest.mark.parametrize("keep_one", [False, True], ids=["completion", "one-token"])
def test_logits_and_gradients_are_the_full_forwards(keep_one):
    model = tiny_model()
    ids, mask, keep = batch(completion=1 if keep_one else 7)
    scored = mask[:, -keep:].bool()
    grads = []
    for forward in (full_logits, shared_prefix_logits):
        model.zero_grad()
        logits = forward(model, ids, mask, keep)
        logits.log_softmax(-1)[scored][:, 5].sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        if forward is full_logits:
            want = logits.detach()
    got = shared_prefix_logits(model, ids, mask, keep).detach()
    assert got.shape == want.shape
    assert (got - want)[scored].abs().max() < 1e-5 * want.abs().max()
    assert float((grads[0] - grads[1]).norm() / grads[0].norm()) < 1e-5


def test_positions_count_from_the_padded_column_as_the_full_forward():
    """A different left padding of the same prompt is a different row of the full forward (its positions
    shift), so it is a different prefix here too; each row still gets its own full-forward logits."""
    model = tiny_model().eval()
    ids, mask, keep = batch(groups=2, split_group=False)
    ids[4:, 2:-keep], mask[4:, 2:-keep] = ids[0, : -keep - 2].clone(), 1  # group 2: group 1's prompt, shifted
    ids[4:, :2], mask[4:, :2] = 0, 0
    with torch.no_grad():
        want, got = full_logits(model, ids, mask, keep), shared_prefix_logits(model, ids, mask, keep)
    scored = mask[:, -keep:].bool()
    assert (got - want)[scored].abs().max() < 1e-5


def test_nothing_shared_is_left_to_the_caller():
    model = tiny_model()
    ids, mask, keep = batch(samples=1, split_group=False)
    assert shared_prefix_logits(model, ids, mask, keep) is None
    assert shared_prefix_logits(model, ids, mask, ids.size(1)) is None  # no prefix at all


def test_sharable_needs_a_cache():
    model = tiny_model()
    keys = {"input_ids", "attention_mask", "past_key_values", "logits_to_keep"}
    assert prefix_sharable(model, keys)
    assert not prefix_sharable(model, keys - {"past_key_values"})
    model.gradient_checkpointing_enable()
    assert not prefix_sharable(model, keys)  # transformers drops the cache under gradient checkpointing
