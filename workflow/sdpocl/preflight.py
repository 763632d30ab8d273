"""``sdpocl preflight``: before the grid, on the machine a job will run on (a GPU node), check what
the grid's jobs will need and say what to fix.

Every check is a plain function returning a :class:`Check` (name, status ``ok`` / ``warn`` / ``fail``
/ ``skip``, a message, the fix, detail lines); :func:`run_preflight` runs them all and
:func:`format_report` prints them. Nothing here touches the network (the base model is looked up as
with ``HF_HUB_OFFLINE=1``) or loads weights (safetensors headers only). ``sdpocl preflight`` exits
non-zero when a check fails; warnings do not fail.

1. GPUs visible (``torch.cuda.device_count``) against the GPUs a train job and an evaluation job ask
   for (``train.gpus_per_job``, ``evaluate.gpus_per_job``; null = the preset's, from
   :mod:`sdpocl.resources`, as the rules ask for them).
2. vLLM importable (``importlib.util.find_spec``, without importing it) and its version.
3. The base model: the directory the jobs will read (``results/base/model``, else ``base.source``, a
   local ``base.model`` or the hub cache's snapshot of the hub id) with a config, loadable
   safetensors headers for every shard, and tokenizer files.
4. GPU memory per train job (:func:`train_memory_estimate`) against the visible GPU's memory.
5. Free disk under the results folder against the checkpoints the grid still has to write
   (:func:`grid_disk_estimate`).
6. The Slurm profile's requests per rule family (``default-resources``, the rules' own resources,
   ``set-resources``), and a train job asking for fewer GPUs than the memory estimate needs.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

from sdpocl import resources

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "workflow" / "rules"
DEFAULT_PROFILE = ROOT / "profiles" / "slurm"

GIB = 2**30
STATUSES = ("ok", "warn", "fail", "skip")
#: the GPU memory the README's memory table assumes (an 80 GB H100 / A100) when none is visible or given
REFERENCE_GPU_GIB = 80.0
#: CUDA context and NCCL buffers per GPU (an allowance, not a measurement)
OVERHEAD_GIB = 1.0
#: the colocated vLLM engine asleep while the trainer steps (TRL's sleep mode level 2: weights and KV cache
#: freed; README's memory table, an estimate)
VLLM_ASLEEP_GIB = 1.5
#: saved weights: the trainer holds fp32 master weights (``model_init_kwargs={"dtype": "float32"}``,
#: sdpocl.train.plan) and every checkpoint and final model is saved from them
SAVED_BYTES_PER_PARAM = 4
#: a stage's resume state (``resume-step-N``, only the latest kept): fp32 model + AdamW's two fp32
#: moments (+ the fp32 EMA teacher of SDPO runs)
RESUME_BYTES_PER_PARAM = {"grpo": 4 + 8, "sdpo": 4 + 8 + 4}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
#: rules that exist in one preset only (defined under ``if TINY:`` / ``else:`` in workflow/rules/data.smk)
PRESET_RULES = {"build_base": "tiny", "fetch_base_model": "paper"}


@dataclass(frozen=True)
class Check:
    """One line of the report: ``status`` is ok, warn, fail or skip; ``fix`` says what to do."""

    name: str
    status: str
    message: str
    fix: str = ""
    details: tuple[str, ...] = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


@dataclass
class ModelInfo:
    """A model directory as read from its config.json and safetensors headers (no weights loaded)."""

    path: Path
    n_params: int
    file_bytes: int
    hidden: int
    layers: int
    vocab: int
    tied: bool
    dtypes: dict = field(default_factory=dict)
    tokenizer: list = field(default_factory=list)
    chat_template: bool = False


# --- 1. GPUs -------------------------------------------------------------------------------------------


def requested_gpus(config: dict) -> tuple[dict, list[str]]:
    """GPUs per job of each kind (train, evaluate, single: teacher_check, compute_drift) as the rules ask for
    them (:func:`sdpocl.resources.gpus_by_kind`), and notes on where each number came from. Unlike the rules,
    it takes configs without the keys (older schemas) or with an unknown preset: 1 GPU, and said so."""
    notes, out = [], {}
    presets = resources.PRESET_GPUS
    for section in ("train", "evaluate"):
        sect = config.get(section) or {}
        if "gpus_per_job" not in sect:
            out[section] = 1
            notes.append(f"{section}.gpus_per_job is not in this config (older schema): assuming 1")
        elif sect["gpus_per_job"] is not None:
            out[section] = int(sect["gpus_per_job"])
        elif section in presets.get(config.get("preset"), {}):
            out[section] = int(presets[config["preset"]][section])
            notes.append(f"{section}.gpus_per_job null: the {config.get('preset')} preset's {out[section]}")
        else:
            out[section] = 1
            notes.append(f"{section}.gpus_per_job null and no preset default found: assuming 1")
    return resources.kind_gpus(out["train"], out["evaluate"]), notes


def visible_gpus() -> list[tuple[str, int]]:
    """(name, total memory in bytes) of every visible CUDA device; none on a CPU node."""
    try:
        import torch
    except ImportError:
        return []
    n = torch.cuda.device_count()
    out = []
    for i in range(n):
        props = torch.cuda.get_device_properties(i)
        out.append((str(props.name), int(props.total_memory)))
    return out


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


# --- 2. vLLM -------------------------------------------------------------------------------------------


def vllm_version() -> str | None:
    """vLLM's installed version, or None when it is not importable (no import of vLLM itself)."""
    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except (ImportError, ValueError):  # a broken or stubbed module
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


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


