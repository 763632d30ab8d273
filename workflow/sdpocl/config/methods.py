"""Method registry: a training method is a name mapped to a TRL trainer family and its settings.

Adding a method means adding an entry here (and a run in the config); no rule changes. Every
setting that docs/paper.md fixes is set explicitly, because TRL's own defaults differ from the paper.

Mitigations (issue 14) are run knobs, not methods, so each combines with any method of a family:
``distillation_weight`` (hybrid SDPO + GRPO), ``kl_beta`` / ``kl_reference`` (anchor to the stage's
parent or the base), ``replay_frac`` (prompts of the earlier domains) and ``confidence_threshold``
(teacher-confidence filtering). A knob at its default value is left out of :meth:`RunSpec.to_dict`
and of the method's settings, so that adding a knob never changes an existing run's tracked settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from sdpocl.data.domains import REPROMPT_TEMPLATE, SOLUTION_TEMPLATE

#: SDPO settings of the official implementation (docs/paper.md, "SDPO precisely").
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

#: GRPO as upstream (docs/paper.md, "Question" and "Continual setting"): Dr.GRPO's advantage (reward minus
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


#: SDPO's vLLM rollout correction, as upstream (verl's ``rollout_is: token``, ``rollout_is_threshold: 2.0``; GRPO's
#: is TRL's ``vllm_importance_sampling_*`` above): each token's losses weighted by min(exp(logp_trainer -
#: logp_vllm), 2), detached (:class:`sdpocl.train.sdpo.MaskedSDPOTrainer`). Set with vLLM rollouts only
#: (:func:`sdpocl.train.rollouts.rollout_kwargs`): without vLLM the weight is 1, and the tracked stage settings
#: stay as they were
SDPO_ROLLOUT_IS_CAP = 2.0

#: the policy term of a hybrid SDPO run takes our GRPO settings (SDPOConfig's own defaults differ:
#: scale_rewards "group", epsilon_high = epsilon)
HYBRID_POLICY = {
    "loss_type": "grpo",
    "scale_rewards": "none",
    "epsilon": GRPO_COMMON["epsilon"],
    "epsilon_high": GRPO_COMMON["epsilon_high"],
    "importance_sampling_level": "token",
}

#: mitigation knobs and their "off" values (a knob at this value is left out of the tracked settings)
MITIGATION_DEFAULTS = {
    "distillation_weight": 1.0,
    "kl_beta": 0.0,
    "kl_reference": "parent",
    "replay_frac": 0.0,
    "confidence_threshold": 0.0,
}
#: knobs only SDPO-family methods take
SDPO_ONLY_KNOBS = ("cot", "mask_prob", "sync_steps", "distillation_weight", "confidence_threshold")
KL_REFERENCES = ("parent", "base")


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
    # mitigations (defaults = off; see MITIGATION_DEFAULTS)
    distillation_weight: float = 1.0  # SDPO family: (1 - w) * policy loss + w * distillation loss
    kl_beta: float = 0.0  # + beta * KL(student || reference), k3 estimator per token
    kl_reference: str = "parent"  # "parent": the stage's start weights; "base": the original base model
    replay_frac: float = 0.0  # share of a stage's prompt pool drawn from the earlier domains
    confidence_threshold: float = 0.0  # SDPO family: distil only tokens whose teacher top-1 prob exceeds it

    def to_dict(self) -> dict:
        """Every field, except mitigation knobs at their default values (see the module docstring)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}  # flat values: no deep copy (asdict's)
        for key, default in MITIGATION_DEFAULTS.items():
            if out[key] == default:
                del out[key]
        return out

    def mitigations(self) -> dict:
        """The mitigation knobs that are on (not at their default values)."""
        out = {k: getattr(self, k) for k, default in MITIGATION_DEFAULTS.items() if getattr(self, k) != default}
        if "kl_beta" not in out:
            out.pop("kl_reference", None)
        return out

    @property
    def is_variant(self) -> bool:
        """Not a plain method run (left out of paper Table 1): CoT, token masking or any mitigation."""
        return bool(self.cot or self.mask_prob or self.mitigations())

    @property
    def needs_base_reference(self) -> bool:
        """The KL anchor is the original base model, which the stage then needs as an input."""
        return self.kl_beta > 0 and self.kl_reference == "base"


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


def mitigation_settings(run: RunSpec, family: str) -> dict:
    """Trainer settings of the mitigation knobs that are on (empty when none is: existing runs keep
    their settings). Replay is data, not a trainer setting: see ``config.stage_settings``."""
    out = {}
    if family == "sdpo" and run.distillation_weight != MITIGATION_DEFAULTS["distillation_weight"]:
        out["distillation_weight"] = float(run.distillation_weight)
        out.update(HYBRID_POLICY)
    if run.kl_beta > 0:
        # GRPO: TRL's own KL term (reference = the trainer's ref_model); SDPO: ours (MaskedSDPOTrainer)
        out["beta"] = float(run.kl_beta)
        out["kl_reference"] = run.kl_reference
    if family == "sdpo" and run.confidence_threshold > 0:
        out["confidence_threshold"] = float(run.confidence_threshold)
    return out


def grpo_settings(run: RunSpec) -> dict:
    return {**GRPO_COMMON, **mitigation_settings(run, "grpo")}


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
    out.update(mitigation_settings(run, "sdpo"))
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


def mitigation_label(run: RunSpec) -> str:
    """Readable label suffix of the mitigations that are on, e.g. ``+hybrid0.5+KL0.01(base)``."""
    m = run.mitigations()
    out = ""
    if "distillation_weight" in m:
        out += f"+hybrid{run.distillation_weight:g}"
    if "kl_beta" in m:
        out += f"+KL{run.kl_beta:g}({run.kl_reference})"
    if "replay_frac" in m:
        out += f"+replay{run.replay_frac:g}"
    if "confidence_threshold" in m:
        out += f"+conf{run.confidence_threshold:g}"
    return out


def mitigation_name(run: RunSpec) -> str:
    """Run-name suffix of the mitigations that are on, e.g. ``-w0.5-kl0.01base``."""
    m = run.mitigations()
    out = ""
    if "distillation_weight" in m:
        out += f"-w{run.distillation_weight:g}"
    if "kl_beta" in m:
        out += f"-kl{run.kl_beta:g}" + ("base" if run.kl_reference == "base" else "")
    if "replay_frac" in m:
        out += f"-replay{run.replay_frac:g}"
    if "confidence_threshold" in m:
        out += f"-conf{run.confidence_threshold:g}"
    return out


def _sdpo_label(run: RunSpec) -> str:
    base = "SDPO_0" if run.alpha == 0 else f"SDPO_{_pct(run.alpha)}"
    if run.cot:
        base += "^CoT"
    if run.mask_prob:
        base += f"+mask{run.mask_prob:g}"
    return base + mitigation_label(run)


METHODS: dict[str, Method] = {
    "grpo": Method("grpo", "grpo", grpo_settings, default_label=lambda run: "GRPO" + mitigation_label(run)),
    "sdpo": Method("sdpo", "sdpo", sdpo_settings, needs_alpha=True, default_label=_sdpo_label),
    "stable_sdpo": Method(
        "stable_sdpo",
        "sdpo",
        stable_sdpo_settings,
        needs_alpha=True,
        default_label=lambda run: "StableSDPO" + mitigation_label(run),
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
    parts[0] += mitigation_name(run)
    if run.alpha is not None:
        parts.append(f"a{run.alpha:g}")
    if run.sync_steps is not None:
        parts.append(f"K{run.sync_steps}")
    return "_".join(parts)
