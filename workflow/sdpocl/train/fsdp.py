"""What the trainers take from accelerate's FSDP2 setup: the mesh, the precision policy, frozen copies.

accelerate's bf16 policy for FSDP2 is ``param_dtype = reduce_dtype = bf16``: gradients would be
reduce-scattered in bf16. Upstream (verl) reduces in fp32, and the paper's 1e-5 updates need it, so
:func:`use_fp32_reduction` sets ``reduce_dtype = fp32`` before the student is prepared.
"""

from __future__ import annotations

import torch

from sdpocl.train.frozen import build_frozen_copy


def fsdp_mesh(accelerator):
    """The FSDP mesh accelerate shards the student on (None: FSDP's default, every rank), as TRL's prepare_fsdp."""
    mesh = getattr(accelerator, "torch_device_mesh", None)
    if mesh is None:
        return None
    return mesh[tuple(accelerator.parallelism_config.fsdp_dim_names)]


def precision_policy(param_dtype: torch.dtype | None):
    """FSDP2 mixed precision: compute in ``param_dtype`` (None: the weights' own), reduce gradients in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)


def use_fp32_reduction(accelerator) -> None:
    """Make the FSDP2 plugin's policy reduce gradients in fp32 (keeping its compute dtype)."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None or plugin.fsdp_version != 2:
        return
    current = plugin.mixed_precision_policy
    plugin.mixed_precision_policy = precision_policy(getattr(current, "param_dtype", None))


def frozen_init_kwargs(trainer) -> dict:
    """``from_pretrained`` arguments of a frozen copy, as TRL builds its teacher and reference models."""
    kwargs = dict(trainer.args.model_init_kwargs or {})
    if trainer.args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]:
        kwargs["device_map"] = None
    kwargs.setdefault("trust_remote_code", trainer.args.trust_remote_code)
    kwargs.setdefault("dtype", trainer.model.dtype)
    kwargs.setdefault("attn_implementation", trainer.model.config._attn_implementation)
    return kwargs


def frozen_copy(trainer, source, what: str):
    """A frozen copy of the model at ``source`` for ``trainer``: under FSDP sharded per decoder layer, broadcast
    from rank 0 and checked (:mod:`sdpocl.train.frozen`); otherwise prepared as TRL does."""
    from trl.models import prepare_deepspeed

    if trainer.is_fsdp_enabled:
        plugin = trainer.accelerator.state.fsdp_plugin
        param_dtype = getattr(plugin.mixed_precision_policy, "param_dtype", None)
        return build_frozen_copy(
            source,
            what,
            shard=True,
            mesh=fsdp_mesh(trainer.accelerator),
            mp_policy=precision_policy(param_dtype),
            **frozen_init_kwargs(trainer),
        )
    model = build_frozen_copy(source, what, **frozen_init_kwargs(trainer))
    if trainer.is_deepspeed_enabled:
        return prepare_deepspeed(model, trainer.accelerator)
    return trainer.accelerator.prepare_model(model, evaluation_mode=True)
