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
* Mitigations (issue 14), run knobs of :mod:`sdpocl.train.methods`:

  - hybrid SDPO + GRPO: TRL's own ``distillation_weight`` blend; nothing to add here;
  - KL anchor (``beta`` > 0, ``kl_reference`` parent | base): GRPO uses TRL's KL term, whose
    reference TRL loads from the stage's parent; with ``kl_reference="base"`` the reference's weights
    are replaced by the base model's (``kl_reference_model``). SDPOConfig stores ``beta`` but TRL
    builds no reference and adds no KL for it, so :class:`MaskedSDPOTrainer` does: a frozen reference
    and ``beta * KL`` with TRL GRPO's per-token k3 estimator, token-mean per sequence;
  - teacher-confidence filtering (SDPO): ``confidence_threshold``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.optim.lr_scheduler import LambdaLR
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer
from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder
from trl.models import prepare_deepspeed, prepare_fsdp
from trl.trainer.utils import create_model_from_path, get_config_model_id, selective_log_softmax

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
class AnchorArgs:
    """KL anchor (both families; the coefficient is the config's own ``beta``)."""

    kl_reference: str = field(
        default="parent",
        metadata={"help": "KL reference: 'parent' (the stage's start weights) or 'base' (the original base model)."},
    )
    kl_reference_model: str | None = field(
        default=None,
        metadata={
            "help": "Model directory of the base model, for kl_reference='base' (a CLI argument of train-stage)."
        },
    )

    def _check_anchor(self):
        if self.kl_reference not in ("parent", "base"):
            raise ValueError(f"`kl_reference` must be 'parent' or 'base', got {self.kl_reference!r}.")
        if self.beta > 0 and self.kl_reference == "base" and not self.kl_reference_model:
            raise ValueError("`kl_reference='base'` needs `kl_reference_model`, the base model's directory.")


