"""sdpocl.finished_rows: ``generate`` that drops the rows that have ended samples the tokens of the full
batch from the same seed (transformers' sampling, the evaluation's sampler, the rollouts' log-probs),
computes fewer rows, and keeps every row where dropping would not be exact. Its premise is checked on the
machine that runs the tests: a row's logits in a batch of >= MIN_ROWS rows are those of the full batch."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from sdpocl.generation import finished_rows
from sdpocl.generation.kv_cache import GrowingCache
from sdpocl.generation.logps import GenerationLogps
from sdpocl.generation.prefill import share_generation_prefill
from sdpocl.generation.sampling import sample_over_top_k

EOS = 3


def preset_sized_model() -> Qwen3ForCausalLM:
    """The tiny preset's decoder (128 wide, 4 layers, 4 heads, 2 key/value heads) over a vocabulary of 40,
    so that random weights sample the end token often and rows end at different steps."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=40, hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, eos_token_id=EOS, pad_token_id=0,
    )  # fmt: skip
    return Qwen3ForCausalLM(config).eval()


def batch(prompts=8, samples=8, width=12, seed=1):
    """``samples`` copies of each of ``prompts`` left-padded prompts (prompt g has g % 4 pads)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 40, (prompts, width), generator=gen)
    mask = torch.ones_like(ids)
    for g in range(prompts):
        ids[g, : g % 4] = 0
        mask[g, : g % 4] = 0
    return ids.repeat_interleave(samples, 0), mask.repeat_interleave(samples, 0)


def generate(model, ids, mask, new_tokens=40, **kw):
    torch.manual_seed(0)
    return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=new_tokens, **kw)


def two_models(**share):
    full, dropping = preset_sized_model(), preset_sized_model()
    assert share_generation_prefill(full, drop_ended=False) and share_generation_prefill(dropping, **share)
    return full, dropping


def test_a_rows_logits_do_not_depend_on_the_other_rows_of_a_batch_of_min_rows_or_more():
    """The premise, on this machine: one decoding step over a subset of >= MIN_ROWS rows of a cache gives
    those rows' logits of the whole batch to the bit (the tiny preset's widths, one thread as the jobs run)."""
    model = preset_sized_model()
    ids, mask = batch()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            cache = GrowingCache(model.config)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
            layers = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
            token = torch.randint(4, 40, (ids.size(0), 1), generator=torch.Generator().manual_seed(2))
            step_mask = torch.cat([mask, torch.ones_like(token)], 1)
            step_pos = positions[:, -1:] + 1

            def step(rows):
                sub = GrowingCache(model.config)
                for i, (k, v) in enumerate(layers):
                    sub.update(k[rows], v[rows], i)
                return model(
                    input_ids=token[rows], attention_mask=step_mask[rows], position_ids=step_pos[rows],
                    past_key_values=sub, use_cache=True,
                ).logits  # fmt: skip

            whole = step(torch.arange(ids.size(0)))
            gen = torch.Generator().manual_seed(3)
            for n in (finished_rows.MIN_ROWS, finished_rows.MIN_ROWS + 7, 40, ids.size(0) - 1):
                rows = torch.randperm(ids.size(0), generator=gen)[:n].sort().values
                assert torch.equal(step(rows), whole[rows]), f"{n} rows of {ids.size(0)}"
    finally:
        torch.set_num_threads(threads)


def test_the_same_tokens_with_fewer_rows_computed():
    full, dropping = two_models()
    ids, mask = batch()
    want = generate(full, ids, mask)
    got = generate(dropping, ids, mask)
    computed, total = dropping.last_generate_row_steps
    assert torch.equal(got, want)
    ended = (want[:, ids.size(1) :] == EOS).any(1)
    assert ended.sum() > ids.size(0) // 2 and not ended.all()  # rows end at different steps
    assert computed < 0.9 * total  # and leave the batch
    assert "forward" not in dropping.__dict__ and "_prepare_special_tokens" not in dropping.__dict__


def test_the_evaluations_sampler_draws_the_same_tokens():
    full, dropping = two_models()
    for model in (full, dropping):
        sample_over_top_k(model)
    ids, mask = batch(seed=4)
    kw = {"temperature": 0.6, "top_p": 0.95, "top_k": 50}
    torch.manual_seed(0)
    want = full.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=40, **kw)
    torch.manual_seed(0)
    got = dropping.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=40, **kw)
    assert torch.equal(got, want)
    assert dropping.last_generate_row_steps[0] < dropping.last_generate_row_steps[1]


def test_the_rollouts_log_probs_are_the_same_where_they_are_read():
    """GRPO's old log-probs come from a hook on the forwards ``generate`` makes (sdpocl.train.shortcuts): the
    same tokens and, up to each row's end token, the same log-probs (after it the trainer masks them)."""
    full, dropping = two_models()
    ids, mask = batch(seed=5)
    got = {}
    for name, model in (("full", full), ("dropping", dropping)):
        recorder = GenerationLogps(model, temperature=1.0)
        got[name] = recorder.finish(generate(model, ids, mask))
    (tokens, want), (tokens2, logps) = got["full"], got["dropping"]
    assert torch.equal(tokens, tokens2)
    ended = (tokens == EOS).long().cumsum(1)
    read = (ended == 0) | ((ended == 1) & (tokens == EOS))  # up to and with the end token
    assert torch.equal(logps[read], want[read])


def test_every_row_is_computed_where_dropping_would_not_be_exact_or_is_not_asked():
    full, dropping = two_models()
    small_ids, small_mask = batch(prompts=2)  # 16 rows: never below MIN_ROWS
    assert torch.equal(generate(dropping, small_ids, small_mask), generate(full, small_ids, small_mask))
    assert not hasattr(dropping, "last_generate_row_steps")
    ids, mask = batch()
    torch.manual_seed(0)
    want = full.generate(
        input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=40,
        output_scores=True, return_dict_in_generate=True,
    )  # fmt: skip
    torch.manual_seed(0)
    got = dropping.generate(
        input_ids=ids, attention_mask=mask, do_sample=True, top_k=0, max_new_tokens=40,
        output_scores=True, return_dict_in_generate=True,
    )  # fmt: skip
    assert all(torch.equal(a, b) for a, b in zip(want.scores, got.scores))  # scores asked for: every row's
    assert not hasattr(dropping, "last_generate_row_steps")
    no_end = generate(dropping, ids, mask, eos_token_id=None)
    assert torch.equal(no_end, generate(full, ids, mask, eos_token_id=None))
    assert not hasattr(dropping, "last_generate_row_steps")
    off = preset_sized_model()
    assert share_generation_prefill(off, drop_ended=False)
    generate(off, ids, mask)
    assert not hasattr(off, "last_generate_row_steps")


def test_rows_leave_the_batch_under_the_trainers_fused_lm_head():
    """TRL's trainers set their own ``forward`` on the model (the fused LM head): rollouts drop ended rows
    through it, sample the full batch's tokens, and leave that ``forward`` in place."""
    from trl.trainer.utils import add_fused_lm_head

    full, dropping = two_models()
    for model in (full, dropping):
        add_fused_lm_head(model, temperature=1.0, outputs=("log_probs", "entropy"))
    fused = dropping.__dict__["forward"]
    ids, mask = batch(seed=6)
    assert torch.equal(generate(dropping, ids, mask), generate(full, ids, mask))
    computed, total = dropping.last_generate_row_steps
    assert computed < 0.9 * total
    assert dropping.__dict__["forward"] is fused
