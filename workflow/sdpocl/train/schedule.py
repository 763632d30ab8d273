"""The rollout-step learning-rate schedule both families share: warm-up over *rollout* steps, then
constant, the scheduler stepped once per rollout step as verl does (several optimizer steps per rollout
step for GRPO, one for SDPO)."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch.optim.lr_scheduler import LambdaLR


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