# --- 3. the base model ---------------------------------------------------------------------------------


def _hub_snapshot(model: str) -> Path | None:
    """The hub cache's snapshot directory of ``model``, looked up offline; None when not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        path = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - an invalid repo id is just "not cached"
        return None
    return Path(path).parent if isinstance(path, str) else None


def resolve_base(config: dict, results: str | Path) -> tuple[Path | None, str]:
    """The base model directory the jobs will read, and how it was found (or why there is none)."""
    fetched = Path(results) / "base" / "model"
    if fetched.is_dir():
        return fetched, f"{fetched} (the workflow's copy)"
    base = config.get("base") or {}
    if config.get("preset") != "paper":
        return None, f"{fetched} does not exist yet: the workflow builds it (rule build_base)"
    model, source = base.get("model"), base.get("source")
    if source:
        if not Path(source).is_dir():
            return None, f"base.source {source!r} is not a directory"
        return Path(source), f"base.source {source}"
    if model and Path(model).expanduser().is_dir():
        return Path(model).expanduser(), f"base.model {model} (a local directory)"
    if model and model.startswith((".", "/", "~")):
        return None, f"base.model {model!r} looks like a local path but is not a directory"
    snap = _hub_snapshot(model) if model else None
    if snap is not None:
        return snap, f"the hub cache's snapshot of {model} ({snap})"
    return None, f"{model!r} is neither fetched into {fetched} nor in the hub cache"


def _text_config(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def inspect_model(path: str | Path) -> ModelInfo:
    """Read a model directory's config.json, every safetensors shard's header and its tokenizer files;
    raises (FileNotFoundError, ValueError, safetensors' error) naming what is missing or unreadable."""
    from safetensors import safe_open

    from sdpocl.train.weights import weight_files

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{path} has no config.json")
    cfg = _text_config(json.loads(cfg_file.read_text()))
    n_params, file_bytes, dtypes = 0, 0, {}
    for shard in weight_files(path):
        if not os.access(shard, os.R_OK):
            raise PermissionError(f"{shard} is not readable")
        try:
            with safe_open(str(shard), framework="pt") as fh:
                for name in fh.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                    sl = fh.get_slice(name)
                    numel = 1
                    for d in sl.get_shape():
                        numel *= d
                    n_params += numel
                    dtypes[sl.get_dtype()] = dtypes.get(sl.get_dtype(), 0) + numel
        except Exception as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)):
                raise
            raise ValueError(f"{shard.name}: unreadable safetensors header ({exc}); a partial download?") from exc
        file_bytes += shard.stat().st_size
    tokenizer = [f for f in TOKENIZER_FILES if (path / f).exists()]
    chat = (path / "chat_template.jinja").exists()
    tok_cfg = path / "tokenizer_config.json"
    if tok_cfg.exists():
        chat = chat or bool(json.loads(tok_cfg.read_text()).get("chat_template"))
    return ModelInfo(
        path=path,
        n_params=n_params,
        file_bytes=file_bytes,
        hidden=int(cfg["hidden_size"]),
        layers=int(cfg["num_hidden_layers"]),
        vocab=int(cfg["vocab_size"]),
        tied=bool(cfg.get("tie_word_embeddings", False)),
        dtypes=dtypes,
        tokenizer=tokenizer,
        chat_template=chat,
    )


