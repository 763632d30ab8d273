"""SDPO's rollout correction (upstream's ``rollout_is: token``, threshold 2): with vLLM rollouts each token's
distillation loss -- and, in a hybrid, its policy loss -- is weighted by min(exp(logp_trainer - logp_vllm), 2),
detached; without vLLM the weight is 1. Checked here against the formula (tests/sdpo_reference.py) on a batch
that the stage's own trainer sampled, with made-up sampling log-probs (some far off, so weights clip at 2, some
missing); tests/with_vllm/ checks it with vLLM's own."""

from __future__ import annotations

import copy

import pytest
import torch
from sdpo_reference import reference_loss, rollout_weights

from sdpocl.config import expand_runs, stage_settings, validate_config
from sdpocl.config.methods import SDPO_ROLLOUT_IS_CAP, RunSpec
from sdpocl.train.rollouts import rollout_kwargs
from sdpocl.train.sdpo import rollout_is_weights, sampled_token_logps
from sdpocl.train.stage import _rollout_is, build_trainer


def parity(completions, **kwargs):
    return [float(len(c) % 2) for c in completions]


def _settings(smoke_config, **knobs) -> dict:
    cfg = validate_config(copy.deepcopy(smoke_config))
    run = next(r for r in expand_runs(cfg) if r.method == "sdpo" and r.alpha == 0.0 and not r.cot)
    s = stage_settings(cfg, RunSpec(**{**run.to_dict(), **knobs}), ("math",))
    return s.replace(
        steps=1,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=10,
        warmup_steps=0,
        lr=1e-3,
        method_settings={**s.method_settings, "rollout_is_cap": SDPO_ROLLOUT_IS_CAP},
    )


def _batch(settings, tiny_standin, tmp_path):
    """The trainer and one batch it sampled (transformers' generate), with sampling log-probs made up around
    the trainer's: N(0, 0.7) off, so some weights clip at 2 and most differ from 1; a few missing (NaN)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    model_dir, recs = tiny_standin
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [r["prompt"] for r in recs], "answer": [r["answer"] for r in recs]})
    torch.manual_seed(0)
    trainer = build_trainer(settings, model_dir, data, tok, [parity], tmp_path)
    rows = [data[i] for i in range(4) for _ in range(4)]
    batch = trainer._prepare_training_batch(rows)
    trainer.model.eval()
    with torch.no_grad():
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        n = batch["completion_ids"].size(1)
        logits = trainer.model(input_ids=ids, attention_mask=mask).logits[:, -n - 1 : -1] / trainer.args.temperature
        logps = torch.log_softmax(logits, -1).gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
    gen = torch.Generator().manual_seed(1)
    sampled = logps + 0.7 * torch.randn(logps.shape, generator=gen)
    sampled[0, :2] = float("nan")
    batch["sampling_per_token_logps"] = sampled * batch["completion_mask"]
    return trainer, batch


def _loss_and_grads(trainer, fn):
    trainer.model.zero_grad()
    loss = fn()
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _assert_same(trainer, batch, cap, use_vllm: bool):
    trainer.use_vllm = use_vllm  # the correction's switch: vLLM samples the rollouts (no engine is called here)
    ours, g_ours = _loss_and_grads(trainer, lambda: trainer.compute_loss(trainer.model, dict(batch)))
    ref, g_ref = _loss_and_grads(trainer, lambda: reference_loss(trainer, batch, cap))
    assert torch.allclose(ours, ref, atol=1e-6, rtol=1e-5), (ours, ref)
    assert g_ours.keys() == g_ref.keys() and g_ours
    for k in g_ref:
        assert torch.allclose(g_ours[k], g_ref[k], atol=1e-6, rtol=1e-4), k
    return ours


@pytest.mark.parametrize("knobs", [{}, {"distillation_weight": 0.5}], ids=["distillation", "hybrid"])
def test_sdpo_loss_is_weighted_by_the_rollout_correction_as_upstream(tiny_standin, smoke_config, tmp_path, knobs):
    settings = _settings(smoke_config, **knobs)
    trainer, batch = _batch(settings, tiny_standin, tmp_path)
    assert float(batch["self_distillation_mask"].sum()) > 0 and float(batch["advantages"].abs().sum()) > 0
    corrected = _assert_same(trainer, batch, SDPO_ROLLOUT_IS_CAP, use_vllm=True)
    # the made-up log-probs move the weights: some tokens clipped at 2, the loss not the uncorrected one
    mode = trainer._metrics["eval"]
    assert 0 < mode["sampling/importance_sampling_ratio/clipped_fraction"][-1] < 0.5
    assert mode["sampling/importance_sampling_ratio/max"][-1] == pytest.approx(SDPO_ROLLOUT_IS_CAP)
    uncorrected = _assert_same(trainer, batch, None, use_vllm=False)  # transformers' rollouts: weight 1
    assert abs(float(corrected - uncorrected)) > 0.05 * abs(float(uncorrected)), (corrected, uncorrected)


def test_rollout_weights_are_the_capped_detached_ratio():
    trainer = torch.tensor([[-1.0, -2.0, -0.1, -30.0]], requires_grad=True)
    sampled = torch.tensor([[-1.5, -1.0, -0.1, -0.5]])
    w = rollout_is_weights(trainer, sampled, 2.0)
    expected = torch.tensor([[0.5, -1.0, 0.0, -20.0]]).exp().clamp(max=2.0)  # log-ratio bounded to -20
    assert torch.allclose(w, expected) and not w.requires_grad
    assert torch.allclose(w, rollout_weights(trainer, sampled, 2.0))


def test_vllm_log_probs_line_up_with_the_completions():
    completion_ids = torch.tensor([[5, 6, 7], [8, 0, 0]])
    logprobs = [[[-0.1], [-0.2], [None]], [[-0.3]]]  # TRL's per-token lists, the sampled token first
    out = sampled_token_logps(logprobs, completion_ids)
    assert out[0, :2].tolist() == pytest.approx([-0.1, -0.2]) and torch.isnan(out[0, 2])
    assert out[1].tolist() == pytest.approx([-0.3, 0.0, 0.0])
    with pytest.raises(ValueError, match="2 completions"):
        sampled_token_logps(logprobs[:1], completion_ids)


def test_the_correction_is_set_with_vllm_only_and_recorded(monkeypatch):
    from types import SimpleNamespace

    settings = SimpleNamespace(max_prompt_length=8, max_completion_length=8, family="sdpo")
    monkeypatch.delenv("SDPOCL_ROLLOUTS", raising=False)
    assert rollout_kwargs(True, settings) == {}  # transformers' generate on a CPU: weight 1, nothing to set
    monkeypatch.setattr("sdpocl.train.rollouts.vllm_installed", lambda: True)
    assert rollout_kwargs(False, settings)["rollout_is_cap"] == SDPO_ROLLOUT_IS_CAP
    settings.family = "grpo"
    assert "rollout_is_cap" not in rollout_kwargs(False, settings)  # TRL's own for GRPO

    class Args:
        use_vllm, rollout_is_cap = True, 2.0

    assert _rollout_is("sdpo", Args).startswith("token-level, min(exp(logp_trainer - logp_vllm), 2.0)")
    Args.rollout_is_cap = None
    assert _rollout_is("sdpo", Args).startswith("ABSENT")
