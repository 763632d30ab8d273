"""train-stage: one stage of one run, through TRL, with resume, checkpoints and a per-step log.

Layout written for a stage directory ``<stage>/`` (declared outputs):
  model/                 final weights (safetensors, sharded when large) + tokenizer
  checkpoints/step-N/    weights every ``save_every`` rollout steps (for drift and eval), full models
  train_log.jsonl        one line per rollout step: reward, loss, distilled-token fraction, length, \\boxed count
  summary.json           steps done, collapse status, reward in the first / last fifth, wall time
  resolved_config.json   every trainer setting actually used, and the update structure
Every step index written is a rollout step (:mod:`sdpocl.train.plan`). Resume state lives in the
state directory (:mod:`sdpocl.train.resume`); the per-step log and summary are
:mod:`sdpocl.train.steplog`'s; live curves (not declared outputs) :mod:`sdpocl.train.curves`'.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from sdpocl.config.methods import MITIGATION_DEFAULTS
from sdpocl.config.stage import StageSettings
from sdpocl.io import read_jsonl, write_json, write_jsonl
from sdpocl.prompts import training_prompt
from sdpocl.train.frozen import check_shards, distributed, load_from_rank0, weights_finite
from sdpocl.train.plan import BatchPlan, batch_plan, trainer_kwargs
from sdpocl.train.resume import (
    RESUME,
    WEIGHTS,
    fingerprint,
    last_finite_weights,
    link_tree,
    resume_point,
    resume_state_callback,
)
from sdpocl.train.rollouts import (
    GIB,
    adapt_engine,
    rollout_engine,
    rollout_kwargs,
    seeded_vllm,
    stage_rollout_memory,
)
from sdpocl.train.steplog import progress_callback, step_log, summarize
from sdpocl.train.weights import has_weights

__all__ = [
    "build_trainer",
    "train_stage",
    "trainer_kwargs",
]

MITIGATION_KEYS = tuple(MITIGATION_DEFAULTS)


def boxed_count(completions, **kwargs) -> list[float]:
    """Zero-weight 'reward' so TRL logs the mean \\boxed count per completion each step."""
    from sdpocl.rewards import boxed_count as count

    return [float(count(c)) for c in completions]


def load_prompts(data: str | Path, settings: StageSettings, tokenizer) -> tuple[list[dict], int]:
    """Training records with the prompt in the stage's format, those longer than
    ``max_prompt_length`` tokens (as the trainer tokenizes them) left out; returns (records, dropped)."""
    records = read_jsonl(data)
    if not records:
        raise ValueError(f"training data {data} is empty")
    fmt = settings.prompt_format
    chat, kwargs = fmt.get("chat_template", False), fmt.get("template_kwargs", {})
    prompts = [training_prompt(r, chat_template=chat) for r in records]
    lengths = prompt_lengths(tokenizer, prompts, chat, kwargs)
    keep = [i for i, n in enumerate(lengths) if n <= settings.max_prompt_length]
    if not keep:
        raise ValueError(f"every prompt of {data} is longer than max_prompt_length={settings.max_prompt_length}")
    return [{**records[i], "prompt": prompts[i]} for i in keep], len(records) - len(keep)


def prompt_lengths(tokenizer, prompts: list, chat_template: bool, template_kwargs: dict) -> list[int]:
    """Token counts of prompts as the trainers tokenize them (chat template with generation prompt)."""
    if chat_template:
        ids = tokenizer.apply_chat_template(
            prompts, add_generation_prompt=True, tokenize=True, return_dict=True, **template_kwargs
        )["input_ids"]
    else:
        ids = tokenizer(prompts)["input_ids"]
    return [len(x) for x in ids]


def demonstration_budget(settings: StageSettings, tokenizer) -> int | None:
    """Tokens a re-prompt's demonstration may take so that the re-prompt fits ``max_reprompt_length``:
    the limit minus the longest allowed prompt and the re-prompt template's own tokens (None: no limit)."""
    limit = settings.max_reprompt_length
    if limit is None:
        return None
    ms = settings.method_settings
    frame = ms["reprompt_template"].format(
        prompt="", solution=ms["solution_template"].format(successful_previous_attempt=""), feedback=""
    )
    overhead = len(tokenizer(frame, add_special_tokens=False)["input_ids"]) + 4  # + token-boundary slack
    budget = limit - settings.max_prompt_length - overhead
    if budget < 1:
        raise ValueError(f"max_reprompt_length {limit} leaves no room for a demonstration")
    return budget