def params_from_config(cfg: dict) -> int:
    """Parameters of a Llama / Qwen3-style decoder from its config.json (no weights needed): embeddings
    (+ an untied LM head), per layer attention (q, k, v, o; Qwen3's q/k norms), a gated MLP and two norms."""
    cfg = _text_config(cfg)
    h, n_layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if cfg.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd
    if cfg.get("model_type") == "qwen3":
        attn += 2 * hd  # q_norm, k_norm
    layer = attn + 3 * h * cfg["intermediate_size"] + 2 * h
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings", False) else 2)
    return embed + n_layers * layer + h


def tiny_base_config(base: dict) -> dict:
    """The tiny preset's base (sdpocl.train.base.build_base: a Qwen3 with tied embeddings) as a config.json."""
    return {
        "model_type": "qwen3",
        "hidden_size": base["hidden_size"],
        "num_hidden_layers": base["num_layers"],
        "vocab_size": base["vocab_size"],
        "intermediate_size": base["intermediate_size"],
        "num_attention_heads": base["num_heads"],
        "num_key_value_heads": base["num_kv_heads"],
        "head_dim": base["hidden_size"] // base["num_heads"],
        "tie_word_embeddings": True,
    }


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


# --- 4. memory per GPU ---------------------------------------------------------------------------------


def train_memory_estimate(
    n_params: float,
    gpus: int,
    *,
    hidden: int,
    layers: int,
    vocab: int,
    prompt_tokens: int,
    response_tokens: int,
    teacher: bool = True,
    reference: bool = False,
    embedding_params: float | None = None,
    micro_batch: int = 1,
    gathered_layers: int = 2,
    vllm_fraction: float = 0.3,
    vllm_asleep_gib: float = VLLM_ASLEEP_GIB,
    gpu_memory_gib: float | None = None,
    overhead_gib: float = OVERHEAD_GIB,
) -> dict[str, float]:
    """GiB per GPU of one train job on ``gpus`` GPUs (FSDP2 full shard, one rank per GPU; 0 or 1 = one
    process holding everything): README's memory table as a formula. Items (bytes; ``P`` = ``n_params``,
    ``N`` = ``gpus``):

    * ``weights``: fp32 master weights, ``4 P / N``;
    * ``grads``: fp32 gradients (reduced in fp32, after every micro-batch), ``4 P / N``;
    * ``adam``: AdamW's two fp32 moments, ``8 P / N``;
    * ``teacher``: SDPO's teacher, a frozen / EMA fp32 copy sharded per decoder layer like the student, ``4 P / N``;
    * ``reference``: a KL reference model (runs with ``kl_beta > 0``), the same, ``4 P / N``;
    * ``gathered``: decoder layers all-gathered in bf16 for compute: ``gathered_layers`` of the student (one in
      use, one prefetched) + one of the teacher, ``2 x layer params x (gathered_layers + teacher)``, layer
      params = (P - embeddings) / layers;
    * ``activations``: gradient checkpointing keeps each layer's input, ``micro_batch x (prompt + response
      tokens) x hidden x layers x 2`` (bf16);
    * ``logits``: full-vocabulary logits over the response tokens, bf16 (2 B) plus their fp32 log-softmax
      (4 B), the student's and (SDPO) the teacher's: ``micro_batch x response x vocab x 6 x (2 or 1)``;
    * ``overhead``: CUDA context, NCCL buffers (an allowance, in GiB);
    * ``vllm``: the colocated vLLM engine while it generates, ``vllm_fraction`` of the GPU (``SDPOCL_VLLM_MEMORY``,
      default 0.3; sdpocl.train.rollouts); asleep while the trainer steps (TRL's sleep mode), ``vllm_asleep_gib``.

    The peak is the larger of two phases: ``rollout`` = states (weights, grads, adam, teacher, reference) +
    overhead + vllm, and ``update`` = states + gathered + activations + logits + overhead + vLLM asleep.
    Returns every item, ``states``, ``update``, ``min_gpu_gib`` (the smallest GPU that holds both phases:
    ``max(update, (states + overhead) / (1 - vllm_fraction))``) and, with ``gpu_memory_gib``, ``vllm``,
    ``rollout`` and ``total`` (the peak).
    """
    n = max(int(gpus), 1)
    p = float(n_params)
    embed = float(vocab * hidden if embedding_params is None else embedding_params)
    layer_params = max(p - embed, 0.0) / max(layers, 1)
    tokens = prompt_tokens + response_tokens
    out = {
        "weights": 4 * p / n,
        "grads": 4 * p / n,
        "adam": 8 * p / n,
        "teacher": 4 * p / n if teacher else 0.0,
        "reference": 4 * p / n if reference else 0.0,
        "gathered": 2 * layer_params * (gathered_layers + (1 if teacher else 0)),
        "activations": float(micro_batch * tokens * hidden * layers * 2),
        "logits": float(micro_batch * response_tokens * vocab * 6 * (2 if teacher else 1)),
    }
    out = {k: v / GIB for k, v in out.items()}
    out["overhead"] = float(overhead_gib)
    out["states"] = sum(out[k] for k in ("weights", "grads", "adam", "teacher", "reference"))
    work = out["gathered"] + out["activations"] + out["logits"]
    out["update"] = out["states"] + work + out["overhead"] + vllm_asleep_gib
    out["min_gpu_gib"] = max(out["update"], (out["states"] + out["overhead"]) / (1 - vllm_fraction))
    if gpu_memory_gib is not None:
        out["vllm"] = vllm_fraction * gpu_memory_gib
        out["rollout"] = out["states"] + out["overhead"] + out["vllm"]
        out["total"] = max(out["rollout"], out["update"])
    return out


