"""The ``bfcl`` reward on hand-written cases, one per rule of BFCL's AST checker it mirrors (the
real data and BFCL's own checker: tests/test_bfcl_real.py), and the ReAct call parser."""

from __future__ import annotations

import json

import pytest

from sdpocl.rewards import parse_tool_call_list, reward_for
from sdpocl.rewards.bfcl import check_bfcl, reference_calls, standardize_string

FN = {
    "name": "book",
    "description": "Book a trip.",
    "parameters": {
        "type": "dict",
        "required": ["city", "nights"],
        "properties": {
            "city": {"type": "string"},
            "nights": {"type": "integer"},
            "budget": {"type": "float"},
            "late": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "span": {"type": "tuple", "items": {"type": "integer"}},
            "guest": {"type": "dict", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}},
            "rooms": {"type": "array", "items": {"type": "dict"}},
            "note": {"type": "any"},
        },
    },
}
OTHER = {"name": "cancel", "description": "", "parameters": {"type": "dict", "required": [], "properties": {}}}
TRUTH = {
    "book": {
        "city": ["New York", "NYC"],
        "nights": [3],
        "budget": [500.0, ""],
        "late": [False, ""],
        "tags": [["beach", "Quiet"], ""],
        "span": [[1, 3]],
        "guest": [{"name": ["Ann Lee"], "age": [30, ""]}, ""],
        "rooms": [[{"beds": [2], "view": ["sea", ""]}], ""],
        "note": ["", "window seat"],
    }
}
BASE = {"city": "New York", "nights": 3, "span": [1, 3]}


def answer(category: str = "simple_python", truth=None, functions=None) -> str:
    return json.dumps(
        {"category": category, "functions": functions or [FN], "ground_truth": [TRUTH] if truth is None else truth}
    )


def score(*calls: tuple[str, dict], category: str = "simple_python", truth=None, functions=None) -> float:
    text = "Thought: let me book.\n" + "\n".join(f"Action: {n}\nAction Input: {json.dumps(a)}" for n, a in calls)
    return reward_for("bfcl")([text], answer=[answer(category, truth, functions)])[0]


def test_registered_with_trl_signature():
    ans = answer()
    assert reward_for("bfcl")(
        [[{"role": "assistant", "content": f"Action: book\nAction Input: {json.dumps(BASE)}"}]],
        answer=[ans],
        prompts=["p"],
        domain=["bfcl"],
    ) == [1.0]


@pytest.mark.parametrize(
    "args,want",
    [
        (BASE, 1.0),
        ({**BASE, "city": "NYC"}, 1.0),  # any listed value
        ({**BASE, "city": "new-york"}, 1.0),  # standardised: case, spaces and ,./-_*^ ignored
        ({**BASE, "city": "Boston"}, 0.0),
        ({"city": "New York", "span": [1, 3]}, 0.0),  # a required parameter missing
        ({"nights": 3, "city": "NYC", "span": [1, 3], "pets": 1}, 0.0),  # an unexpected parameter
        ({**BASE, "budget": 500}, 1.0),  # an int where a float is expected
        ({**BASE, "budget": 500.0}, 1.0),
        ({**BASE, "budget": 501.0}, 0.0),
        ({**BASE, "nights": 3.0}, 0.0),  # a float is no integer
        ({**BASE, "nights": True}, 0.0),  # nor a boolean
        ({**BASE, "late": False}, 1.0),
        ({**BASE, "late": 0}, 0.0),
        ({**BASE, "tags": ["Beach", "quiet"]}, 1.0),  # list items standardised too
        ({**BASE, "tags": ["quiet", "beach"]}, 0.0),  # order matters
        ({**BASE, "tags": ["beach", 1]}, 0.0),  # item type checked
        ({**BASE, "span": [1, 3.0]}, 0.0),  # ... one level deep, exactly
        ({"city": "NYC", "nights": 3}, 0.0),  # "span" lists no "": not optional
        ({**BASE, "guest": {"name": "ann lee"}}, 1.0),  # a possible-answer map: "age" lists ""
        ({**BASE, "guest": {"name": "Ann Lee", "age": 30}}, 1.0),
        ({**BASE, "guest": {"name": "Ann Lee", "age": 31}}, 0.0),
        ({**BASE, "guest": {"age": 30}}, 0.0),  # a key without "" missing
        ({**BASE, "guest": {"name": "Ann Lee", "vip": True}}, 0.0),  # an unexpected key
        ({**BASE, "rooms": [{"beds": 2}]}, 1.0),  # lists of dicts: map by map
        ({**BASE, "rooms": [{"beds": 2, "view": "Sea"}]}, 1.0),
        ({**BASE, "rooms": [{"beds": 2}, {"beds": 2}]}, 0.0),
        ({**BASE, "note": "Window-seat"}, 1.0),
    ],
)
def test_simple_function_checker_rules(args, want):
    assert score(("book", args)) == want