def build_trainer(
    settings: StageSettings, parent, dataset, tokenizer, reward_funcs: list, output_dir, callbacks=(), reference=None
):
    """The TRL trainer of a stage: its family's config from the stage settings (:mod:`sdpocl.train.plan`
    and the method's settings) and its trainer class; ``output_dir`` receives TRL's checkpoints.
    ``reference`` is the base model's directory, for a KL anchor to the base (``kl_reference="base"``)."""
    import torch

    from sdpocl.generation import speed_up
    from sdpocl.train.trainers import FAMILIES

    use_cpu = not torch.cuda.is_available()
    config_cls, trainer_cls = FAMILIES[settings.family]
    kwargs = {**trainer_kwargs(settings, str(output_dir), use_cpu), **settings.method_settings}
    if kwargs.get("kl_reference") == "base" and kwargs.get("beta", 0) > 0:
        if reference is None:
            raise ValueError(
                "this run anchors to the base model (kl_reference: base): pass its directory (--reference)"
            )
        kwargs["kl_reference_model"] = str(reference)
    kwargs["reward_weights"] = [1.0] + [0.0] * (len(reward_funcs) - 1)  # the first scores; the rest only log
    kwargs["chat_template_kwargs"] = settings.prompt_format.get("template_kwargs") or None
    if settings.family == "sdpo":
        kwargs["max_prompt_length"] = settings.max_prompt_length  # never cuts: longer prompts were left out
        kwargs["demonstration_max_tokens"] = demonstration_budget(settings, tokenizer)
        kwargs["max_reprompt_len"] = settings.max_reprompt_length or (
            settings.max_prompt_length + settings.max_completion_length + 64
        )
    memory = None
    if not use_cpu and rollout_engine(use_cpu) == "vllm":
        # the engine's share of the GPU, sized to what the trainer keeps while it samples (sdpocl.train.rollouts)
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / GIB
        memory = stage_rollout_memory(settings, parent, batch_plan(settings).world, total)
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"[rollouts] {memory.line()}", flush=True)
    kwargs.update(rollout_kwargs(use_cpu, settings, memory))
    with seeded_vllm(settings.seed, use_cpu):
        trainer = trainer_cls(
            model=str(parent),
            reward_funcs=reward_funcs,
            args=config_cls(**kwargs),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=list(callbacks),
        )
    adapt_engine(trainer, use_cpu)
    if trainer.shortcuts and trainer.share_prefixes:  # rollouts by transformers' generate prefill each prompt once
        speed_up(trainer.accelerator.unwrap_model(trainer.model))
    return trainer


def stage_dataset(settings: StageSettings, data, tokenizer, replay_data=()) -> tuple[dict, int, dict | None]:
    """The stage's training columns (``prompt``, ``answer``, ``tests``, ``domain``), the number of
    prompts left out as too long, and the replay summary (None without replay): with
    ``settings.replay``, ``replay_data`` are the earlier domains' training files, in its order."""
    from sdpocl.train.replay import mix_replay

    records, dropped = load_prompts(data, settings, tokenizer)
    records = [{**r, "domain": r.get("domain") or settings.domain} for r in records]
    replay = settings.replay
    summary = None
    if replay:
        if len(replay_data) != len(replay["domains"]):
            raise ValueError(
                f"replay of {', '.join(replay['domains'])} needs their training files (--replay-data), "
                f"got {len(replay_data)}"
            )
        pools = {}
        for domain, path in zip(replay["domains"], replay_data):
            pool, _ = load_prompts(path, settings, tokenizer)
            pools[domain] = [{**r, "domain": r.get("domain") or domain} for r in pool]
        records, summary = mix_replay(records, pools, replay["frac"], settings.seed, settings.chain)
    columns = {
        "prompt": [r["prompt"] for r in records],
        "answer": [r.get("answer", "") for r in records],
        "tests": [json.dumps(r.get("tests", [])) for r in records],
        "domain": [r["domain"] for r in records],
    }
    return columns, dropped, summary


