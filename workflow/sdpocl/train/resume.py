"""A stage's resume state, outside its declared outputs (Snakemake deletes those before a rerun).

``resume-step-N/`` is the latest complete trainer checkpoint (model, optimizer, scheduler, RNG, EMA teacher;
only the latest is kept) and ``weights/step-N/`` the model of every save, linked into ``checkpoints/``
when the stage ends. A checkpoint counts only once it is complete (``COMPLETE`` written last), and
resume state is valid only for the settings and inputs whose fingerprint it records.

Each thing is written once: ``weights/step-N`` holds hard links to the model files the trainer's own save
wrote into its checkpoint (a full, loadable model: ``save_model`` with the config and tokenizer; under FSDP
gathered as a full state dict), not a second copy, and ``checkpoints/`` links to those (:func:`link_tree`).
The student's bytes go to disk once per save, where they went three times before (the trainer's model,
``weights/step-N``, the copy into ``checkpoints/``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from sdpocl.config.stage import StageSettings
from sdpocl.train.frozen import distributed
from sdpocl.train.plan import BatchPlan
from sdpocl.train.weights import load_tensors

COMPLETE = "COMPLETE"  # marker written last into a resume checkpoint
RESUME = "resume-step-"  # full trainer state, named by rollout step
WEIGHTS = "weights"  # weights/step-N: the model of every save
#: what a trainer checkpoint holds besides the model (its config, weights and tokenizer)
TRAINER_STATE = (
    "optimizer",
    "scheduler",
    "scaler",
    "rng_state",
    "trainer_state",
    "training_args",
    "pytorch_model_fsdp",
)
TEACHER_FILE = "teacher.safetensors"


def model_files(checkpoint: Path) -> list[Path]:
    """The model's files in a trainer checkpoint: everything but the trainer's state and the teacher."""
    return [
        p
        for p in sorted(checkpoint.iterdir())
        if p.is_file() and p.name not in (TEACHER_FILE, COMPLETE) and not p.name.startswith(TRAINER_STATE)
    ]


def link_tree(src: Path, dst: Path, files: list[Path] | None = None) -> None:
    """``dst`` with hard links to ``src``'s files (or ``files``): no bytes written; a copy where the file system
    takes no link (another device)."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in files if files is not None else sorted(p for p in src.iterdir() if p.is_file()):
        try:
            os.link(path, dst / path.name)
        except OSError:
            shutil.copy2(path, dst / path.name)


def fingerprint(settings: StageSettings, parent: str) -> str:
    return hashlib.sha256((settings.to_json() + "|" + str(parent)).encode()).hexdigest()[:16]


def full_state_dict(model) -> dict:
    """A full (gathered, CPU) state dict, also of an FSDP-sharded model, ready for ``save_file``: a sharded
    model's gathered tensors are fresh CPU copies already; only tensors that share storage with an earlier one
    (tied weights of an unsharded model) are copied, as safetensors refuses shared storage."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    seen: set[int] = set()
    out = {}
    for key, value in state.items():
        value = value.detach()
        ptr = value.untyped_storage().data_ptr() if value.numel() else None
        if ptr is not None and ptr in seen:
            value = value.clone()
        elif ptr is not None:
            seen.add(ptr)
        out[key] = value.contiguous()
    return out


def resume_state_callback(plan: BatchPlan, state_dir: Path, tokenizer):
    """The callback that turns every trainer save into resume state; its ``teacher`` is set once the
    trainer (and its EMA teacher) exists."""
    from transformers import TrainerCallback

    class ResumeState(TrainerCallback):
        """After each save: keep the model as ``weights/step-N`` (a full, loadable model, linked), save the EMA
        teacher, rename the trainer checkpoint to ``resume-step-N``, mark it complete, drop older ones."""

        teacher = None

        def on_save(self, args, state, control, **kwargs):
            from safetensors.torch import save_file

            step = plan.rollout_step(state.global_step)
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            # every rank takes part in gathering the teacher (FSDP); rank 0 writes it. The student is the
            # model the trainer's save wrote into the checkpoint (module docstring): linked, not written again
            teacher = full_state_dict(self.teacher) if self.teacher is not None else None
            if distributed():
                # every rank has written its part of the trainer checkpoint (its RNG state) before rank 0 moves it
                import torch.distributed as dist

                dist.barrier()
            if not state.is_world_process_zero:
                return
            if teacher is not None:
                save_file(teacher, str(ckpt / TEACHER_FILE))
            files = model_files(ckpt)
            if not any(p.suffix == ".safetensors" for p in files):
                raise RuntimeError(f"{ckpt} holds no model weights: the trainer's save must write a full model")
            weights, tmp = state_dir / WEIGHTS / f"step-{step}", state_dir / WEIGHTS / f"tmp-step-{step}"
            shutil.rmtree(tmp, ignore_errors=True)
            link_tree(ckpt, tmp, files)
            if not (tmp / "tokenizer_config.json").exists():
                tokenizer.save_pretrained(tmp)
            shutil.rmtree(weights, ignore_errors=True)
            os.replace(tmp, weights)
            final = state_dir / f"{RESUME}{step}"
            shutil.rmtree(final, ignore_errors=True)
            os.replace(ckpt, final)
            (final / COMPLETE).write_text(str(step))
            for old in state_dir.glob(f"{RESUME}*"):
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
            if os.environ.get("SDPOCL_KILL_AFTER_CHECKPOINT") == str(step):
                os._exit(137)  # simulate a job killed right after a checkpoint (resume tests)

    return ResumeState()


def resume_point(state_dir: Path, fp: str, tag: str) -> Path | None:
    """The checkpoint to resume from, decided on rank 0 and broadcast (the ranks must agree, or they hang):
    rank 0 discards resume state of other settings, records this fingerprint and picks the newest complete
    checkpoint; the other ranks wait for it and read nothing themselves."""
    import torch
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    # cpu= as the trainer will: without it, CPU ranks under torchrun would each be a main process of their own
    proc = PartialState(cpu=not torch.cuda.is_available())
    choice = [None]
    if proc.is_main_process:
        fp_file = state_dir / "fingerprint"
        if state_dir.exists() and (not fp_file.exists() or fp_file.read_text() != fp):
            print(f"[{tag}] discarding stale resume state in {state_dir}", flush=True)
            shutil.rmtree(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        fp_file.write_text(fp)
        found = last_complete_checkpoint(state_dir)
        choice = [str(found) if found else None]
    if proc.num_processes > 1:
        broadcast_object_list(choice, from_process=0)
        proc.wait_for_everyone()
    return Path(choice[0]) if choice[0] else None


def last_complete_checkpoint(state_dir: Path) -> Path | None:
    """The newest complete ``resume-step-N`` of a state directory."""
    ckpts = [p for p in state_dir.glob(f"{RESUME}*") if (p / COMPLETE).exists()]
    return max(ckpts, key=lambda p: int(p.name[len(RESUME) :]), default=None)


def last_finite_weights(state_dir: Path, parent: Path) -> tuple[str, dict]:
    """The newest saved weights of this stage that are all finite, else the parent's."""
    import torch

    saved = sorted(
        (p for p in (state_dir / WEIGHTS).glob("step-*") if p.name[5:].isdigit()),
        key=lambda p: int(p.name[5:]),
        reverse=True,
    )
    for source in [*saved, parent]:
        state = load_tensors(source)
        if all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point()):
            return (source.name if source != parent else "parent"), state
    raise RuntimeError(f"no finite weights found for this stage, not even in its parent {parent}")
