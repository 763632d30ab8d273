"""Data and benchmark loaders of the *paper* preset (real datasets through ``datasets``).

Every source is converted to the common record schema of :mod:`sdpocl.domains`::

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
    bfcl_v4               benchmark  tooluse  test (single-call AST categories)
    livecodebench_v6      benchmark  code     test (contest date in [2025-02-01, 2025-05-01))

In-domain evaluation uses ``sciknoweval``/``toolalpaca``/``dolci_code`` ``test`` and AIME.

Prompts follow the paper's public code (``PAPER.md``, "prompts of the public code"); where a
source needs a format the public code does not show, the choice is documented at its converter.
Each converter names where its source schema was confirmed (``Schema:`` comment); the
assumptions that could not be confirmed are collected here:

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

import base64
import json
import logging
import os
import pickle
import random
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .domains import _stable_int

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
]

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# prompts of the paper's public code (lasgroup/SDPO data/format/*.py, as forked in
# yuki-younai/SDPO-Unify and devvrit/SDPO_custom)
# --------------------------------------------------------------------------------------------

#: data/format/prompts.py PROMPT = "{problem}\n\nPlease reason step by step, and put ..."
MATH_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."

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

#: data/format/prompts.py CODE_PROMPT
CODE_PROMPT = (
    "You are a coding expert. You will be given a coding problem, and you need to write a correct "
    "Python program that matches the specification and passes all tests. The time limit is 1 second. "
    "You may start by outlining your thought process. In the end, please provide the complete code "
    "in a code block enclosed with ``` ```.\n\n{problem}"
)

#: data/format/gpqa.py PROMPT
GPQA_PROMPT = (
    "Return your final response within \\boxed{{}} and only include the letter choice "
    "({letters}) as your final response.\nProblem: {problem}\nOptions: {options}\nAnswer:"
)

#: the tool-use prompt of the public code's datasets/tooluse/{train,test}.json (ReAct, no system)
TOOL_PROMPT = (
    "Your task is to answer the user's question using available tools. \n"
    "You have access to the following tools:\n"
    "{tools}"
    "Use the following format:\n"
    "Thought: you should always think about what to do\n"
    "Action: the action to take, should be one of the tool names.\n"
    "Action Input: the input to the action, must be in JSON format. "
    "All of the action input must be realistic and from the user.\n\n"
    "Begin!\n"
    "Question: {question}"
)

#: appended to stdin/stdout code problems, because the code reward runs the model's code block
#: first and the tests after it (see the module docstring)
STDIN_NOTE = (
    "\n\nYour program reads the input from standard input and writes the answer to standard output. "
    "Put all of it in a function `main()` and call it only under `if __name__ == \"__main__\":`."
)

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class RowError(ValueError):
    """A source row that cannot be converted (the caller adds the source name and row index)."""


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _record(prompt: str, answer: str, domain: str, dataset: str, solution: str = "",
            tests: Sequence[str] = (), system: str | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "prompt": prompt.rstrip(),  # a prompt never ends in whitespace (tokenisation trap, NOTES.md)
        "answer": answer,
        "tests": list(tests),
        "domain": domain,
        "dataset": dataset,
        "solution": solution,
    }
    if system is not None:
        rec["system"] = system
    return rec


def _field(row: Mapping[str, Any], *names: str) -> Any:
    """The first present, non-empty column of ``names`` (mirrors spell columns differently)."""
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    raise RowError(f"missing column {' / '.join(names)}")


def _boxed(answer: str) -> str:
    return f"\\boxed{{{answer}}}"


def _options_block(texts: Sequence[str]) -> str:
    """``A: ...\\nB: ...`` as in the public SciKnowEval formatter."""
    return "\n".join(f"{_LETTERS[i]}: {str(t).strip()}" for i, t in enumerate(texts))


def _mc_system(k: int) -> str:
    """SciKnowEval's system prompt, for ``k`` options (verbatim for the paper's k = 4)."""
    if k == 4:
        return SCIKNOWEVAL_SYSTEM
    words = {2: "two", 3: "three", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    letters = (f"{_LETTERS[0]} or {_LETTERS[1]}" if k == 2
               else ", ".join(_LETTERS[: k - 1]) + f", or {_LETTERS[k - 1]}")
    return (SCIKNOWEVAL_SYSTEM.replace("four options", f"{words.get(k, str(k))} options")
            .replace("(A, B, C, or D)", f"({letters})"))


def _science_mc(question: str, options: Sequence[str], correct: int, dataset: str) -> dict[str, Any]:
    """A multiple-choice record in the SciKnowEval format, scored by the science reward."""
    if not 0 <= correct < len(options):
        raise RowError(f"correct option {correct} out of range for {len(options)} options")
    letter = _LETTERS[correct]
    prompt = question.strip() + "\n\n" + _options_block(options) + "\nPlease reason step by step."
    return _record(prompt, letter, "science", dataset, solution=f"<answer>{letter}</answer>",
                   system=_mc_system(len(options)))


def _json_object(text: Any, what: str) -> dict:
    if isinstance(text, dict):
        return text
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise RowError(f"{what} is not JSON: {text!r:.80}") from exc
    if not isinstance(obj, dict):
        raise RowError(f"{what} is not a JSON object: {text!r:.80}")
    return obj


def _tool_answer(calls: Sequence[tuple[str, dict]]) -> tuple[str, str]:
    """Reference (JSON of action names + merged input, as ``tooluse_reward`` expects) and the
    matching minimal ReAct completion (one ``Action``/``Action Input`` pair per call)."""
    merged: dict = {}
    for _, inp in calls:
        merged.update(inp)
    answer = json.dumps({"actions": [name for name, _ in calls], "input": merged}, ensure_ascii=False)
    solution = "\n".join(f"Action: {name}\nAction Input: {json.dumps(inp, ensure_ascii=False)}"
                         for name, inp in calls)
    return answer, solution


# --------------------------------------------------------------------------------------------
# math
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# science-style multiple choice
# --------------------------------------------------------------------------------------------


def select_sciknoweval(row: Mapping[str, Any]) -> bool:
    """Chemistry, level L3, four-option multiple choice (the paper's SCIENCE stage)."""
    details = row.get("details") or {}
    return (row.get("domain") == "Chemistry" and row.get("type") == "mcq-4-choices"
            and isinstance(details, Mapping) and details.get("level") == "L3")


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


# --------------------------------------------------------------------------------------------
# tool use
# --------------------------------------------------------------------------------------------


def _toolalpaca_prompt(api: Mapping[str, Any], question: str) -> str:
    doc = api.get("NLDocumentation")
    if not isinstance(doc, str) or not doc.strip():
        functions = api.get("Function_Description") or {}
        doc = "\n".join(f"{k}: {v}" for k, v in functions.items() if k != "components" and v)
    if not doc.strip():
        raise RowError("API without documentation")
    tools = (f"Name: {api.get('Name', '')}\nDescription: {api.get('Description', '')}\n"
             f"Documentation:\n{doc.rstrip()}\n\n")
    return TOOL_PROMPT.format(tools=tools, question=question.strip())


def _toolalpaca_functions(api: Mapping[str, Any]) -> set[str]:
    functions = api.get("Function_Description") or api.get("Function_Projection") or {}
    return {k for k in functions if k != "components"}


def convert_toolalpaca(row: Mapping[str, Any], seed: int) -> list[dict]:
    """ToolAlpaca: one row is an API; every instruction becomes a record.

    eval files (``Instructions`` + ``Golden_Answers``): the golden calls are the reference,
    verbatim. train file (``Instances``): the calls of ``intermediate_steps`` to the API's own
    functions are the reference; as in ToolAlpaca's build_dataset.py an instance is dropped when it
    has no step or more than five, and it is also dropped when it used ``getDetails`` (its later
    inputs came from the user's reply, not from the question); such drops are by design, not
    errors. An instruction whose action input is not a JSON object is skipped with a warning.
    The reference never enters the prompt."""
    # Schema: tangqiaoyu/ToolAlpaca README "Data format" + build_dataset.py (Instances: input,
    # output, Final Thought, intermediate_steps=[[[action, action_input, text], observation]]);
    # data/eval_simulated.json (Instructions, Golden_Answers=[[{Action, Action_Input}]]); prompt
    # text from the public code's datasets/tooluse/test.json (yuki-younai/SDPO-Unify).
    if "Golden_Answers" in row:
        items = [(q, [(c.get("Action") or "", c.get("Action_Input", "{}")) for c in golden])
                 for q, golden in zip(row.get("Instructions") or [], row["Golden_Answers"])]
    else:
        functions = _toolalpaca_functions(row)
        if not functions:
            raise RowError("API without Function_Description")
        items = []
        for inst in row.get("Instances") or []:
            steps = inst.get("intermediate_steps") or []
            if not steps or len(steps) > 5 or any(step[0][0] == "getDetails" for step in steps):
                continue
            calls = [(step[0][0], step[0][1]) for step in steps if step[0][0] in functions]
            if calls:
                items.append((str(inst.get("input", "")).rsplit("\nHint: ", 1)[0], calls))
    out: list[dict] = []
    bad = 0
    for question, raw_calls in items:
        try:
            calls = [(str(name).strip(), _json_object(inp, "action input")) for name, inp in raw_calls]
            if not calls or not all(name for name, _ in calls):
                raise RowError("empty call list or action name")
        except RowError as exc:  # one bad instruction does not discard the API's other ones
            bad += 1
            log.warning("toolalpaca: API %r: skipping instruction %r: %s", row.get("Name"), question[:60], exc)
            continue
        answer, solution = _tool_answer(calls)
        out.append(_record(_toolalpaca_prompt(row, question), answer, "tooluse", "toolalpaca",
                           solution=solution))
    if bad and not out:
        raise RowError(f"none of the API's {bad} instructions has valid calls")
    return out


#: BFCL categories whose every entry is one call (the tool reward merges the inputs of all calls,
#: so parallel calls of one function cannot be represented); multi-turn, memory, web-search and
#: format-sensitivity need an executable environment; java/javascript use non-JSON types.
BFCL_CATEGORIES = ("simple_python", "multiple", "live_simple", "live_multiple")
BFCL_DATA_URL = ("https://raw.githubusercontent.com/ShishirPatil/gorilla/main/"
                 "berkeley-function-call-leaderboard/bfcl_eval/data/")


def _bfcl_first(value: Any) -> Any:
    """One concrete value of a BFCL "possible answer": dicts are themselves possible-answer maps
    (recurse), lists are literal values whose dict elements recurse."""
    if isinstance(value, dict):
        out = {}
        for key, options in value.items():
            if not isinstance(options, list) or not options:
                raise RowError(f"possible answer of {key!r} is not a non-empty list")
            first = options[0]
            if first == "":  # the first listed option is "omit this optional parameter"
                continue
            out[key] = _bfcl_first(first)
        return out
    if isinstance(value, list):
        return [_bfcl_first(v) for v in value]
    return value


def _bfcl_tool_doc(fn: Mapping[str, Any]) -> str:
    params = fn.get("parameters") or {}
    required = set(params.get("required") or [])
    described = {}
    for name, spec in (params.get("properties") or {}).items():
        spec = spec or {}
        text = f"{'Required' if name in required else 'Optional'}. {spec.get('type', 'any')}."
        if spec.get("enum"):
            text += f" One of: [{', '.join(map(str, spec['enum']))}]."
        if spec.get("description"):
            text += f" {spec['description']}"
        for sub in ("items", "properties"):
            if spec.get(sub):
                text += f" {sub}: {json.dumps(spec[sub], ensure_ascii=False)}"
        described[name] = text
    return f"{fn['name']}: {fn.get('description', '')}\nParameters: {json.dumps(described, ensure_ascii=False)}"


def convert_bfcl(row: Mapping[str, Any], seed: int) -> list[dict]:
    """BFCL v4 (single-turn, single-call): the functions are documented ToolAlpaca-style in the
    same ReAct prompt; the reference takes the first listed value of every parameter (omitting
    one whose first option is "" = optional). Exact-match reward, so stricter than BFCL's AST
    checker, which accepts any listed value. Rows of other shapes are dropped (counted)."""
    # Schema: ShishirPatil/gorilla berkeley-function-call-leaderboard/bfcl_eval/data/
    # BFCL_v4_simple_python.json (id, question=[[{role, content}]], function=[{name, description,
    # parameters={type: dict, properties, required}}]) and possible_answer/BFCL_v4_*.json
    # (id, ground_truth=[{function: {param: [acceptable values]}}]); answers joined by id.
    truth = row.get("ground_truth")
    turns = row.get("question") or []
    if truth is None or len(turns) != 1 or not isinstance(truth, list) or len(truth) != 1:
        return []  # irrelevance (no truth), multi-turn or parallel: not representable
    (fname, args), = truth[0].items()
    functions = row.get("function") or []
    if fname not in {f.get("name") for f in functions}:
        raise RowError(f"ground-truth function {fname!r} is not among the offered functions")
    messages = [m for m in turns[0] if m.get("content")]
    if len(messages) == 1:
        question = messages[0]["content"]
    else:
        question = "\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)
    tools = "".join(_bfcl_tool_doc(f) + "\n" for f in functions) + "\n"
    answer, solution = _tool_answer([(fname, _bfcl_first(args))])
    return [_record(TOOL_PROMPT.format(tools=tools, question=question), answer, "tooluse", "bfcl_v4",
                    solution=solution)]


# --------------------------------------------------------------------------------------------
# code
# --------------------------------------------------------------------------------------------

#: per-test helper of functional (LeetCode-style) tests: newline-separated JSON arguments, a JSON
#: result, a tuple compared as a list -- LiveCodeBench's call-based grading. Accepts a
#: ``class Solution`` method or a top-level function (the public code strips ``self``).
_CALL_HELPER = '''\
def _sdpocl_call(fn_name, args_text):
    import json
    args = [json.loads(line) for line in args_text.strip().split("\\n") if line.strip()]
    namespace = globals()
    fn = getattr(namespace["Solution"](), fn_name) if "Solution" in namespace else namespace[fn_name]
    result = fn(*args)
    return list(result) if isinstance(result, tuple) else result
'''

#: per-test helper of stdin/stdout tests: runs ``main()`` with redirected streams and compares
#: stripped lines, tokens equal or equal as decimals (LiveCodeBench's stdio grading).
_STDIO_HELPER = '''\
def _sdpocl_stdio(stdin_text, expected):
    import io, sys
    from decimal import Decimal, InvalidOperation
    buffer = io.BytesIO()
    new_in = io.TextIOWrapper(io.BytesIO(stdin_text.encode("utf-8")), encoding="utf-8")
    new_out = io.TextIOWrapper(buffer, encoding="utf-8", write_through=True)
    old = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = new_in, new_out
    try:
        globals()["main"]()
    except SystemExit:
        pass
    finally:
        new_out.flush()
        sys.stdin, sys.stdout = old
    got = [line.strip() for line in buffer.getvalue().decode("utf-8").strip().splitlines()]
    want = [line.strip() for line in expected.strip().splitlines()]
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt):
            return False
        for a, b in zip(gt, wt):
            if a != b:
                try:
                    if Decimal(a) != Decimal(b):
                        return False
                except (InvalidOperation, ValueError):
                    return False
    return True
'''


def functional_test(fn_name: str, args_text: str, expected_json: str) -> str:
    """A self-contained test string for a call-based problem."""
    return (_CALL_HELPER + f"assert _sdpocl_call({fn_name!r}, {args_text!r}) == "
            f"__import__('json').loads({expected_json!r})\n")


def stdio_test(stdin_text: str, expected: str) -> str:
    """A self-contained test string for a stdin/stdout problem (needs ``main()``)."""
    return _STDIO_HELPER + f"assert _sdpocl_stdio({stdin_text!r}, {expected!r})\n"


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # a test payload is a plain str: no classes
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def decode_lcb_tests(value: Any) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or (later releases' private tests) the JSON text
    pickled, zlib-compressed and base64-encoded. Unpickled without any globals."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        raw = zlib.decompress(base64.b64decode(value.encode("utf-8")))
        import io

        text = _NoGlobals(io.BytesIO(raw)).load()
        return json.loads(text)
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as exc:
        raise RowError(f"undecodable test cases ({type(exc).__name__})") from exc


def _lcb_date(row: Mapping[str, Any]) -> datetime:
    value = row.get("contest_date")
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=None)
    except ValueError as exc:
        raise RowError(f"contest_date {value!r}") from exc


def _lcb_window(since: str | None, until: str | None) -> Callable[[Mapping[str, Any]], bool]:
    lo = datetime.fromisoformat(since) if since else None
    hi = datetime.fromisoformat(until) if until else None

    def select(row: Mapping[str, Any]) -> bool:
        try:
            date = _lcb_date(row)
        except RowError as exc:
            log.warning("LiveCodeBench problem %r left out: %s", row.get("question_id"), exc)
            return False
        return (lo is None or date >= lo) and (hi is None or date < hi)

    select.__doc__ = f"LiveCodeBench problems with contest date in [{since}, {until})."
    return select


def _signature(starter: str) -> str:
    """The ``def`` line of LeetCode starter code, without ``self`` (as the public code)."""
    match = re.search(r"def [^\n]*", starter)
    if not match:
        raise RowError("starter code without a def")
    return match.group(0).strip().replace("(self, ", "(").replace("(self)", "()")


def _convert_lcb(dataset: str) -> Callable[[Mapping[str, Any], int], list[dict]]:
    def convert(row: Mapping[str, Any], seed: int) -> list[dict]:
        problem = str(_field(row, "question_content")).strip()
        cases = decode_lcb_tests(row.get("public_test_cases")) + decode_lcb_tests(row.get("private_test_cases"))
        if not cases:
            raise RowError("no test cases")
        starter = str(row.get("starter_code") or "")
        if starter.strip():  # call-based (LeetCode)
            sig = _signature(starter)
            meta = row.get("metadata") or {}
            meta = json.loads(meta) if isinstance(meta, str) and meta.strip() else dict(meta or {})
            fn_name = meta.get("func_name") or re.match(r"def (\w+)", sig).group(1)
            problem += f"\n\nYour solution should have the following signature: ```python\n{sig}\n```"
            tests = [functional_test(fn_name, c["input"], c["output"]) for c in cases]
        else:  # stdin/stdout (AtCoder, Codeforces)
            problem += STDIN_NOTE
            tests = [stdio_test(c["input"], c["output"]) for c in cases]
        return [_record(CODE_PROMPT.format(problem=problem), "", "code", dataset, tests=tests)]

    convert.__doc__ = (f"{dataset}: the public code's code prompt; public + private tests become "
                       "assert strings (call-based or stdin/stdout via main()).")
    return convert


# Schema: LiveCodeBench lcb_runner/benchmarks/code_generation.py (question_title,
# question_content, platform, question_id, contest_id, contest_date, starter_code, difficulty,
# public_test_cases/private_test_cases = JSON [{input, output, testtype}], metadata = JSON
# {func_name}); compressed private tests and the release_v6 file list (test.jsonl .. test6.jsonl)
# as in the public LCB loaders; window and signature line from lasgroup/SDPO
# data/utils/livecodebench.py (LCB_TEST_CUTOFF 2025-02-01, until 2025-05-01).
convert_livecodebench_v6 = _convert_lcb("livecodebench_v6")
convert_livecodebench_train = _convert_lcb("livecodebench_train")


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def select_dolci_code(row: Mapping[str, Any]) -> bool:
    """Rows verified by a code verifier (``dataset`` ``code`` or ``code_stdio``)."""
    return any(d in ("code", "code_stdio") for d in _as_list(row.get("dataset")))


def _expand_json_lists(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, str) and item.strip()[:1] in "[{":
            try:
                item = json.loads(item)
            except ValueError:
                out.append(item)
                continue
        if isinstance(item, list):
            out.extend(item)
        else:
            out.append(item)
    return out


def convert_dolci_code(row: Mapping[str, Any], seed: int) -> list[dict]:
    """Dolci-Think-RL code rows: ``code`` rows carry assert strings (used as the tests),
    ``code_stdio`` rows stdin/stdout pairs (turned into main()-based tests). ASSUMED schema."""
    # Schema (assumed, see module docstring): allenai/Dolci-Think-RL-7B split train with prompt
    # (str), ground_truth (list[str]), dataset (list[str]) as on the Dolci-Instruct-RL and
    # Dolci-RL-Zero-Code-7B cards; label formats of open-instruct's CodeVerifier ("tests: list of
    # test cases or a JSON string representation of a list").
    prompt = str(_field(row, "prompt"))
    if prompt.startswith("user: "):  # some Dolci prompts carry a role prefix
        prompt = prompt[len("user: "):]
    truth = _expand_json_lists(_as_list(row.get("ground_truth")))
    if "code_stdio" in _as_list(row.get("dataset")):
        pairs = [t for t in truth if isinstance(t, Mapping) and "input" in t and "output" in t]
        if not pairs or len(pairs) != len(truth):
            raise RowError("code_stdio ground truth is not a list of {input, output}")
        tests = [stdio_test(str(p["input"]), str(p["output"])) for p in pairs]
        prompt = prompt.rstrip() + STDIN_NOTE
    else:
        tests = [t for t in truth if isinstance(t, str) and t.strip()]
        if not tests or len(tests) != len(truth) or not any("assert" in t for t in tests):
            raise RowError("code ground truth is not a list of assert strings")
    return [_record(CODE_PROMPT.format(problem=prompt.strip()), "", "code", "dolci_code", tests=tests)]


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------

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
    some (documented at the converter); otherwise such a row is an error.
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
    notes: str = ""


MMLU_SUBJECTS = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge",
    "college_biology", "college_chemistry", "college_computer_science", "college_mathematics",
    "college_medicine", "college_physics", "computer_security", "conceptual_physics", "econometrics",
    "electrical_engineering", "elementary_mathematics", "formal_logic", "global_facts",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_european_history", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics",
    "high_school_physics", "high_school_psychology", "high_school_statistics",
    "high_school_us_history", "high_school_world_history", "human_aging", "human_sexuality",
    "international_law", "jurisprudence", "logical_fallacies", "machine_learning", "management",
    "marketing", "medical_genetics", "miscellaneous", "moral_disputes", "moral_scenarios",
    "nutrition", "philosophy", "prehistory", "professional_accounting", "professional_law",
    "professional_medicine", "professional_psychology", "public_relations", "security_studies",
    "sociology", "us_foreign_policy", "virology", "world_religions",
)

