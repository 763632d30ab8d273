"""The paper preset's base model: a hub id or a local directory, resolved once to a local snapshot.

``fetch-base`` (rule ``fetch_base_model``) gives every consumer -- stage 1 of every run,
evaluate-base, compute-drift -- one local model directory, ``results/base/model``:

* ``base.source`` (a local mirror, like ``data.sources``) or a ``base.model`` that is a local
  directory: its files are linked into the output (no copy of the weights);
* otherwise ``base.model`` is a hub id: ``huggingface_hub.snapshot_download`` writes the snapshot
  into the output (weights, config, tokenizer, chat template).

:func:`check_base_available` runs when the workflow is parsed: offline (``HF_HUB_OFFLINE``) with
no local copy and no cached snapshot, it names the model before any job starts.

``build-standin`` makes the CPU rehearsal's stand-in: a tiny Qwen3-architecture model with a
byte-level BPE tokenizer, Qwen3's chat template (``enable_thinking`` supported) and its special
tokens, saved *sharded* like a hub checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdpocl.train.weights import has_weights

#: what a snapshot needs (weights, config, tokenizer, chat template); not the original PyTorch bins
SNAPSHOT_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


class BaseModelError(ValueError):
    """The base model cannot be resolved; the message names it."""


def _is_local(path: str | None) -> bool:
    return bool(path) and Path(path).is_dir()


def check_base_available(model: str, source: str | None = None) -> None:
    """Fail early (at parse time) when the base model cannot be had: a missing local mirror, or
    offline mode with neither a local directory nor a cached snapshot of the hub id."""
    if source is not None:
        if not _is_local(source):
            raise BaseModelError(f"base.source {source!r} (local copy of {model!r}) is not a directory")
        return
    if _is_local(model):
        return
    if model.startswith((".", "/", "~")):
        raise BaseModelError(f"base.model {model!r} looks like a local path but is not a directory")
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        return  # online: fetch_base_model downloads it (and names the model if that fails)
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(model, "config.json"), str):
        raise BaseModelError(
            f"base model {model!r} is not available offline (HF_HUB_OFFLINE is set and the hub cache has no "
            "snapshot of it): download it once with network, or set base.source to a local copy"
        )


def fetch_base_model(model: str, out: str | Path, source: str | None = None) -> Path:
    """Make ``out`` a local model directory of ``model`` (see the module docstring)."""
    out = Path(out)
    check_base_available(model, source)
    local = source or (model if _is_local(model) else None)
    if local is not None:
        local = Path(local).resolve()
        out.mkdir(parents=True, exist_ok=True)
        for path in sorted(local.iterdir()):
            if path.is_file():
                link = out / path.name
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(path)
        print(f"[fetch-base] {model}: linked {local} -> {out}", flush=True)
    else:
        from huggingface_hub import snapshot_download

        print(f"[fetch-base] {model}: downloading a snapshot into {out} ...", flush=True)
        try:
            snapshot_download(repo_id=model, local_dir=str(out), allow_patterns=SNAPSHOT_PATTERNS)
        except Exception as exc:  # network, auth, unknown repo: name the model
            raise BaseModelError(f"cannot download base model {model!r}: {type(exc).__name__}: {exc}") from exc
    if not (out / "config.json").exists() or not has_weights(out):
        raise BaseModelError(f"base model {model!r}: {out} has no config.json or safetensors weights")
    return out


def build_standin(
    out: str | Path,
    texts: list[str],
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    max_shard_size: str = "200KB",
) -> Path:
    """A tiny, randomly initialised Qwen3 stand-in for the paper preset's rehearsal (see module docstring)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=32768
    )
    fast.chat_template = qwen3_chat_template()
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden_size // 2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        eos_token_id=[fast.convert_tokens_to_ids("<|im_end|>"), fast.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)  # hub checkpoints are bf16
    model.save_pretrained(out, max_shard_size=max_shard_size)
    return out


def qwen3_chat_template() -> str:
    """Qwen3's chat template as TRL ships it (``trl/chat_templates/qwen3.jinja``)."""
    import trl

    return (Path(os.path.dirname(trl.__file__)) / "chat_templates" / "qwen3.jinja").read_text()
