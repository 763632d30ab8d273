"""TRL trainer families used by the method registry, plus what TRL lacks for the paper's setting.

A method is configuration: each family is a TRL config dataclass plus a trainer, extended here by
small mixins, never a fork.

* Rollout-step schedule (both families): the learning rate warms up over *rollout* steps and is
  then constant, as verl steps its scheduler once per rollout step; GRPO takes several optimizer
  steps per rollout step (``optimizer_steps_per_rollout``), SDPO one.
* Teacher re-prompt budget (SDPO): TRL left-truncates a long re-prompt, which cuts the system
  prompt and the question; here the *demonstration* is cut so that the re-prompt fits
  ``max_reprompt_len`` (PAPER.md, lengths) and the cuts are counted.
* Random token masking of the distillation loss (PAPER.md, variants): ``token_mask_prob``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.optim.lr_scheduler import LambdaLR
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer
from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder

#: placeholder of the demonstration in SDPO's solution template
DEMO_FIELD = "{successful_previous_attempt}"


@dataclass
class RolloutScheduleArgs:
    """Fields shared by both families' configs (counted in rollout steps, as upstream)."""

    optimizer_steps_per_rollout: int = field(
        default=1, metadata={"help": "Optimizer steps per rollout step (GRPO mini-batches; SDPO 1)."}
    )
    rollout_warmup_steps: int = field(
        default=0, metadata={"help": "Linear learning-rate warm-up, in rollout steps; constant afterwards."}
    )


class RolloutScheduleMixin:
    """Constant learning rate after a linear warm-up counted in rollout steps.

    The factor at optimizer step ``s`` is ``min(1, (s // k) / warmup)`` with ``k`` optimizer steps
    per rollout step: transformers' ``constant_with_warmup`` on the rollout index, so every optimizer
    step of one rollout step uses the same learning rate (verl steps its scheduler once per rollout)."""

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            k, warmup = self.args.optimizer_steps_per_rollout, self.args.rollout_warmup_steps
            self.lr_scheduler = LambdaLR(optimizer or self.optimizer, rollout_lr_factor(k, warmup))
            self._created_lr_scheduler = True
        return self.lr_scheduler


def rollout_lr_factor(k: int, warmup: int):
    """Learning-rate factor per optimizer step (see :class:`RolloutScheduleMixin`)."""
    return lambda step: min(1.0, (step // k) / warmup) if warmup > 0 else 1.0


@dataclass
class SchedGRPOConfig(RolloutScheduleArgs, GRPOConfig):
    pass


class SchedGRPOTrainer(RolloutScheduleMixin, GRPOTrainer):
    """GRPOTrainer whose learning-rate schedule counts rollout steps."""


@dataclass
class MaskedSDPOConfig(RolloutScheduleArgs, SDPOConfig):
    token_mask_prob: float = field(
        default=0.0,
        metadata={"help": "Probability of dropping each response token from the distillation loss (sparser signal)."},
    )
    demonstration_max_tokens: int | None = field(
        default=None,
        metadata={"help": "Cut a re-prompt's demonstration to this many tokens (None: never cut)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.token_mask_prob < 1.0:
            raise ValueError(f"`token_mask_prob` must be in [0, 1), got {self.token_mask_prob}.")
        if DEMO_FIELD not in self.solution_template:
            raise ValueError(f"`solution_template` must contain {DEMO_FIELD}")


class BudgetedTeacherContextBuilder(SuccessfulRolloutTeacherContextBuilder):
    """TRL's teacher context, with the demonstration (never the system prompt or question) cut to
    ``demonstration_max_tokens`` so the re-prompt stays within ``max_reprompt_len``."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.n_built = 0
        self.n_cut = 0

    def _build_reprompt_text(self, prompt_text: str, solution_text: str, feedback_text: str) -> str:
        budget = self.trainer.args.demonstration_max_tokens
        if solution_text and budget is not None:
            head, tail = self.trainer.args.solution_template.split(DEMO_FIELD)
            demo = solution_text[len(head) : len(solution_text) - len(tail)]
            ids = self.trainer._tokenizer(demo, add_special_tokens=False)["input_ids"]
            self.n_built += 1
            if len(ids) > budget:
                self.n_cut += 1
                demo = self.trainer._tokenizer.decode(ids[:budget], skip_special_tokens=False)
                solution_text = head + demo + tail
        return super()._build_reprompt_text(prompt_text, solution_text, feedback_text)

    def build(self, *args, **kwargs):
        self.n_built = self.n_cut = 0
        out = super().build(*args, **kwargs)
        self.last_metrics["self_distillation/demonstration_cut_fraction"] = self.n_cut / max(1, self.n_built)
        return out


class MaskedSDPOTrainer(RolloutScheduleMixin, SDPOTrainer):
    """SDPOTrainer with random token masking, a budgeted re-prompt and a distilled-token fraction metric."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher_context_builder = BudgetedTeacherContextBuilder(self)

    def _compute_teacher_student_logits(self, model, teacher_model, inputs):
        out = super()._compute_teacher_student_logits(model, teacher_model, inputs)
        p = self.args.token_mask_prob
        if p > 0:
            # Seeded by (seed, step) so that a resumed run draws the same masks as an uninterrupted one.
            gen = torch.Generator(device="cpu").manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
            keep = (torch.rand(out.loss_mask.shape, generator=gen) >= p).to(out.loss_mask.device)
            out.loss_mask = out.loss_mask * keep.to(out.loss_mask.dtype)
        mode = "train" if self.model.training else "eval"
        completion_tokens = out.completion_mask.sum().clamp(min=1)
        self._metrics[mode]["distill_token_fraction"].append((out.loss_mask.sum() / completion_tokens).item())
        return out


FAMILIES = {
    "grpo": (SchedGRPOConfig, SchedGRPOTrainer),
    "sdpo": (MaskedSDPOConfig, MaskedSDPOTrainer),
}
