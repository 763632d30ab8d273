"""SDPO's loss with upstream's rollout correction, written out from the formula, to compare
:class:`sdpocl.train.sdpo.MaskedSDPOTrainer` against on one batch (tests/test_rollout_correction.py with made-up
sampling log-probs, tests/with_vllm/test_vllm_rollouts.py with vLLM's own).

Upstream (verl: ``compute_self_distillation_loss(..., rollout_is_weights)``, the policy loss's ``pg_losses *
rollout_is_weights``; ``rollout_is: token``, ``rollout_is_threshold: 2.0``): w = min(exp(logp_trainer - logp_vllm),
2) per token, detached, multiplies each token's distillation loss and, in a hybrid, each token's policy loss;
token-mean per sequence (over the tokens the loss counts), mean over sequences. The student and teacher forwards
and the per-token divergence (TRL's top-k generalised JSD) are computed here without the trainer's shortcuts."""

from __future__ import annotations

import torch
from trl.experimental.sdpo.loss_utils import compute_topk_self_distillation_loss
from trl.trainer.utils import selective_log_softmax


def completion_logits(model, prefix_ids, prefix_mask, completion_ids, completion_mask, temperature):
    """Logits / T at the positions that predict each completion token (a plain full forward)."""
    ids = torch.cat([prefix_ids, completion_ids], dim=1)
    mask = torch.cat([prefix_mask, completion_mask], dim=1)
    n = completion_ids.size(1)
    return model(input_ids=ids, attention_mask=mask, use_cache=False).logits[:, -n - 1 : -1] / temperature


def rollout_weights(student_logps, sampled_logps, cap):
    """min(exp(logp_trainer - logp_vllm), cap), detached; 1 where vLLM gave no log-prob (NaN)."""
    diff = (student_logps.detach() - sampled_logps).clamp(-20.0, 20.0)
    return torch.where(torch.isnan(sampled_logps), torch.ones_like(diff), diff.exp().clamp(max=cap))


def sequence_mean(per_token, mask):
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def reference_loss(trainer, inputs, cap: float | None) -> torch.Tensor:
    """The batch's loss by the formula (cap None: no correction, weight 1)."""
    args, model = trainer.args, trainer.model
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"].float()
    student = completion_logits(
        model, inputs["prompt_ids"], inputs["prompt_mask"], completion_ids, inputs["completion_mask"], args.temperature
    )
    logps = selective_log_softmax(student, completion_ids)
    sampled = inputs.get("sampling_per_token_logps")
    weights = torch.ones_like(logps) if cap is None or sampled is None else rollout_weights(logps, sampled, cap)
    w = args.distillation_weight
    loss = torch.zeros((), dtype=logps.dtype)
    if w > 0:
        n = completion_ids.size(1)
        teacher_ids, teacher_mask = inputs["teacher_input_ids"], inputs["teacher_attention_mask"]
        with torch.no_grad():
            teacher = completion_logits(
                trainer.teacher_model,
                teacher_ids[:, :-n],
                teacher_mask[:, :-n],
                teacher_ids[:, -n:],
                teacher_mask[:, -n:],
                args.temperature,
            )
        per_token = compute_topk_self_distillation_loss(
            student,
            teacher,
            distillation_topk=args.distillation_topk,
            distillation_alpha=args.distillation_alpha,
            distillation_add_tail=args.distillation_add_tail,
        )
        loss_mask = completion_mask * inputs["self_distillation_mask"].unsqueeze(1)
        loss = loss + w * sequence_mean(per_token * weights, loss_mask)
    if w < 1:
        # one optimizer step per rollout step: the ratio is exp(logp - logp.detach()) = 1, the clip inactive
        advantages = inputs["advantages"].unsqueeze(1)
        per_token = -advantages * weights * torch.exp(logps - logps.detach())
        loss = loss + (1 - w) * sequence_mean(per_token, completion_mask)
    return loss
