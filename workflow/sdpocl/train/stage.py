"""train-stage: one stage of one run, through TRL, with resume, checkpoints and a per-step log.

Layout written for a stage directory ``<stage>/`` (declared outputs):
  model/                 final weights (safetensors) + tokenizer
  checkpoints/step-N/    intermediate weights every ``save_every`` steps (for drift and eval)
  train_log.jsonl        one line per step: reward, loss, distilled-token fraction, length, \\boxed count
  summary.json           steps done, collapse status, reward in the first / last fifth, wall time
  resolved_config.json   every trainer setting actually used
Resume state (full trainer checkpoints) lives in ``state/`` outside the declared outputs, because
Snakemake deletes declared outputs before a rerun; a checkpoint counts only once it is complete.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from pathlib import Path

from sdpocl.config import stable_json
from sdpocl.io import read_jsonl, write_json, write_jsonl

COMPLETE = "COMPLETE"  # marker written last into a resume checkpoint


def fingerprint(settings: dict, parent: str) -> str:
    return hashlib.sha256((stable_json(settings) + "|" + str(parent)).encode()).hexdigest()[:16]


def trainer_kwargs(settings: dict, output_dir: str, use_cpu: bool) -> dict:
    """Map a stage's settings onto TRL config fields (shared by GRPO and SDPO)."""
    per_step = settings["prompts_per_step"] * settings["num_generations"]
    world = int(os.environ.get("WORLD_SIZE", "1"))  # accelerate launch: one process per GPU
    if per_step % world:
        raise ValueError(f"{per_step} completions per step cannot be split over {world} GPUs")
    return dict(
        output_dir=output_dir,
        max_steps=settings["steps"],
        per_device_train_batch_size=per_step // world,  # the global batch stays prompts x samples
        gradient_accumulation_steps=1,
        num_generations=settings["num_generations"],
        max_completion_length=settings["max_completion_length"],
        temperature=settings["temperature"],
        top_p=1.0,
        top_k=0,
        learning_rate=settings["lr"],
        weight_decay=settings["weight_decay"],
        max_grad_norm=settings["max_grad_norm"],
        warmup_steps=settings["warmup_steps"],
        lr_scheduler_type="constant_with_warmup",
        optim="adamw_torch",
        num_iterations=1,
        save_strategy="steps",
        save_steps=settings["save_every"],
        save_only_model=False,
        logging_steps=1,
        report_to=[],
        seed=settings["seed"],
        data_seed=settings["seed"],
        use_cpu=use_cpu,
        bf16=not use_cpu,
        gradient_checkpointing=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        reward_weights=[1.0, 0.0],  # the second function only logs the \boxed count
    )


def rollout_kwargs(use_cpu: bool) -> dict:
    """vLLM rollouts (TRL's colocated engine) on a GPU when the ``gpu`` extra is installed;
    transformers' generate otherwise. ``SDPOCL_ROLLOUTS=hf`` forces generate."""
    if use_cpu or os.environ.get("SDPOCL_ROLLOUTS", "auto") == "hf":
        return {}
    try:
        import vllm  # noqa: F401
    except ImportError:
        return {}
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": float(os.environ.get("SDPOCL_VLLM_MEMORY", "0.3")),
    }


def boxed_count(completions, **kwargs) -> list[float]:
    """Zero-weight 'reward' so TRL logs the mean \\boxed count per completion each step."""
    from sdpocl.rewards import boxed_count as count

    return [float(count(c)) for c in completions]


