"""Training stages whose rollouts vLLM samples (TRL's colocated engine, ``SDPOCL_ROLLOUTS=vllm``), through the
stage's own code (:func:`sdpocl.train.stage.train_stage`) on the rehearsal's paper-preset settings (chat template,
micro-batch 1, GRPO's mini-batches): a GRPO and an SDPO stage of 3 rollout steps each, from a chat model that
solves about three quarters of the math prompts (tests/with_vllm/chat_model.py), so that rewards vary and every
step updates the weights.

After each weight sync vLLM's log-probs of the tokens it sampled agree with the trainer's
(``rollout_logp_abs_diff``: TRL's metric for GRPO, ours for SDPO -- a bf16 engine against fp32 master weights);
the same stage with the sync switched off (stale weights in the engine) fails that check. SDPO records and applies
upstream's rollout correction with vLLM's real log-probs: its loss on a batch vLLM sampled equals the formula's
(tests/sdpo_reference.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from sdpo_reference import reference_loss

from sdpocl.config import expand_runs, load_config, stage_settings
from sdpocl.config.methods import SDPO_ROLLOUT_IS_CAP
from sdpocl.data.domains import generate
from sdpocl.io import read_jsonl, write_jsonl
from sdpocl.prompts import training_prompt

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
#: mean |logp_trainer - logp_vllm| over the sampled tokens after a sync: a bf16 engine against the trainer's fp32
#: weights (seen: 0.001-0.008 on a 3-step stage, 0.016 at a higher learning rate); stale weights: 0.14-0.22
AGREE = 0.03
STEPS = 3


def settings_for(method: str) -> dict:
    """A math stage of the rehearsal's paper-preset settings: 3 rollout steps of 4 prompts x 4 samples, no
    warm-up (the weights change from the first update), a learning rate that moves them visibly."""
    cfg = load_config(ROOT / "config" / "rehearsal.yaml")
    cfg["train"].update(prompts_per_step=4, num_generations=4, save_every=STEPS)
    run = next(r for r in expand_runs(cfg) if r.method == method and not r.is_variant and r.alpha in (None, 0.0))
    s = stage_settings(cfg, run, ("math",))
    return s.replace(steps=STEPS, warmup_steps=0, lr=3e-4, max_completion_length=32)


def stale_engine(trainer, use_cpu):
    """The control: the engine adapted as usual, then its weight sync switched off (it keeps the parent's)."""
    from sdpocl.train.rollouts import adapt_engine

    adapt_engine(trainer, use_cpu)
    generation = trainer.vllm_generation
    generation.__class__ = type("Stale" + type(generation).__name__, (type(generation),), {"sync_weights": noop})


def noop(self):
    return None


def run_stage(method: str, chat_model, work: Path, stale: bool = False) -> dict:
    from sdpocl.train import stage

    model_dir, _ = chat_model
    data = work / "train.jsonl"
    write_jsonl(data, generate("math", "train", 64, 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SDPOCL_ROLLOUTS", "vllm")
        if stale:
            mp.setattr(stage, "adapt_engine", stale_engine)
        summary = stage.train_stage(settings_for(method), model_dir, data, work / "out", work / "state", threads=1)
    out = work / "out"
    return {
        "summary": summary,
        "log": read_jsonl(out / "train_log.jsonl"),
        "resolved": json.loads((out / "resolved_config.json").read_text()),
    }


@pytest.fixture(scope="module")
def stages(chat_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-stages")
    return {
        (method, stale): run_stage(method, chat_model, root / f"{method}-{'stale' if stale else 'synced'}", stale)
        for method in ("grpo", "sdpo")
        for stale in (False, True)
    }


@pytest.mark.parametrize("method", ["grpo", "sdpo"])
def test_vllm_samples_the_rollouts_and_agrees_with_the_trainer_after_each_sync(stages, method):
    run = stages[(method, False)]
    cfg = run["resolved"]["trainer_config"]
    assert cfg["use_vllm"] and cfg["vllm_mode"] == "colocate" and not cfg["vllm_enable_sleep_mode"]
    assert run["summary"]["steps_done"] == STEPS and run["summary"]["finite_weights"]
    diffs = [row["rollout_logp_abs_diff"] for row in run["log"]]
    print(f"[{method}] synced: mean |logp_trainer - logp_vllm| per step {[round(d, 4) for d in diffs]}")
    assert len(diffs) == STEPS and all(0 <= d < AGREE for d in diffs), diffs
    assert any(row["grad_norm"] > 0 for row in run["log"][:-1])  # the weights changed between syncs


@pytest.mark.parametrize("method", ["grpo", "sdpo"])
def test_stale_weights_fail_the_same_check(stages, method):
    synced = [row["rollout_logp_abs_diff"] for row in stages[(method, False)]["log"]]
    stale = [row["rollout_logp_abs_diff"] for row in stages[(method, True)]["log"]]
    print(f"[{method}] stale: {[round(d, 4) for d in stale]} against synced {[round(d, 4) for d in synced]}")
    assert stale[0] < AGREE  # before the first update the engine's weights are the trainer's either way
    assert stale[-1] >= AGREE and stale[-1] > 5 * synced[-1], (stale, synced)


def test_sdpo_records_and_applies_the_rollout_correction(stages):
    run = stages[("sdpo", False)]
    assert run["resolved"]["trainer_config"]["rollout_is_cap"] == SDPO_ROLLOUT_IS_CAP
    assert run["resolved"]["rollout_importance_sampling"].startswith(
        f"token-level, min(exp(logp_trainer - logp_vllm), {SDPO_ROLLOUT_IS_CAP})"
    )
    for row in run["log"]:
        assert 0 < row["rollout_is_weight_min"] <= row["rollout_is_weight_mean"] <= row["rollout_is_weight_max"]
        assert row["rollout_is_weight_max"] <= SDPO_ROLLOUT_IS_CAP and 0 <= row["rollout_is_clipped_fraction"] <= 1
    weights = {
        k: [round(r[k], 4) for r in run["log"]] for k in ("rollout_is_weight_mean", "rollout_is_clipped_fraction")
    }
    print(f"[sdpo] rollout correction per step: {weights}")
    assert stages[("grpo", False)]["resolved"]["rollout_importance_sampling"].startswith("TRL vLLM importance")


def test_sdpo_loss_on_a_vllm_batch_is_the_formulas(chat_model, tmp_path, monkeypatch):
    """One batch sampled by vLLM (real log-probs of its sampled tokens), the loss and gradients of the stage's
    SDPO trainer against tests/sdpo_reference.py's; with the correction off, the formula with weight 1."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from sdpocl.rewards import domain_rewards
    from sdpocl.train.stage import build_trainer

    model_dir, _ = chat_model
    monkeypatch.setenv("SDPOCL_ROLLOUTS", "vllm")
    settings = settings_for("sdpo")
    recs = generate("math", "train", 16, 2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_dict(
        {
            "prompt": [training_prompt(r, chat_template=True) for r in recs],
            "answer": [r["answer"] for r in recs],
        }
    )
    torch.manual_seed(0)
    trainer = build_trainer(settings, model_dir, data, tok, [domain_rewards(None)["math"]], tmp_path)
    rows = [data[i] for i in range(4) for _ in range(4)]
    batch = trainer._prepare_training_batch(rows)
    sampled = batch["sampling_per_token_logps"]
    mask = batch["completion_mask"].bool()
    assert not torch.isnan(sampled[mask]).any() and (sampled[mask] < 0).all()  # vLLM's own, for every token
    assert float(batch["self_distillation_mask"].sum()) > 0
    trainer.model.eval()
    for cap in (SDPO_ROLLOUT_IS_CAP, None):
        trainer.args.rollout_is_cap = cap
        trainer.model.zero_grad()
        ours = trainer.compute_loss(trainer.model, dict(batch))
        ours.backward()
        g_ours = {k: p.grad.clone() for k, p in trainer.model.named_parameters() if p.grad is not None}
        trainer.model.zero_grad()
        ref = reference_loss(trainer, batch, cap)
        ref.backward()
        assert torch.allclose(ours, ref, atol=1e-6, rtol=1e-5), (cap, ours, ref)
        for k, p in trainer.model.named_parameters():
            if p.grad is not None:
                assert torch.allclose(g_ours[k], p.grad, atol=1e-6, rtol=1e-4), (cap, k)
