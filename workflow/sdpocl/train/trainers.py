"""TRL trainer families used by the method registry, plus what TRL lacks for the paper's setting.

A method is configuration: each family is a TRL config dataclass plus a trainer, extended here by
small mixins, never a fork.

* Rollout-step schedule (both families): the learning rate warms up over *rollout* steps and is
  then constant, as verl steps its scheduler once per rollout step; GRPO takes several optimizer
  steps per rollout step (``optimizer_steps_per_rollout``), SDPO one.
* Teacher re-prompt budget (SDPO): TRL left-truncates a long re-prompt, which cuts the system
  prompt and the question; here the *demonstration* is cut so that the re-prompt fits
  ``max_reprompt_len`` (docs/paper.md, "Lengths") and the cuts are counted.
* Random token masking of the distillation loss (docs/paper.md, "Variants"): ``token_mask_prob``.
* Mitigations (issue 14), run knobs of :mod:`sdpocl.config.methods`:

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
    computed anyway while sampling (:class:`sdpocl.generation.logps.GenerationLogps`: the raw logits of each
    decoding step, before any sampling processor, which TRL's forward does not apply either);
  - GRPO: rows with zero advantage (every sample of a group scored alike) contribute exactly 0 to the
    loss and gradient when ``beta`` is 0 and the loss is ``grpo`` / ``dr_grpo`` (both divide by the
    number of rows); they are left out of the forward/backward and the loss is scaled by kept / all;
  - SDPO, pure distillation: rows without a demonstration (``self_distillation_mask`` 0) have an
    all-zero loss mask; only the others go through the student and teacher forwards, the loss scaled
    by kept / all. Token masking still draws over the full batch shape; the confidence filter only
    removes tokens, so it keeps the selection exact;
  - both: the rows of a group share their prompt (GRPO's and SDPO's student) or most of their re-prompt
    (SDPO's teacher); each distinct one is forwarded once and its key/value cache indexed out to the rows
    (:mod:`sdpocl.generation.prefix`; ``share_prefixes``), for the trained model, SDPO's teacher and the KL
    reference. GRPO's log-probs and entropies are then computed from those logits as TRL's fused LM head
    computes them (:meth:`SchedGRPOTrainer.prefix_sharing_usable`).
  - both, rollouts by transformers' ``generate``: the prefill runs each distinct prompt once and the rows
    start from its cache (:func:`sdpocl.generation.prefill.share_generation_prefill`; ``share_prefixes``): the
    same sampled tokens.

  Each switches itself off where it would not be exact (:meth:`SchedGRPOTrainer.generation_logps_usable`,
  :meth:`SchedGRPOTrainer.zero_advantage_rows_skippable`, :meth:`MaskedSDPOTrainer.distilled_rows`,
  :meth:`SchedGRPOTrainer.prefix_sharing_usable`, :func:`sdpocl.generation.prefix.prefix_sharable`,
  :func:`sdpocl.generation.prefill.share_generation_prefill`).
"""

from __future__ import annotations

from sdpocl.train.grpo import SchedGRPOConfig, SchedGRPOTrainer
from sdpocl.train.sdpo import MaskedSDPOConfig, MaskedSDPOTrainer

FAMILIES = {
    "grpo": (SchedGRPOConfig, SchedGRPOTrainer),
    "sdpo": (MaskedSDPOConfig, MaskedSDPOTrainer),
}
