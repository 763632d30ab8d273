"""Frozen model copies (the SDPO teacher, KL references) with the right weights on every rank.

Why this module exists: under ``accelerate launch`` with FSDP and ``fsdp_cpu_ram_efficient_loading``,
transformers (5.17) loads the weights on local rank 0 only and gives every other rank ``zeros_like``
tensors, expecting a broadcast that accelerate does for the Trainer's own model only. TRL builds the
SDPO teacher and the KL reference with ``create_model_from_path`` + ``prepare_fsdp`` (a bare
``fully_shard``, no broadcast), so (N-1)/N of every teacher tensor would be 0 — a broken teacher
that looks exactly like "SDPO collapses". Here a frozen copy is

1. sharded per decoder layer (``_no_split_modules``), as the student, so a forward all-gathers one
   layer at a time instead of the whole model;
2. filled from the full state dict on rank 0, broadcast to every rank
   (``set_model_state_dict(full_state_dict=True, broadcast_from_rank0=True)``); buffers that are not
   in the state dict (rotary ``inv_freq``) are broadcast too;
3. checked: every rank reads *its own slice* of every tensor from the source file and compares it
   with its shard (:func:`check_shards`), so a rank with wrong weights stops the stage at once.

Fresh and resumed stages load a teacher the same way (:func:`load_from_rank0` + :func:`check_shards`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import torch
from torch import nn

__all__ = [
    "WrongWeightsError",
    "build_frozen_copy",
    "check_shards",
    "distributed",
    "load_from_rank0",
    "shard_per_layer",
    "weights_finite",
]


class WrongWeightsError(RuntimeError):
    """A rank's frozen copy differs from the weights it was loaded from."""


def distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if distributed() else 0


def weights_finite(model: nn.Module) -> bool:
    """Every parameter finite, decided alike on every rank: each rank counts the non-finite tensors of its own
    shards (a DTensor's local part: ``torch.isfinite(p).all()`` on a DTensor reads this rank's shard only, so
    ranks disagree about one tensor) and the counts are summed across ranks. A collective: every rank calls it."""
    count = 0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        count += int(not bool(torch.isfinite(local.detach()).all()))
    if distributed():
        total = torch.tensor(count, dtype=torch.int64)
        if torch.distributed.get_backend() == "nccl":
            total = total.cuda()
        torch.distributed.all_reduce(total)
        count = int(total)
    return count == 0


def shard_per_layer(model: nn.Module, *, mesh=None, mp_policy=None, reshard_after_forward: bool = True) -> int:
    """FSDP2-shard ``model`` with one unit per decoder layer (the model's ``_no_split_modules``) plus the
    root, as accelerate's TRANSFORMER_BASED_WRAP does for the student; returns the number of layer units."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    kwargs = {"mesh": mesh, "reshard_after_forward": reshard_after_forward, "mp_policy": mp_policy}
    if kwargs["mp_policy"] is None:
        kwargs["mp_policy"] = MixedPrecisionPolicy()
    units = [m for m in model.modules() if m is not model and type(m).__name__ in layer_classes]
    for module in units:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return len(units)


def _source_files(source: str | Path) -> list[Path]:
    """The safetensors files of a model directory, or a single ``.safetensors`` file."""
    from sdpocl.train.weights import weight_files

    source = Path(source)
    return [source] if source.is_file() else weight_files(source)


def _read_full(source: str | Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for path in _source_files(source):
        out.update(load_file(str(path)))
    return out


def load_from_rank0(model: nn.Module, source: str | Path | dict) -> None:
    """Load the full state dict of ``source`` (a model directory, a safetensors file, or the state dict itself)
    into ``model``, sharded or not: rank 0's copy is broadcast to every other rank; non-persistent buffers too."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    multi = distributed()
    state = {}
    if _rank() == 0:
        state = source if isinstance(source, dict) else _read_full(source)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=multi, strict=False)
    set_model_state_dict(model, state, options=options)
    if multi:
        _broadcast_buffers(model)


def _broadcast_buffers(model: nn.Module) -> None:
    """Buffers outside the state dict (rotary ``inv_freq``) are zeros on ranks > 0 after a cpu-ram-efficient
    load; FSDP2 does not shard buffers, so rank 0's plain copy is broadcast."""
    from torch.distributed.tensor import DTensor

    for buf in model.buffers():
        if isinstance(buf, DTensor) or not buf.is_floating_point():
            continue
        torch.distributed.broadcast(buf.data, src=0)


def _local_slices(param) -> tuple[torch.Tensor, tuple[slice, ...] | None]:
    """A parameter's local tensor and the slice of the full tensor it holds (None: the whole tensor)."""
    from torch.distributed.tensor import DTensor

    if not isinstance(param, DTensor):
        return param.detach(), None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    return param.to_local().detach(), tuple(slice(o, o + n) for o, n in zip(offset, shape))


def _file_keys(source: str | Path) -> Iterator[tuple[str, Path]]:
    from safetensors import safe_open

    for path in _source_files(source):
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                yield key, path


def check_shards(model: nn.Module, source: str | Path, what: str) -> int:
    """Every rank compares its shard of every parameter with the same slice of ``source`` (read lazily, one
    slice at a time) and all ranks stop with :class:`WrongWeightsError` when any rank differs; returns the
    number of tensors checked. A parameter missing from the file (a tied ``lm_head``) is skipped."""
    from safetensors import safe_open

    where = dict(_file_keys(source))
    bad: list[str] = []
    checked = 0
    with ExitStack() as stack:
        handles = {p: stack.enter_context(safe_open(str(p), framework="pt")) for p in set(where.values())}
        for name, param in model.named_parameters():
            if name not in where:
                continue
            local, index = _local_slices(param)
            view = handles[where[name]].get_slice(name)
            expected = view[index] if index is not None else view[:]
            expected = expected.to(local.dtype)
            checked += 1
            if expected.shape != local.shape or not torch.equal(expected, local.cpu()):
                total = float(local.double().sum()) if local.numel() else 0.0
                want = float(expected.double().sum()) if expected.numel() else 0.0
                bad.append(f"{name} (shard sum {total:.6g}, expected {want:.6g})")
    if checked == 0:
        raise WrongWeightsError(f"{what}: no parameter of the model is in {source}: wrong file?")
    n_bad = torch.tensor([len(bad)])
    if distributed():
        torch.distributed.all_reduce(n_bad)
    if bad:
        shown = "; ".join(bad[:3]) + (f"; ... ({len(bad)} tensors)" if len(bad) > 3 else "")
        raise WrongWeightsError(f"rank {_rank()}: the {what}'s weights differ from {source}: {shown}")
    if int(n_bad) > 0:
        raise WrongWeightsError(f"rank {_rank()}: another rank's {what} differs from {source} (see its error)")
    return checked


def build_frozen_copy(
    source: str | Path, what: str, *, shard: bool = False, mesh=None, mp_policy=None, **init_kwargs
) -> nn.Module:
    """A frozen (no grad, eval) copy of the model at ``source``, correct on every rank: with ``shard`` (FSDP)
    sharded per decoder layer on ``mesh`` (None: FSDP's default mesh), loaded by broadcast from rank 0 and
    checked shard by shard. ``init_kwargs`` go to ``from_pretrained`` (dtype, attention implementation), as
    TRL builds its teacher."""
    from trl.trainer.utils import create_model_from_path

    model = create_model_from_path(str(source), **init_kwargs)
    model.requires_grad_(False)
    model.eval()
    if shard:
        shard_per_layer(model, mesh=mesh, mp_policy=mp_policy)
        load_from_rank0(model, source)
    if distributed():
        check_shards(model, source, what)
    return model
