"""What each GPU-capable rule family's job asks the scheduler for: GPUs, CPUs and host memory.

The one home of these numbers: workflow/rules/common.smk gives the rules :func:`job_resources` (their
``resources:``, which profiles/slurm submits) and :mod:`sdpocl.preflight` reports the same requests.
A job on N GPUs of one node asks for ``gpu`` = N (profiles/slurm: sbatch and the job's srun
``--gpus=N``, with the profile's ``nodes: 1``), ``cpus_per_task`` = max(threads, :data:`CPUS_PER_GPU`)
per GPU and ``mem_mb`` = :data:`MEM_MB_PER_GPU` per GPU; with no GPU (the tiny preset) it is a CPU job
with the rule's own memory (:data:`CPU_MEM_MB`). Resources are no rerun trigger (params are): changing
a GPU count reruns nothing.
"""

from __future__ import annotations

#: `gpus_per_job: null` = the preset's: a paper-preset train job needs 4 GPUs of 80 GB
#: (docs/paper-preset.md, "Memory per GPU"; 8 is comfortable), an evaluation job one; the tiny
#: preset's jobs are CPU jobs
PRESET_GPUS = {"paper": {"train": 4, "evaluate": 1}, "tiny": {"train": 0, "evaluate": 0}}
#: CPUs per GPU, at least: each of a train job's ranks runs `train.threads` threads (8 in config/paper.yaml)
CPUS_PER_GPU = 8
#: host memory per GPU, MB. A 4-rank Qwen3-4B train job needs well over 64 GB: every rank materialises the
#: full fp32 model on the CPU at load (16 GB each, 64 GB together), and rank 0 gathers the full student,
#: teacher and optimizer state (16 + 16 + 32 GB) at every save. ~48 GB per GPU: 192 GB for 4 GPUs, 384 for 8.
MEM_MB_PER_GPU = 48000

#: how each GPU-capable rule's GPU count follows from the config (:func:`gpus_by_kind`): "train" =
#: train.gpus_per_job (train_stage runs one FSDP rank per GPU it sees, sdpocl.commands.train._relaunch_on_gpus),
#: "evaluate" = evaluate.gpus_per_job, "single" = one GPU when train jobs have GPUs (one process on one device)
RULE_GPUS = {
    "train_stage": "train",
    "teacher_check": "single",
    "evaluate_checkpoint": "evaluate",
    "evaluate_base": "evaluate",
    "compute_drift": "single",
}
#: the host memory (MB) of each of those rules as a CPU job (no GPU: the tiny preset); None = the default
CPU_MEM_MB = {
    "train_stage": 2000,
    "teacher_check": 2000,
    "evaluate_checkpoint": 3000,
    "evaluate_base": 3000,
    "compute_drift": None,
}


def gpus_per_job(config: dict, section: str) -> int:
    """``config[section]["gpus_per_job"]`` ("train" or "evaluate"), or the preset's when null."""
    gpus = config[section]["gpus_per_job"]
    return PRESET_GPUS[config["preset"]][section] if gpus is None else gpus


def kind_gpus(train: int, evaluate: int) -> dict[str, int]:
    """GPUs of one job of each kind of :data:`RULE_GPUS`, from a train and an evaluation job's GPUs."""
    return {"train": train, "evaluate": evaluate, "single": min(train, 1)}


def gpus_by_kind(config: dict) -> dict[str, int]:
    """GPUs of one job of each kind of :data:`RULE_GPUS` for ``config`` (validated: it has the keys)."""
    return kind_gpus(gpus_per_job(config, "train"), gpus_per_job(config, "evaluate"))


def cpu_job(rule: str) -> dict:
    """``rule``'s resources as a CPU job: its own ``mem_mb``, if it has one."""
    mem_mb = CPU_MEM_MB[rule]
    return {} if mem_mb is None else {"mem_mb": mem_mb}


def gpu_resources(gpus: int, **cpu_job) -> dict:
    """Resources for a job on ``gpus`` GPUs of one node: ``gpu``, ``cpus_per_task`` = max(threads, 8) per
    GPU (a function of the job's threads, as Snakemake calls it), ``mem_mb`` = 48 GB per GPU. With no GPU,
    ``cpu_job``: the CPU job's resources as they always were (the tiny preset)."""
    if not gpus:
        return cpu_job
    return {
        "gpu": gpus,
        "cpus_per_task": lambda wildcards, threads: max(threads, CPUS_PER_GPU) * gpus,
        "mem_mb": MEM_MB_PER_GPU * gpus,
    }


def job_resources(config: dict, rule: str) -> dict:
    """The ``resources:`` of ``rule`` (a key of :data:`RULE_GPUS`) for ``config``: ``gpu``, ``cpus_per_task``
    (a callable of (wildcards, threads)) and ``mem_mb`` for a GPU job, else the rule's CPU job."""
    return gpu_resources(gpus_by_kind(config)[RULE_GPUS[rule]], **cpu_job(rule))