#: the share of a GPU an estimate may fill and still count as fitting: it is an estimate (fragmentation,
#: NCCL and vLLM overheads beyond the allowances, one recomputed layer are not in it), so 25% stays free
HEADROOM = 0.75


def min_gpus(estimate_for, gpu_memory_gib: float, choices=(1, 2, 4, 8)) -> int | None:
    """The fewest GPUs (of ``choices``) whose per-GPU peak (``estimate_for(n)`` with ``gpu_memory_gib``) fits
    within ``HEADROOM`` of ``gpu_memory_gib``; None if none does."""
    for n in choices:
        if estimate_for(n)["total"] <= HEADROOM * gpu_memory_gib:
            return n
    return None


def grid_shape(config: dict) -> dict:
    """What the grid's largest train job holds: a teacher (any SDPO-family run), a KL reference (any run
    with kl_beta > 0), the longest prompt + response."""
    from sdpocl.config import expand_runs
    from sdpocl.train.methods import get_method

    runs = expand_runs(config)
    train = config["train"]
    return {
        "teacher": any(get_method(r.method).family == "sdpo" for r in runs),
        "reference": any(r.kl_beta > 0 for r in runs),
        "prompt_tokens": int(train.get("max_prompt_length") or 0),
        "response_tokens": int(max(train["max_completion_length"].values())),
        "micro_batch": int(train.get("micro_batch_size") or 1),
    }


def vllm_fraction() -> float:
    return float(os.environ.get("SDPOCL_VLLM_MEMORY", "0.3"))


def _shape(config: dict, info: ModelInfo | None) -> dict | None:
    """n_params, hidden, layers, vocab (and the embedding's params) of the base: read from its files, or
    for the tiny preset from the config's base section."""
    if info is not None:
        embed = info.vocab * info.hidden * (1 if info.tied else 2)
        return dict(n_params=info.n_params, hidden=info.hidden, layers=info.layers, vocab=info.vocab, embed=embed)
    if config.get("preset") == "tiny":
        cfg = tiny_base_config(config["base"])
        embed = cfg["vocab_size"] * cfg["hidden_size"]
        return dict(
            n_params=params_from_config(cfg),
            hidden=cfg["hidden_size"],
            layers=cfg["num_hidden_layers"],
            vocab=cfg["vocab_size"],
            embed=embed,
        )
    return None


