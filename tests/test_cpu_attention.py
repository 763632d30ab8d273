"""The CPU grouped-query attention gives what transformers' own ``sdpa`` gives, without ``repeat_kv``."""

from __future__ import annotations

import pytest
import torch
import transformers.integrations.sdpa_attention as hf_sdpa
from transformers import Qwen3Config, Qwen3ForCausalLM

from sdpocl.cpu_attention import use_cpu_gqa_attention, use_stock_sdpa_attention, use_workflow_attention


@pytest.fixture(autouse=True)
def _restore_stock():
    yield
    use_stock_sdpa_attention()


def _model(kv_heads: int = 2) -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        head_dim=8,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        attn_implementation="sdpa",
    )
    return Qwen3ForCausalLM(cfg)


def _left_padded_batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 64, (3, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # left padding, as the workflow's generation batches have
    mask[1, :2] = 0
    ids[mask == 0] = 0
    return ids, mask


def _loss_and_grads(model, ids, mask):
    model.zero_grad()
    logits = model(input_ids=ids, attention_mask=mask).logits
    loss = (logits.log_softmax(-1)[..., 5] * mask).sum()
    loss.backward()
    return logits.detach(), [p.grad.clone() for p in model.parameters()]


def test_forward_and_gradients_match_transformers_sdpa():
    model = _model()
    ids, mask = _left_padded_batch()
    use_stock_sdpa_attention()
    ref_logits, ref_grads = _loss_and_grads(model, ids, mask)
    use_cpu_gqa_attention()
    logits, grads = _loss_and_grads(model, ids, mask)
    keep = mask.bool()
    torch.testing.assert_close(logits[keep], ref_logits[keep], rtol=0, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_sampled_generation_is_the_same_tokens():
    model = _model().eval()
    ids, mask = _left_padded_batch()
    outs = []
    for use in (use_stock_sdpa_attention, use_cpu_gqa_attention):
        use()
        torch.manual_seed(3)
        with torch.inference_mode():
            outs.append(
                model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=True,
                    max_new_tokens=12,
                    min_new_tokens=12,
                    pad_token_id=0,
                )
            )
    assert torch.equal(outs[0], outs[1])


def test_the_key_value_heads_are_not_repeated_on_cpu(monkeypatch):
    """The point of it: with a mask and grouped heads, no copy of the KV cache per layer and token."""
    calls = []
    real = hf_sdpa.repeat_kv
    monkeypatch.setattr(hf_sdpa, "repeat_kv", lambda *a: calls.append(1) or real(*a))
    model = _model().eval()
    ids, mask = _left_padded_batch()
    use_stock_sdpa_attention()
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask)
    assert calls, "transformers' sdpa no longer repeats the KV heads with a mask: this module may be unneeded"
    calls.clear()
    use_cpu_gqa_attention()
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert calls == []


def test_other_cases_are_left_to_transformers(monkeypatch):
    """No grouping (one KV head per query head): transformers' function runs, as before."""
    seen = []
    real = hf_sdpa.sdpa_attention_forward
    monkeypatch.setattr("sdpocl.cpu_attention.sdpa_attention_forward", lambda *a, **k: seen.append(1) or real(*a, **k))
    use_cpu_gqa_attention()
    ids, mask = _left_padded_batch()
    with torch.inference_mode():
        _model(kv_heads=4)(input_ids=ids, attention_mask=mask)
    assert len(seen) == 2  # one call per layer


def test_the_workflow_attention_turns_off_only_cudnn_on_a_gpu():
    """cuDNN's attention kernel made bf16 training non-finite on an H200 (the module's docstring): the
    workflow's attention leaves flash, memory-efficient and math kernels on and cuDNN off."""
    from transformers import AttentionInterface

    torch.backends.cuda.enable_cudnn_sdp(True)
    use_workflow_attention()
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.math_sdp_enabled()
    assert AttentionInterface._global_mapping["sdpa"].__name__ == "cpu_gqa_sdpa_forward"


@pytest.mark.parametrize(
    "module, function",
    [
        ("sdpocl.train.stage", "train_stage"),
        ("sdpocl.evaluate.run", "make_lm"),
        ("sdpocl.train.teacher_check", "check_teacher"),
        ("sdpocl.drift.embeddings", "_load"),
    ],
)
def test_every_job_that_runs_a_model_sets_the_workflow_attention(module, function):
    """Training, evaluation, the teacher check and drift embeddings all load models: each calls
    ``use_workflow_attention`` (a job that forgot would run cuDNN's kernel on a GPU)."""
    import ast
    import importlib
    import inspect

    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    called = {n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "use_workflow_attention" in called
