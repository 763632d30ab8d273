"""The six checks: each compares what the machine has (:mod:`.probes`) with what the grid needs (the
estimates of :mod:`.memory` and :mod:`.disk`, the requests of :mod:`.slurm`) and returns a
:class:`~sdpocl.preflight.report.Check` with its fix."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sdpocl.preflight.disk import grid_disk_estimate
from sdpocl.preflight.memory import (
    GIB,
    HEADROOM,
    VLLM_ASLEEP_GIB,
    estimate_for,
    fits,
    grid_shape,
    min_gpus,
    vllm_fraction,
)
from sdpocl.preflight.probes import ModelInfo, inspect_model, model_shape, resolve_base, visible_gpus, vllm_version
from sdpocl.preflight.report import Check
from sdpocl.preflight.slurm import DEFAULT_PROFILE, read_profile, requested_gpus, rule_resources, slurm_requests

#: the GPU memory docs/paper-preset.md's memory table assumes (an 80 GB H100 / A100) when none is visible or
#: given
REFERENCE_GPU_GIB = 80.0


def check_gpus(config: dict, gpus: list[tuple[str, int]] | None = None) -> Check:
    gpus = visible_gpus() if gpus is None else gpus
    req, notes = requested_gpus(config)
    want = f"a train job asks for {req['train']} GPU(s), an evaluation job for {req['evaluate']}"
    details = tuple(notes) + tuple(f"cuda:{i} {name}, {mem / GIB:.1f} GiB" for i, (name, mem) in enumerate(gpus))
    if cvd := os.environ.get("CUDA_VISIBLE_DEVICES"):
        details += (f"CUDA_VISIBLE_DEVICES={cvd}",)
    if not gpus:
        if req["train"] == 0 and req["evaluate"] == 0:
            return Check("gpus", "ok", f"no GPU visible; this preset's jobs are CPU jobs ({want})", details=details)
        return Check(
            "gpus",
            "warn",
            f"no GPU visible (CPU node?); {want}",
            fix=f"run preflight on a GPU node like the train jobs': srun --nodes=1 --gpus={req['train']} "
            "sdpocl preflight --config <config> (on the login node the GPU lines are only estimates)",
            details=details,
        )
    need = max(req["train"], req["evaluate"])
    if len(gpus) < need:
        return Check(
            "gpus",
            "warn",
            f"{len(gpus)} GPU(s) visible; {want}",
            fix=f"under Slurm every job gets its own GPUs: check on a node allocated like a train job "
            f"(srun --nodes=1 --gpus={req['train']} sdpocl preflight --config <config>); run here without Slurm, "
            f"a train job would run {len(gpus)} rank(s)",
            details=details,
        )
    return Check("gpus", "ok", f"{len(gpus)} GPU(s) visible; {want}", details=details)


def check_vllm(config: dict, gpus: list[tuple[str, int]]) -> Check:
    version = vllm_version()
    backend = (config.get("evaluate") or {}).get("backend", "auto")
    rollouts_hf = os.environ.get("SDPOCL_ROLLOUTS", "auto") == "hf"
    if version is not None:
        extra = []
        if rollouts_hf:
            extra.append("SDPOCL_ROLLOUTS=hf: training rollouts use transformers' generate anyway")
        if backend == "hf":
            extra.append("evaluate.backend: hf: evaluation uses transformers' generate anyway")
        return Check("vllm", "ok", f"vLLM {version} importable", details=tuple(extra))
    fix = "pip install -e '.[gpu]' on the GPU nodes, or choose the (much slower) transformers generate: "
    fix += "SDPOCL_ROLLOUTS=hf for training and evaluate.backend: hf for evaluation"
    if backend == "vllm":
        return Check("vllm", "fail", "vLLM is not installed but evaluate.backend is 'vllm'", fix=fix)
    if os.environ.get("SDPOCL_ROLLOUTS") == "vllm":
        return Check("vllm", "fail", "vLLM is not installed but SDPOCL_ROLLOUTS is 'vllm'", fix=fix)
    if not gpus:
        status = "skip" if config.get("preset") == "paper" else "ok"
        return Check("vllm", status, "vLLM not installed; not needed on a CPU node (CPU jobs use transformers)")
    if rollouts_hf and backend == "hf":
        return Check(
            "vllm",
            "warn",
            "vLLM not installed; SDPOCL_ROLLOUTS=hf and evaluate.backend: hf ask for transformers' generate "
            "(8,192-token samples: slow, check the jobs' runtimes)",
        )
    missing = [w for w, hf in (("training rollouts", rollouts_hf), ("evaluation", backend == "hf")) if not hf]
    status = "fail" if config.get("preset") == "paper" else "warn"
    message = f"a GPU is visible but vLLM is not installed ({' and '.join(missing)} need it)"
    return Check("vllm", status, message, fix=fix)


def check_base(config: dict, results: str | Path) -> tuple[Check, ModelInfo | None]:
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    path, how = resolve_base(config, results)
    if path is None:
        if config.get("preset") != "paper":
            return Check("base model", "ok", how), None
        model = (config.get("base") or {}).get("model")
        fix = (
            f"with network (the login node): snakemake {Path(results) / 'base' / 'model'} --configfile <config> "
            f"(rule fetch_base_model), or `hf download {model}`; or set base.source to a local copy"
        )
        if "looks like a local path" in how or "base.source" in how:
            return Check("base model", "fail", how, fix="point base.model / base.source at the model directory"), None
        status = "fail" if offline else "warn"
        note = " and HF_HUB_OFFLINE is set: the workflow stops at parse time" if offline else ""
        return Check("base model", status, f"base model not available offline: {how}{note}", fix=fix), None
    try:
        info = inspect_model(path)
    except Exception as exc:  # noqa: BLE001 - every failure is reported with its fix
        return (
            Check(
                "base model",
                "fail",
                f"{how}: {type(exc).__name__}: {exc}",
                fix="download the snapshot again (hf download <model> --local-dir <dir>) or point base.source at "
                "a complete copy: config.json, every safetensors shard of model.safetensors.index.json, tokenizer",
            ),
            None,
        )
    dtypes = ", ".join(f"{k} {v / 1e9:.2f}B" if v >= 1e8 else f"{k} {v}" for k, v in sorted(info.dtypes.items()))
    details = (
        f"{info.n_params / 1e9:.3f} B parameters ({dtypes}), {info.file_bytes / 1e9:.2f} GB on disk",
        f"hidden {info.hidden}, {info.layers} layers, vocabulary {info.vocab}, tied embeddings {info.tied}",
        f"tokenizer: {', '.join(info.tokenizer) or 'none'}; chat template: {'yes' if info.chat_template else 'no'}",
    )
    if not info.tokenizer:
        fix = "copy the tokenizer files (tokenizer.json, tokenizer_config.json) from the hub snapshot"
        return Check("base model", "fail", f"{how}: no tokenizer files", fix=fix, details=details), info
    if config.get("preset") == "paper" and not info.chat_template:
        return (
            Check(
                "base model",
                "fail",
                f"{how}: no chat template (the paper preset's prompts use it)",
                fix="copy chat_template.jinja / tokenizer_config.json from the hub snapshot",
                details=details,
            ),
            info,
        )
    return Check("base model", "ok", f"{how}: readable offline", details=details), info


def _estimate_lines(est: dict) -> tuple[str, ...]:
    from sdpocl.train.rollouts import FALLBACK_FRACTION

    states = ", ".join(f"{k} {est[k]:.1f}" for k in ("weights", "grads", "adam", "teacher", "reference") if est[k])
    work = ", ".join(f"{k} {est[k]:.1f}" for k in ("gathered", "activations", "logits"))
    memory = est.get("rollout_memory")
    if vllm_fraction() is not None:
        share = f"SDPOCL_VLLM_MEMORY {vllm_fraction():g}"
    elif memory is not None:
        share = f"{memory.fraction:.2f} of the GPU, sized by the train job"
    else:
        share = f"{FALLBACK_FRACTION:g} of the GPU: no model config to size it by"
    lines = [
        f"per GPU (GiB): sharded states {est['states']:.1f} ({states}), overhead {est['overhead']:.1f}",
        f"rollout: states + overhead + vLLM {est['vllm']:.1f} ({share}) = {est['rollout']:.1f}",
        f"update: states + {work} + overhead + vLLM asleep {VLLM_ASLEEP_GIB:g} = {est['update']:.1f}",
    ]
    if memory is not None:
        lines.append(f"rollouts: {memory.line()}")
    return tuple(lines)


@dataclass(frozen=True)
class GpuNeed:
    """The fewest GPUs per train job that fit (None: unknown, or none of 1, 2, 4, 8), and whether the GPU
    memory behind it was assumed (no GPU visible, no --gpu-memory-gib)."""

    fewest: int | None = None
    assumed: bool = True


def check_memory(
    config: dict, info: ModelInfo | None, gpus: list[tuple[str, int]], gpu_memory_gib: float | None = None
) -> tuple[Check, GpuNeed]:
    """The memory estimate of one train job against the GPU's memory (the visible GPU's, else
    ``gpu_memory_gib``, else an assumed 80 GiB); also the fewest GPUs that fit, for the Slurm check."""
    req, _ = requested_gpus(config)
    n = req["train"]
    if n == 0:
        return Check("memory", "ok", "train jobs are CPU jobs (train.gpus_per_job 0): no GPU memory needed"), GpuNeed()
    shape = model_shape(config, info)
    if shape is None:
        return (
            Check(
                "memory",
                "skip",
                "no estimate: the base model's config.json is not available here",
                fix="fetch the base model (see the base model line) and run preflight again",
            ),
            GpuNeed(),
        )
    assumed = False
    if gpus:
        mem = min(m for _, m in gpus) / GIB
        where = f"{gpus[0][0]}, {mem:.1f} GiB"
    elif gpu_memory_gib is not None:
        mem, where = float(gpu_memory_gib), f"--gpu-memory-gib {gpu_memory_gib:g}"
    else:
        mem, where, assumed = REFERENCE_GPU_GIB, f"assumed {REFERENCE_GPU_GIB:g} GiB: no GPU visible", True
    estimate = estimate_for(config, shape, mem)
    est = estimate(n)
    fewest = min_gpus(estimate, mem)
    one_wave = min_gpus(estimate, mem, one_wave=True)
    grid = grid_shape(config)
    details = (
        f"{shape['n_params'] / 1e9:.3f} B parameters, prompt {grid['prompt_tokens']} + response "
        f"{grid['response_tokens']} tokens, micro-batch {grid['micro_batch']}, "
        f"{'SDPO teacher' if grid['teacher'] else 'no teacher'}{', KL reference' if grid['reference'] else ''}",
        *_estimate_lines(est),
        f"fewest GPUs per job that fit (update phase with {1 - HEADROOM:.0%} headroom, the engine's share as sized): "
        f"{fewest if fewest else 'none of 1, 2, 4, 8'}; whose KV cache also holds a step's sequences at full length: "
        f"{one_wave if one_wave else 'none of 1, 2, 4, 8'}",
        "formula: sdpocl.preflight.train_memory_estimate, sdpocl.train.rollouts.rollout_memory (estimates)",
    )
    head = f"train job on {n} GPU(s): ~{est['total']:.1f} GiB per GPU of {mem:.1f} ({where})"
    fix = (f"train.gpus_per_job: {fewest}" if fewest else "more GPUs per job, or a shorter max_completion_length") + (
        f", or a smaller SDPOCL_VLLM_MEMORY (now {vllm_fraction():g})" if vllm_fraction() is not None else ""
    )
    need = GpuNeed(fewest, assumed)
    if est["total"] > mem or est["update"] > mem:
        return Check("memory", "warn" if assumed else "fail", head + ": does not fit", fix=fix, details=details), need
    if not fits(est, mem):
        return Check("memory", "warn", head + f": under {1 - HEADROOM:.0%} headroom", fix=fix, details=details), need
    if assumed:
        fix = "run preflight on a GPU node, or give the cluster's GPU memory: --gpu-memory-gib 80"
        return Check("memory", "skip", head + ": fits; no GPU to compare with", fix=fix, details=details), need
    return Check("memory", "ok", head + ": fits", details=details), need


def check_cost(config: dict, results: str | Path, info: ModelInfo | None, gpu_check: str | Path | None = None) -> Check:
    """The grid's GPU-hours before it runs (:mod:`.cost`): informational, never fails."""
    from sdpocl.preflight.cost import CostAssumptions, cost_lines, grid_cost, measured_update

    shape = model_shape(config, info)
    if shape is None:
        return Check("cost", "skip", "no estimate: the base model's shape is not known here")
    if config.get("preset") == "tiny" and not config["train"].get("gpus_per_job"):
        return Check("cost", "ok", "train and evaluation jobs are CPU jobs (the tiny preset): no GPU-hours")
    assumptions = CostAssumptions()
    cost = grid_cost(config, shape, results, assumptions, measured_update(gpu_check))
    h = cost["gpu_hours"]
    message = (
        f"~{h['total']:,.0f} GPU-hours: train {h['train_stage']:,.0f}, evaluate {h['evaluate']:,.0f} (an estimate)"
    )
    return Check("cost", "ok", message, details=cost_lines(cost, assumptions))