def estimate_for(config: dict, shape: dict, gpu_memory_gib: float | None):
    """``gpus -> train_memory_estimate(...)`` for this config and base."""
    grid = grid_shape(config)

    def estimate(gpus: int) -> dict:
        return train_memory_estimate(
            shape["n_params"],
            gpus,
            hidden=shape["hidden"],
            layers=shape["layers"],
            vocab=shape["vocab"],
            embedding_params=shape["embed"],
            prompt_tokens=grid["prompt_tokens"],
            response_tokens=grid["response_tokens"],
            teacher=grid["teacher"],
            reference=grid["reference"],
            micro_batch=grid["micro_batch"],
            vllm_fraction=vllm_fraction(),
            gpu_memory_gib=gpu_memory_gib,
        )

    return estimate


def _estimate_lines(est: dict) -> tuple[str, ...]:
    states = ", ".join(f"{k} {est[k]:.1f}" for k in ("weights", "grads", "adam", "teacher", "reference") if est[k])
    work = ", ".join(f"{k} {est[k]:.1f}" for k in ("gathered", "activations", "logits"))
    share = f"SDPOCL_VLLM_MEMORY {vllm_fraction():g}"
    return (
        f"per GPU (GiB): sharded states {est['states']:.1f} ({states}), overhead {est['overhead']:.1f}",
        f"rollout: states + overhead + vLLM {est['vllm']:.1f} ({share} of the GPU) = {est['rollout']:.1f}",
        f"update: states + {work} + overhead + vLLM asleep {VLLM_ASLEEP_GIB:g} = {est['update']:.1f}",
    )


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
    shape = _shape(config, info)
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
    grid = grid_shape(config)
    details = (
        f"{shape['n_params'] / 1e9:.3f} B parameters, prompt {grid['prompt_tokens']} + response "
        f"{grid['response_tokens']} tokens, micro-batch {grid['micro_batch']}, "
        f"{'SDPO teacher' if grid['teacher'] else 'no teacher'}{', KL reference' if grid['reference'] else ''}",
        *_estimate_lines(est),
        f"fewest GPUs per job that fit with {1 - HEADROOM:.0%} headroom: {fewest if fewest else 'none of 1, 2, 4, 8'}",
        "formula: sdpocl.preflight.train_memory_estimate (an estimate, not a measurement)",
    )
    head = f"train job on {n} GPU(s): ~{est['total']:.1f} GiB per GPU of {mem:.1f} ({where})"
    fix = (
        f"train.gpus_per_job: {fewest}" if fewest else "more GPUs per job, or a shorter max_completion_length"
    ) + f", or a smaller SDPOCL_VLLM_MEMORY (now {vllm_fraction():g})"
    need = GpuNeed(fewest, assumed)
    if est["total"] > mem:
        return Check("memory", "warn" if assumed else "fail", head + ": does not fit", fix=fix, details=details), need
    if est["total"] > HEADROOM * mem:
        return Check("memory", "warn", head + f": under {1 - HEADROOM:.0%} headroom", fix=fix, details=details), need
    if assumed:
        fix = "run preflight on a GPU node, or give the cluster's GPU memory: --gpu-memory-gib 80"
        return Check("memory", "skip", head + ": fits; no GPU to compare with", fix=fix, details=details), need
    return Check("memory", "ok", head + ": fits", details=details), need


# --- 5. disk -------------------------------------------------------------------------------------------


def grid_stages(config: dict) -> list[tuple[object, tuple[str, ...]]]:
    """(run, chain) of every train stage of the grid (as workflow/rules/common.smk's all_stages)."""
    from sdpocl.config import chains_for, expand_runs

    return [(run, chain) for run in expand_runs(config) for chain in chains_for(config, run)]


