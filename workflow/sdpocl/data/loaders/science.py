"""Science-style multiple choice: SciKnowEval (training), MMLU-Redux and ZebraLogic (benchmarks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sdpocl.data.loaders.common import _LETTERS, RowError, _field, _record

#: data/format/sciknoweval.py SYSTEM_PROMPT (verbatim, leading newline included)
SCIKNOWEVAL_SYSTEM = """
Given a question and four options, please select the right answer. Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>

For the answer, only output the letter corresponding to the correct option (A, B, C, or D), and nothing else. Do not restate the answer text. For example, if the answer is "A", just output:
<answer>
A
</answer>
"""


def _options_block(texts: Sequence[str]) -> str:
    """``A: ...\\nB: ...`` as in the public SciKnowEval formatter."""
    return "\n".join(f"{_LETTERS[i]}: {str(t).strip()}" for i, t in enumerate(texts))


def _mc_system(k: int) -> str:
    """SciKnowEval's system prompt, for ``k`` options (verbatim for the paper's k = 4)."""
    if k == 4:
        return SCIKNOWEVAL_SYSTEM
    words = {2: "two", 3: "three", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    letters = f"{_LETTERS[0]} or {_LETTERS[1]}" if k == 2 else ", ".join(_LETTERS[: k - 1]) + f", or {_LETTERS[k - 1]}"
    return SCIKNOWEVAL_SYSTEM.replace("four options", f"{words.get(k, str(k))} options").replace(
        "(A, B, C, or D)", f"({letters})"
    )


def _science_mc(question: str, options: Sequence[str], correct: int, dataset: str) -> dict[str, Any]:
    """A multiple-choice record in the SciKnowEval format, scored by the science reward."""
    if not 0 <= correct < len(options):
        raise RowError(f"correct option {correct} out of range for {len(options)} options")
    letter = _LETTERS[correct]
    prompt = question.strip() + "\n\n" + _options_block(options) + "\nPlease reason step by step."
    return _record(
        prompt, letter, "science", dataset, solution=f"<answer>{letter}</answer>", system=_mc_system(len(options))
    )


def select_sciknoweval(row: Mapping[str, Any]) -> bool:
    """Chemistry, level L3, four-option multiple choice (the paper's SCIENCE stage)."""
    details = row.get("details") or {}
    return (
        row.get("domain") == "Chemistry"
        and row.get("type") == "mcq-4-choices"
        and isinstance(details, Mapping)
        and details.get("level") == "L3"
    )


def convert_sciknoweval(row: Mapping[str, Any], seed: int) -> list[dict]:
    """SciKnowEval: the public code's system prompt and ``question + options + step-by-step``."""
    # Schema: SciKnowEval README / eval format (question, choices={text, label}, answerKey, type,
    # domain, details={level, task, subtask}); filter and prompt from lasgroup/SDPO
    # data/format/sciknoweval.py (load_dataset("hicai-zju/SciKnowEval", split="test")).
    choices = _field(row, "choices")
    texts, labels = list(choices.get("text") or []), list(choices.get("label") or [])
    key = str(_field(row, "answerKey")).strip()
    if key not in labels:
        raise RowError(f"answerKey {key!r} not among the labels {labels}")
    if labels != list(_LETTERS[: len(labels)]):
        raise RowError(f"unexpected option labels {labels}")
    return [_science_mc(_field(row, "question"), texts, labels.index(key), "sciknoweval")]


def select_mmlu_redux(row: Mapping[str, Any]) -> bool:
    """Only questions the MMLU-Redux annotators marked ``ok`` (as lm-eval's generative task,
    which reads fxmarty/mmlu-redux-2.0-ok); the others have wrong, missing or several answers."""
    return row.get("error_type", "ok") == "ok"


def convert_mmlu_redux(row: Mapping[str, Any], seed: int) -> list[dict]:
    """MMLU-Redux: SciKnowEval-style multiple choice (the tiny preset's MMLU-Redux analogue uses
    the science reward too; the paper does not show this benchmark's prompt)."""
    # Schema: edinburgh-dawg/mmlu-redux-2.0, one config per MMLU subject, split test (question,
    # choices, answer (index), error_type, source, ...) -- lighteval/evalscope/lm-eval task configs.
    choices = list(_field(row, "choices"))
    try:
        correct = int(row["answer"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RowError(f"answer index {row.get('answer')!r}") from exc
    return [_science_mc(_field(row, "question"), choices, correct, "mmlu_redux")]


def convert_zebralogic(row: Mapping[str, Any], seed: int) -> list[dict]:
    """ZebraLogic mc_mode: puzzle + question + lettered choices, science reward (grid_mode needs a
    grid checker this project has no reward for)."""
    # Schema: WildEval/ZebraLogic config mc_mode split test (id, puzzle, question, choices, answer,
    # created_at) -- several public loaders (e.g. ``load_dataset("WildEval/ZebraLogic", "mc_mode")``).
    choices = [str(c) for c in _field(row, "choices")]
    answer = str(_field(row, "answer")).strip()
    matches = [i for i, c in enumerate(choices) if c.strip() == answer]
    if len(matches) != 1:
        raise RowError(f"answer {answer!r} is not exactly one of the choices {choices}")
    question = str(_field(row, "puzzle")).strip() + "\n\n" + str(_field(row, "question")).strip()
    return [_science_mc(question, choices, matches[0], "zebralogic")]
