"""Raw rows of a paper source, in source order: the hub, JSON lines, JSON documents, local files."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sdpocl.data.loaders.registry import Source

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}


def _file_list(files: str | Sequence[str]) -> list[str]:
    return [files] if isinstance(files, str) else list(files)


def _builder(files: list[str]) -> str:
    suffixes = {Path(f.split("?")[0]).suffix.lower() for f in files}
    builders = {_BUILDERS.get(s) for s in suffixes}
    if len(builders) != 1 or None in builders:
        raise ValueError(f"cannot tell the file format of {files} (use one of {sorted(_BUILDERS)})")
    return builders.pop()


def _text_rows(files: list[str], *, document: bool) -> Iterator[Any]:
    import datasets

    kwargs = {"sample_by": "document"} if document else {}
    ds = datasets.load_dataset("text", data_files=files, split="train", **kwargs)
    for item in ds:
        text = item["text"]
        if not text.strip():
            continue
        value = json.loads(text)
        if document and isinstance(value, list):
            yield from value
        else:
            yield value


def _answers_for(files: list[str], answers_dir: str, unanswered: Sequence[str] = ()) -> dict[str, Any]:
    """BFCL's possible answers: same file names in ``answers_dir`` beside each question file (none
    for the question files named in ``unanswered``)."""
    answer_files = []
    for f in files:
        head, _, tail = f.rpartition("/")
        if tail in unanswered:
            continue
        answer_files.append(f"{head}/{answers_dir}/{tail}" if head else f"{answers_dir}/{tail}")
    if not answer_files:
        return {}
    return {row["id"]: row.get("ground_truth") for row in _text_rows(answer_files, document=False)}


def iter_source(src: Source, split: str, data_files: str | Sequence[str] | None) -> Iterator[Any]:
    """Raw rows of ``src``'s ``split``, in source order."""
    import datasets

    if src.reader == "hub":
        if data_files is not None:
            files = _file_list(data_files)
            yield from datasets.load_dataset(_builder(files), data_files=files, split="train")
            return
        for config in src.configs or (src.config,):
            yield from datasets.load_dataset(src.hub_id, config, split=src.splits[split])
        return
    files = _file_list(data_files if data_files is not None else src.splits[split])
    rows = _text_rows(files, document=src.reader == "json_document")
    if src.answers_dir:
        answers = _answers_for(files, src.answers_dir, src.unanswered_files)
        rows = ({**row, "ground_truth": answers.get(row.get("id"))} for row in rows)
    yield from rows


def holdout_indices(n: int, split: str, fraction: float, seed: int) -> list[int]:
    import datasets

    parts = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(test_size=fraction, seed=seed)
    return list(parts[split]["i"])