def grid_disk_estimate(
    config: dict, n_params: int, results: str | Path, *, jobs: int | None = None, base_bytes: int = 0
) -> dict:
    """Bytes the grid's train stages will still write under ``results`` (stages with a summary.json are done):

    * ``kept``: per stage, ``steps // save_every`` checkpoints + the final model, each ``4 x n_params``
      (fp32, as saved);
    * ``transient``: per stage while it runs, its resume state (fp32 model + AdamW moments (+ teacher):
      ``RESUME_BYTES_PER_PARAM``) and the copies of its checkpoints in the state folder, for as many
      stages at once as can run (one per chain that starts from the base, at most ``jobs``);
    * ``base``: ``base_bytes``, a base model still to be downloaded into the results folder.
    """
    from sdpocl.chain import stage_dir
    from sdpocl.train.methods import get_method

    model = SAVED_BYTES_PER_PARAM * n_params
    every = config["train"]["save_every"]
    kept, stages, done, peaks = 0, 0, 0, []
    for run, chain in grid_stages(config):
        if (Path(stage_dir(str(results), run.name, chain)) / "summary.json").exists():
            done += 1
            continue
        ckpts = config["train"]["steps"][chain[-1]] // every
        stages += 1
        kept += (ckpts + 1) * model
        family = get_method(run.method).family
        peaks.append(RESUME_BYTES_PER_PARAM[family] * n_params + ckpts * model)
    roots = sum(1 for _, chain in grid_stages(config) if len(chain) == 1)
    at_once = min(roots, jobs) if jobs else roots
    transient = sum(sorted(peaks, reverse=True)[:at_once])
    return {
        "stages": stages,
        "done": done,
        "kept": kept,
        "transient": transient,
        "at_once": at_once,
        "base": base_bytes,
        "total": kept + transient + base_bytes,
        "model_bytes": model,
    }


def _size(n: float) -> str:
    """Bytes as GB (or MB when small), decimal units like ``df -H``."""
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(config: dict, results: str | Path, info: ModelInfo | None, jobs: int | None = None) -> Check:
    shape = _shape(config, info)
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


# --- 6. the Slurm profile ------------------------------------------------------------------------------


def read_profile(profile_path: str | Path) -> dict:
    """A Snakemake profile's config.yaml (``profile_path`` is the profile folder or the file)."""
    import yaml

    path = Path(profile_path)
    if path.is_dir():
        path = path / "config.yaml"
    return yaml.safe_load(path.read_text()) or {}


def rule_resources(rules_dir: Path = RULES_DIR) -> dict[str, dict]:
    """Per rule of workflow/rules/*.smk: its ``threads`` (a number, or ``THREADS`` = ``train.threads``) and
    whether it is a local rule, read from the rule files' text. (Its GPUs, CPUs and memory, for the rules
    that have GPUs: :mod:`sdpocl.resources`.)"""
    out = {}
    for smk in sorted(rules_dir.glob("*.smk")):
        text = smk.read_text()
        starts = [(m.start(), m.group(1)) for m in re.finditer(r"^\s*rule (\w+):", text, re.M)]
        for i, (pos, name) in enumerate(starts):
            block = text[pos : starts[i + 1][0] if i + 1 < len(starts) else len(text)]
            threads = re.search(r"^\s*threads:\s*(\w+)", block, re.M)
            out[name] = {
                "threads": threads.group(1) if threads else "1",
                "local": bool(re.search(r"^\s*localrule:\s*True", block, re.M)),
            }
    return out


def _eval_resource(value, attempt: int = 1, threads: int = 1):
    """A profile value (a number, or a Python expression in attempt / threads as a string) at attempt 1."""
    if not isinstance(value, str):
        return value
    try:
        return eval(value, {"__builtins__": {"max": max, "min": min}}, {"attempt": attempt, "threads": threads})  # noqa: S307
    except Exception:  # noqa: BLE001 - "2h" and the like: shown as written
        return value


