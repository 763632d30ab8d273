"""Data and benchmark loaders of the *paper* preset (real datasets through ``datasets``).

Every source is converted to the common record schema of :mod:`sdpocl.data.domains`::

    {"prompt": str, "answer": str, "tests": list[str], "domain": str,
     "dataset": str, "solution": str, optional "system": str}

``domain`` is the *reward family* that scores the record (a key of
:data:`sdpocl.rewards.REWARD_FUNCS`), ``dataset`` the source name below, ``solution`` a minimal
reference completion that the record's reward scores 1.0 (no reasoning; ``""`` when the source has
no reference, e.g. code benchmarks), ``system`` a system prompt where the paper's public code uses
one (SciKnowEval-style multiple choice).

Sources (:data:`SOURCES`; split -> where it comes from)::

    name                  role       reward   splits
    dapo_math             train      math     train (deduplicated prompts)
    sciknoweval           train      science  train/test: Chemistry L3 mcq-4-choices, seeded 90/10
    toolalpaca            train      tooluse  train (train_data.json) / test (eval_simulated.json)
    dolci_code            train      code     train/test: code rows of Dolci-Think-RL-7B, seeded 90/10
    livecodebench_train   train      code     train: LiveCodeBench problems before 2025-02-01
    aime24, aime25        benchmark  math     test
    math500               benchmark  math     test
    gpqa_diamond          benchmark  math     test (letter in \\boxed{}, seeded option order)
    mmlu_redux            benchmark  science  test (error_type == "ok" only)
    zebralogic            benchmark  science  test (mc_mode)
    bfcl_v4               benchmark  bfcl     test (AST categories + irrelevance; reward = BFCL's AST checker)
    livecodebench_v6      benchmark  code     test (contest date in [2025-02-01, 2025-05-01))

In-domain evaluation uses ``sciknoweval``/``toolalpaca``/``dolci_code`` ``test`` and AIME.

Prompts follow the paper's public code (``PAPER.md``, "prompts of the public code"); where a
source needs a format the public code does not show, the choice is documented at its converter.
The converters live in one module per source family (:mod:`.math`, :mod:`.science`,
:mod:`.tooluse`, :mod:`.code`); this module holds the registry and the loading. Each converter
names where its source schema was confirmed (``Schema:`` comment); the assumptions that could
not be confirmed are collected here:

* ``dolci_code``: the column layout of ``allenai/Dolci-Think-RL-7B`` (``prompt``, list-valued
  ``ground_truth`` and ``dataset`` columns) is taken from the sibling Dolci cards; that a code row's
  ``ground_truth`` holds assert strings (``dataset`` ``code``) or stdin/stdout pairs
  (``code_stdio``) follows open-instruct's code verifier and is NOT confirmed for this dataset.
* ``sciknoweval``: the hub repo has changed layout over time (per-domain configs vs one default
  config); the public code loads it with no config, as done here.
* ``toolalpaca`` train: ``data/train_data.json`` is named in the ToolAlpaca README (the file itself
  was not inspected); its ``Instances`` layout is confirmed by the README and ``build_dataset.py``.
* code rewards are assert strings run after the model's code block (``sdpocl.rewards``), so stdin
  problems ask for a ``main()`` function under an ``if __name__ == "__main__":`` guard, and the
  tests call ``main()`` with redirected standard streams (a deviation from the public prompt,
  needed by this project's code reward; programs reading ``open(0)`` are not supported).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdpocl.data.domains import _stable_int
from sdpocl.data.loaders.code import (
    CODE_PROMPT,
    _lcb_window,
    convert_dolci_code,
    convert_livecodebench_train,
    convert_livecodebench_v6,
    decode_lcb_tests,
    select_dolci_code,
)
from sdpocl.data.loaders.common import RowError
from sdpocl.data.loaders.math import (
    GPQA_PROMPT,
    MATH_SUFFIX,
    convert_aime24,
    convert_aime25,
    convert_dapo,
    convert_gpqa,
    convert_math500,
)
from sdpocl.data.loaders.science import (
    SCIKNOWEVAL_SYSTEM,
    convert_mmlu_redux,
    convert_sciknoweval,
    convert_zebralogic,
    select_mmlu_redux,
    select_sciknoweval,
)
from sdpocl.data.loaders.tooluse import (
    BFCL_CATEGORIES,
    BFCL_DATA_URL,
    BFCL_NOTE,
    BFCL_UNANSWERED_FILES,
    TOOL_PROMPT,
    bfcl_category,
    convert_bfcl,
    convert_toolalpaca,
)
from sdpocl.io import write_jsonl

__all__ = [
    "Source",
    "SOURCES",
    "TRAINING_SETS",
    "IN_DOMAIN_EVAL",
    "OOD_BENCHMARKS",
    "RowError",
    "load_records",
    "prepare_paper_dataset",
    "MATH_SUFFIX",
    "SCIKNOWEVAL_SYSTEM",
    "CODE_PROMPT",
    "GPQA_PROMPT",
    "TOOL_PROMPT",
    "BFCL_NOTE",
    "decode_lcb_tests",
]

log = logging.getLogger(__name__)


Converter = Callable[[Mapping[str, Any], int], list]


@dataclass(frozen=True)
class Source:
    """Where a dataset lives and how its rows become records.

    ``splits`` maps this project's split names to the hub split (``reader="hub"``) or to the
    remote files of that split (other readers). ``reader`` is ``hub`` (``load_dataset(hub_id,
    config)``), ``json_lines`` (JSON lines read as text, so heterogeneous nested rows are not
    coerced into one Arrow schema) or ``json_document`` (whole JSON files). With ``holdout`` the
    (filtered) rows of the one source split are divided into ``train``/``test`` by
    ``Dataset.train_test_split(test_size=holdout, seed=seed)`` -- the public code's
    ``data/split_tasks.py`` -- so the split is deterministic for a seed and disjoint.
    ``skip_invalid`` turns unconvertible rows into a counted warning, for sources known to contain
    some (documented at the converter); otherwise such a row is an error. ``group`` names a raw
    row's group (BFCL: its test category): rows, records and skipped rows are then counted and
    logged per group (:func:`load_records`'s ``stats``). ``answers_dir``: the files of the same
    names in that directory beside the question files hold each row's ``ground_truth`` (joined by
    ``id``), except for the question files named in ``unanswered_files``.
    """

    name: str
    hub_id: str | None
    config: str | None
    splits: Mapping[str, Any]
    domain: str
    role: str
    convert: Converter
    reader: str = "hub"
    configs: tuple[str, ...] = ()
    select: Callable[[Mapping[str, Any]], bool] | None = None
    holdout: float | None = None
    dedupe: bool = False
    skip_invalid: bool = False
    answers_dir: str | None = None  # BFCL: possible answers beside the questions, joined by id
    unanswered_files: tuple[str, ...] = ()  # question files (base names) without an answers file
    group: Callable[[Mapping[str, Any]], str] | None = None
    notes: str = ""


MMLU_SUBJECTS = (
    "abstract_algebra",
    "anatomy",
    "astronomy",
    "business_ethics",
    "clinical_knowledge",
    "college_biology",
    "college_chemistry",
    "college_computer_science",
    "college_mathematics",
    "college_medicine",
    "college_physics",
    "computer_security",
    "conceptual_physics",
    "econometrics",
    "electrical_engineering",
    "elementary_mathematics",
    "formal_logic",
    "global_facts",
    "high_school_biology",
    "high_school_chemistry",
    "high_school_computer_science",
    "high_school_european_history",
    "high_school_geography",
    "high_school_government_and_politics",
    "high_school_macroeconomics",
    "high_school_mathematics",
    "high_school_microeconomics",
    "high_school_physics",
    "high_school_psychology",
    "high_school_statistics",
    "high_school_us_history",
    "high_school_world_history",
    "human_aging",
    "human_sexuality",
    "international_law",
    "jurisprudence",
    "logical_fallacies",
    "machine_learning",
    "management",
    "marketing",
    "medical_genetics",
    "miscellaneous",
    "moral_disputes",
    "moral_scenarios",
    "nutrition",
    "philosophy",
    "prehistory",
    "professional_accounting",
    "professional_law",
    "professional_medicine",
    "professional_psychology",
    "public_relations",
    "security_studies",
    "sociology",
    "us_foreign_policy",
    "virology",
    "world_religions",
)

_LCB = "hf://datasets/livecodebench/code_generation_lite/"
_LCB_FILES = tuple(
    _LCB + f for f in ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")
)
_TOOLALPACA = "https://raw.githubusercontent.com/tangqiaoyu/ToolAlpaca/main/data/"

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        # ---- training sets -------------------------------------------------------------------
        Source(
            "dapo_math",
            "BytedTsinghua-SIA/DAPO-Math-17k",
            None,
            {"train": "train"},
            "math",
            "train",
            convert_dapo,
            dedupe=True,
            notes="the hub split repeats every problem ~100 times: prompts are deduplicated",
        ),
        Source(
            "sciknoweval",
            "hicai-zju/SciKnowEval",
            None,
            {"train": "test", "test": "test"},
            "science",
            "train",
            convert_sciknoweval,
            select=select_sciknoweval,
            holdout=0.1,
        ),
        Source(
            "toolalpaca",
            None,
            None,
            {"train": (_TOOLALPACA + "train_data.json",), "test": (_TOOLALPACA + "eval_simulated.json",)},
            "tooluse",
            "train",
            convert_toolalpaca,
            reader="json_document",
            skip_invalid=True,
            notes="LLM-generated: a few action inputs are not JSON objects (skipped, counted)",
        ),
        Source(
            "dolci_code",
            "allenai/Dolci-Think-RL-7B",
            None,
            {"train": "train", "test": "train"},
            "code",
            "train",
            convert_dolci_code,
            select=select_dolci_code,
            holdout=0.1,
            skip_invalid=True,
            notes="schema assumed; rows whose ground truth is not in a recognised test format are skipped and counted",
        ),
        Source(
            "livecodebench_train",
            None,
            None,
            {"train": _LCB_FILES},
            "code",
            "train",
            convert_livecodebench_train,
            reader="json_lines",
            select=_lcb_window(None, "2025-02-01"),
        ),
        # ---- benchmarks ----------------------------------------------------------------------
        Source("aime24", "HuggingFaceH4/aime_2024", None, {"test": "train"}, "math", "benchmark", convert_aime24),
        Source("aime25", "math-ai/aime25", None, {"test": "test"}, "math", "benchmark", convert_aime25),
        Source("math500", "HuggingFaceH4/MATH-500", None, {"test": "test"}, "math", "benchmark", convert_math500),
        Source(
            "gpqa_diamond",
            "Idavidrein/gpqa",
            "gpqa_diamond",
            {"test": "train"},
            "math",
            "benchmark",
            convert_gpqa,
            notes="gated on the hub (needs an accepted licence and a token)",
        ),
        Source(
            "mmlu_redux",
            "edinburgh-dawg/mmlu-redux-2.0",
            None,
            {"test": "test"},
            "science",
            "benchmark",
            convert_mmlu_redux,
            configs=MMLU_SUBJECTS,
            select=select_mmlu_redux,
        ),
        Source(
            "zebralogic", "WildEval/ZebraLogic", "mc_mode", {"test": "test"}, "science", "benchmark", convert_zebralogic
        ),
        Source(
            "bfcl_v4",
            None,
            None,
            {"test": tuple(BFCL_DATA_URL + f"BFCL_v4_{c}.json" for c in BFCL_CATEGORIES)},
            "bfcl",
            "benchmark",
            convert_bfcl,
            reader="json_lines",
            skip_invalid=True,
            answers_dir="possible_answer",
            unanswered_files=BFCL_UNANSWERED_FILES,
            group=bfcl_category,
            notes="rows BFCL's Python AST checker cannot represent are skipped and counted per category",
        ),
        Source(
            "livecodebench_v6",
            None,
            None,
            {"test": _LCB_FILES[4:]},
            "code",
            "benchmark",
            convert_livecodebench_v6,
            reader="json_lines",
            select=_lcb_window("2025-02-01", "2025-05-01"),
            notes="test5.jsonl + test6.jsonl hold every problem of the window",
        ),
    )
}


#: the paper's stage order and each stage's training set
TRAINING_SETS = {"math": "dapo_math", "science": "sciknoweval", "tooluse": "toolalpaca", "code": "dolci_code"}
#: in-domain evaluation per training domain: (source, split)
IN_DOMAIN_EVAL = {
    "math": (("aime24", "test"), ("aime25", "test")),
    "science": (("sciknoweval", "test"),),
    "tooluse": (("toolalpaca", "test"),),
    "code": (("dolci_code", "test"),),
}
#: the paper's out-of-distribution benchmarks (split ``test``)
OOD_BENCHMARKS = ("math500", "gpqa_diamond", "bfcl_v4", "livecodebench_v6", "zebralogic", "mmlu_redux")


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------

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


def _iter_source(src: Source, split: str, data_files: str | Sequence[str] | None) -> Iterator[Any]:
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


def _holdout_indices(n: int, split: str, fraction: float, seed: int) -> list[int]:
    import datasets

    parts = datasets.Dataset.from_dict({"i": list(range(n))}).train_test_split(test_size=fraction, seed=seed)
    return list(parts[split]["i"])


def _check(name: str, split: str) -> Source:
    if name not in SOURCES:
        raise ValueError(f"unknown paper dataset {name!r}; valid: {', '.join(sorted(SOURCES))}")
    src = SOURCES[name]
    if split not in src.splits:
        raise ValueError(f"dataset {name!r} has no split {split!r}; valid splits: {', '.join(src.splits)}")
    return src


#: the per-group counts of load_records(stats=...)
_GROUP_COUNTS = ("rows", "skipped", "no_record", "converted", "without_reference", "records")


def load_records(
    name: str,
    split: str,
    *,
    seed: int = 42,
    n: int | None = None,
    data_files: str | Sequence[str] | None = None,
    stats: dict | None = None,
) -> list[dict[str, Any]]:
    """Records of ``name``/``split`` (see :func:`prepare_paper_dataset`), without writing them.

    A ``stats`` dict is filled with the counts: ``rows`` read (after the source's selection),
    ``skipped`` (unconvertible, for ``skip_invalid`` sources), ``no_record`` (rows that yield no
    record by design), ``converted`` records and ``records`` returned (after the subsample); for
    sources with a ``group``, ``groups`` holds the same counts per group, plus
    ``without_reference`` (records whose ``solution`` is empty -- BFCL: rows on which BFCL's
    checker rejects every answer), and a log line per group reports them."""
    src = _check(name, split)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n must be a non-negative integer or None, got {n!r}")
    indexed: Iterable[tuple[int, Any]] = (
        (i, row) for i, row in enumerate(_iter_source(src, split, data_files)) if src.select is None or src.select(row)
    )  # lazy: DAPO's hub split has 1.8M rows
    if src.holdout is not None:
        pool = list(indexed)
        indexed = [pool[j] for j in _holdout_indices(len(pool), split, src.holdout, seed)]
    records: list[dict[str, Any]] = []
    record_groups: list[str | None] = []
    groups: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    rows = invalid = dropped = 0
    for index, row in indexed:
        rows += 1
        group = None
        if src.group is not None:
            group = src.group(row)
            counts = groups.setdefault(group, dict.fromkeys(_GROUP_COUNTS, 0))
            counts["rows"] += 1
        try:
            converted = src.convert(row, seed)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            if not src.skip_invalid:
                raise ValueError(f"{name} ({split}): cannot convert row {index}: {exc}") from exc
            invalid += 1
            if group is not None:
                groups[group]["skipped"] += 1
            log.log(
                logging.WARNING if invalid <= 10 else logging.DEBUG,
                "%s (%s): skipping row %d%s: %s",
                name,
                split,
                index,
                "" if group is None else f" ({group})",
                exc,
            )
            continue
        if not converted:
            dropped += 1
            if group is not None:
                groups[group]["no_record"] += 1
        for rec in converted:
            if src.dedupe:
                if rec["prompt"] in seen:
                    continue
                seen.add(rec["prompt"])
            records.append(rec)
            record_groups.append(group)
            if group is not None:
                groups[group]["converted"] += 1
                groups[group]["without_reference"] += not rec.get("solution")
    if invalid:
        log.warning("%s (%s): %d unconvertible rows skipped (%s)", name, split, invalid, src.notes)
        if not records:
            raise ValueError(f"{name} ({split}): no row could be converted ({invalid} invalid)")
    if dropped:
        log.info("%s (%s): %d rows yield no record by design", name, split, dropped)
    converted_total = len(records)
    if n is not None and n < len(records):
        keep = sorted(random.Random(_stable_int("paper-subsample", name, split, seed)).sample(range(len(records)), n))
        records = [records[i] for i in keep]
        record_groups = [record_groups[i] for i in keep]
    elif n is not None and n > len(records):
        log.warning("%s (%s): %d records requested, only %d available", name, split, n, len(records))
    for group in record_groups:
        if group is not None:
            groups[group]["records"] += 1
    for group, counts in groups.items():
        log.log(
            logging.WARNING if counts["skipped"] else logging.INFO,
            "%s (%s): %s: %d rows, %d converted (%d without a reference), %d skipped, %d records kept",
            name,
            split,
            group,
            counts["rows"],
            counts["converted"],
            counts["without_reference"],
            counts["skipped"],
            counts["records"],
        )
    if stats is not None:
        stats.update(
            rows=rows,
            skipped=invalid,
            no_record=dropped,
            converted=converted_total,
            records=len(records),
        )
        if src.group is not None:
            stats["groups"] = groups
    return records


def prepare_paper_dataset(
    name: str,
    split: str,
    out: Path,
    *,
    seed: int = 42,
    n: int | None = None,
    data_files: str | None = None,
    stats: dict | None = None,
) -> int:
    """Load ``name``'s ``split`` (hub id, or local ``data_files`` in the source's own format for
    offline fixtures and mirrors), convert it to the common schema, write JSONL atomically and
    return the number of records.

    ``seed`` drives the seeded parts (hold-out split, GPQA option order, the subsample); ``n``
    keeps a seeded subsample of that many records (in source order; all if fewer exist).
    Unknown names or splits raise ``ValueError`` listing the valid ones; an unconvertible row
    raises ``ValueError`` naming the source and row index (skipped and counted for the sources
    with ``skip_invalid``). ``stats`` receives the counts of :func:`load_records`.
    """
    records = load_records(name, split, seed=seed, n=n, data_files=data_files, stats=stats)
    write_jsonl(out, records, ensure_ascii=False)
    return len(records)