def _callbacks(tag: str, patience: int, stop_on_collapse: bool):
    """Progress printing with NaN / collapse stopping, and teacher-state saving for resume.

    The second callback's ``teacher`` is set once the trainer (and its EMA teacher) exists."""
    from safetensors.torch import save_model
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def __init__(self):
            self.t_last = time.time()
            self.zero_run = 0

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            now = time.time()
            row = log_row(logs)
            reward = row.get("reward", float("nan"))
            loss = row.get("loss", float("nan"))
            print(
                f"[{tag}] step {state.global_step}/{state.max_steps} reward {reward:.3f} loss {loss:.4f} "
                f"len {row.get('completion_length', float('nan')):.1f} ({now - self.t_last:.2f}s)",
                flush=True,
            )
            self.t_last = now
            if not math.isfinite(loss):
                print(f"[{tag}] non-finite loss at step {state.global_step}: stopping this stage", flush=True)
                control.should_training_stop = True
            self.zero_run = self.zero_run + 1 if reward == 0 else 0
            if self.zero_run >= patience and stop_on_collapse:
                control.should_training_stop = True

    class TeacherState(TrainerCallback):
        """Save the EMA teacher into each checkpoint, then mark the checkpoint complete."""

        teacher = None

        def on_save(self, args, state, control, **kwargs):
            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if self.teacher is not None:
                save_model(self.teacher, str(ckpt / "teacher.safetensors"))  # handles tied embeddings
            (ckpt / COMPLETE).write_text(str(state.global_step))
            if os.environ.get("SDPOCL_KILL_AFTER_CHECKPOINT") == str(state.global_step):
                os._exit(137)  # simulate a job killed right after a checkpoint (resume tests)

    return Progress(), TeacherState()


def last_complete_checkpoint(state_dir: Path) -> Path | None:
    ckpts = [p for p in state_dir.glob("checkpoint-*") if (p / COMPLETE).exists()]
    return max(ckpts, key=lambda p: int(p.name.split("-")[1]), default=None)


