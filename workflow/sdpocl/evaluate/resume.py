"""Per-benchmark resume state of evaluate-checkpoint: a retried job skips the benchmarks it finished.

Why: a paper-preset evaluation job runs every benchmark x prompt x k samples for hours, and a job
that hits its time limit would otherwise start again from zero. Each finished benchmark (its scores
and sample records) is one file in a state directory *outside* the declared outputs, which Snakemake
deletes before every attempt. A file counts only under its fingerprint: the model (path and file
sizes / mtimes, so a retrained stage at the same path is new work), the resolved backend, the
settings (with the benchmark's own limit of ``evaluate.n_prompts``, :func:`sdpocl.evaluate.limits.n_prompts_for`:
a changed OOD limit keeps the domain benchmarks' results), the benchmark's task YAML and the data
file it reads. Anything else is evaluated again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import yaml

from sdpocl.config import stable_json
from sdpocl.io import write_json


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_identity(model: str, hub_model: bool = False) -> str:
    """A hub id as is; a local checkpoint by its path and every file's size and mtime."""
    if hub_model:
        return model
    root = Path(model).resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return str(root) + "".join(f"|{p.relative_to(root)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


class _TaskLoader(yaml.SafeLoader):
    """Reads our task YAMLs without resolving lm-eval's ``!function`` tags."""


_TaskLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def task_identity(task_dir: str | Path, benchmark: str) -> str:
    """Hash of ``<task_dir>/<benchmark>.yaml`` (as the workflow writes it) and of its data file."""
    path = Path(task_dir) / f"{benchmark}.yaml"
    if not path.exists():
        return ""
    text = path.read_bytes()
    data = ((yaml.load(text, Loader=_TaskLoader) or {}).get("dataset_kwargs") or {}).get("data_files") or {}
    data_file = Path(str(data.get("test", ""))) if isinstance(data, dict) else None
    data_hash = _sha(data_file.read_bytes()) if data_file and data_file.is_file() else ""
    return _sha(text) + ":" + data_hash


def fingerprint(model_id: str, backend: str, settings: dict, benchmark: str, task_id: str) -> str:
    parts = {"model": model_id, "backend": backend, "settings": settings, "benchmark": benchmark, "task": task_id}
    return _sha(stable_json(parts).encode())[:16]


def load(state_dir: str | Path | None, benchmark: str, fp: str) -> dict | None:
    """The benchmark's saved result when its fingerprint is ``fp``, else None."""
    if state_dir is None:
        return None
    path = Path(state_dir) / f"{benchmark}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if doc.get("fingerprint") == fp else None


def save(state_dir: str | Path | None, benchmark: str, fp: str, result: dict) -> None:
    """Write one finished benchmark atomically (a killed job leaves the old file or the new one)."""
    if state_dir is not None:
        write_json(Path(state_dir) / f"{benchmark}.json", {**result, "fingerprint": fp}, indent=None)


def clear(state_dir: str | Path | None) -> None:
    """Drop the state once the final outputs exist."""
    if state_dir is not None:
        shutil.rmtree(state_dir, ignore_errors=True)
