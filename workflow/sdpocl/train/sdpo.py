"""The SDPO family: TRL's SDPOTrainer with the checked teacher (built by rank 0 and sharded, never TRL's
zero-filled copy on ranks > 0), the demonstration budget of the re-prompt, random token masking, the KL
anchor, the teacher-confidence filter and the exact shortcuts: rows without a demonstration skipped, each
distinct (re-)prompt forwarded once (:mod:`sdpocl.train.prefix`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer
from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder
from trl.trainer.utils import get_config_model_id, selective_log_softmax

from sdpocl.prefill import dropout_free
from sdpocl.train.anchor import AnchorArgs, k3_kl, kl_reference_path
from sdpocl.train.frozen import distributed
from sdpocl.train.fsdp import frozen_copy, use_fp32_reduction
from sdpocl.train.prefix import prefix_sharable, shared_prefix_logits
from sdpocl.train.schedule import RolloutScheduleArgs, RolloutScheduleMixin
from sdpocl.train.shortcuts import rows_selectable, select_rows

#: placeholder of the demonstration in SDPO's solution template
DEMO_FIELD = "{successful_previous_attempt}"


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
        use_fp32_reduction(self.accelerator)
        self.teacher_context_builder = BudgetedTeacherContextBuilder(self)
        self.ref_model = self._build_reference() if self.args.beta > 0 else None
        self._kl_student = None  # the model whose grad-enabled forward compute_loss captures
        self._kl_student_logits = None
        models = [self.accelerator.unwrap_model(self.model)]
        if isinstance(getattr(self, "teacher_model", None), nn.Module):
            models.append(self.accelerator.unwrap_model(self.teacher_model))
        self._dropout_free = all(dropout_free(m) for m in models)

    #: the exact shortcuts of the module docstring; False: TRL's own computation (tests, benchmarks)
    shortcuts = True
    #: with ``shortcuts``: forward each distinct (re-)prompt once, and prefill it once in ``generate``
    #: (:mod:`sdpocl.train.prefix`; exact up to float rounding, which Adam's first steps amplify in near-zero
    #: gradients, so the row tests compare without it)
    share_prefixes = True
    prefix_forwards = 0  # forwards that shared their prefixes (tests, benchmarks)

    # --- the teacher and the KL anchor: frozen copies correct on every rank ------------------------

    def _setup_teacher_model(self) -> None:
        """TRL's teacher, except that a separate teacher model (``base`` or ``ema`` without PEFT) under FSDP is a
        frozen copy sharded per decoder layer, broadcast from rank 0 and checked (:mod:`sdpocl.train.frozen`):
        TRL's own would be zeros on every rank but 0."""
        from accelerate.utils import is_peft_model
        from trl.experimental.sdpo.teacher_sync import SyncTeacherModelCallback

        kind = self.args.teacher_model_kind
        if kind == "live" or is_peft_model(self.model) or not (self.is_fsdp_enabled or distributed()):
            return super()._setup_teacher_model()
        self.teacher_model = frozen_copy(self, get_config_model_id(self.model.config), "SDPO teacher")
        if kind == "ema":
            self.add_callback(SyncTeacherModelCallback(teacher_model=self.teacher_model, accelerator=self.accelerator))

    def _build_reference(self):
        """A frozen reference model (the stage's parent or the base model), correct on every rank."""
        return frozen_copy(self, kl_reference_path(self), "KL reference")

    def _forward_logits(self, model, input_ids, attention_mask, logits_to_keep):
        logits = None
        if (
            self.shortcuts
            and self.share_prefixes
            and self._dropout_free
            and prefix_sharable(model, self.model_kwarg_keys)
        ):
            logits = shared_prefix_logits(model, input_ids, attention_mask, logits_to_keep)
            self.prefix_forwards += logits is not None
        if logits is None:
            logits = super()._forward_logits(model, input_ids, attention_mask, logits_to_keep)
        else:
            logits = logits / self.temperature
        if model is self._kl_student and torch.is_grad_enabled():
            self._kl_student_logits = logits  # the student forward of this compute_loss (teacher: no grad)
        return logits

    def reference_kl(self, student_logits: torch.Tensor, inputs) -> torch.Tensor:
        """KL(student || reference) over the completion tokens: k3 per token, token-mean per sequence,
        mean over the batch (TRL ``loss_type="grpo"`` aggregation, as GRPO's KL term)."""
        completion_ids, mask = inputs["completion_ids"], inputs["completion_mask"]
        with torch.no_grad():
            ref_logits = self._forward_logits(  # computed as the student's (KL 0 where the weights are equal)
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
        p = self.args.token_mask_prob
        if p > 0:  # drawn over the whole batch, whichever rows go through the forwards
            inputs = {**inputs, "token_keep": self.token_keep(inputs["completion_mask"].shape)}
        if self.ref_model is not None:
            return self._loss_with_kl(model, inputs, return_outputs, num_items_in_batch)
        rows = self.distilled_rows(inputs)
        if rows is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # Rows without a demonstration have an all-zero loss mask: their per-row loss is 0 and the batch loss
        # is the mean over rows, so the loss over the others is scaled by kept / all. (None at all: the shortest
        # row keeps the zero loss attached to the graph, as TRL's own.)
        n = inputs["completion_ids"].size(0)
        keep = rows if rows.numel() else inputs["completion_mask"].sum(1).argmin().view(1)
        full = {**inputs, "full_completion_tokens": inputs["completion_mask"].sum()}
        loss = super().compute_loss(model, select_rows(full, keep), return_outputs, num_items_in_batch)
        return loss * (rows.numel() / n)

    def distilled_rows(self, inputs) -> torch.Tensor | None:
        """The rows with a demonstration, when only they can change loss and gradient (else None): pure
        distillation (``distillation_weight`` 1: a policy term has every row), no KL term (``beta`` 0: the
        same), the local teacher (not the teacher server), one process, a batch of known layout, no dropout;
        None too when every row has a demonstration."""
        sd_mask = inputs.get("self_distillation_mask")
        if not (
            self.shortcuts
            and sd_mask is not None
            and self.args.distillation_weight == 1.0
            and self.ref_model is None
            and not self.use_teacher_server
            and self.accelerator.num_processes == 1
            and rows_selectable(inputs)
            and self._dropout_free
        ):
            return None
        rows = (sd_mask > 0).nonzero().squeeze(1)
        return None if rows.numel() == sd_mask.size(0) else rows

    def token_keep(self, shape) -> torch.Tensor:
        """Random token masking's keep mask over a batch of ``shape`` (rows x completion tokens); seeded by
        (seed, step) so that a resumed run draws the same masks as an uninterrupted one."""
        gen = torch.Generator(device="cpu").manual_seed(self.args.seed * 1_000_003 + self.state.global_step)
        return (torch.rand(shape, generator=gen) >= self.args.token_mask_prob).to(self.accelerator.device)

    def _loss_with_kl(self, model, inputs, return_outputs, num_items_in_batch):
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
        if self.args.token_mask_prob > 0:
            # drawn by compute_loss over the whole batch (rows selected with it), else here
            keep = inputs.get("token_keep")
            keep = self.token_keep(out.loss_mask.shape) if keep is None else keep
            out.loss_mask = out.loss_mask * keep.to(out.loss_mask.device, out.loss_mask.dtype)
        t = self.args.confidence_threshold
        if t > 0:
            # the teacher's distribution as the distillation loss sees it (temperature-scaled logits)
            keep = teacher_top1_prob(out.teacher_logits) > t
            before = out.loss_mask.sum()
            out.loss_mask = out.loss_mask * keep.to(out.loss_mask.dtype)
            kept = out.loss_mask.sum() / before.clamp(min=1) if before > 0 else torch.tensor(float("nan"))
            self._metrics[mode]["confidence_kept_fraction"].append(self._rank_mean(kept))
        # over the whole batch's completion tokens, also when only the distilled rows came through
        completion_tokens = inputs.get("full_completion_tokens", out.completion_mask.sum()).clamp(min=1)
        self._metrics[mode]["distill_token_fraction"].append(self._rank_mean(out.loss_mask.sum() / completion_tokens))
        return out

    def _rank_mean(self, value: torch.Tensor) -> float:
        """A metric's mean over the ranks (every rank computes it for each micro-batch), not rank 0's own."""
        value = value.detach().float().reshape(()).to(self.accelerator.device)
        return self.accelerator.gather(value).nanmean().item()

    def _compute_self_distillation_loss(self, model, inputs, distillation_logits):
        """TRL's, except on several ranks: TRL returns early on a micro-batch without a demonstrated token and so
        skips the gather of the distillation loss that the other ranks make -- a deadlock at the first such
        micro-batch (micro-batch 1: nearly every step). Such a rank joins the gather with a zero, and the logged
        loss is the ranks' mean, as on the other path."""
        empty = bool(distillation_logits.loss_mask.sum() == 0)
        loss = super()._compute_self_distillation_loss(model, inputs, distillation_logits)
        if empty and self.accelerator.num_processes > 1:
            value = self.accelerator.gather(torch.zeros((), device=self.accelerator.device)).mean().item()
            mode = "train" if model.training else "eval"
            for key in [k for k in self._metrics[mode] if k.endswith("distillation_loss")]:
                self._metrics[mode][key][-1] = value
        return loss


def teacher_top1_prob(teacher_logits: torch.Tensor) -> torch.Tensor:
    """The teacher's top-1 next-token probability per position (no grad)."""
    with torch.no_grad():
        return torch.softmax(teacher_logits.float(), dim=-1).amax(dim=-1)
