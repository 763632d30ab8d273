"""Stage bookkeeping: per-step log rows, collapse detection, resume-state helpers."""

import math

from sdpocl.train.resume import COMPLETE, fingerprint, last_complete_checkpoint
from sdpocl.train.steplog import step_log, summarize


def test_step_log_maps_grpo_and_sdpo_keys():
    history = [
        {"step": 1, "loss": 0.5, "reward": 0.25, "completions/mean_length": 12.0, "rewards/boxed_count/mean": 1.0},
        {
            "step": 2,
            "loss": 0.4,
            "self_distillation/reward_mean": 0.5,
            "self_distillation/rewards/boxed_count": 2.0,
            "distill_token_fraction": 0.3,
        },
        {"step": 2, "train_runtime": 3.0},  # the final summary entry is not a step
    ]
    rows = step_log(history)
    assert rows == [
        {"step": 1, "loss": 0.5, "reward": 0.25, "completion_length": 12.0, "boxed_per_completion": 1.0},
        {"step": 2, "loss": 0.4, "reward": 0.5, "boxed_per_completion": 2.0, "distill_token_fraction": 0.3},
    ]


def test_summary_reward_fifths():
    log = [
        {"step": i + 1, "loss": 0.1, "reward": r}
        for i, r in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    ]
    s = summarize(log, 10, patience=3)
    assert math.isclose(s["reward_first_fifth"], 0.15) and math.isclose(s["reward_last_fifth"], 0.95)
    assert s["collapsed"] is False and s["steps_done"] == 10


def test_summary_flags_nan_loss():
    log = [{"step": 1, "loss": 0.1, "reward": 0.5}, {"step": 2, "loss": float("nan"), "reward": 0.5}]
    s = summarize(log, 10, patience=3)
    assert s["collapsed"] and s["collapse_step"] == 2 and "non-finite" in s["collapse_reason"]
    assert s["steps_done"] == 2 < s["steps_planned"]


def test_summary_flags_reward_stuck_at_zero():
    rewards = [0.5, 0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 0.0]
    log = [{"step": i + 1, "loss": 0.1, "reward": r} for i, r in enumerate(rewards)]
    assert summarize(log, 8, patience=5)["collapsed"] is False
    s = summarize(log, 8, patience=4)
    assert s["collapsed"] and s["collapse_step"] == 8


def test_only_complete_checkpoints_resume(tmp_path):
    for step, complete in [(2, True), (4, True), (6, False)]:
        d = tmp_path / f"resume-step-{step}"
        d.mkdir()
        if complete:
            (d / COMPLETE).write_text(str(step))
    assert last_complete_checkpoint(tmp_path).name == "resume-step-4"
    assert last_complete_checkpoint(tmp_path / "nothing") is None


def test_fingerprint_depends_on_settings_and_parent(smoke_config):
    from sdpocl.config import expand_runs, stage_settings, validate_config
    from sdpocl.config.stage import StageSettings

    cfg = validate_config(smoke_config)
    s = stage_settings(cfg, expand_runs(cfg)[0], ("math",))
    a = fingerprint(s, "/m")
    assert a == fingerprint(StageSettings.from_json(s.to_json()), "/m")  # what the CLI parses: the same
    assert a != fingerprint(s.replace(lr=s.lr * 2), "/m")
    assert a != fingerprint(s, "/other")


def test_multi_gpu_processes_split_the_global_batch(monkeypatch, smoke_config):
    from sdpocl.config import expand_runs, stage_settings, validate_config
    from sdpocl.train.plan import trainer_kwargs

    cfg = validate_config(smoke_config)
    runs = {run.method: run for run in expand_runs(cfg)}
    batch = dict(prompts_per_step=32, num_generations=8, micro_batch_size=None)
    grpo = stage_settings(cfg, runs["grpo"], ("math",)).replace(**batch)
    sdpo = stage_settings(cfg, runs["sdpo"], ("math",)).replace(**batch)
    # GRPO: 4 mini-batches of 8 prompts x 8 = 64 completions; SDPO: the whole 256 in one optimizer step
    assert trainer_kwargs(grpo, "/tmp/x", True)["per_device_train_batch_size"] == 64
    assert trainer_kwargs(sdpo, "/tmp/x", True)["per_device_train_batch_size"] == 256
    monkeypatch.setenv("WORLD_SIZE", "4")  # accelerate launch with 4 GPUs: 4 x 16 = one GRPO mini-batch
    assert trainer_kwargs(grpo, "/tmp/x", False)["per_device_train_batch_size"] == 16
    assert trainer_kwargs(sdpo, "/tmp/x", False)["per_device_train_batch_size"] == 64
    monkeypatch.setenv("WORLD_SIZE", "3")
    import pytest

    with pytest.raises(ValueError, match="cannot be split over 3 processes"):
        trainer_kwargs(grpo, "/tmp/x", False)


def test_rollouts_use_vllm_only_on_a_gpu_with_vllm(monkeypatch):
    from types import SimpleNamespace

    import pytest

    from sdpocl.train import rollouts

    settings = SimpleNamespace(max_prompt_length=2048, max_completion_length=8192, family="grpo")
    assert rollouts.rollout_kwargs(True, settings) == {}
    monkeypatch.setattr(rollouts, "vllm_installed", lambda: False)
    with pytest.raises(rollouts.MissingVLLMError, match=r"pip install -e '\.\[gpu\]'.*SDPOCL_ROLLOUTS=hf"):
        rollouts.rollout_kwargs(False, settings)  # a GPU without vLLM: no silent slow path
    monkeypatch.setenv("SDPOCL_ROLLOUTS", "hf")
    assert rollouts.rollout_kwargs(False, settings) == {}  # asked for
    monkeypatch.delenv("SDPOCL_ROLLOUTS")
    monkeypatch.setattr(rollouts, "vllm_installed", lambda: True)
    kw = rollouts.rollout_kwargs(False, settings)
    assert kw["use_vllm"] and kw["vllm_mode"] == "colocate" and kw["vllm_enable_sleep_mode"]
    assert kw["vllm_max_model_length"] == 2048 + 8192  # not the model's 40,960


def test_colocated_vllm_is_seeded_by_the_run(monkeypatch):
    """TRL seeds its colocated engine with the process index alone; the run's seed is folded in."""
    from trl.generation import vllm_generation

    from sdpocl.train.rollouts import engine_seed, seeded_vllm

    seen = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kw: seen.append(kw["seed"]), raising=False)
    stub = vllm_generation.LLM
    for run_seed in (0, 3):
        with seeded_vllm(run_seed):
            vllm_generation.LLM(model="m", seed=1)  # what TRL passes on rank 1
    assert vllm_generation.LLM is stub  # restored
    assert seen == [engine_seed(0, 1), engine_seed(3, 1)] and seen[0] != seen[1]


def test_gradients_are_reduced_every_micro_batch(smoke_config):
    from sdpocl.config import expand_runs, stage_settings, validate_config
    from sdpocl.train.plan import trainer_kwargs

    cfg = validate_config(smoke_config)
    kw = trainer_kwargs(stage_settings(cfg, expand_runs(cfg)[0], ("math",)), "/tmp/x", True)
    assert kw["accelerator_config"]["gradient_accumulation_kwargs"]["sync_each_batch"] is True