def test_values_inside_a_possible_answer_map_are_plain_values():
    """BFCL reads dicts below a dict parameter's map as literal values (a live_multiple row has
    one); 50 == 50.0 as in Python."""
    fn = {
        "name": "headway",
        "description": "",
        "parameters": {"type": "dict", "required": ["ego"], "properties": {"ego": {"type": "dict"}}},
    }
    truth = [{"headway": {"ego": [{"position": [{"lateral": 10.5, "longitudinal": 50}], "heading": [30]}]}}]
    ego = {"position": {"lateral": 10.5, "longitudinal": 50.0}, "heading": 30}
    assert score(("headway", {"ego": ego}), truth=truth, functions=[fn]) == 1.0
    moved = {**ego, "position": {"lateral": 10.5, "longitudinal": 51}}
    assert score(("headway", {"ego": moved}), truth=truth, functions=[fn]) == 0.0
    assert reference_calls(json.loads(answer(truth=truth, functions=[fn]))) == [("headway", {"ego": ego})]


def test_a_variable_typed_possible_answer_is_compared_as_a_plain_value():
    """type_checker: a listed value of another type than the schema's (a variable name in BFCL's
    data) is accepted at that type and compared without standardisation."""
    truth = [{"book": {"city": ["NYC"], "nights": ["n_nights"], "span": [[1, 3]]}}]
    assert score(("book", {"city": "NYC", "nights": "n_nights", "span": [1, 3]}), truth=truth) == 1.0
    assert score(("book", {"city": "NYC", "nights": "N_Nights", "span": [1, 3]}), truth=truth) == 0.0


def test_a_required_parameter_listing_only_empty_options_cannot_be_answered():
    truth = [{"book": {"city": [], "nights": [3], "span": [[1, 3]]}}]
    assert score(("book", {"nights": 3, "span": [1, 3]}), truth=truth) == 0.0
    assert score(("book", {"city": "NYC", "nights": 3, "span": [1, 3]}), truth=truth) == 0.0


def test_categories_route_as_bfcl_does():
    call = ("book", BASE)
    assert score(call, call) == 0.0  # simple: exactly one call
    assert score(("cancel", {})) == 0.0
    # simple checks the *first* offered function, multiple the expected one
    assert score(call, functions=[OTHER, FN]) == 0.0 and score(call, category="multiple", functions=[OTHER, FN]) == 1.0
    assert score(call, call, category="multiple", functions=[OTHER, FN]) == 0.0
    truth = [TRUTH, {"cancel": {}}]
    for category in ("parallel", "parallel_multiple", "live_parallel", "live_parallel_multiple"):
        both = dict(category=category, truth=truth, functions=[FN, OTHER])
        assert score(call, ("cancel", {}), **both) == score(("cancel", {}), call, **both) == 1.0
        assert score(call, **both) == score(call, ("cancel", {}), ("cancel", {}), **both) == 0.0
    assert score(category="parallel", truth=truth, functions=[FN, OTHER]) == 0.0  # no call