def stage_reward(settings: StageSettings):
    """The scoring reward of a stage: its domain's, or (with replay) one routed by the ``domain`` column."""
    from sdpocl.rewards import domain_rewards, make_routed_reward

    funcs = domain_rewards(settings.rewards)
    return make_routed_reward(funcs) if settings.replay else funcs[settings.domain]


def objective(settings: StageSettings, args, plan: BatchPlan, replay: dict | None) -> dict:
    """What a stage's loss is, with the mitigations that are on (for ``resolved_config.json``)."""
    ms = settings.method_settings
    beta = float(getattr(args, "beta", 0.0) or 0.0)
    out: dict = {"mitigations": {k: v for k, v in settings.run.items() if k in MITIGATION_KEYS}}
    if settings.family == "sdpo":
        w = float(args.distillation_weight)
        out["loss"] = "(1 - w) * policy_loss + w * distillation_loss" + (" + beta * kl" if beta else "")
        out["distillation_weight"] = w
        if w < 1:
            out["policy_term"] = (
                f"TRL SDPOTrainer's policy loss with our GRPO settings: loss_type {args.loss_type}, "
                f"scale_rewards {args.scale_rewards}, epsilon {args.epsilon}/{args.epsilon_high}. The SDPO family "
                f"takes {plan.optimizer_steps} optimizer step per rollout step, so the policy ratio is 1 and "
                "the clip is inactive: the term is the plain policy gradient with the group-mean-centred advantage"
            )
        else:
            out["policy_term"] = "absent (w = 1: pure self-distillation)"
        if ms.get("confidence_threshold"):
            out["confidence_filter"] = (
                f"distil only response tokens whose teacher top-1 probability (temperature {args.temperature}) "
                f"exceeds {args.confidence_threshold}; kept share logged as confidence_kept_fraction"
            )
    else:
        out["loss"] = "GRPO clipped policy loss" + (" + beta * kl" if beta else "")
    if beta:
        ref = args.kl_reference
        out["kl"] = {
            "beta": beta,
            "reference": ref,
            "reference_model": args.kl_reference_model if ref == "base" else "the stage's parent (its model path)",
            "estimator": "k3 per completion token, exp(ref - logp) - (ref - logp) - 1; token-mean per sequence, "
            "mean over the batch; logged as kl",
            "implementation": (
                "TRL GRPOTrainer beta" + (" (reference weights replaced by the base model's)" if ref == "base" else "")
                if settings.family == "grpo"
                else "sdpocl MaskedSDPOTrainer (TRL's SDPOConfig.beta adds no KL term)"
            ),
        }
    if replay:
        out["replay"] = {**replay, "domains": settings.replay["domains"], "reward": "routed by the domain column"}
    return out


