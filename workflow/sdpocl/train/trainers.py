"""TRL trainer families used by the method registry, plus the one knob TRL lacks.

Random token masking of the distillation loss (PAPER.md, variants) is a config field
(`token_mask_prob`) on a thin SDPOConfig subclass and a trainer subclass that drops each
response token from the loss with that probability. Nothing else of TRL is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.experimental.sdpo import SDPOConfig, SDPOTrainer


@dataclass
class MaskedSDPOConfig(SDPOConfig):
    token_mask_prob: float = field(
        default=0.0,
        metadata={"help": "Probability of dropping each response token from the distillation loss (sparser signal)."},
    )

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 <= self.token_mask_prob < 1.0:
            raise ValueError(f"`token_mask_prob` must be in [0, 1), got {self.token_mask_prob}.")


class MaskedSDPOTrainer(SDPOTrainer):
    """SDPOTrainer with random token masking and a distilled-token fraction metric."""

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
    "grpo": (GRPOConfig, GRPOTrainer),
    "sdpo": (MaskedSDPOConfig, MaskedSDPOTrainer),
}
