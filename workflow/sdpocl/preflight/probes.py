"""What this machine has, read without touching the network or loading weights: the visible GPUs, vLLM
(found, not imported) and the base model's directory (config.json, safetensors headers, tokenizer files)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


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
    kv_per_token: int = 0  # vLLM's bf16 KV cache per token (sdpocl.train.rollouts.kv_bytes_per_token)
    attn_width: int = 0  # attention heads x head dim (the attention's FLOPs per token of context)


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
    from sdpocl.train.rollouts import kv_bytes_per_token
    from sdpocl.train.weights import shard_parameter_counts, weight_files

    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a directory")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise FileNotFoundError(f"{path} has no config.json")
    cfg = _text_config(json.loads(cfg_file.read_text()))
    file_bytes, dtypes = 0, {}
    for shard in weight_files(path):
        if not os.access(shard, os.R_OK):
            raise PermissionError(f"{shard} is not readable")
        try:
            for dtype, numel in shard_parameter_counts(shard).items():
                dtypes[dtype] = dtypes.get(dtype, 0) + numel
        except Exception as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)):
                raise
            raise ValueError(f"{shard.name}: unreadable safetensors header ({exc}); a partial download?") from exc
        file_bytes += shard.stat().st_size
    n_params = sum(dtypes.values())
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
        kv_per_token=kv_bytes_per_token(cfg),
        attn_width=attention_width(cfg),
    )


def attention_width(cfg: dict) -> int:
    """Attention heads x head dim of a config.json (Qwen3-4B: 32 x 128 = 4,096, wider than its hidden 2,560)."""
    cfg = _text_config(cfg)
    heads = int(cfg["num_attention_heads"])
    return heads * int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)


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


def model_shape(config: dict, info: ModelInfo | None) -> dict | None:
    """n_params, hidden, layers, vocab (and the embedding's params) of the base: read from its files, or
    for the tiny preset from the config's base section."""
    if info is not None:
        embed = info.vocab * info.hidden * (1 if info.tied else 2)
        return dict(
            n_params=info.n_params,
            hidden=info.hidden,
            layers=info.layers,
            vocab=info.vocab,
            embed=embed,
            kv_per_token=info.kv_per_token,
            attn_width=info.attn_width or info.hidden,
        )
    if config.get("preset") == "tiny":
        from sdpocl.train.rollouts import kv_bytes_per_token

        cfg = tiny_base_config(config["base"])
        embed = cfg["vocab_size"] * cfg["hidden_size"]
        return dict(
            kv_per_token=kv_bytes_per_token(cfg),
            attn_width=attention_width(cfg),
            n_params=params_from_config(cfg),
            hidden=cfg["hidden_size"],
            layers=cfg["num_hidden_layers"],
            vocab=cfg["vocab_size"],
            embed=embed,
        )
    return None