def train_stage(
    settings: StageSettings,
    parent: str | Path,
    data: str | Path,
    out_dir: str | Path,
    state_dir: str | Path,
    threads: int = 1,
    reference: str | Path | None = None,
    replay_data: list[str | Path] = (),
    curves_dir: str | Path | None = None,
) -> dict:
    """Train one stage from ``parent`` (a model directory) on ``data``; write the stage outputs.

    ``reference``: the base model's directory (KL anchor to the base); ``replay_data``: the earlier
    domains' training files (replay). Both are paths, so they are arguments, never stage settings.
    ``curves_dir``: the stage's TensorBoard run (:mod:`sdpocl.train.curves`; None: no live curves)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback

    from sdpocl.config.methods import get_method
    from sdpocl.gpu import use_gpu_kernels

    torch.set_num_threads(threads)
    use_gpu_kernels()
    out_dir, state_dir, parent = Path(out_dir), Path(state_dir), Path(parent)
    if not (parent / "config.json").exists() or not has_weights(parent):
        raise FileNotFoundError(f"parent model {parent} has no config.json or weights: its stage did not finish")
    tag = f"{settings.run['name']} {'/'.join(settings.chain)}"
    t0 = time.time()

    # Resume state is valid only for exactly these settings, this parent (and reference, replay files).
    inputs = str(parent.resolve())
    if reference is not None or replay_data:
        inputs += "|" + "|".join(str(Path(p).resolve()) for p in [reference or "", *replay_data])
    resume = resume_point(state_dir, fingerprint(settings, inputs), tag)

    tokenizer = AutoTokenizer.from_pretrained(parent)
    columns, dropped, replay = stage_dataset(settings, data, tokenizer, replay_data)
    n_own = len(columns["prompt"]) - (replay["replayed_prompts"] if replay else 0)
    if n_own < settings.prompts_per_step:
        raise ValueError(
            f"training data {data} has {n_own} usable prompts, fewer than the "
            f"{settings.prompts_per_step} prompts of one rollout step (train.prompts_per_step)"
        )
    if dropped:
        print(
            f"[{tag}] {dropped} of {dropped + n_own} prompts longer than {settings.max_prompt_length} tokens left out",
            flush=True,
        )
    if replay:
        print(
            f"[{tag}] replay: {replay['replayed_prompts']} prompts of {', '.join(settings.replay['domains'])} "
            f"added to {replay['current_prompts']} ({replay['replayed_share']:.3f} of the pool)",
            flush=True,
        )
    dataset = Dataset.from_dict(columns)

    plan = batch_plan(settings)
    reward = stage_reward(settings)
    progress = progress_callback(tag, plan, settings.collapse_patience, settings.stop_on_collapse)
    resume_state = resume_state_callback(plan, state_dir, tokenizer)
    callbacks = [progress, resume_state]
    if curves_dir is not None:
        from sdpocl.train import curves

        resume_step = int(resume.name[len(RESUME) :]) if resume is not None else None
        callbacks.append(curves.curves_callback(Path(curves_dir), plan.rollout_step, resume_step))
        print(f"[{tag}] live curves: tensorboard --logdir {curves_dir}", flush=True)
    trainer = build_trainer(
        settings,
        parent,
        dataset,
        tokenizer,
        [reward, boxed_count],
        state_dir,
        callbacks=callbacks,
        reference=reference,
    )
    args, trainer_cls = trainer.args, type(trainer)
    method = get_method(settings.run["method"])
    trainer.remove_callback(PrinterCallback)  # Progress prints one readable line per step instead
    if settings.method_settings.get("teacher_model_kind") == "ema":
        # An EMA / restart-and-freeze teacher is state of its own: it is checkpointed and restored.
        # (A frozen teacher is rebuilt from the parent, which is what it is.)
        resume_state.teacher = trainer.teacher_model
    if resume is not None:
        print(f"[{tag}] resuming from {resume.name}", flush=True)
        if resume_state.teacher is not None:
            # as a fresh stage loads it: rank 0 reads, every rank receives its shard and checks it
            saved = resume / "teacher.safetensors"
            load_from_rank0(resume_state.teacher, saved)
            if distributed():
                check_shards(resume_state.teacher, saved, "SDPO teacher (resumed)")
    print(
        f"[{tag}] {method.name} ({settings.family}): {settings.steps} rollout steps x "
        f"{settings.prompts_per_step} prompts x {settings.num_generations} samples; {plan.optimizer_steps} "
        f"optimizer step(s) per rollout step, micro-batch {plan.micro_batch} x {plan.grad_accum} accumulated "
        f"x {plan.world} process(es)",
        flush=True,
    )
    diverged = None
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except RuntimeError as exc:
        # Diverged weights make sampling itself fail ("probability tensor contains inf/nan");
        # that is a collapse of this stage, not a crash of the grid. Decided across ranks (each holds a shard),
        # so that no rank re-raises while the others wait for it at the next collective.
        if weights_finite(trainer.model):
            raise
        step = plan.rollout_step(trainer.state.global_step) + 1
        diverged = f"non-finite weights at step {step}: {str(exc).splitlines()[0]}"
        print(f"[{tag}] {diverged}: stopping this stage", flush=True)

    # --- declared outputs; under several processes every rank takes part in gathering weights ---
    trainer.accelerator.wait_for_everyone()
    finite = weights_finite(trainer.model)
    model_from = "final"
    if not finite:
        # A diverged stage hands on its last finite weights (else its parent's), so that the
        # rest of the chain can still run; the stage is recorded as collapsed either way.
        model_from, weights = last_finite_weights(state_dir, parent)
        load_from_rank0(trainer.model, weights)
        print(f"[{tag}] non-finite weights: handing on weights from {model_from}", flush=True)
    trainer.save_model(str(out_dir / "model"))  # full weights also from a sharded (FSDP) model
    if not trainer.accelerator.is_main_process:
        return {}
    tokenizer.save_pretrained(out_dir / "model")
    ckpt_root = out_dir / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    for weights in sorted((state_dir / WEIGHTS).glob("step-*"), key=lambda p: int(p.name[5:])):
        if not weights.name[5:].isdigit():
            continue  # an unfinished copy
        shutil.rmtree(ckpt_root / weights.name, ignore_errors=True)
        link_tree(weights, ckpt_root / weights.name)  # hard links: each checkpoint's bytes were written once

    log = step_log(trainer.state.log_history, plan)
    write_jsonl(out_dir / "train_log.jsonl", log)
    summary = summarize(log, settings.steps, settings.collapse_patience)
    if diverged and not summary["collapsed"]:
        step = plan.rollout_step(trainer.state.global_step) + 1
        summary.update(collapsed=True, collapse_step=step, collapse_reason=diverged)
    summary.update(
        finite_weights=bool(finite),
        model_from=model_from,
        seconds=round(time.time() - t0, 2),
        resumed_from=resume.name[len("resume-") :] if resume else None,
        prompts_dropped=dropped,
        seconds_per_step=round(trainer.state.log_history[-1].get("train_runtime", 0.0) / max(1, len(log)), 4),
    )
    write_json(out_dir / "summary.json", summary)
    resolved = {
        "method": method.name,
        "family": settings.family,
        "trainer": f"{trainer_cls.__module__}.{trainer_cls.__name__}",
        "stage_settings": settings.to_dict(),
        "parent_model": str(parent),
        "train_data": str(data),
        "update_structure": {
            "rollout_steps": settings.steps,
            "completions_per_rollout_step": plan.completions,
            "optimizer_steps_per_rollout_step": plan.optimizer_steps,
            "micro_batch_per_process": plan.micro_batch,
            "gradient_accumulation": plan.grad_accum,
            "processes": plan.world,
            "lr_schedule": f"linear warm-up over {settings.warmup_steps} rollout steps, then constant",
            "precision": "bf16 autocast, fp32 master weights" if args.bf16 else "fp32",
        },
        "objective": objective(settings, args, plan, replay),
        "rollout_importance_sampling": _rollout_is(settings.family, args),
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
    print(f"[{tag}] done in {summary['seconds']}s; reward first/last fifth {first:.3f} -> {last:.3f}", flush=True)
    shutil.rmtree(state_dir, ignore_errors=True)  # resume state is no longer needed
    return summary


def _rollout_is(family: str, args) -> str:
    """What corrects vLLM rollouts for the trainer's log-probs (only relevant with vLLM)."""
    if not getattr(args, "use_vllm", False):
        return "not needed: rollouts come from the trained model itself (transformers generate)"
    if family == "grpo":
        return (
            f"TRL vLLM importance sampling, {args.vllm_importance_sampling_mode}, "
            f"cap {args.vllm_importance_sampling_clip_max}"
        )
    if getattr(args, "rollout_is_cap", None) is None:
        return "ABSENT: rollout_is_cap is None, so SDPO's losses take vLLM's tokens as the trainer's own"
    return (
        f"token-level, min(exp(logp_trainer - logp_vllm), {args.rollout_is_cap}), detached, on the distillation "
        "loss and the policy term (sdpocl MaskedSDPOTrainer, as upstream's rollout_is: token)"
    )


def _versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("sdpocl", "torch", "transformers", "trl"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out