def summarize(log: list[dict], steps_planned: int, patience: int) -> dict:
    """Stage summary from the per-step log: collapse status and reward in the first / last fifth."""
    rewards = [r["reward"] for r in log if "reward" in r]
    losses = [r["loss"] for r in log if "loss" in r]
    out = {
        "steps_planned": steps_planned,
        "steps_done": len(log),
        "collapsed": False,
        "collapse_step": None,
        "collapse_reason": None,
    }
    nan_at = next((r["step"] for r in log if not math.isfinite(r.get("loss", 0.0))), None)
    if nan_at is not None:
        out.update(collapsed=True, collapse_step=nan_at, collapse_reason="non-finite loss")
    else:
        run = 0
        for r in log:
            run = run + 1 if r.get("reward", 1.0) == 0 else 0
            if run >= patience:
                out.update(collapsed=True, collapse_step=r["step"], collapse_reason=f"reward 0 for {patience} steps")
                break
    if rewards:
        k = max(1, len(rewards) // 5)
        out["reward_first_fifth"] = sum(rewards[:k]) / k
        out["reward_last_fifth"] = sum(rewards[-k:]) / k
    if losses:
        out["loss_last"] = losses[-1]
    return out


#: TRL log keys -> our per-step log columns (GRPO and SDPO name some metrics differently).
LOG_KEYS = {
    "reward": "reward",
    "self_distillation/reward_mean": "reward",
    "self_distillation/rewards/boxed_count": "boxed_per_completion",
    "loss": "loss",
    "completions/mean_length": "completion_length",
    "completions/clipped_ratio": "truncated_fraction",
    "rewards/boxed_count/mean": "boxed_per_completion",
    "distill_token_fraction": "distill_token_fraction",
    "self_distillation/reprompt_sample_fraction": "distill_sample_fraction",
    "self_distillation/success_group_fraction": "success_group_fraction",
    "self_distillation/distillation_loss": "distillation_loss",
    "learning_rate": "lr",
    "grad_norm": "grad_norm",
}


def log_row(entry: dict) -> dict:
    """One TRL log entry renamed to our per-step columns."""
    return {dst: entry[src] for src, dst in LOG_KEYS.items() if src in entry}


def step_log(log_history: list[dict]) -> list[dict]:
    """Per-step rows (named for the paper's diagnostics) from the trainer's log history."""
    return [{"step": e["step"], **log_row(e)} for e in log_history if "loss" in e and "step" in e]


def train_stage(
    settings: dict, parent: str | Path, data: str | Path, out_dir: str | Path, state_dir: str | Path, threads: int = 1
) -> dict:
    """Train one stage from ``parent`` (a model directory) on ``data``; write the stage outputs."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback

    from sdpocl.rewards import make_reward
    from sdpocl.train.methods import get_method
    from sdpocl.train.trainers import FAMILIES

    torch.set_num_threads(threads)
    out_dir, state_dir, parent = Path(out_dir), Path(state_dir), Path(parent)
    if not (parent / "config.json").exists():
        raise FileNotFoundError(f"parent model {parent} has no config.json: its stage did not finish")
    tag = f"{settings['run']['name']} {'/'.join(settings['chain'])}"
    t0 = time.time()

    # Resume state is valid only for exactly these settings and this parent.
    fp = fingerprint(settings, parent.resolve())
    fp_file = state_dir / "fingerprint"
    main_process = int(os.environ.get("RANK", "0")) == 0  # under accelerate launch only rank 0 writes
    if main_process and state_dir.exists() and (not fp_file.exists() or fp_file.read_text() != fp):
        print(f"[{tag}] discarding stale resume state in {state_dir}", flush=True)
        shutil.rmtree(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    if main_process:
        fp_file.write_text(fp)
    resume = last_complete_checkpoint(state_dir)

    records = read_jsonl(data)
    if not records:
        raise ValueError(f"training data {data} is empty")
    columns = {
        "prompt": [r["prompt"] for r in records],
        "answer": [r.get("answer", "") for r in records],
        "tests": [json.dumps(r.get("tests", [])) for r in records],
    }
    dataset = Dataset.from_dict(columns)

    use_cpu = not torch.cuda.is_available()
    config_cls, trainer_cls = FAMILIES[settings["family"]]
    method = get_method(settings["run"]["method"])
    kwargs = {**trainer_kwargs(settings, str(state_dir), use_cpu), **settings["method_settings"]}
    if settings["family"] == "sdpo":
        kwargs["max_prompt_length"] = settings["max_prompt_length"]
        kwargs["max_reprompt_len"] = settings["max_prompt_length"] * 2
    kwargs["model_init_kwargs"] = {"dtype": "float32" if use_cpu else "bfloat16"}
    kwargs.update(rollout_kwargs(use_cpu))
    args = config_cls(**kwargs)

    tokenizer = AutoTokenizer.from_pretrained(parent)
    reward = make_reward(settings["domain"], settings.get("rewards"))
    progress, teacher_state = _callbacks(tag, settings["collapse_patience"], settings["stop_on_collapse"])
    trainer = trainer_cls(
        model=str(parent),
        reward_funcs=[reward, boxed_count],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[progress, teacher_state],
    )
    trainer.remove_callback(PrinterCallback)  # Progress prints one readable line per step instead
    if settings["method_settings"].get("teacher_model_kind") == "ema":
        # An EMA / restart-and-freeze teacher is state of its own: it is checkpointed and restored.
        # (A frozen teacher is rebuilt from the parent, which is what it is.)
        teacher_state.teacher = trainer.teacher_model
    if resume is not None:
        print(f"[{tag}] resuming from {resume.name}", flush=True)
        if teacher_state.teacher is not None:
            from safetensors.torch import load_model

            load_model(teacher_state.teacher, str(resume / "teacher.safetensors"))
    print(
        f"[{tag}] {method.name} ({settings['family']}): {settings['steps']} steps x "
        f"{settings['prompts_per_step']} prompts x {settings['num_generations']} samples",
        flush=True,
    )
    diverged = None
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except RuntimeError as exc:
        # Diverged weights make sampling itself fail ("probability tensor contains inf/nan");
        # that is a collapse of this stage, not a crash of the grid.
        if all(torch.isfinite(p).all() for p in trainer.model.parameters()):
            raise
        diverged = f"non-finite weights at step {trainer.state.global_step + 1}: {str(exc).splitlines()[0]}"
        print(f"[{tag}] {diverged}: stopping this stage", flush=True)

    # --- declared outputs (rank 0 only in a multi-GPU job) ---
    trainer.accelerator.wait_for_everyone()
    if not trainer.accelerator.is_main_process:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    model = trainer.model
    finite = all(torch.isfinite(p).all() for p in model.parameters())
    model_from = "final"
    if not finite:
        # A diverged stage hands on its last finite weights (else its parent's), so that the
        # rest of the chain can still run; the stage is recorded as collapsed either way.
        model_from = _restore_last_finite(model, state_dir, parent)
        print(f"[{tag}] non-finite weights: handing on weights from {model_from}", flush=True)
    model.save_pretrained(out_dir / "model", safe_serialization=True)
    tokenizer.save_pretrained(out_dir / "model")
    ckpt_root = out_dir / "checkpoints"
    for ckpt in sorted(state_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])):
        if not (ckpt / COMPLETE).exists():
            continue
        dst = ckpt_root / f"step-{ckpt.name.split('-')[1]}"
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("model.safetensors", "config.json", "generation_config.json"):
            if (ckpt / name).exists():
                shutil.copy2(ckpt / name, dst / name)
        tokenizer.save_pretrained(dst)
    ckpt_root.mkdir(exist_ok=True)

    log = step_log(trainer.state.log_history)
    write_jsonl(out_dir / "train_log.jsonl", log)
    summary = summarize(log, settings["steps"], settings["collapse_patience"])
    if diverged and not summary["collapsed"]:
        summary.update(collapsed=True, collapse_step=trainer.state.global_step + 1, collapse_reason=diverged)
    summary.update(
        finite_weights=bool(finite),
        model_from=model_from,
        seconds=round(time.time() - t0, 2),
        resumed_from=resume.name if resume else None,
        seconds_per_step=round(trainer.state.log_history[-1].get("train_runtime", 0.0) / max(1, len(log)), 4),
    )
    write_json(out_dir / "summary.json", summary)
    resolved = {
        "method": method.name,
        "family": settings["family"],
        "trainer": f"{trainer_cls.__module__}.{trainer_cls.__name__}",
        "stage_settings": settings,
        "parent_model": str(parent),
        "train_data": str(data),
        "trainer_config": json.loads(args.to_json_string()),
        "versions": _versions(),
    }
    write_json(out_dir / "resolved_config.json", resolved, sort_keys=True, default=str)
    if summary["collapsed"]:
        print(
            f"[{tag}] stage recorded as COLLAPSED at step {summary['collapse_step']}: {summary['collapse_reason']}",
            flush=True,
        )
    first, last = summary.get("reward_first_fifth", float("nan")), summary.get("reward_last_fifth", float("nan"))
    print(
        f"[{tag}] done in {summary['seconds']}s; reward first/last fifth {first:.3f} -> {last:.3f}",
        flush=True,
    )
    shutil.rmtree(state_dir, ignore_errors=True)  # resume state is no longer needed
    return summary


def _restore_last_finite(model, state_dir: Path, parent: Path) -> str:
    """Load the newest complete checkpoint whose weights are all finite (else the parent) into ``model``."""
    import torch
    from safetensors.torch import load_model

    ckpts = sorted(
        (p for p in state_dir.glob("checkpoint-*") if (p / COMPLETE).exists()),
        key=lambda p: int(p.name.split("-")[1]),
        reverse=True,
    )
    for source in [*ckpts, parent]:
        load_model(model, str(source / "model.safetensors"), strict=False)
        if all(torch.isfinite(p).all() for p in model.parameters()):
            return source.name if source != parent else "parent"
    raise RuntimeError(f"no finite weights found for this stage, not even in its parent {parent}")


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("sdpocl", "torch", "transformers", "trl"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out