def slurm_requests(config: dict, profile: dict) -> dict[str, dict]:
    """What each non-local rule family asks Slurm for at attempt 1: ``default-resources``, then the rule's own
    resources (its GPUs from the config: :mod:`sdpocl.resources`, as the rules' ``job_resources``), then
    ``set-resources``."""
    req, _ = requested_gpus(config)
    rules = rule_resources()
    default = profile.get("default-resources") or {}
    overrides = profile.get("set-resources") or {}
    names = [r for r in overrides if r in rules] + [r for r in rules if r in resources.RULE_GPUS]
    out = {}
    for name in dict.fromkeys(names):
        spec = rules[name]
        if spec["local"] or PRESET_RULES.get(name, config.get("preset")) != config.get("preset"):
            continue
        threads = int(config["train"]["threads"]) if spec["threads"] == "THREADS" else int(spec["threads"])
        own: dict = {}
        if name in resources.RULE_GPUS:
            gpus = req[resources.RULE_GPUS[name]]
            own = resources.gpu_resources(gpus, **resources.cpu_job(name))
            own = {k: v(None, threads) if callable(v) else v for k, v in own.items()}  # cpus_per_task(wc, threads)
        merged = {**default, **own, **(overrides.get(name) or {})}
        merged = {k: _eval_resource(v, threads=threads) for k, v in merged.items()}
        merged.setdefault("cpus_per_task", threads)
        out[name] = merged
    return out


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


# --- the report ----------------------------------------------------------------------------------------


def run_preflight(
    config: dict,
    profile_path: str | Path | None = None,
    *,
    results: str | Path | None = None,
    gpu_memory_gib: float | None = None,
    config_name: str | None = None,
) -> list[Check]:
    """Every check, in order; ``config`` is a validated config (sdpocl.config.load_config), ``config_name``
    its file (named in the fixes instead of ``<config>``)."""
    results = Path(results if results is not None else config.get("results", "results"))
    gpus = visible_gpus()
    checks = [check_gpus(config, gpus), check_vllm(config, gpus)]
    base, info = check_base(config, results)
    checks.append(base)
    memory, need = check_memory(config, info, gpus, gpu_memory_gib)
    checks.append(memory)
    profile = None
    path = Path(profile_path) if profile_path is not None else DEFAULT_PROFILE
    try:
        profile = read_profile(path)
    except Exception:  # noqa: BLE001 - reported by check_slurm
        profile = None
    jobs = (profile or {}).get("jobs")
    checks.append(check_disk(config, results, info, jobs=int(jobs) if isinstance(jobs, int) else None))
    checks.append(check_slurm(config, path, need))
    if config_name:
        checks = [replace(c, fix=c.fix.replace("<config>", config_name)) for c in checks]
    return checks


def format_report(checks: list[Check], header: str = "") -> str:
    """One line per check (``[FAIL] name: message``), its fix and detail lines indented, and a summary."""
    lines = [header] if header else []
    width = max((len(c.name) for c in checks), default=0)
    for c in checks:
        lines.append(f"[{c.status.upper():>4}] {c.name:<{width}}  {c.message}")
        if c.fix:
            lines.append(f"{'':>7} {'':<{width}}  fix: {c.fix}")
        for d in c.details:
            lines.append(f"{'':>7} {'':<{width}}    {d}")
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = "FAILED: fix the [FAIL] lines before the grid" if counts["fail"] else "passed"
    lines.append(
        f"preflight {verdict} ({counts['fail']} failed, {counts['warn']} warnings, {counts['ok']} ok, "
        f"{counts['skip']} skipped)"
    )
    return "\n".join(lines) + "\n"


def header(config_name: str, config: dict, results: str | Path) -> str:
    host, preset = socket.gethostname(), config.get("preset")
    return f"sdpocl preflight on {host}: {config_name} (preset {preset}), results {results}"


def failed(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


def preflight_rule(config: dict, profile: str | Path, results: str, configfiles: list, out: str, log: str) -> None:
    """The rule ``preflight`` (workflow/rules/preflight.smk): the report printed and written to ``log``, and to
    ``out`` only when no check fails; a failed check raises (the job fails, ``out`` is not made)."""
    name = " ".join(str(f) for f in configfiles) or "<config>"
    checks = run_preflight(config, profile, results=results, config_name=name)
    report = format_report(checks, header(name, config, results))
    print(report, end="", flush=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(report)
    if failed(checks):
        raise RuntimeError(f"preflight: a check failed (the [FAIL] lines above; the report: {log})")
    Path(out).write_text(report)
