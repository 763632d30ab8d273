"""Training semantics as upstream (docs/paper.md, "Continual setting"), on a tiny random model through
the stage's own trainer construction (`sdpocl.train.stage.build_trainer`): optimizer steps per
rollout step, gradient accumulation, fp32 master weights under bf16 autocast, rollout-step names."""

from __future__ import annotations

import json

import pytest
import torch

from sdpocl.config import expand_runs, stage_settings, validate_config
from sdpocl.train.plan import batch_plan
from sdpocl.train.stage import build_trainer, train_stage


def parity_reward(completions, **kwargs):
    """Deterministic, varied within a group: advantages are non-zero and some samples 'succeed' (SDPO)."""
    return [float(len(c) % 2) for c in completions]


def _settings(smoke_config, method: str, **overrides):
    cfg = validate_config(smoke_config)
    run = next(r for r in expand_runs(cfg) if r.method == method and (r.alpha in (None, 0.0)) and not r.cot)
    s = stage_settings(cfg, run, ("math",))
    fixed = dict(
        steps=2,
        save_every=1,
        prompts_per_step=4,
        num_generations=4,
        max_completion_length=8,
        max_grad_norm=1e9,
        warmup_steps=0,
        lr=1e-3,
    )
    return s.replace(**{**fixed, **overrides})


def _trainer(settings, model_dir, recs, out, callbacks=()):
    from datasets import Dataset
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [r["prompt"] for r in recs], "answer": [r["answer"] for r in recs]})
    return build_trainer(settings, model_dir, data, tok, [parity_reward], out, callbacks)


class Recorder:
    """Counts optimizer steps and keeps the gradients of the first one (after accumulation)."""

    def __new__(cls):
        from transformers import TrainerCallback

        class _Recorder(TrainerCallback):
            def __init__(self):
                self.optimizer_steps = 0
                self.first_grads = None

            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                if self.first_grads is None:
                    self.first_grads = {
                        n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None
                    }

            def on_optimizer_step(self, args, state, control, **kwargs):
                self.optimizer_steps += 1

        return _Recorder()


@pytest.mark.parametrize("method, per_rollout", [("grpo", 4), ("sdpo", 1)])
def test_optimizer_steps_per_rollout_step(tiny_standin, smoke_config, tmp_path, method, per_rollout):
    """GRPO: 4 mini-batches, one optimizer step each, per rollout step; SDPO: one (trainer state)."""
    model, recs = tiny_standin
    settings = _settings(smoke_config, method)
    rec = Recorder()
    trainer = _trainer(settings, model, recs, tmp_path / "out", [rec])
    trainer.train()
    assert trainer.state.global_step == rec.optimizer_steps == per_rollout * settings.steps
    assert batch_plan(settings).rollout_step(trainer.state.global_step) == settings.steps
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["step"] for e in logged] == [per_rollout * (i + 1) for i in range(settings.steps)]


@pytest.mark.parametrize("method, micro", [("grpo", 1), ("sdpo", 4)])
def test_accumulated_gradient_equals_full_batch(tiny_standin, smoke_config, tmp_path, method, micro):
    """Micro-batches with gradient accumulation give the gradient of the whole optimizer mini-batch."""
    model, recs = tiny_standin
    grads = {}
    for name, size in (("full", None), ("accumulated", micro)):
        settings = _settings(smoke_config, method, micro_batch_size=size, steps=1)
        assert batch_plan(settings).grad_accum == (
            1 if size is None else (16 // batch_plan(settings).optimizer_steps) // size
        )
        rec = Recorder()
        _trainer(settings, model, recs, tmp_path / name, [rec]).train()
        grads[name] = rec.first_grads
    assert batch_plan(_settings(smoke_config, method, micro_batch_size=micro)).grad_accum > 1
    assert grads["full"].keys() == grads["accumulated"].keys() and grads["full"]
    total = sum(float(g.abs().sum()) for g in grads["full"].values())
    assert total > 0, "a zero gradient would make the comparison empty"
    for key, g in grads["full"].items():
        torch.testing.assert_close(grads["accumulated"][key], g, rtol=1e-4, atol=1e-7, msg=key)


def test_master_weights_stay_fp32_under_bf16_autocast(tiny_standin, smoke_config, tmp_path):
    """mixed_precision bf16: the forward runs in bf16 (autocast), weights and AdamW state stay fp32."""
    model, recs = tiny_standin
    settings = _settings(smoke_config, "grpo", mixed_precision="bf16", steps=1)
    trainer = _trainer(settings, model, recs, tmp_path / "out")
    assert trainer.args.bf16 is True
    seen = []
    layer = trainer.model.model.layers[0].mlp.down_proj
    handle = layer.register_forward_hook(
        lambda mod, inp, out: seen.append(out.dtype) if torch.is_grad_enabled() else None
    )
    trainer.train()
    handle.remove()
    assert torch.bfloat16 in seen, seen
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    states = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert states and all(s["exp_avg"].dtype == torch.float32 for s in states)


def test_a_stage_sets_the_gpu_kernels_before_it_builds_the_trainer(tiny_standin, smoke_config, tmp_path, monkeypatch):
    """train_stage sets up its device first (sdpocl.gpu: cuDNN's attention kernel off where a GPU is visible, it
    made bf16 training non-finite on an H200), before the trainer exists."""
    import sdpocl.gpu
    import sdpocl.train.stage as stage

    calls = []
    monkeypatch.setattr(sdpocl.gpu, "use_gpu_kernels", lambda: calls.append("kernels") or False)
    build = stage.build_trainer
    monkeypatch.setattr(stage, "build_trainer", lambda *a, **k: calls.append("trainer") or build(*a, **k))
    model, recs = tiny_standin
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    train_stage(_settings(smoke_config, "grpo", steps=1), model, data, tmp_path / "stage", tmp_path / "state")
    assert calls == ["kernels", "trainer"]


def test_checkpoints_and_log_count_rollout_steps(tiny_standin, smoke_config, tmp_path):
    """Every index the stage writes is a rollout step: GRPO's 8 optimizer steps are steps 1..2."""
    model, recs = tiny_standin
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    settings = _settings(smoke_config, "grpo")
    summary = train_stage(settings, model, data, tmp_path / "stage", tmp_path / "state")
    assert summary["steps_done"] == 2
    assert sorted(p.name for p in (tmp_path / "stage" / "checkpoints").iterdir()) == ["step-1", "step-2"]
    log = [json.loads(x) for x in (tmp_path / "stage" / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [1, 2]
    resolved = json.loads((tmp_path / "stage" / "resolved_config.json").read_text())
    assert resolved["update_structure"]["optimizer_steps_per_rollout_step"] == 4
    assert resolved["trainer_config"]["max_steps"] == 8 and resolved["trainer_config"]["save_steps"] == 4
