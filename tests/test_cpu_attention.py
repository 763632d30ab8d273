"""The CPU grouped-query attention (sdpocl.generation.attention) gives what transformers' own ``sdpa`` gives,
without ``repeat_kv``; a model takes it by its name, and transformers' ``sdpa`` stays as it is."""

from __future__ import annotations

import pytest
import torch
import transformers.integrations.sdpa_attention as hf_sdpa
from transformers import Qwen3Config, Qwen3ForCausalLM

from sdpocl.generation.attention import ATTENTION, register


def use(model, name: str):
    """``model`` on the attention ``name`` (transformers' ``sdpa``, or the workflow's)."""
    register()
    model.set_attn_implementation(name)
    return model


def use_stock_sdpa_attention(model):
    return use(model, "sdpa")


def use_cpu_gqa_attention(model):
    return use(model, ATTENTION)


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
    ref_logits, ref_grads = _loss_and_grads(use_stock_sdpa_attention(model), ids, mask)
    logits, grads = _loss_and_grads(use_cpu_gqa_attention(model), ids, mask)
    keep = mask.bool()
    torch.testing.assert_close(logits[keep], ref_logits[keep], rtol=0, atol=1e-5)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6)


def test_sampled_generation_is_the_same_tokens():
    model = _model().eval()
    ids, mask = _left_padded_batch()
    outs = []
    for set_attention in (use_stock_sdpa_attention, use_cpu_gqa_attention):
        set_attention(model)
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
    model = use_stock_sdpa_attention(_model().eval())
    ids, mask = _left_padded_batch()
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask)
    assert calls, "transformers' sdpa no longer repeats the KV heads with a mask: this module may be unneeded"
    calls.clear()
    use_cpu_gqa_attention(model)
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert calls == []


def test_other_cases_are_left_to_transformers(monkeypatch):
    """No grouping (one KV head per query head): transformers' function runs, as before."""
    seen = []
    real = hf_sdpa.sdpa_attention_forward
    monkeypatch.setattr(
        "sdpocl.generation.attention.sdpa_attention_forward", lambda *a, **k: seen.append(1) or real(*a, **k)
    )
    ids, mask = _left_padded_batch()
    with torch.inference_mode():
        use_cpu_gqa_attention(_model(kv_heads=4))(input_ids=ids, attention_mask=mask)
    assert len(seen) == 2  # one call per layer


def test_transformers_sdpa_stays_transformers(monkeypatch):
    """Registering the workflow's attention adds a name; ``sdpa`` is transformers' own function still."""
    from transformers import AttentionInterface

    register()
    assert AttentionInterface._global_mapping["sdpa"] is hf_sdpa.sdpa_attention_forward
    assert AttentionInterface._global_mapping[ATTENTION].__name__ == "cpu_gqa_sdpa_forward"


def test_the_gpu_settings_turn_off_only_cudnn(monkeypatch):
    """cuDNN's attention kernel made bf16 training non-finite on an H200 (sdpocl.gpu): where a GPU is visible the
    jobs leave flash, memory-efficient and math kernels on and cuDNN off; on a CPU they change nothing."""
    from sdpocl.gpu import use_gpu_kernels

    torch.backends.cuda.enable_cudnn_sdp(True)
    assert use_gpu_kernels() is torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert use_gpu_kernels()
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.math_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)


@pytest.mark.parametrize(
    "module, function, calls",
    [
        ("sdpocl.train.stage", "train_stage", {"use_gpu_kernels"}),
        ("sdpocl.evaluate.run", "make_lm", {"use_gpu_kernels", "model_kwargs", "speed_up"}),
        ("sdpocl.train.teacher_check", "check_teacher", {"use_gpu_kernels", "model_kwargs", "speed_up"}),
        ("sdpocl.train.plan", "trainer_kwargs", {"model_kwargs"}),
    ],
)
def test_every_job_that_runs_a_model_sets_its_device_and_attention(module, function, calls):
    """Training, evaluation and the teacher check set the GPU kernels where they set up their device, and load
    their models with the workflow's attention (sdpocl.generation.model_kwargs; the trainer's through TRL's
    model_init_kwargs, which its teacher and reference copies take too)."""
    import ast
    import importlib
    import inspect

    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    body = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    called = {n.func.id for n in ast.walk(body) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert calls <= called


def test_the_trainers_models_run_the_workflows_attention_on_a_cpu():
    from types import SimpleNamespace

    from sdpocl.train.plan import trainer_kwargs

    settings = SimpleNamespace(
        prompts_per_step=2,
        num_generations=2,
        optimizer_steps_per_rollout=1,
        micro_batch_size=1,
        steps=1,
        warmup_steps=0,
        max_completion_length=8,
        temperature=1.0,
        lr=1e-5,
        weight_decay=0.0,
        max_grad_norm=1.0,
        save_every=1,
        seed=0,
        mixed_precision="auto",
        gradient_checkpointing=False,
    )
    assert trainer_kwargs(settings, "/tmp/x", use_cpu=True, world=1)["model_init_kwargs"] == {
        "dtype": "float32",
        "attn_implementation": ATTENTION,
    }
    assert trainer_kwargs(settings, "/tmp/x", use_cpu=False, world=1)["model_init_kwargs"] == {"dtype": "float32"}
