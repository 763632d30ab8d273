"""Math sources: DAPO-Math-17k (training), AIME 24/25, MATH-500 and GPQA-diamond (benchmarks)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from sdpocl.data.loaders.common import _LETTERS, RowError, _field, _record
from sdpocl.data.synthetic.common import _stable_int

#: data/format/prompts.py PROMPT = "{problem}\n\nPlease reason step by step, and put ..."
MATH_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."

#: data/format/gpqa.py PROMPT
GPQA_PROMPT = (
    "Return your final response within \\boxed{{}} and only include the letter choice "
    "({letters}) as your final response.\nProblem: {problem}\nOptions: {options}\nAnswer:"
)


def _boxed(answer: str) -> str:
    return f"\\boxed{{{answer}}}"


_DAPO_PREFIX = re.compile(r"^\s*Solve the following math problem step by step\..*?\n\n", re.DOTALL)
_DAPO_SUFFIX = re.compile(r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$")


def _math_record(problem: str, answer: Any, dataset: str) -> dict[str, Any]:
    answer = str(answer).strip()
    if not answer:
        raise RowError("empty answer")
    return _record(problem.strip() + MATH_SUFFIX, answer, "math", dataset, solution=_boxed(answer))


def convert_dapo(row: Mapping[str, Any], seed: int) -> list[dict]:
    """DAPO-Math-17k: the raw problem is cut out of DAPO's "Answer:"-format instruction, which
    would contradict the paper's \\boxed{} instruction."""
    # Schema: BytedTsinghua-SIA/DAPO-Math-17k card (data_source, prompt=[{content, role}], ability,
    # reward_model={ground_truth, style}, extra_info={index}); template text as stripped by
    # open-r1/DAPO-Math-17k-Processed and lasgroup/SDPO examples/data_preprocess/dapo_math_processed.py.
    prompt = row.get("prompt")
    if isinstance(prompt, list):  # the original chat layout
        prompt = next((m.get("content") for m in prompt if m.get("role") == "user"), None)
    if not isinstance(prompt, str) or not prompt.strip():
        raise RowError("no user prompt")
    problem, n_pre = _DAPO_PREFIX.subn("", prompt, count=1)
    problem, n_suf = _DAPO_SUFFIX.subn("", problem, count=1)
    if n_pre != n_suf:
        raise RowError("DAPO instruction template only half present")
    reward_model = row.get("reward_model") or {}
    answer = reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None
    if answer is None:
        answer = row.get("solution")  # open-r1/DAPO-Math-17k-Processed mirror
    if answer is None:
        raise RowError("no reward_model.ground_truth")
    return [_math_record(problem, answer, "dapo_math")]


def _convert_math_benchmark(dataset: str) -> Callable[[Mapping[str, Any], int], list[dict]]:
    def convert(row: Mapping[str, Any], seed: int) -> list[dict]:
        return [_math_record(_field(row, "problem", "Problem"), _field(row, "answer", "Answer"), dataset)]

    convert.__doc__ = f"{dataset}: problem + the paper's math suffix; the reference answer is boxed."
    return convert


# Schema: HuggingFaceH4/aime_2024 card (id, problem, solution, answer, url, year; split train);
# lm-eval's aime24 uses Maxwell-Jia/AIME_2024 (ID, Problem, Solution, Answer) -- both spellings read.
convert_aime24 = _convert_math_benchmark("aime24")
# Schema: lm-eval lm_eval/tasks/aime/aime25.yaml (math-ai/aime25, split test, {{problem}} {{answer}}).
convert_aime25 = _convert_math_benchmark("aime25")
# Schema: HuggingFaceH4/MATH-500 (problem, solution, answer, subject, level, unique_id; split test).
convert_math500 = _convert_math_benchmark("math500")


def convert_gpqa(row: Mapping[str, Any], seed: int) -> list[dict]:
    """GPQA-diamond: options shuffled by a rng seeded from (seed, question) -- the public code
    shuffled with the global, unseeded ``random`` -- and the letter answered in \\boxed{}, so the
    math reward scores it (normalised string equality of the boxed letter)."""
    # Schema: Idavidrein/gpqa config gpqa_diamond split train (Question, Correct Answer,
    # Incorrect Answer 1-3, Record ID, ...); prompt from lasgroup/SDPO data/format/gpqa.py.
    question = str(_field(row, "Question")).strip()
    correct = str(_field(row, "Correct Answer")).strip()
    options = [correct] + [str(_field(row, f"Incorrect Answer {i}")).strip() for i in (1, 2, 3)]
    key = row.get("Record ID") or question
    random.Random(_stable_int("gpqa-options", seed, key)).shuffle(options)
    letters = _LETTERS[: len(options)]
    letter = letters[options.index(correct)]
    prompt = GPQA_PROMPT.format(
        letters=", ".join(letters[:-1]) + f", or {letters[-1]}",
        problem=question,
        options=", ".join(f"{L}) {o}" for L, o in zip(letters, options)),
    )
    return [_record(prompt, letter, "math", "gpqa_diamond", solution=_boxed(letter))]