def kl_reference_path(trainer) -> str:
    """The KL reference's model directory: the base model's, or the stage's parent (the model path)."""
    if trainer.args.kl_reference == "base":
        return str(trainer.args.kl_reference_model)
    return get_config_model_id(trainer.model.config)


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(student || reference) on the sampled tokens, as TRL's GRPO:
    exp(ref - logp) - (ref - logp) - 1 (>= 0, 0 where the two agree)."""
    d = ref_logps - logps
    return torch.exp(d) - d - 1


@dataclass
class SchedGRPOConfig(AnchorArgs, RolloutScheduleArgs, GRPOConfig):
    def __post_init__(self):
        super().__post_init__()
        self._check_anchor()


class SchedGRPOTrainer(RolloutScheduleMixin, GRPOTrainer):
    """GRPOTrainer whose learning-rate schedule counts rollout steps, with a KL anchor to the parent
    (TRL's ``beta``: its reference model is loaded from the model path, the stage's parent) or to
    the base model (the same reference, its weights replaced by the base's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.beta > 0 and self.args.kl_reference == "base":
            from sdpocl.train.stage import _load_full_state_dict
            from sdpocl.train.weights import load_tensors

            if self.ref_model is None:
                raise ValueError("kl_reference='base' needs a separate reference model (not available with PEFT)")
            _load_full_state_dict(self.ref_model, load_tensors(self.args.kl_reference_model))


@dataclass
class MaskedSDPOConfig(AnchorArgs, RolloutScheduleArgs, SDPOConfig):
    token_mask_prob: float = field(
        default=0.0,
        metadata={"help": "Probability of dropping each response token from the distillation loss (sparser signal)."},
    )
    confidence_threshold: float = field(
        default=0.0,
        metadata={"help": "Distil only response tokens whose teacher top-1 probability exceeds this (0: every token)."},
    )
    demonstration_max_tokens: int | None = field(
        default=None,
        metadata={"help": "Cut a re-prompt's demonstration to this many tokens (None: never cut)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.token_mask_prob < 1.0:
            raise ValueError(f"`token_mask_prob` must be in [0, 1), got {self.token_mask_prob}.")
        if not 0.0 <= self.confidence_threshold < 1.0:
            raise ValueError(f"`confidence_threshold` must be in [0, 1), got {self.confidence_threshold}.")
        if self.beta < 0:
            raise ValueError(f"`beta` must be >= 0, got {self.beta}.")
        self._check_anchor()
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
    """SDPOTrainer with random token masking, teacher-confidence filtering, a KL anchor, a budgeted
    re-prompt and a distilled-token fraction metric."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher_context_builder = BudgetedTeacherContextBuilder(self)
        self.ref_model = self._build_reference() if self.args.beta > 0 else None
        self._kl_student = None  # the model whose grad-enabled forward compute_loss captures
        self._kl_student_logits = None

    # --- KL anchor -----------------------------------------------------------------------------

    def _build_reference(self):
        """A frozen reference model, built as TRL builds SDPO's teacher (from a model path)."""
        kwargs = dict(self.args.model_init_kwargs or {})
        if self.args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]:
            kwargs["device_map"] = None
        kwargs.setdefault("trust_remote_code", self.args.trust_remote_code)
        kwargs.setdefault("dtype", self.model.dtype)
        kwargs.setdefault("attn_implementation", self.model.config._attn_implementation)
        ref = create_model_from_path(kl_reference_path(self), **kwargs)
        ref.requires_grad_(False)
        ref.eval()
        if self.is_deepspeed_enabled:
            return prepare_deepspeed(ref, self.accelerator)
        if self.is_fsdp_enabled:
            return prepare_fsdp(ref, self.accelerator)
        return self.accelerator.prepare_model(ref, evaluation_mode=True)

    def _forward_logits(self, model, input_ids, attention_mask, logits_to_keep):
        logits = super()._forward_logits(model, input_ids, attention_mask, logits_to_keep)
        if model is self._kl_student and torch.is_grad_enabled():
            self._kl_student_logits = logits  # the student forward of this compute_loss (teacher: no grad)
        return logits

    def reference_kl(self, student_logits: torch.Tensor, inputs) -> torch.Tensor:
        """KL(student || reference) over the completion tokens: k3 per token, token-mean per sequence,
        mean over the batch (TRL ``loss_type="grpo"`` aggregation, as GRPO's KL term)."""
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        with torch.no_grad():
            ref_logits = super()._forward_logits(
                self.ref_model,
                torch.cat([inputs["prompt_ids"], completion_ids], dim=1),
                torch.cat([inputs["prompt_mask"], mask], dim=1),
                completion_ids.size(1),
            )
        per_token = k3_kl(
            selective_log_softmax(student_logits, completion_ids), selective_log_softmax(ref_logits, completion_ids)
        )
        mask = mask.to(per_token.dtype)
        mode = "train" if self.model.training else "eval"
        token_mean = (per_token.detach() * mask).sum() / mask.sum().clamp(min=1.0)
        self._metrics[mode]["kl"].append(self.accelerator.gather(token_mean).mean().item())  # as GRPO logs "kl"
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.ref_model is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self._kl_student, self._kl_student_logits = model, None
        try:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            student_logits = self._kl_student_logits
        finally:
            self._kl_student, self._kl_student_logits = None, None
        if student_logits is None:
            raise RuntimeError("the KL anchor found no student forward in compute_loss")
        scale = self.current_gradient_accumulation_steps if self.model.training else 1.0
        return loss + self.args.beta * self.reference_kl(student_logits, inputs) / scale

    # --- sparser supervision -------------------------------------------------------------------

    def _compute_teacher_student_logits(self, model, teacher_model, inputs):
        out = super()._compute_teacher_student_logits(model, teacher_model, inputs)
        mode = "train" if self.model.training else "eval"
        p = self.args.token_mask_prob
        if p > 0:
            # Seeded by (seed, step) so that a resumed run draws the same masks as an uninterrupted one.
            gen = torch.Generator(device="cpu").manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
            keep = (torch.rand(out.loss_mask.shape, generator=gen) >= p).to(out.loss_mask.device)
            out.loss_mask = out.loss_mask * keep.to(out.loss_mask.dtype)
        t = self.args.confidence_threshold
        if t > 0:
            # the teacher's distribution as the distillation loss sees it (temperature-scaled logits)
            keep = teacher_top1_prob(out.teacher_logits) > t
            before = out.loss_mask.sum()
            out.loss_mask = out.loss_mask * keep.to(out.loss_mask.dtype)
            kept = (out.loss_mask.sum() / before.clamp(min=1)).item() if before > 0 else float("nan")
            self._metrics[mode]["confidence_kept_fraction"].append(kept)
        completion_tokens = out.completion_mask.sum().clamp(min=1)
        self._metrics[mode]["distill_token_fraction"].append((out.loss_mask.sum() / completion_tokens).item())
        return out


def teacher_top1_prob(teacher_logits: torch.Tensor) -> torch.Tensor:
    """The teacher's top-1 next-token probability per position (no grad)."""
    with torch.no_grad():
        return torch.softmax(teacher_logits.float(), dim=-1).amax(dim=-1)


FAMILIES = {
    "grpo": (SchedGRPOConfig, SchedGRPOTrainer),
    "sdpo": (MaskedSDPOConfig, MaskedSDPOTrainer),
}
