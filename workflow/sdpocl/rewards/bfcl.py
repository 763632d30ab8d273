"""BFCL v4 reward: BFCL's own AST checker (Python) applied to the calls of a ReAct completion.

Our own code, written to mirror ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` of the PyPI
package ``bfcl-eval`` 2026.3.23 (and the parts of ``eval_checker/eval_runner.py`` and
``utils.py`` that call it) rule for rule; every function names the checker function it follows.
``bfcl_eval`` is never imported (it pins numpy 1.26); ``tests/test_bfcl_real.py`` compares this
module with the real checker, taken from the wheel, on every row of the real data.

The record's ``answer`` is JSON ``{"category", "functions", "ground_truth"}``: the BFCL test
category (the id's prefix), the function documents offered to the model (BFCL's schema: each
parameter's ``type`` is a Python-flavoured name, ``dict``/``array``/``tuple``/...) and BFCL's
possible-answer list ``[{function: {parameter: [acceptable values]}}]`` (``null`` for the
irrelevance categories). The completion's calls are the ``Action:`` / ``Action Input:`` pairs of
the paper's ReAct format (:func:`sdpocl.rewards.tooluse.parse_tool_call_list`), one pair per call;
they play the part of BFCL's decoded model output ``[{name: {param: value}}, ...]``.

* AST categories (``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple`` and their
  ``live_`` counterparts): 1.0 iff the calls decode and :func:`ast_checker` accepts them.
* ``irrelevance`` / ``live_irrelevance``: 1.0 iff the completion makes no call (no decodable
  ``Action``/``Action Input`` pair), as ``_evaluate_single_relevance_entry`` decides.

Differences from running BFCL itself are in the output format, not in the checking: the model
writes JSON inputs instead of a Python call list, so there are no variables, tuples or
``underscore_to_dot`` renaming (``convert_func_name`` is the identity for prompt-based models).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from sdpocl.rewards.text import _column
from sdpocl.rewards.tooluse import parse_tool_call_list

log = logging.getLogger(__name__)

#: BFCL categories scored by the AST checker, and those scored as "no call expected"
BFCL_AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
BFCL_IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")

#: ast_checker.PYTHON_TYPE_MAPPING / PYTHON_NESTED_TYPE_CHECK_LIST
PYTHON_TYPE_MAPPING = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
PYTHON_NESTED_TYPE_CHECK_LIST = ("array", "tuple")

Result = tuple[bool, str]  # (valid, error) -- the checker's {"valid", "error"} dicts
_OK: Result = (True, "")


# --------------------------------------------------------------------------------------------
# the checker (ast_checker.py, Python branch)
# --------------------------------------------------------------------------------------------


def ast_checker(functions: list, model_output: list, possible_answer: list, category: str) -> Result:
    """``ast_checker``: parallel categories match calls without order, ``multiple`` ones check the
    single expected call, the others need exactly one call checked against the *first* offered
    function (BFCL's simple categories offer one)."""
    if "parallel" in category:
        return parallel_function_checker_no_order(functions, model_output, possible_answer)
    if "multiple" in category:
        return multiple_function_checker(functions, model_output, possible_answer)
    if len(model_output) != 1:
        return False, "wrong number of functions"
    return simple_function_checker(functions[0], model_output[0], possible_answer[0])


def find_description(functions: Any, name: str) -> dict | None:
    """``find_description``: the document of ``name`` (a lone dict is the only function)."""
    if isinstance(functions, list):
        for fn in functions:
            if fn["name"] == name:
                return fn
        return None
    return functions


def get_possible_answer_type(possible_answer: list) -> type | None:
    """``get_possible_answer_type``: the type of the first listed value that is not ``""``."""
    for answer in possible_answer:
        if answer != "":  # optional parameter
            return type(answer)
    return None


def type_checker(
    param: str,
    value: Any,
    possible_answer: list,
    expected_type_description: str,
    expected_type_converted: type,
    nested_type_converted: type | None,
) -> tuple[bool, str, bool]:
    """``type_checker`` -> (valid, error, is_variable). A value of the listed values' type where
    the schema says otherwise is a "variable" (accepted, then compared as a plain value); arrays
    and tuples also check their items against the item type, one level deep, and pass when some
    listed value is not a list (e.g. ``""``) -- all as BFCL does."""
    is_variable = False
    possible_answer_type = get_possible_answer_type(possible_answer)
    if possible_answer_type is not None and possible_answer_type is not expected_type_converted:
        is_variable = True

    if type(value) is expected_type_converted:  # exact types, as BFCL compares them
        if nested_type_converted is None:
            return True, "", is_variable
        for possible_answer_item in possible_answer:
            flag = True
            if type(possible_answer_item) is list:
                for value_item in value:
                    ok, _, _ = type_checker(
                        param,
                        value_item,
                        possible_answer_item,
                        str(nested_type_converted),
                        nested_type_converted,
                        None,
                    )
                    if not ok:
                        flag = False
                        break
            if flag:
                return True, "", is_variable
        return False, f"nested type checking failed for parameter {param!r}", False

    if possible_answer_type is not None and type(value) is possible_answer_type:
        return True, "", True  # a variable
    return False, f"incorrect type for parameter {param!r}: {type(value).__name__}", False


_STANDARDIZE = re.compile(r"[ \,\.\/\-\_\*\^]")


def standardize_string(input_string: str) -> str:
    """``standardize_string``: drop spaces and ``,./-_*^``, lower-case, ``'`` -> ``"``."""
    return _STANDARDIZE.sub("", input_string).lower().replace("'", '"')


def _standardized(values: Any) -> list:
    """The listed values with the strings standardised (BFCL's loops over ``range(len(...))``)."""
    return [standardize_string(values[i]) if type(values[i]) is str else values[i] for i in range(len(values))]


def string_checker(param: str, model_output: str, possible_answer: list) -> Result:
    """``string_checker``: the standardised string is among the standardised listed strings."""
    listed = [standardize_string(v) for v in possible_answer if type(v) is str]
    if standardize_string(model_output) not in listed:
        return False, f"invalid value for parameter {param!r}: {model_output!r}"
    return _OK


def list_checker(param: str, model_output: list, possible_answer: list) -> Result:
    """``list_checker``: the list, string items standardised, equals a listed list (likewise
    standardised; order matters)."""
    standardize_model_output = _standardized(list(model_output))
    standardize_possible_answer = [_standardized(possible_answer[i]) for i in range(len(possible_answer))]
    if standardize_model_output not in standardize_possible_answer:
        return False, f"invalid value for parameter {param!r}: {model_output!r}"
    return _OK


def dict_checker(param: str, model_output: dict, possible_answers: list) -> Result:
    """``dict_checker``: some listed dict (skipping ``""``) is a possible-answer map that accepts
    every key of the value (standardised strings; a value *inside* it is compared as a plain
    value, dicts included) and misses no key whose options lack ``""``."""
    result: Result = (False, f"no listed dict for parameter {param!r}")
    for i in range(len(possible_answers)):
        if possible_answers[i] == "":
            continue
        result = (False, "")
        flag = True
        possible_answer = possible_answers[i]
        for key, value in model_output.items():
            if key not in possible_answer:
                result = (False, f"unexpected dict key {key!r} in parameter {param!r}")
                flag = False
                break
            standardize_value = standardize_string(value) if type(value) is str else value
            if standardize_value not in _standardized(possible_answer[key]):
                result = (False, f"invalid value for dict key {key!r} of parameter {param!r}: {value!r}")
                flag = False
                break
        for key, value in possible_answer.items():
            if key not in model_output and "" not in value:
                result = (False, f"missing dict key {key!r} in parameter {param!r}")
                flag = False
                break
        if flag:
            return _OK
    return result


def list_dict_checker(param: str, model_output: list, possible_answers: list) -> Result:
    """``list_dict_checker``: a listed list of the same length whose dicts accept the value's
    dicts position by position (each through :func:`dict_checker`)."""
    result: Result = (False, f"no listed list of dicts for parameter {param!r}")
    for answer_index in range(len(possible_answers)):
        flag = True
        if len(model_output) != len(possible_answers[answer_index]):
            result = (False, f"wrong number of dictionaries in parameter {param!r}")
            continue
        for dict_index in range(len(model_output)):
            result = dict_checker(param, model_output[dict_index], [possible_answers[answer_index][dict_index]])
            if not result[0]:
                flag = False
                break
        if flag:
            return _OK
    return result


def simple_function_checker(func_description: dict, model_output: dict, possible_answer: dict) -> Result:
    """``simple_function_checker`` (Python): the call names the documented function; no required
    parameter is missing; every given parameter is documented *and* listed in the possible
    answer, passes :func:`type_checker` (an int where a float is expected counts as that float;
    tuples are lists after JSON) and its value checker (dict, list of dicts, string, list, or
    plain membership); every listed parameter not given lists ``""``."""
    possible_answer = list(possible_answer.values())[0]
    func_name = func_description["name"]
    param_details = func_description["parameters"]["properties"]
    required_params = func_description["parameters"]["required"]

    if func_name not in model_output:
        return False, f"function name {func_name!r} not found in model output"
    model_params = model_output[func_name]

    for param in required_params:
        if param not in model_params:
            return False, f"missing required parameter {param!r}"

    for param, value in model_params.items():
        if param not in param_details or param not in possible_answer:
            return False, f"unexpected parameter {param!r}"
        expected_type_description = param_details[param]["type"]
        expected_type_converted = PYTHON_TYPE_MAPPING[expected_type_description]
        nested_type_converted = None
        if expected_type_description in PYTHON_NESTED_TYPE_CHECK_LIST:
            nested_type_converted = PYTHON_TYPE_MAPPING[param_details[param]["items"]["type"]]

        if expected_type_description == "tuple" and type(value) is tuple:
            value = list(value)
        if expected_type_description == "float" and type(value) is int:  # not bool
            value = float(value)

        ok, error, is_variable = type_checker(
            param,
            value,
            possible_answer[param],
            expected_type_description,
            expected_type_converted,
            nested_type_converted,
        )
        if not ok:
            return False, error

        if not is_variable:
            if expected_type_converted is dict:
                result = dict_checker(param, value, possible_answer[param])
            elif expected_type_converted is list and nested_type_converted is dict:
                result = list_dict_checker(param, value, possible_answer[param])
            elif expected_type_converted is str:
                result = string_checker(param, value, possible_answer[param])
            elif expected_type_converted is list:
                result = list_checker(param, value, possible_answer[param])
            else:
                result = None
            if result is not None:
                if not result[0]:
                    return result
                continue

        if value not in possible_answer[param]:
            return False, f"invalid value for parameter {param!r}: {value!r}"

    for param in possible_answer:
        if param not in model_params and "" not in possible_answer[param]:
            return False, f"parameter {param!r} not provided and not optional"
    return _OK


def parallel_function_checker_no_order(functions: list, model_output: list, possible_answers: list) -> Result:
    """``parallel_function_checker_no_order``: as many calls as expected; each expected call, in
    order, takes the *first* still unmatched call it accepts (greedy, as BFCL does -- not a
    maximum matching)."""
    if len(model_output) != len(possible_answers):
        return False, "wrong number of functions"
    matched_indices: list[int] = []
    for i in range(len(possible_answers)):
        func_name_expected = list(possible_answers[i].keys())[0]
        func_description = find_description(functions, func_name_expected)
        result: Result = (False, "")
        for index in range(len(model_output)):
            if index in matched_indices:
                continue
            result = simple_function_checker(func_description, model_output[index], possible_answers[i])
            if result[0]:
                matched_indices.append(index)
                break
        if not result[0]:
            return False, f"no call matches expected call {i} ({func_name_expected}): {result[1]}"
    return _OK


def multiple_function_checker(functions: list, model_output: list, possible_answers: list) -> Result:
    """``multiple_function_checker``: as many calls as expected (one); the first is checked
    against the first expected call's function."""
    if len(model_output) != len(possible_answers):
        return False, "wrong number of functions"
    func_name_expected = list(possible_answers[0].keys())[0]
    func_description = find_description(functions, func_name_expected)
    return simple_function_checker(func_description, model_output[0], possible_answers[0])


# --------------------------------------------------------------------------------------------
# completions -> BFCL's decoded output, and the reward
# --------------------------------------------------------------------------------------------


def decode_calls(completion: Any) -> list[dict] | None:
    """The completion's calls as BFCL's decoded output ``[{name: {param: value}}, ...]``, or None
    when they do not decode (see :func:`~sdpocl.rewards.tooluse.parse_tool_call_list`)."""
    calls = parse_tool_call_list(completion)
    return None if calls is None else [{name: args} for name, args in calls]


def check_bfcl(reference: dict, completion: Any) -> Result:
    """(valid, why not) of one completion against a parsed BFCL reference (see module doc)."""
    category = reference["category"]
    decoded = decode_calls(completion)
    if "irrelevance" in category:
        # _evaluate_single_relevance_entry: a decodable, non-empty call list is a call
        return (True, "") if not decoded else (False, "a call where none is expected")
    if category not in BFCL_AST_CATEGORIES:
        return False, f"category {category!r} is not scored"
    if decoded is None:
        return False, "calls do not decode"
    return ast_checker(reference["functions"], decoded, reference["ground_truth"], category)


@functools.lru_cache(maxsize=256)
def _parse_reference(text: str) -> dict | None:
    try:
        ref = json.loads(text)
    except ValueError:
        return None
    if not isinstance(ref, dict) or not isinstance(ref.get("category"), str) or "ground_truth" not in ref:
        return None
    if not isinstance(ref.get("functions"), list):
        return None
    return ref


def load_bfcl_reference(answer: Any) -> dict | None:
    """The parsed ``answer`` column (JSON text or a dict), or None when malformed. Parsed
    references are shared between calls: callers must not modify them."""
    if isinstance(answer, dict):
        return _parse_reference(json.dumps(answer))
    if isinstance(answer, bytes):
        answer = answer.decode()
    return _parse_reference(answer) if isinstance(answer, str) else None


def bfcl_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff BFCL's AST checker accepts the completion's calls (irrelevance: iff it makes no
    call); 0.0 otherwise, also for a malformed reference or a checker error (a reference the
    loader let through never raises)."""
    answers = _column(answer, len(completions), "answer")
    out = []
    for completion, a in zip(completions, answers):
        ref = load_bfcl_reference(a)
        if ref is None:
            log.warning("bfcl_reward: malformed reference answer %r", str(a)[:200])
            out.append(0.0)
            continue
        try:
            ok, _ = check_bfcl(ref, completion)
        except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
            # BFCL itself would stop with this error; here the sample scores 0
            log.warning("bfcl_reward: checker error on %s: %r", ref.get("category"), exc)
            ok = False
        out.append(1.0 if ok else 0.0)
    return out


# --------------------------------------------------------------------------------------------
# concrete answers from a possible-answer list (references for the loader and the tests)
# --------------------------------------------------------------------------------------------

OMIT = object()  #: "leave this parameter out"
CHOICES = ("first", "last", "omit")


def _choose(options: Any, choice: str, *, optional: bool) -> Any:
    """A value for one parameter from its listed ``options``, or :data:`OMIT`.

    ``first``: the first listed value (omitted where it is ``""``); ``last``: the last listed value
    that is not ``""``; ``omit``: omitted wherever ``""`` is listed, else the first value. Only an
    ``optional`` parameter is ever omitted (the checker rejects a missing required one even where
    ``""`` is listed); a required one whose only listed value is ``""`` gets ``""``, which the
    string checker accepts."""
    if not isinstance(options, list):
        return OMIT
    values = [o for o in options if o != ""]
    can_omit = optional and "" in options
    if choice == "first":
        if options and options[0] == "" and can_omit:
            return OMIT
    elif choice == "omit":
        if can_omit:
            return OMIT
    elif choice == "last":
        values = values[::-1]
    else:
        raise ValueError(f"unknown choice {choice!r}; one of {', '.join(CHOICES)}")
    if values:
        return values[0]
    return "" if "" in options and not can_omit else OMIT


def concrete_value(value: Any, spec: Any, choice: str) -> Any:
    """A concrete value for one listed ``value`` of a parameter with schema ``spec``, read as the
    checker reads it: a dict of a ``dict`` parameter is a possible-answer map (its values are
    lists of options, each a plain value: :func:`dict_checker`); a list of an ``array`` of dicts
    holds such maps (:func:`list_dict_checker`); anything else is the value itself."""
    kind = spec.get("type") if isinstance(spec, dict) else None
    items = spec.get("items") if isinstance(spec, dict) else None
    if kind == "dict" and isinstance(value, dict):
        return _choose_map(value, choice)
    if (
        kind in PYTHON_NESTED_TYPE_CHECK_LIST
        and isinstance(items, dict)
        and items.get("type") == "dict"
        and isinstance(value, list)
        and all(isinstance(v, dict) for v in value)
    ):
        return [_choose_map(v, choice) for v in value]
    return json.loads(json.dumps(value))  # a copy


def _choose_map(possible: dict, choice: str) -> dict:
    """A dict for a possible-answer map: :func:`dict_checker` lets a key be left out where its
    options list ``""`` (no schema there), and compares the chosen values as plain values."""
    out = {}
    for key, options in possible.items():
        chosen = _choose(options, choice, optional=True)
        if chosen is not OMIT:
            out[key] = json.loads(json.dumps(chosen))
    return out


def reference_calls(reference: dict, choice: str = "first") -> list[tuple[str, dict]]:
    """One concrete call list for a parsed reference: every expected call in order, each
    parameter's value chosen from its listed values by ``choice`` (see :func:`_choose`);
    parameters the function's document lacks are left out (the checker rejects them as
    unexpected); ``[]`` for the irrelevance categories. The checker accepts the result unless it
    rejects every answer of the row (or, for parallel calls, BFCL's greedy matching rejects
    this particular set)."""
    calls = []
    for expected in reference.get("ground_truth") or []:
        ((name, params),) = expected.items()
        fn = find_description(reference["functions"], name) or {}
        schema = fn.get("parameters") or {}
        props = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        args = {}
        for param, options in params.items():
            if param not in props:
                continue
            chosen = _choose(options, choice, optional=param not in required)
            if chosen is not OMIT:
                args[param] = concrete_value(chosen, props[param], choice)
        calls.append((name, args))
    return calls


def react_text(calls: Sequence[tuple[str, dict]]) -> str:
    """Calls in the ReAct format the reward reads: one ``Action``/``Action Input`` pair per call."""
    return "\n".join(f"Action: {name}\nAction Input: {json.dumps(args, ensure_ascii=False)}" for name, args in calls)