def test_parallel_matching_is_greedy_like_bfcl():
    """Expected call 0 accepts either city, expected call 1 only Boston: BFCL takes, for each
    expected call in turn, the first unmatched call it accepts -- so Boston first fails."""
    truth = [
        {"book": {"city": ["NYC", "Boston"], "nights": [3], "span": [[1, 3]]}},
        {"book": {"city": ["Boston"], "nights": [3], "span": [[1, 3]]}},
    ]
    nyc, boston = ("book", {**BASE, "city": "NYC"}), ("book", {**BASE, "city": "Boston"})
    assert score(nyc, boston, category="parallel", truth=truth) == 1.0
    assert score(boston, nyc, category="parallel", truth=truth) == 0.0


def test_irrelevance_is_right_without_a_call():
    for category in ("irrelevance", "live_irrelevance"):
        ans = answer(category, truth=[])
        texts = [
            "No tool fits.",
            "Action: book\nAction Input: city=NYC",  # does not decode: no call
            "Action: book",  # no input: no call
            f"Action: book\nAction Input: {json.dumps(BASE)}",
            'Action: anything\nAction Input: {"x": 1}',
        ]
        assert reward_for("bfcl")(texts, answer=[ans] * len(texts)) == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_malformed_calls_references_and_unknown_categories_score_zero(caplog):
    good = f"Action: book\nAction Input: {json.dumps(BASE)}"
    assert reward_for("bfcl")([good[: good.index("{") + 5]], answer=[answer()]) == [0.0]  # broken JSON
    assert reward_for("bfcl")([good, good], answer=["not json", json.dumps({"category": "x"})]) == [0.0, 0.0]
    assert reward_for("bfcl")([good], answer=[answer("simple_java")]) == [0.0]
    assert check_bfcl(json.loads(answer("multi_turn_base")), good) == (
        False,
        "category 'multi_turn_base' is not scored",
    )
    broken = json.dumps({"category": "simple_python", "functions": [{"name": "book"}], "ground_truth": [TRUTH]})
    assert reward_for("bfcl")([good], answer=[broken]) == [0.0]  # BFCL would stop; a warning here
    assert any("checker error" in r.getMessage() for r in caplog.records)


def test_standardize_string_as_bfcl():
    assert standardize_string("April 1, 2024") == standardize_string("april 1 2024") == "april12024"
    assert standardize_string("It's a/b_c-d*e^f.") == 'it"sabcdef'


def test_reference_choices():
    ref = json.loads(answer())
    first = dict(reference_calls(ref, "first"))["book"]
    assert first == {
        "city": "New York",
        "nights": 3,
        "budget": 500.0,
        "late": False,
        "tags": ["beach", "Quiet"],
        "span": [1, 3],
        "guest": {"name": "Ann Lee", "age": 30},
        "rooms": [{"beds": 2, "view": "sea"}],
    }
    assert dict(reference_calls(ref, "last"))["book"] == {**first, "city": "NYC", "note": "window seat"}
    assert dict(reference_calls(ref, "omit"))["book"] == {"city": "New York", "nights": 3, "span": [1, 3]}
    for choice in ("first", "last", "omit"):
        assert score(*reference_calls(ref, choice)) == 1.0
    with pytest.raises(ValueError, match="unknown choice"):
        reference_calls(ref, "random")


def test_parse_tool_call_list_keeps_calls_apart():
    text = (
        "<think>Action: no\nAction Input: {}</think> Thought: two.\n"
        'Action: `f`\nAction Input: {"q": "Action: g\\nAction Input: {}"}\n'
        'Observation: ok\nAction: f Action Input: {"q": 2}'
    )
    assert parse_tool_call_list(text) == [("f", {"q": "Action: g\nAction Input: {}"}), ("f", {"q": 2})]
    assert parse_tool_call_list("I would rather not.") == []
    for bad in (
        "Action: f",  # no input
        'Action: f\nAction: g\nAction Input: {"q": 1}',  # f has none of its own
        'Action Input: {"q": 1}',  # no action
        'Action: \nAction Input: {"q": 1}',  # no name
        "Action: f\nAction Input: [1]",  # not an object
        'Action: f\nAction Input:\n{"q": 1}',  # not on the Action Input line (as the tool-use reward)
    ):
        assert parse_tool_call_list(bad) is None, bad
