"""The registry of the *paper* preset's datasets: where each source lives and how its rows become records.

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

Prompts follow the paper's public code (``docs/paper.md``, "Prompts of the public code"); where a
source needs a format the public code does not show, the choice is documented at its converter.
The converters live in one module per source family (:mod:`.math`, :mod:`.science`,
:mod:`.tooluse`, :mod:`.code`); this module holds the registry, :mod:`.reader` reads a source's raw
rows and :mod:`.load` turns them into records. Each converter
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sdpocl.data.loaders.code import (
    _lcb_window,
    convert_dolci_code,
    convert_livecodebench_train,
    convert_livecodebench_v6,
    select_dolci_code,
)
from sdpocl.data.loaders.math import (
    convert_aime24,
    convert_aime25,
    convert_dapo,
    convert_gpqa,
    convert_math500,
)
from sdpocl.data.loaders.science import (
    convert_mmlu_redux,
    convert_sciknoweval,
    convert_zebralogic,
    select_mmlu_redux,
    select_sciknoweval,
)
from sdpocl.data.loaders.tooluse import (
    BFCL_CATEGORIES,
    BFCL_DATA_URL,
    BFCL_UNANSWERED_FILES,
    bfcl_category,
    convert_bfcl,
    convert_toolalpaca,
)

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


def source(name: str, split: str) -> Source:
    """The source ``name``, which must have ``split``; ``ValueError`` listing the valid ones otherwise."""
    if name not in SOURCES:
        raise ValueError(f"unknown paper dataset {name!r}; valid: {', '.join(sorted(SOURCES))}")
    src = SOURCES[name]
    if split not in src.splits:
        raise ValueError(f"dataset {name!r} has no split {split!r}; valid splits: {', '.join(src.splits)}")
    return src