_LCB = "hf://datasets/livecodebench/code_generation_lite/"
_LCB_FILES = tuple(_LCB + f for f in ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl",
                                      "test5.jsonl", "test6.jsonl"))
_TOOLALPACA = "https://raw.githubusercontent.com/tangqiaoyu/ToolAlpaca/main/data/"

SOURCES: dict[str, Source] = {s.name: s for s in (
    # ---- training sets -------------------------------------------------------------------
    Source("dapo_math", "BytedTsinghua-SIA/DAPO-Math-17k", None, {"train": "train"}, "math", "train",
           convert_dapo, dedupe=True,
           notes="the hub split repeats every problem ~100 times: prompts are deduplicated"),
    Source("sciknoweval", "hicai-zju/SciKnowEval", None, {"train": "test", "test": "test"}, "science",
           "train", convert_sciknoweval, select=select_sciknoweval, holdout=0.1),
    Source("toolalpaca", None, None,
           {"train": (_TOOLALPACA + "train_data.json",), "test": (_TOOLALPACA + "eval_simulated.json",)},
           "tooluse", "train", convert_toolalpaca, reader="json_document", skip_invalid=True,
           notes="LLM-generated: a few action inputs are not JSON objects (skipped, counted)"),
    Source("dolci_code", "allenai/Dolci-Think-RL-7B", None, {"train": "train", "test": "train"}, "code",
           "train", convert_dolci_code, select=select_dolci_code, holdout=0.1, skip_invalid=True,
           notes="schema assumed; rows whose ground truth is not in a recognised test format are "
                 "skipped and counted"),
    Source("livecodebench_train", None, None, {"train": _LCB_FILES}, "code", "train",
           convert_livecodebench_train, reader="json_lines", select=_lcb_window(None, "2025-02-01")),
    # ---- benchmarks ----------------------------------------------------------------------
    Source("aime24", "HuggingFaceH4/aime_2024", None, {"test": "train"}, "math", "benchmark", convert_aime24),
    Source("aime25", "math-ai/aime25", None, {"test": "test"}, "math", "benchmark", convert_aime25),
    Source("math500", "HuggingFaceH4/MATH-500", None, {"test": "test"}, "math", "benchmark", convert_math500),
    Source("gpqa_diamond", "Idavidrein/gpqa", "gpqa_diamond", {"test": "train"}, "math", "benchmark",
           convert_gpqa, notes="gated on the hub (needs an accepted licence and a token)"),
    Source("mmlu_redux", "edinburgh-dawg/mmlu-redux-2.0", None, {"test": "test"}, "science", "benchmark",
           convert_mmlu_redux, configs=MMLU_SUBJECTS, select=select_mmlu_redux),
    Source("zebralogic", "WildEval/ZebraLogic", "mc_mode", {"test": "test"}, "science", "benchmark",
           convert_zebralogic),
    Source("bfcl_v4", None, None,
           {"test": tuple(BFCL_DATA_URL + f"BFCL_v4_{c}.json" for c in BFCL_CATEGORIES)}, "tooluse",
           "benchmark", convert_bfcl, reader="json_lines", answers_dir="possible_answer"),
    Source("livecodebench_v6", None, None, {"test": _LCB_FILES[4:]}, "code", "benchmark",
           convert_livecodebench_v6, reader="json_lines", select=_lcb_window("2025-02-01", "2025-05-01"),
           notes="test5.jsonl + test6.jsonl hold every problem of the window"),
)}


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


