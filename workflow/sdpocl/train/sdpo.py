"""The SDPO family: TRL's SDPOTrainer with the checked teacher (built by rank 0 and sharded, never TRL's
zero-filled copy on ranks > 0), the demonstration budget of the re-prompt, random token masking, the KL
anchor, the teacher-confidence filter and the exact shortcuts: rows without a demonstration skipped, each
distinct (re-)prompt forwarded once (:mod:`sdpocl.generation.prefix`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer
from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder
from trl.trainer.utils import get_config_model_id, selective_log_softmax

from sdpocl.generation.prefill import dropout_free
from sdpocl.generation.prefix import prefix_sharable, shared_prefix_logits
from sdpocl.train.anchor import AnchorArgs, k3_kl, kl_reference_path
from sdpocl.train.frozen import distributed
from sdpocl.train.fsdp import frozen_copy, use_fp32_reduction
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
    rollout_is_cap: float | None = field(
        default=None,
        metadata={
            "help": "With vLLM rollouts, weight each token's losses by min(exp(logp_trainer - logp_vllm), cap), "
            "detached (upstream's rollout_is: token); None: no correction (weight 1)."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.token_mask_prob < 1.0:
            raise ValueError(f"`token_mask_prob` must be in [0, 1), got {self.token_mask_prob}.")
        if not 0.0 <= self.confidence_threshold < 1.0:
            raise ValueError(f"`confidence_threshold` must be in [0, 1), got {self.confidence_threshold}.")
        if self.beta < 0:
            raise ValueError(f"`beta` must be >= 0, got {self.beta}.")
        if self.rollout_is_cap is not None and not self.rollout_is_cap > 0:
            raise ValueError(f"`rollout_is_cap` must be > 0 or None, got {self.rollout_is_cap}.")
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
    re-prompt, a distilled-token fraction metric and, with vLLM rollouts, upstream's rollout correction.

    Rollout correction: TRL's SDPOTrainer asks vLLM for no log-probs, so the tokens vLLM sampled (bf16 weights,
    its own kernels) are distilled as if the trained model had sampled them. Upstream (verl, ``rollout_is:
    token``, threshold 2) weights each token's loss by w = min(exp(logp_trainer - logp_vllm), 2), detached; GRPO
    here gets the same from TRL (``vllm_importance_sampling_*``). With ``rollout_is_cap`` set and vLLM rollouts,
    vLLM's log-probs of its sampled tokens are kept (``sampling_per_token_logps``) and w multiplies the
    distillation loss per token -- through TRL's own clipped importance ratio (``distillation_is_clip``), whose
    "old" log-probs are then vLLM's: the SDPO family takes one optimizer step per rollout step, so TRL computes no
    old log-probs of its own and the student now is the student that the rollout was meant to sample from -- and
    the hybrid's policy term per token (as verl weights ``pg_losses``). The KL anchor is not weighted (nor in
    verl). Logged: ``sampling/sampling_logp_difference/mean`` (mean |logp_trainer - logp_vllm|) and
    ``sampling/importance_sampling_ratio/{mean,min,max,clipped_fraction}``, over the completion tokens of the
    rows forwarded (the distilled ones, with the exact shortcuts)."""

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
        self._sampled_logps = None  # vLLM's log-probs of the last rollout's sampled tokens
        if self.rollout_correction:
            self.vllm_generation.logprobs = 0  # the sampled token's log-prob only (TRL passes None: none at all)

    @property
    def rollout_correction(self) -> bool:
        """vLLM samples the rollouts and ``rollout_is_cap`` asks for upstream's correction (class docstring)."""
        return bool(self.use_vllm and self.args.rollout_is_cap is not None)

    #: the exact shortcuts of the module docstring; False: TRL's own computation (tests, benchmarks)
    shortcuts = True
    #: with ``shortcuts``: forward each distinct (re-)prompt once, and prefill it once in ``generate``
    #: (:mod:`sdpocl.generation.prefix`; exact up to float rounding, which Adam's first steps amplify in near-zero
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

    # --- vLLM rollouts: upstream's rollout correction (class docstring) ----------------------------

    def _generate_vllm(self, prompt_ids):
        """TRL's (weights synced once per optimizer step, then vLLM samples), keeping vLLM's log-probs."""
        if self.state.global_step != self._last_loaded_step:
            self.vllm_generation.sync_weights()
            self._last_loaded_step = self.state.global_step
        n = self.num_generations if self.model.training else self.num_generations_eval
        prompt_ids, completion_ids, logprobs, _ = self.vllm_generation.generate(
            prompts=prompt_ids, images=None, num_generations=n
        )
        self._sampled_logps = logprobs
        return prompt_ids, completion_ids

    def sample_rollouts(self, inputs):
        self._sampled_logps = None
        batch = super().sample_rollouts(inputs)
        if self.rollout_correction:
            if self._sampled_logps is None:
                raise RuntimeError("vLLM returned no log-probs of its sampled tokens: no rollout correction possible")
            batch["sampling_per_token_logps"] = sampled_token_logps(self._sampled_logps, batch["completion_ids"])
        self._sampled_logps = None
        return batch

    def _rollout_logps(self, student_logits, inputs, log: bool = True) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(the student's, the behaviour's) log-probs of the sampled tokens, no grad: the behaviour's are vLLM's
        (the student's own where vLLM gave none); the weights' metrics logged once per forward (``log``). None
        without the correction."""
        sampled = inputs.get("sampling_per_token_logps")
        if sampled is None or not self.rollout_correction:
            return None
        if inputs.get("old_per_token_logps") is not None:
            raise RuntimeError("the rollout correction assumes one optimizer step per rollout step (no old log-probs)")
        with torch.no_grad():
            student = selective_log_softmax(student_logits.detach(), inputs["completion_ids"])
            behaviour = torch.where(torch.isnan(sampled), student, sampled.to(student.dtype))
            if log:
                self._log_rollout_weights(student, behaviour, inputs["completion_mask"])
        return student, behaviour

    def _log_rollout_weights(self, student, behaviour, mask) -> None:
        mode = "train" if self.model.training else "eval"
        mask = mask.bool()
        diff = (student - behaviour)[mask]
        weights = rollout_is_weights(student, behaviour, self.args.rollout_is_cap)[mask]
        nan = torch.tensor(float("nan"), device=student.device)
        stats = {
            "sampling/sampling_logp_difference/mean": diff.abs().mean() if diff.numel() else nan,
            "sampling/importance_sampling_ratio/mean": weights.mean() if weights.numel() else nan,
            "sampling/importance_sampling_ratio/clipped_fraction": (
                (diff > math.log(self.args.rollout_is_cap)).float().mean() if diff.numel() else nan
            ),
            "sampling/importance_sampling_ratio/min": weights.min() if weights.numel() else nan,
            "sampling/importance_sampling_ratio/max": weights.max() if weights.numel() else nan,
        }
        for key, value in stats.items():
            gathered = self.accelerator.gather(value.detach().float().reshape(()).to(self.accelerator.device))
            reduce = {"min": _nanmin, "max": _nanmax}.get(key.rsplit("/", 1)[-1], torch.nanmean)
            self._metrics[mode][key].append(reduce(gathered).item())

    def _compute_policy_loss(self, inputs, student_logits):
        """TRL's policy term (the hybrid), each token's advantage times the rollout weight: w * min(r A, clip(r) A)
        = min(r wA, clip(r) wA) for w > 0, verl's ``pg_losses * rollout_is_weights``."""
        logps = self._rollout_logps(student_logits, inputs, log=self.args.distillation_weight == 0.0)
        if logps is not None:
            weights = rollout_is_weights(*logps, self.args.rollout_is_cap)
            advantages = inputs["advantages"]
            advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
            inputs = {**inputs, "advantages": advantages * weights.to(advantages.dtype)}
        return super()._compute_policy_loss(inputs, student_logits)

    # --- sparser supervision -------------------------------------------------------------------

    def _compute_teacher_student_logits(self, model, teacher_model, inputs):
        out = super()._compute_teacher_student_logits(model, teacher_model, inputs)
        logps = self._rollout_logps(out.student_logits, inputs)
        out.behaviour_logps = None if logps is None else logps[1]
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
        behaviour = getattr(distillation_logits, "behaviour_logps", None)
        if behaviour is None:
            loss = super()._compute_self_distillation_loss(model, inputs, distillation_logits)
        else:
            # TRL's clipped importance ratio exp(logp - old).clamp(max=clip) with vLLM's log-probs as the old ones
            # and the cap as the clip: the rollout weight w (class docstring)
            clip, self.args.distillation_is_clip = self.args.distillation_is_clip, self.args.rollout_is_cap
            try:
                loss = super()._compute_self_distillation_loss(
                    model, {**inputs, "old_per_token_logps": behaviour}, distillation_logits
                )
            finally:
                self.args.distillation_is_clip = clip
        if empty and self.accelerator.num_processes > 1:
            value = self.accelerator.gather(torch.zeros((), device=self.accelerator.device)).mean().item()
            mode = "train" if model.training else "eval"
            for key in [k for k in self._metrics[mode] if k.endswith("distillation_loss")]:
                self._metrics[mode][key][-1] = value
        return loss


def rollout_is_weights(trainer_logps: torch.Tensor, behaviour_logps: torch.Tensor, cap: float) -> torch.Tensor:
    """Upstream's token-level rollout correction: min(exp(logp_trainer - logp_behaviour), cap), detached, the
    log-ratio bounded to +-20 as verl and TRL bound it."""
    diff = (trainer_logps.detach() - behaviour_logps.detach()).clamp(min=-20.0, max=20.0)
    return torch.exp(diff).clamp(max=cap)


def sampled_token_logps(logprobs: list, completion_ids: torch.Tensor) -> torch.Tensor:
    """vLLM's log-probs of the sampled tokens (TRL's per-sequence, per-token lists, the sampled token first) as a
    (rows x completion tokens) tensor beside ``completion_ids``: 0 at padding, NaN where vLLM gave none."""
    out = torch.zeros(completion_ids.shape, dtype=torch.float32)
    if len(logprobs) != completion_ids.size(0):
        raise ValueError(f"{len(logprobs)} sequences of vLLM log-probs for {completion_ids.size(0)} completions")
    for row, seq in enumerate(logprobs):
        values = [float("nan") if tok is None or tok[0] is None else tok[0] for tok in seq]
        out[row, : len(values)] = torch.tensor(values[: out.size(1)], dtype=torch.float32)
    return out.to(completion_ids.device)


def _nanmin(x: torch.Tensor) -> torch.Tensor:
    x = x[~torch.isnan(x)]
    return x.min() if x.numel() else torch.tensor(float("nan"))


def _nanmax(x: torch.Tensor) -> torch.Tensor:
    x = x[~torch.isnan(x)]
    return x.max() if x.numel() else torch.tensor(float("nan"))


def teacher_top1_prob(teacher_logits: torch.Tensor) -> torch.Tensor:
    """The teacher's top-1 next-token probability per position (no grad)."""
    with torch.no_grad():
        return torch.softmax(teacher_logits.float(), dim=-1).amax(dim=-1)
