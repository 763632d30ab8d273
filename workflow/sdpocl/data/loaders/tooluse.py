"""Tool-use sources: ToolAlpaca (training and in-domain test) and BFCL v4 (benchmark)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sdpocl.data.loaders.common import RowError, _record
from sdpocl.rewards.bfcl import (
    BFCL_AST_CATEGORIES,
    BFCL_IRRELEVANCE_CATEGORIES,
    PYTHON_NESTED_TYPE_CHECK_LIST,
    PYTHON_TYPE_MAPPING,
    check_bfcl,
    react_text,
    reference_calls,
)

log = logging.getLogger(__name__)

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
    solution = "\n".join(f"Action: {name}\nAction Input: {json.dumps(inp, ensure_ascii=False)}" for name, inp in calls)
    return answer, solution


def _toolalpaca_prompt(api: Mapping[str, Any], question: str) -> str:
    doc = api.get("NLDocumentation")
    if not isinstance(doc, str) or not doc.strip():
        functions = api.get("Function_Description") or {}
        doc = "\n".join(f"{k}: {v}" for k, v in functions.items() if k != "components" and v)
    if not doc.strip():
        raise RowError("API without documentation")
    tools = (
        f"Name: {api.get('Name', '')}\nDescription: {api.get('Description', '')}\nDocumentation:\n{doc.rstrip()}\n\n"
    )
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
        items = [
            (q, [(c.get("Action") or "", c.get("Action_Input", "{}")) for c in golden])
            for q, golden in zip(row.get("Instructions") or [], row["Golden_Answers"])
        ]
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
        out.append(_record(_toolalpaca_prompt(row, question), answer, "tooluse", "toolalpaca", solution=solution))
    if bad and not out:
        raise RowError(f"none of the API's {bad} instructions has valid calls")
    return out


#: BFCL v4 categories loaded, each scored by :mod:`sdpocl.rewards.bfcl` as BFCL's AST checker does
#: (irrelevance ones: correct iff no call). Not loaded (docs/scoring.md, "BFCL v4"): multi-turn, memory and
#: web search need BFCL's executable environments, format sensitivity re-asks the AST categories
#: in other output formats, Java/JavaScript use non-JSON argument types, live_relevance (any call
#: is right) is left out of the category mean.
BFCL_CATEGORIES = BFCL_AST_CATEGORIES + BFCL_IRRELEVANCE_CATEGORIES
#: question files without a ``possible_answer/`` file (no call is expected)
BFCL_UNANSWERED_FILES = tuple(f"BFCL_v4_{c}.json" for c in BFCL_IRRELEVANCE_CATEGORIES)
BFCL_DATA_URL = (
    "https://raw.githubusercontent.com/ShishirPatil/gorilla/main/berkeley-function-call-leaderboard/bfcl_eval/data/"
)
#: what BFCL's own system prompt tells the model and the paper's ReAct prompt does not: several
#: calls (parallel categories) and no call (irrelevance) are answers too
BFCL_NOTE = (
    "Write one Action and Action Input pair for each function call; if the question needs several "
    "calls, write one pair per call. If none of the tools can be used, or the question lacks the "
    "parameters a tool requires, say so and write no Action.\n\n"
)
BFCL_PROMPT = TOOL_PROMPT.replace("\n\nBegin!\n", "\n\n" + BFCL_NOTE + "Begin!\n")


def bfcl_category(row: Mapping[str, Any]) -> str:
    """A BFCL row's test category: its id without the ``_<index>`` suffix (BFCL's ``sort_key``)."""
    entry_id = str(row.get("id") or "")
    return entry_id.split(":")[0].rsplit("_", 1)[0] if "_" in entry_id else "unknown"


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


def _bfcl_functions(row: Mapping[str, Any], *, allow_none: bool) -> list[dict]:
    functions = row.get("function")
    if not isinstance(functions, list) or not (functions or allow_none):
        raise RowError("no function documents")
    for fn in functions:
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RowError("a function document without a name")
        params = fn.get("parameters")
        if not isinstance(params, dict) or not isinstance(params.get("properties"), dict):
            raise RowError(f"function {fn['name']!r} has no parameter properties")
    return functions


def _bfcl_checkable(fn: Mapping[str, Any]) -> None:
    """What BFCL's checker reads from the document of a function it checks, present and of a type
    it knows (it would stop with an error otherwise, on any call of that function)."""
    params = fn["parameters"]
    if not isinstance(params.get("required"), list):
        raise RowError(f"function {fn['name']!r} has no list of required parameters")
    for name, spec in params["properties"].items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in PYTHON_TYPE_MAPPING:
            raise RowError(f"parameter {name!r} of {fn['name']!r} has a type BFCL's Python checker lacks: {kind!r}")
        if kind in PYTHON_NESTED_TYPE_CHECK_LIST:
            items = spec.get("items")
            if not isinstance(items, dict) or items.get("type") not in PYTHON_TYPE_MAPPING:
                raise RowError(f"parameter {name!r} of {fn['name']!r} has no item type BFCL's checker knows")


def _bfcl_truth(truth: Any, functions: list[dict], category: str) -> list[dict]:
    if not isinstance(truth, list) or not truth:
        raise RowError("no possible answer")
    by_name = {fn["name"]: fn for fn in functions}
    for expected in truth:
        if not isinstance(expected, dict) or len(expected) != 1:
            raise RowError("a possible answer is not one {function: parameters} map")
        ((name, params),) = expected.items()
        if not isinstance(params, dict):
            raise RowError(f"the possible answer of {name!r} is not a parameter map")
        if name not in by_name:
            raise RowError(f"expected function {name!r} is not among the offered functions")
        _bfcl_checkable(by_name[name])
    if "parallel" not in category and "multiple" not in category:
        _bfcl_checkable(functions[0])  # the simple categories check the first offered function
    return truth


def convert_bfcl(row: Mapping[str, Any], seed: int) -> list[dict]:
    """BFCL v4, the categories of :data:`BFCL_CATEGORIES`: one record per row, scored by the
    ``bfcl`` reward (BFCL's AST checker over the ReAct calls; irrelevance: no call).

    The prompt documents every offered function ToolAlpaca-style in the paper's ReAct prompt, plus
    :data:`BFCL_NOTE` (one pair per call; no call when no tool fits), which BFCL's own prompt says
    too. The question's messages (a system message included) are joined into the question. The
    record keeps what the checker needs: ``answer`` = JSON ``{"category", "functions",
    "ground_truth"}`` (BFCL's possible-answer list, ``null`` for irrelevance) and ``category``.
    ``solution`` is a checked reference (first listed values; else the last ones; else optional
    parameters omitted); it is ``""`` on the few rows whose every answer BFCL's checker rejects
    (e.g. an empty possible-answer list for a required parameter): they stay, and score 0 for
    every model as in BFCL. A row that cannot be represented raises :class:`RowError` (the
    source skips and counts it per category): another category, several turns, a missing or
    malformed possible answer, an expected function that is not offered, a parameter type
    BFCL's Python checker does not know."""
    # Schema: bfcl-eval 2026.3.23 (PyPI) bfcl_eval/data/BFCL_v4_<category>.json (id,
    # question=[[{role, content}]], function=[{name, description, parameters={type: dict,
    # properties, required}}]) and possible_answer/BFCL_v4_<category>.json (id,
    # ground_truth=[{function: {param: [acceptable values]}}]); answers joined by id.
    category = bfcl_category(row)
    if category not in BFCL_CATEGORIES:
        raise RowError(f"category {category!r} is not loaded")
    turns = row.get("question")
    if not isinstance(turns, list) or len(turns) != 1 or not isinstance(turns[0], list):
        raise RowError("not a single-turn question")
    messages = [m for m in turns[0] if isinstance(m, dict) and m.get("content")]
    if not messages:
        raise RowError("empty question")
    if len(messages) == 1:
        question = str(messages[0]["content"])
    else:
        question = "\n".join(f"{str(m.get('role', 'user')).capitalize()}: {m['content']}" for m in messages)
    # irrelevance rows may offer no function at all (4 live_irrelevance rows): no call is right
    functions = _bfcl_functions(row, allow_none=category in BFCL_IRRELEVANCE_CATEGORIES)
    if category in BFCL_IRRELEVANCE_CATEGORIES:
        truth = None
        solution = "Thought: none of the available tools can answer this question, so I call none."
    else:
        truth = _bfcl_truth(row.get("ground_truth"), functions, category)
    reference = {"category": category, "functions": functions, "ground_truth": truth}
    if truth is not None:
        solution = ""
        for choice in ("first", "last", "omit"):
            text = react_text(reference_calls(reference, choice))
            if check_bfcl(reference, text)[0]:
                solution = text
                break
        else:
            log.info("bfcl: %s: BFCL's checker rejects every answer; kept, it scores 0", row.get("id"))
    tools = "".join(_bfcl_tool_doc(f) + "\n" for f in functions) + "\n"
    rec = _record(
        BFCL_PROMPT.format(tools=tools, question=question),
        json.dumps(reference, ensure_ascii=False),
        "bfcl",
        "bfcl_v4",
        solution=solution,
    )
    rec["category"] = category
    return [rec]