def _answers_for(files: list[str], answers_dir: str) -> dict[str, Any]:
    """BFCL's possible answers: same file names in ``answers_dir`` beside each question file."""
    answer_files = []
    for f in files:
        head, _, tail = f.rpartition("/")
        answer_files.append(f"{head}/{answers_dir}/{tail}" if head else f"{answers_dir}/{tail}")
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
        answers = _answers_for(files, src.answers_dir)
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


def load_records(name: str, split: str, *, seed: int = 42, n: int | None = None,
                 data_files: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Records of ``name``/``split`` (see :func:`prepare_paper_dataset`), without writing them."""
    src = _check(name, split)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n must be a non-negative integer or None, got {n!r}")
    indexed: Iterable[tuple[int, Any]] = (
        (i, row) for i, row in enumerate(_iter_source(src, split, data_files))
        if src.select is None or src.select(row))  # lazy: DAPO's hub split has 1.8M rows
    if src.holdout is not None:
        pool = list(indexed)
        indexed = [pool[j] for j in _holdout_indices(len(pool), split, src.holdout, seed)]
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    invalid = dropped = 0
    for index, row in indexed:
        try:
            converted = src.convert(row, seed)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            if not src.skip_invalid:
                raise ValueError(f"{name} ({split}): cannot convert row {index}: {exc}") from exc
            invalid += 1
            log.log(logging.WARNING if invalid <= 10 else logging.DEBUG,
                    "%s (%s): skipping row %d: %s", name, split, index, exc)
            continue
        if not converted:
            dropped += 1
        for rec in converted:
            if src.dedupe:
                if rec["prompt"] in seen:
                    continue
                seen.add(rec["prompt"])
            records.append(rec)
    if invalid:
        log.warning("%s (%s): %d unconvertible rows skipped (%s)", name, split, invalid, src.notes)
        if not records:
            raise ValueError(f"{name} ({split}): no row could be converted ({invalid} invalid)")
    if dropped:
        log.info("%s (%s): %d rows yield no record by design", name, split, dropped)
    if n is not None and n < len(records):
        keep = sorted(random.Random(_stable_int("paper-subsample", name, split, seed)).sample(range(len(records)), n))
        records = [records[i] for i in keep]
    elif n is not None and n > len(records):
        log.warning("%s (%s): %d records requested, only %d available", name, split, n, len(records))
    return records


def prepare_paper_dataset(name: str, split: str, out: Path, *, seed: int = 42, n: int | None = None,
                          data_files: str | None = None) -> int:
    """Load ``name``'s ``split`` (hub id, or local ``data_files`` in the source's own format for
    offline fixtures and mirrors), convert it to the common schema, write JSONL atomically and
    return the number of records.

    ``seed`` drives the seeded parts (hold-out split, GPQA option order, the subsample); ``n``
    keeps a seeded subsample of that many records (in source order; all if fewer exist).
    Unknown names or splits raise ``ValueError`` listing the valid ones; an unconvertible row
    raises ``ValueError`` naming the source and row index (skipped and counted for the sources
    with ``skip_invalid``).
    """
    records = load_records(name, split, seed=seed, n=n, data_files=data_files)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return len(records)
