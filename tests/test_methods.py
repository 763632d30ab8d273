"""Method -> trainer-config mapping for every method and alpha."""

import pytest

from sdpocl.config.methods import METHODS, RunSpec, get_method, stable_sdpo_period
from sdpocl.train.trainers import FAMILIES


def settings(method, **kw):
    return get_method(method).settings(RunSpec(name="x", method=method, **kw))


def test_grpo_as_upstream():
    """Token-mean per sequence, Dr.GRPO advantage (no std scaling), clip 0.2/0.28, no KL, token-level vLLM IS cap 2."""
    s = settings("grpo")
    assert s == {
        "loss_type": "grpo",
        "scale_rewards": "none",
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "beta": 0.0,
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": 2.0,
    }


@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.05, 0.5, 1.0])
def test_sdpo_paper_settings(alpha):
    s = settings("sdpo", alpha=alpha)
    assert s["distillation_mode"] == "topk_logits" and s["distillation_topk"] == 100
    assert s["distillation_add_tail"] is True and s["distillation_alpha"] == 0.5
    assert s["success_reward_threshold"] == 0.5 and s["dont_reprompt_on_self_success"] is True
    assert s["remove_thinking_from_demonstration"] is True
    assert s["include_environment_feedback"] is False and s["distillation_is_clip"] == 2.0
    assert s["distillation_weight"] == 1.0 and s["beta"] == 0.0
    if alpha == 0:
        assert s["teacher_model_kind"] == "base"
    else:
        assert s["teacher_model_kind"] == "ema"
        assert s["teacher_update_rate"] == alpha and s["teacher_sync_steps"] == 1


@pytest.mark.parametrize("alpha, k", [(0.05, 20), (0.1, 10), (0.02, 50), (0.3, 3), (1.0, 1)])
def test_stable_sdpo_restart_period(alpha, k):
    s = settings("stable_sdpo", alpha=alpha)
    assert s["teacher_model_kind"] == "ema" and s["teacher_update_rate"] == 1.0
    assert s["teacher_sync_steps"] == k == stable_sdpo_period(alpha)


def test_stable_sdpo_override_and_errors():
    assert settings("stable_sdpo", alpha=0.05, sync_steps=7)["teacher_sync_steps"] == 7
    with pytest.raises(ValueError):
        stable_sdpo_period(0.0)


def test_variants():
    assert settings("sdpo", alpha=0.0, cot=True)["remove_thinking_from_demonstration"] is False
    assert settings("sdpo", alpha=0.0, mask_prob=0.3)["token_mask_prob"] == 0.3


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("alpha", [0.0, 0.05])
def test_settings_build_a_real_trl_config(method, alpha, tmp_path):
    m = get_method(method)
    if method == "stable_sdpo" and alpha == 0:
        pytest.skip("StableSDPO needs alpha > 0")
    run = RunSpec(name="x", method=method, alpha=alpha if m.needs_alpha else None)
    config_cls, _ = FAMILIES[m.family]
    cfg = config_cls(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        report_to=[],
        num_generations=4,
        per_device_train_batch_size=8,
        **m.settings(run),
    )
    for key, value in m.settings(run).items():
        assert getattr(cfg, key) == value


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        get_method("ppo")
