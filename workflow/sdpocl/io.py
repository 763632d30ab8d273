"""Atomic file writers: a reader (or a killed job's rerun) never sees a half-written output.

Each writer writes a temporary file beside the target and renames it into place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | Path, obj: Any, **dumps_kwargs) -> Path:
    """``json.dumps(obj, **dumps_kwargs)`` written atomically (``indent=2`` unless given)."""
    dumps_kwargs.setdefault("indent", 2)
    return write_text(path, json.dumps(obj, **dumps_kwargs))


def write_jsonl(path: str | Path, records: Iterable[Any], *, ensure_ascii: bool = True) -> Path:
    """One JSON line per record, written atomically."""
    return write_text(path, "".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in records))


def write_csv(df, path: str | Path) -> Path:
    """A DataFrame as CSV (no index), written atomically."""
    return write_text(path, df.to_csv(index=False))


def read_jsonl(path: str | Path) -> list[dict]:
    """Every non-empty line of a JSONL file, parsed."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
