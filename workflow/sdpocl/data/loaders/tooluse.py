"""Tool-use sources: ToolAlpaca (training and in-domain test) and BFCL v4 (benchmark)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sdpocl.data.loaders.common import RowError, _record

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


#: BFCL categories whose every entry is one call (the tool reward merges the inputs of all calls,
#: so parallel calls of one function cannot be represented); multi-turn, memory, web-search and
#: format-sensitivity need an executable environment; java/javascript use non-JSON types.
BFCL_CATEGORIES = ("simple_python", "multiple", "live_simple", "live_multiple")
BFCL_DATA_URL = (
    "https://raw.githubusercontent.com/ShishirPatil/gorilla/main/berkeley-function-call-leaderboard/bfcl_eval/data/"
)


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
    ((fname, args),) = truth[0].items()
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
    return [
        _record(TOOL_PROMPT.format(tools=tools, question=question), answer, "tooluse", "bfcl_v4", solution=solution)
    ]
