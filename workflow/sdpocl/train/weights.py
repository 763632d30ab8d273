"""Safetensors model directories, single-file or sharded (``model.safetensors.index.json``).

Every reader of weights goes through here, so a sharded checkpoint (a hub snapshot of
a 4B model, or one saved with a shard size limit) is read and copied like a single file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"


def weight_files(model_dir: str | Path) -> list[Path]:
    """The safetensors files of a model directory (the shards named by its index, or the single file)."""
    model_dir = Path(model_dir)
    index = model_dir / INDEX
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (model_dir / s).exists()]
        if missing:
            raise FileNotFoundError(f"{model_dir}: {INDEX} names missing shard(s) {', '.join(missing)}")
        return [model_dir / s for s in shards]
    if (model_dir / SINGLE).exists():
        return [model_dir / SINGLE]
    raise FileNotFoundError(f"{model_dir} holds no safetensors weights ({SINGLE} or {INDEX})")


def has_weights(model_dir: str | Path) -> bool:
    model_dir = Path(model_dir)
    return (model_dir / INDEX).exists() or (model_dir / SINGLE).exists()


def iter_tensors(model_dir: str | Path, keep: Callable[[str], bool] | None = None) -> Iterator[tuple[str, object]]:
    """(name, tensor) of every weight (``keep(name)`` only), shard by shard, loading only what is kept."""
    from safetensors import safe_open

    for path in weight_files(model_dir):
        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                if keep is None or keep(name):
                    yield name, fh.get_tensor(name)


def load_tensors(model_dir: str | Path, keep: Callable[[str], bool] | None = None) -> dict:
    return dict(iter_tensors(model_dir, keep))


def shard_parameter_counts(shard: str | Path) -> dict[str, int]:
    """Parameters per dtype of one safetensors file, read from its header (no weights)."""
    from safetensors import safe_open

    counts: dict[str, int] = {}
    with safe_open(str(shard), framework="pt") as fh:
        for name in fh.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
            sl = fh.get_slice(name)
            numel = 1
            for d in sl.get_shape():
                numel *= d
            counts[sl.get_dtype()] = counts.get(sl.get_dtype(), 0) + numel
    return counts


def parameter_count(model_dir: str | Path) -> int:
    """Parameters of a model directory's safetensors (headers only)."""
    return sum(n for shard in weight_files(model_dir) for n in shard_parameter_counts(shard).values())
