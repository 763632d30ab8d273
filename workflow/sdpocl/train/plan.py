"""How one rollout step of a stage maps onto TRL's optimizer steps and micro-batches.

Every step index the workflow writes (train log rows, summary, collapse step, checkpoint and
resume names, drift points) is a *rollout* step: one batch of ``prompts_per_step`` prompts x
``num_generations`` samples. Upstream (docs/paper.md, "Continual setting") GRPO splits that batch into
``grpo_minibatches`` mini-batches, one optimizer step each, so its clipped ratio acts; SDPO takes
one optimizer step. Each optimizer step accumulates gradients over micro-batches of
``micro_batch_size`` completions per device (upstream 1). TRL counts optimizer steps
(``global_step``) and micro-steps (``steps_per_generation``); this module converts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sdpocl.config.stage import StageSettings
from sdpocl.generation import model_kwargs


@dataclass(frozen=True)
class BatchPlan:
    completions: int  # per rollout step (prompts x samples)
    optimizer_steps: int  # per rollout step
    world: int  # processes (GPUs)
    micro_batch: int  # completions per forward/backward per process
    grad_accum: int  # micro-steps per optimizer step

    @property
    def steps_per_generation(self) -> int:
        """TRL's micro-steps per rollout (generation) batch."""
        return self.optimizer_steps * self.grad_accum

    def rollout_step(self, global_step: int) -> int:
        """Rollout step reached after ``global_step`` optimizer steps."""
        return global_step // self.optimizer_steps

    def optimizer_step(self, rollout_step: int) -> int:
        return rollout_step * self.optimizer_steps


def batch_plan(settings: StageSettings, world: int | None = None) -> BatchPlan:
    """The plan of a stage's settings; ``world`` defaults to accelerate's ``WORLD_SIZE``."""
    world = int(os.environ.get("WORLD_SIZE", "1")) if world is None else world
    n = settings.prompts_per_step * settings.num_generations
    k = settings.optimizer_steps_per_rollout
    if n % k:
        raise ValueError(f"{n} completions per rollout step cannot be split into {k} optimizer steps")
    mini = n // k
    if mini % world:
        raise ValueError(f"{mini} completions per optimizer step cannot be split over {world} processes")
    per_device = mini // world
    micro = settings.micro_batch_size or per_device
    if per_device % micro:
        raise ValueError(f"{per_device} completions per device and optimizer step: not a multiple of {micro}")
    return BatchPlan(completions=n, optimizer_steps=k, world=world, micro_batch=micro, grad_accum=per_device // micro)


def mixed_precision(settings: StageSettings, cuda: bool) -> bool:
    """bf16 autocast over fp32 master weights (``auto``: on a GPU only)."""
    mode = settings.mixed_precision
    return cuda if mode == "auto" else mode == "bf16"


def trainer_kwargs(settings: StageSettings, output_dir: str, use_cpu: bool, world: int | None = None) -> dict:
    """Map a stage's settings onto TRL config fields (shared by GRPO and SDPO)."""
    plan = batch_plan(settings, world)
    k = plan.optimizer_steps
    return dict(
        output_dir=output_dir,
        max_steps=settings.steps * k,
        per_device_train_batch_size=plan.micro_batch,
        gradient_accumulation_steps=plan.grad_accum,
        steps_per_generation=plan.steps_per_generation,
        optimizer_steps_per_rollout=k,
        rollout_warmup_steps=settings.warmup_steps,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_completion_length,
        temperature=settings.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=settings.lr,
        weight_decay=settings.weight_decay,
        max_grad_norm=settings.max_grad_norm,
        lr_scheduler_type="constant_with_warmup",  # replaced by the rollout-step schedule (sdpocl.train.schedule)
        warmup_steps=settings.warmup_steps * k,
        optim="adamw_torch",
        num_iterations=1,
        save_strategy="steps",
        save_steps=settings.save_every * k,
        save_only_model=False,
        save_total_limit=1,  # only the latest resume state is kept
        logging_steps=k,  # one log row per rollout step
        report_to=[],
        seed=settings.seed,
        data_seed=settings.seed,
        use_cpu=use_cpu,
        bf16=mixed_precision(settings, cuda=not use_cpu),
        gradient_checkpointing=settings.gradient_checkpointing,
        disable_tqdm=True,
        dataloader_num_workers=0,
        # fp32 master weights (bf16 only as autocast); on a CPU the workflow's attention (sdpocl.generation), which
        # TRL's teacher and reference copies take from the student
        model_init_kwargs={"dtype": "float32", **model_kwargs(use_cpu)},
        # reduce(-scatter) gradients every micro-batch: under no_sync FSDP2 would hold unsharded bf16
        # gradients of the whole model across the accumulation (and DDP a full replica's)
        accelerator_config={"gradient_accumulation_kwargs": {"sync_each_batch": True}},
    )
