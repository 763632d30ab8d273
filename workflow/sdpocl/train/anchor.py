"""The KL anchor of the mitigations (``beta`` > 0, ``kl_reference`` parent | base): the config fields,
the reference's path and TRL GRPO's per-token k3 estimator."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from trl.trainer.utils import get_config_model_id


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
