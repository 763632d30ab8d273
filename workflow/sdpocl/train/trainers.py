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

* Exact shortcuts (``shortcuts = True`` on both trainers; False runs TRL's own computation): work
  whose result cannot change the update is skipped, with the same losses, optimizer steps and
  random-number use, equal to float rounding:

  - GRPO, several optimizer steps per rollout step: TRL's "old" log-probs (a second no-grad forward
    over the whole rollout batch) are the log-softmax of the logits / temperature that ``generate``
    computed anyway while sampling (:class:`GenerationLogps`: the raw logits of each decoding step,
    before any sampling processor, which TRL's forward does not apply either);
  - GRPO: rows with zero advantage (every sample of a group scored alike) contribute exactly 0 to the
    loss and gradient when ``beta`` is 0 and the loss is ``grpo`` / ``dr_grpo`` (both divide by the
    number of rows); they are left out of the forward/backward and the loss is scaled by kept / all;
  - SDPO, pure distillation: rows without a demonstration (``self_distillation_mask`` 0) have an
    all-zero loss mask; only the others go through the student and teacher forwards, the loss scaled
    by kept / all. Token masking still draws over the full batch shape; the confidence filter only
    removes tokens, so it keeps the selection exact.

  Each switches itself off where it would not be exact (:meth:`SchedGRPOTrainer.generation_logps_usable`,
  :meth:`SchedGRPOTrainer.zero_advantage_rows_skippable`, :meth:`MaskedSDPOTrainer.distilled_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer
from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder
from trl.trainer.utils import get_config_model_id, selective_log_softmax

from sdpocl.train.frozen import check_shards, distributed, load_from_rank0
from sdpocl.train.fsdp import frozen_copy, use_fp32_reduction

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


# --- exact shortcuts: helpers ------------------------------------------------------------------

#: per-row tensors whose columns are the completion tokens (right-padded)
COMPLETION_ALIGNED = (
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "sampling_per_token_logps",
    "ref_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
    "token_keep",
)
#: per-row tensors whose last columns are the completion tokens (a left-padded prompt before them)
ENDS_WITH_COMPLETION = ("teacher_input_ids", "teacher_attention_mask")
#: other per-row tensors (the prompt keeps its left padding: position ids count from column 0)
PER_ROW = ("prompt_ids", "prompt_mask", "advantages", "rewards", "raw_completion_lengths", "self_distillation_mask")
#: batch-level values, kept as they are
BATCH_LEVEL = ("num_items_in_batch", "full_completion_tokens")
SELECTABLE_KEYS = frozenset(COMPLETION_ALIGNED + ENDS_WITH_COMPLETION + PER_ROW + BATCH_LEVEL)


def rows_selectable(inputs: dict) -> bool:
    """Every entry of the batch has a known layout (a new TRL field switches the row shortcuts off)."""
    return set(inputs) <= SELECTABLE_KEYS


def select_rows(inputs: dict, rows: torch.Tensor) -> dict:
    """The batch restricted to ``rows``, with the completion columns that are padding in every kept row
    cut off the right (a causal model's outputs at the other positions do not depend on them)."""
    unknown = set(inputs) - SELECTABLE_KEYS
    if unknown:
        raise ValueError(f"select_rows: unknown batch entries {sorted(unknown)}")
    out = {k: (v if k in BATCH_LEVEL or v is None else v[rows]) for k, v in inputs.items()}
    width = inputs["completion_ids"].size(1)
    used = out["completion_mask"].any(dim=0).nonzero()
    keep = int(used.max()) + 1 if used.numel() else 1
    cut = width - keep
    if cut > 0:
        for k in COMPLETION_ALIGNED:
            v = out.get(k)
            if isinstance(v, torch.Tensor) and v.dim() == 2 and v.size(1) == width:
                out[k] = v[:, :keep]
        for k in ENDS_WITH_COMPLETION:
            if isinstance(out.get(k), torch.Tensor):
                out[k] = out[k][:, :-cut]
    return out


def dropout_free(model: nn.Module) -> bool:
    """No dropout acts in training mode: a forward over fewer rows draws no random numbers either way."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    rates = (getattr(text, k, 0.0) for k in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop"))
    if any(isinstance(r, (int, float)) and r > 0 for r in rates):
        return False
    return not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules())


class GenerationLogps:
    """While ``generate`` samples, the log-probability of each sampled token under log_softmax(logits / T):
    a forward hook on the model reads the raw last-position logits of every decoding step (before any
    logits processor) and gathers the token that the next step receives, so one (rows x vocab) matrix is
    held at a time. :meth:`finish` returns ``(tokens, logps)`` of the generated columns, or None when the
    hook did not see exactly one forward per generated token."""

    def __init__(self, model: nn.Module, temperature: float):
        self.temperature = float(temperature)
        self.prev = None
        self.tokens, self.logps = [], []
        self.valid = True
        self.handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        logits = getattr(output, "logits", None)
        if ids is None or logits is None or logits.dim() != 3:
            self.valid = False
            return
        if self.prev is not None:
            self._take(ids[:, -1])
        self.prev = torch.log_softmax(logits[:, -1].float() / self.temperature, dim=-1)

    def _take(self, token: torch.Tensor) -> None:
        self.tokens.append(token)
        self.logps.append(self.prev.gather(-1, token[:, None]).squeeze(-1))
        self.prev = None

    def finish(self, sequences: torch.Tensor):
        self.handle.remove()
        if self.prev is not None:
            self._take(sequences[:, -1])
        n = len(self.tokens)
        if not self.valid or n == 0 or n > sequences.size(1):
            return None
        tokens = torch.stack(self.tokens, dim=1)
        if not torch.equal(tokens, sequences[:, -n:]):
            return None
        return tokens, torch.stack(self.logps, dim=1)


@dataclass
class SchedGRPOConfig(AnchorArgs, RolloutScheduleArgs, GRPOConfig):
    def __post_init__(self):
        super().__post_init__()
        self._check_anchor()


#: TRL GRPO's clip-ratio metrics that are token means over the batch
CLIP_RATIO_MEANS = ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean")


class SchedGRPOTrainer(RolloutScheduleMixin, GRPOTrainer):
    """GRPOTrainer whose learning-rate schedule counts rollout steps, with a KL anchor to the parent
    (TRL's ``beta``: its reference model is loaded from the model path, the stage's parent) or to
    the base model (the same reference, its weights replaced by the base's)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        use_fp32_reduction(self.accelerator)
        if self.beta > 0:
            self._load_reference()
        self._rollout_logps = None  # (tokens, log-probs) of the last generate, for the old log-probs
        self._dropout_free = dropout_free(self.accelerator.unwrap_model(self.model))

    #: the exact shortcuts of the module docstring; False: TRL's own computation (tests, benchmarks)
    shortcuts = True

    def _load_reference(self) -> None:
        """TRL loads the reference from the parent's path, which under FSDP's cpu-ram-efficient loading leaves
        zeros on every rank but 0 (:mod:`sdpocl.train.frozen`): the weights (the parent's or, with
        ``kl_reference="base"``, the base model's) are broadcast from rank 0 and checked on every rank."""
        if self.ref_model is None:
            if self.args.kl_reference == "base":
                raise ValueError("kl_reference='base' needs a separate reference model (not available with PEFT)")
            return
        source = kl_reference_path(self)
        if self.args.kl_reference == "base" or distributed():
            load_from_rank0(self.ref_model, source)
        if distributed():
            check_shards(self.ref_model, source, "KL reference")

    # --- old log-probs from the generation's own logits -----------------------------------------

    def generation_logps_usable(self, images=None) -> bool:
        """The log-probs ``generate`` computes are the numbers TRL's old-log-prob forward would compute:
        TRL computes them at all (several optimizer steps per rollout), the same model in the same
        precision samples them (transformers' generate in fp32; not vLLM, continuous batching, a custom
        rollout function or tool calls), text only, and no dropout (a forward would draw random numbers)."""
        args = self.args
        return (
            self.shortcuts
            and args.gradient_accumulation_steps % (args.steps_per_generation * self.num_iterations) != 0
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and self.rollout_func is None
            and not self.tools
            and images is None
            and not (args.bf16 or args.fp16 or args.cast_lm_head_to_fp32)
            and self._dropout_free
        )

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        self._rollout_logps = None
        if not self.generation_logps_usable(images) or multimodal_fields:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        model = self.accelerator.unwrap_model(self.model)
        own = model.__dict__.get("generate")  # an instance attribute already there (another wrapper)
        generate = model.generate
        recorder = GenerationLogps(model, self.temperature)

        def generate_recording(*a, **kw):
            sequences = generate(*a, **kw)
            self._rollout_logps = recorder.finish(sequences) if isinstance(sequences, torch.Tensor) else None
            return sequences

        model.generate = generate_recording
        try:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        finally:
            if own is None:
                del model.generate
            else:
                model.generate = own
            recorder.handle.remove()

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        kept, self._rollout_logps = self._rollout_logps, None
        if (
            kept is not None
            and model is self.model
            and not compute_entropy
            and not torch.is_grad_enabled()
            and not any(v is not None and v is not False for v in kwargs.values())
        ):
            # the first no-grad call after generate: TRL's old-log-prob pass over the generated batch
            tokens, logps = kept
            if tokens.size(0) == input_ids.size(0) and tokens.size(1) >= logits_to_keep:
                mask = attention_mask[:, -logits_to_keep:].bool()
                tokens, logps = tokens[:, :logits_to_keep], logps[:, :logits_to_keep]
                if torch.equal(tokens[mask], input_ids[:, -logits_to_keep:][mask]):
                    # TRL's fused head gives 0 where the attention mask is 0 (padding after EOS)
                    return logps.masked_fill(~mask, 0.0).to(input_ids.device), None, None
        return super()._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            compute_entropy=compute_entropy,
            **kwargs,
        )

    # --- rows with zero advantage left out of forward/backward -----------------------------------

    def zero_advantage_rows_skippable(self, inputs) -> bool:
        """A zero-advantage row adds exactly 0 to loss and gradient, and the loss is a sum over rows divided
        by the number of rows: ``beta`` 0 (no KL term, which every row has), loss ``grpo`` or ``dr_grpo``
        (not ``bnpo`` / ``dapo`` / ..., which divide by the batch's tokens), no entropy mask, entropy bonus
        or MoE aux loss (terms of every row), per-sequence advantages, one process (the metrics gather),
        a batch of known layout, and no dropout (fewer rows would draw other random numbers)."""
        return (
            self.shortcuts
            and self.beta == 0.0
            and self.loss_type in ("grpo", "dr_grpo")
            and self.top_entropy_quantile == 1.0
            and not self._entropy_bonus_enabled
            and not self.aux_loss_enabled
            and self.off_policy_mask_threshold is None
            and self.accelerator.num_processes == 1
            and inputs["advantages"].dim() == 1
            and rows_selectable(inputs)
            and self._dropout_free
        )

    def _compute_loss(self, model, inputs):
        if not self.zero_advantage_rows_skippable(inputs):
            return super()._compute_loss(model, inputs)
        n = inputs["advantages"].size(0)
        rows = (inputs["advantages"] != 0).nonzero().squeeze(1)
        if rows.numel() == n:
            return super()._compute_loss(model, inputs)
        # no row to train: the shortest one keeps a (zero) loss attached to the graph and the metrics filled
        keep = rows if rows.numel() else inputs["completion_mask"].sum(1).argmin().view(1)
        mode = "train" if self.model.training else "eval"
        before = {k: len(self._metrics[mode].get(k, ())) for k in CLIP_RATIO_MEANS}
        loss = super()._compute_loss(model, select_rows(inputs, keep))
        self._restore_clip_ratios(mode, before, inputs, keep)
        return loss * (rows.numel() / n)

    def _restore_clip_ratios(self, mode: str, before: dict, inputs, kept: torch.Tensor) -> None:
        """The clip-ratio token means over the whole batch: a zero-advantage row has no clipped token (TRL
        counts a clip only where the advantage has a sign), so the kept rows' mean is scaled by their share
        of the tokens. (TRL's ``entropy`` metric is the kept rows' mean: the others are not forwarded.)"""
        mask = (
            inputs["completion_mask"] if "tool_mask" not in inputs else inputs["completion_mask"] * inputs["tool_mask"]
        )
        share = float(mask[kept].sum()) / max(float(mask.sum()), 1.0)
        for key, n in before.items():
            values = self._metrics[mode].get(key, [])
            if len(values) == n + 1:
                values[-1] = values[-1] * share
        dropped = torch.ones(mask.size(0), dtype=torch.bool, device=mask.device)
        dropped[kept] = False
        low = self._metrics[mode].get("clip_ratio/low_min")
        if low and bool((mask[dropped].sum(1) > 0).any()):
            low[-1] = 0.0  # min over rows: a dropped row with tokens has a clip fraction of 0


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

    #: the exact shortcut of the module docstring; False: TRL's own computation (tests, benchmarks)
    shortcuts = True

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


FAMILIES = {
    "grpo": (SchedGRPOConfig, SchedGRPOTrainer),
    "sdpo": (MaskedSDPOConfig, MaskedSDPOTrainer),
}