def _size(n: float) -> str:
    """Bytes as GB (or MB when small), decimal units like ``df -H``."""
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(config: dict, results: str | Path, info: ModelInfo | None, jobs: int | None = None) -> Check:
    shape = model_shape(config, info)
    if shape is None:
        return Check(
            "disk",
            "skip",
            "no estimate: the base model's size is not known here",
            fix="fetch the base model (see the base model line) and run preflight again",
        )
    base_bytes = 0
    fetched = Path(results) / "base" / "model"
    if info is not None and not fetched.exists() and not (config.get("base") or {}).get("source"):
        model = (config.get("base") or {}).get("model") or ""
        if not Path(model).expanduser().is_dir():
            base_bytes = info.file_bytes  # fetch_base_model downloads the snapshot into the results folder
    est = grid_disk_estimate(config, shape["n_params"], results, jobs=jobs, base_bytes=base_bytes)
    where = _existing(Path(results))
    free = shutil.disk_usage(where).free
    details = (
        f"{est['stages']} stage(s) to train ({est['done']} done), each model {_size(est['model_bytes'])} "
        f"(fp32 as saved)",
        f"kept: checkpoints + final models {_size(est['kept'])}; while running: resume state and checkpoint "
        f"copies of up to {est['at_once']} stage(s) at once {_size(est['transient'])}"
        + (f"; base snapshot {_size(est['base'])}" if est["base"] else ""),
        "not counted: evaluation samples, logs, tables (small beside the models)",
    )
    head = f"{_size(free)} free under {where}; the grid keeps ~{_size(est['kept'] + est['base'])}"
    head += f", up to ~{_size(est['total'])} while stages run"
    fix = "free space, or point `results` at a larger file system (--config results=/scratch/...)"
    if free < est["kept"] + est["base"]:
        return Check("disk", "fail", head, fix=fix, details=details)
    if free < est["total"]:
        fix += "; or fewer stages at once (--jobs)"
        return Check("disk", "warn", head + ": enough only if few stages run at once", fix=fix, details=details)
    return Check("disk", "ok", head, details=details)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when below it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_slurm(config: dict, profile_path: str | Path | None, need: GpuNeed | None = None) -> Check:
    path = Path(profile_path) if profile_path is not None else DEFAULT_PROFILE
    try:
        profile = read_profile(path)
    except FileNotFoundError:
        return Check("slurm profile", "skip", f"no profile at {path}", fix="--profile profiles/slurm")
    except Exception as exc:  # noqa: BLE001
        return Check("slurm profile", "fail", f"{path}: cannot read ({exc})", fix="fix the profile's YAML")
    requests = slurm_requests(config, profile)
    details, problems = [], []
    for rule, r in requests.items():
        line = (
            f"{rule}: gpu {r.get('gpu', 0)}, nodes {r.get('nodes', '-')}, cpus_per_task {r.get('cpus_per_task')}, "
            f"mem_mb {r.get('mem_mb')}, runtime {r.get('runtime')} min"
        )
        extra = [f"{k} {r[k]}" for k in ("slurm_partition", "gpu_model", "gres", "slurm_account") if k in r]
        details.append(line + (f", {', '.join(extra)}" if extra else ""))
        if r.get("gpu") and r.get("nodes") != 1:
            problems.append(f"{rule} asks for {r['gpu']} GPU(s) without nodes: 1 (they could be spread over nodes)")
    unknown = [r for r in (profile.get("set-resources") or {}) if r not in rule_resources()]
    if unknown:
        problems.append(f"set-resources names no rule of the workflow: {', '.join(unknown)}")
    train = requests.get("train_stage", {})
    status = "warn" if problems else "ok"
    fix = ""
    if need is not None and need.fewest and int(train.get("gpu") or 0) < need.fewest:
        of = f"an assumed {REFERENCE_GPU_GIB:g} GiB GPU" if need.assumed else "this GPU"
        problems.append(
            f"train_stage asks for {train.get('gpu') or 0} GPU(s); the memory estimate needs {need.fewest} of {of}"
        )
        fix = f"train.gpus_per_job: {need.fewest} in the config (do not set gpu for train_stage in the profile)"
        status = "warn" if need.assumed else "fail"
    elif problems:
        fix = "see the lines above; profiles/README.md"
    message = f"{_shown(path)}: " + ("; ".join(problems) if problems else f"{len(requests)} rule families (attempt 1)")
    return Check("slurm profile", status, message, fix=fix, details=tuple(details))
