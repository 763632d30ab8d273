"""The GRPO family: TRL's GRPOTrainer with the rollout-step schedule, a KL anchor to the parent or the
base, and the exact shortcuts (old log-probs from sampling, zero-advantage rows skipped, each distinct
prompt forwarded once)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head, entropy_from_logits, selective_log_softmax

from sdpocl.generation.logps import recording_logps
from sdpocl.generation.prefill import dropout_free
from sdpocl.generation.prefix import prefix_sharable, shared_prefix_logits
from sdpocl.train.anchor import AnchorArgs, kl_reference_path
from sdpocl.train.frozen import check_shards, distributed, load_from_rank0
from sdpocl.train.fsdp import frozen_copy, use_fp32_reduction
from sdpocl.train.schedule import RolloutScheduleArgs, RolloutScheduleMixin
from sdpocl.train.shortcuts import rows_selectable, select_rows


@dataclass
class SchedGRPOConfig(AnchorArgs, RolloutScheduleArgs, GRPOConfig):
    def __post_init__(self):
        super().__post_init__()
        self._check_anchor()


#: the most completion logits (rows x tokens x vocabulary) GRPO's shared-prefix forward holds (256 MB in fp32)
SHARED_LOGITS_MAX = 2**26

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
    #: with ``shortcuts``: ``generate`` prefills each distinct prompt once (:mod:`sdpocl.generation.prefill`), and so do
    #: the training and reference forwards (:mod:`sdpocl.generation.prefix`)
    share_prefixes = True

    def _load_reference(self) -> None:
        """The KL reference (the parent's or, with ``kl_reference="base"``, the base model's weights), correct on
        every rank. Under FSDP it is built as SDPO's teacher is (:func:`sdpocl.train.fsdp.frozen_copy`: sharded per
        decoder layer, broadcast from rank 0, checked), with TRL's fused LM head: TRL's own is one FSDP unit, so
        every reference forward would gather the whole model (~8 GB in bf16 for Qwen3-4B), and it holds zeros on
        every rank but 0 (:mod:`sdpocl.train.frozen`). Elsewhere TRL's reference gets the weights broadcast from
        rank 0 and checked."""
        if self.ref_model is None:
            if self.args.kl_reference == "base":
                raise ValueError("kl_reference='base' needs a separate reference model (not available with PEFT)")
            return
        source = kl_reference_path(self)
        if self.is_fsdp_enabled:
            reference = frozen_copy(self, source, "KL reference")
            add_fused_lm_head(
                reference, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32
            )
            self.ref_model = reference
            return
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
        with recording_logps(model, self.temperature, keep=lambda logps: setattr(self, "_rollout_logps", logps)):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )

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
        if self.prefix_sharing_usable(model, input_ids.size(0), batch_size, kwargs, logits_to_keep):
            shared = self._shared_prefix_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
            if shared is not None:
                return shared
        return super()._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            compute_entropy=compute_entropy,
            **kwargs,
        )

    # --- each distinct prompt forwarded once ----------------------------------------------------

    prefix_forwards = 0  # forwards that shared their prompts (tests, benchmarks)

    def prefix_sharing_usable(self, model, rows: int, batch_size, kwargs, logits_to_keep: int = 1) -> bool:
        """The rows of a group share their prompt, and a causal model's outputs at the prompt positions do not
        depend on the completion (:mod:`sdpocl.generation.prefix`, as SDPO's forwards): text only, no MoE aux loss,
        no dropout, the entropies for the metric only (no high-entropy mask, no entropy bonus), the LM head as
        the model computes it (not cast to fp32), one chunk, a model that takes a cache, and completion logits
        small enough to hold (TRL's fused LM head never holds them: a large vocabulary and long completions
        keep its path)."""
        unwrapped = self.accelerator.unwrap_model(model)
        keys = inspect.signature(unwrapped.forward).parameters.keys()
        vocab = unwrapped.config.get_text_config().vocab_size
        return (
            rows * logits_to_keep * vocab <= SHARED_LOGITS_MAX
            and self.shortcuts
            and self.share_prefixes
            and self._dropout_free
            and not any(v is not None and v is not False for v in kwargs.values())
            and self.top_entropy_quantile == 1.0
            and not self._entropy_bonus_enabled
            and not self.args.cast_lm_head_to_fp32
            and (batch_size is None or batch_size >= rows)
            and prefix_sharable(model, keys)
        )

    def _shared_prefix_logps(self, model, input_ids, attention_mask, logits_to_keep, compute_entropy):
        """What TRL's fused LM head returns (log-probs of the completion tokens under logits / T, 0 at padding,
        and the entropies), from logits whose prompt columns were forwarded once per distinct prompt."""
        with self.accelerator.autocast():
            logits = shared_prefix_logits(model, input_ids, attention_mask, logits_to_keep)
        if logits is None:
            return None
        self.prefix_forwards += 1
        logits = logits.float() / self.temperature
        mask = attention_mask[:, -logits_to_keep:].bool()
        logps = selective_log_softmax(logits, input_ids[:, -logits_to_keep:]).masked_fill(~mask, 0.0)
        entropies = None
        if compute_entropy:
            with torch.no_grad():  # the entropy metric only (see prefix_sharing_usable)
                entropies = entropy_from_logits(logits).masked_fill(~mask, 0.0)
        return logps, entropies, None

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
