"""Method registry: a training method is a name mapped to a TRL trainer family and its settings.

Adding a method means adding an entry here (and a run in the config); no rule changes. Every
setting that PAPER.md fixes is set explicitly, because TRL's own defaults differ from the paper.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from sdpocl.data.domains import REPROMPT_TEMPLATE, SOLUTION_TEMPLATE

#: SDPO settings of the official implementation (PAPER.md, "SDPO precisely").
SDPO_COMMON = {
    "distillation_weight": 1.0,  # pure distillation: no GRPO term
    "distillation_mode": "topk_logits",
    "distillation_topk": 100,
    "distillation_add_tail": True,
    "distillation_alpha": 0.5,  # generalized JSD, mixing 0.5
    "distillation_is_clip": 2.0,
    "success_reward_threshold": 0.5,
    "dont_reprompt_on_self_success": True,
    "use_successful_as_teacher": True,
    "include_environment_feedback": False,
    "beta": 0.0,  # no KL term
    "loss_type": "grpo",  # token-mean per sequence (the distillation loss is normalised so in TRL too)
    "reprompt_template": REPROMPT_TEMPLATE,
    "solution_template": SOLUTION_TEMPLATE,
}

#: GRPO as upstream (PAPER.md, "Question" and "Continual setting"): Dr.GRPO's advantage (reward minus
#: the group mean, no std scaling), token-mean per sequence (TRL ``loss_type="grpo"``, not TRL's
#: ``dr_grpo`` normaliser), clip 0.2 / 0.28, no KL; vLLM rollouts corrected token by token, cap 2.
GRPO_COMMON = {
    "loss_type": "grpo",
    "scale_rewards": "none",
    "epsilon": 0.2,
    "epsilon_high": 0.28,
    "beta": 0.0,
    "vllm_importance_sampling_correction": True,
    "vllm_importance_sampling_mode": "token_truncate",
    "vllm_importance_sampling_clip_max": 2.0,
}


@dataclass(frozen=True)
class RunSpec:
    """One run of the grid: a method, its knobs and a seed. Stages of a run share these."""

    name: str
    method: str
    seed: int = 0
    label: str = ""
    alpha: float | None = None
    sync_steps: int | None = None
    cot: bool = False
    mask_prob: float = 0.0
    lr: float | None = None
    temperature: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Method:
    """A registry entry: which trainer family runs it and how a run maps to trainer settings."""

    name: str
    family: str  # "grpo" or "sdpo": selects the TRL trainer/config pair
    settings: Callable[[RunSpec], dict]
    needs_alpha: bool = False
    default_label: Callable[[RunSpec], str] = lambda run: run.method


def _pct(alpha: float) -> str:
    return f"{alpha * 100:g}%"


def grpo_settings(run: RunSpec) -> dict:
    return dict(GRPO_COMMON)


def sdpo_settings(run: RunSpec) -> dict:
    """SDPO with an EMA teacher; alpha 0 freezes the teacher at the stage's start weights."""
    alpha = run.alpha
    out = dict(SDPO_COMMON)
    out["remove_thinking_from_demonstration"] = not run.cot
    if alpha == 0:
        out.update(teacher_model_kind="base", teacher_update_rate=0.0, teacher_sync_steps=1)
    else:
        out.update(teacher_model_kind="ema", teacher_update_rate=float(alpha), teacher_sync_steps=1)
    out["token_mask_prob"] = float(run.mask_prob)
    return out


def stable_sdpo_period(alpha: float, sync_steps: int | None = None) -> int:
    """Restart period K of StableSDPO: matched to the EMA rate as K = round(1/alpha) unless set."""
    if sync_steps is not None:
        return int(sync_steps)
    if not alpha:
        raise ValueError("stable_sdpo needs alpha > 0 (K = round(1/alpha)) or an explicit sync_steps")
    return max(1, round(1.0 / alpha))


def stable_sdpo_settings(run: RunSpec) -> dict:
    """Restart-and-freeze: teacher frozen, hard-reset to the student every K steps."""
    out = sdpo_settings(run)
    out.update(
        teacher_model_kind="ema",
        teacher_update_rate=1.0,
        teacher_sync_steps=stable_sdpo_period(run.alpha, run.sync_steps),
    )
    return out


def _sdpo_label(run: RunSpec) -> str:
    base = "SDPO_0" if run.alpha == 0 else f"SDPO_{_pct(run.alpha)}"
    if run.cot:
        base += "^CoT"
    if run.mask_prob:
        base += f"+mask{run.mask_prob:g}"
    return base


METHODS: dict[str, Method] = {
    "grpo": Method("grpo", "grpo", grpo_settings, default_label=lambda run: "GRPO"),
    "sdpo": Method("sdpo", "sdpo", sdpo_settings, needs_alpha=True, default_label=_sdpo_label),
    "stable_sdpo": Method(
        "stable_sdpo", "sdpo", stable_sdpo_settings, needs_alpha=True, default_label=lambda run: "StableSDPO"
    ),
}


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(sorted(METHODS))}") from None


def default_run_name(run: RunSpec) -> str:
    """Stable, readable run id: method, variant knobs, alpha, seed (e.g. ``sdpo-cot_a0_s0``)."""
    parts = [run.method.replace("_", "-")]
    if run.cot:
        parts[0] += "-cot"
    if run.mask_prob:
        parts[0] += f"-mask{run.mask_prob:g}"
    if run.alpha is not None:
        parts.append(f"a{run.alpha:g}")
    if run.sync_steps is not None:
        parts.append(f"K{run.sync_steps}")
    return "_".join(parts)
