"""Tests for sdpocl.rewards (binary rewards, TRL signature)."""

from __future__ import annotations

import json

import pytest

from sdpocl import rewards
from sdpocl.rewards import (
    REWARD_FUNCS,
    boxed_count,
    code_reward,
    completion_text,
    extract_boxed,
    extract_code_block,
    math_reward,
    parse_tests,
    reward_for,
    science_reward,
    tooluse_reward,
)

EXTRA = dict(
    prompts=["p"],
    completion_ids=[[1, 2]],
    trainer_state=None,
    log_extra=None,
    log_metric=None,
    domain=["x"],
    dataset=["d"],
    solution=["s"],
)


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


# --------------------------------------------------------------------------- #
# generic
# --------------------------------------------------------------------------- #
def test_registry_and_names():
    assert set(REWARD_FUNCS) == {"math", "science", "tooluse", "code", "bfcl"}
    for domain, fn in REWARD_FUNCS.items():
        assert reward_for(domain) is fn
        assert fn.__name__ == f"{domain}_reward"


def test_unknown_domain_error_names_domain_and_known_ones():
    with pytest.raises(ValueError) as exc:
        reward_for("chess")
    msg = str(exc.value)
    assert "chess" in msg
    for known in ("math", "science", "tooluse", "code", "bfcl"):
        assert known in msg


def test_completion_text_variants():
    assert completion_text(" hi") == " hi"
    assert completion_text(chat(" hi")) == " hi"
    conv = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "first"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "second"},
    ]
    assert completion_text(conv) == "second"
    assert (
        completion_text(
            [{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
        )
        == "ab"
    )
    assert completion_text(None) == ""


# --------------------------------------------------------------------------- #
# math
# --------------------------------------------------------------------------- #
def test_math_right_wrong_malformed():
    comps = [
        " <think>23+45=68</think> \\boxed{68}",
        " <think>23+45=69</think> \\boxed{69}",
        " <think>23+45=68</think> the answer is 68",
        " <think>23+45</think> \\boxed{68",  # unterminated
        "",
    ]
    assert math_reward(comps, answer=["68"] * 5, **EXTRA) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_math_numeric_normalisation():
    comps = [
        " <think>x</think> \\boxed{68.0}",
        " <think>x</think> \\boxed{ 68 }",
        " <think>x</think> \\boxed{68.}",
        " <think>x</think> \\boxed{1,000}",
        " <think>x</think> \\boxed{-0.50}",
        " <think>x</think> \\boxed{$7$}",
        " <think>x</think> \\boxed{67.9}",
    ]
    answers = ["68", "68", "68", "1000", "-.5", "7", "68"]
    assert math_reward(comps, answer=answers) == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert math_reward([" <think>x</think> \\boxed{\\text{68}}"], answer=["68"]) == [1.0]
    # non-numeric answers compare as normalised strings
    assert math_reward([" <think>x</think> \\boxed{x + 1}"], answer=["x+1"]) == [1.0]


def test_math_nested_braces():
    text = " <think>frac</think> \\boxed{\\frac{1}{2}}"
    assert extract_boxed(text) == "\\frac{1}{2}"
    assert math_reward([text], answer=["\\frac{1}{2}"]) == [1.0]
    assert math_reward([text], answer=["\\frac{1}{3}"]) == [0.0]
    assert extract_boxed(" \\boxed{\\boxed{68}}") == "68"
    assert extract_boxed(" \\boxed{a_{b_{c}}}") == "a_{b_{c}}"


def test_math_last_box_wins():
    text = " <think>try</think> \\boxed{12} no wait \\boxed{68}"
    assert math_reward([text], answer=["68"]) == [1.0]
    assert math_reward([text], answer=["12"]) == [0.0]


def test_math_box_outside_final_window_ignored():
    early = " <think>x</think> \\boxed{68}" + " filler" * 30
    assert len(early) > 120
    assert extract_boxed(early) is None
    assert math_reward([early], answer=["68"]) == [0.0]
    # an earlier box outside the window does not rescue a wrong final box
    mixed = " \\boxed{68}" + " filler" * 30 + " \\boxed{7}"
    assert math_reward([mixed], answer=["68"]) == [0.0]
    # trailing whitespace does not push the box out of the window
    assert math_reward([" <think>x</think> \\boxed{68}" + " " * 200], answer=["68"]) == [1.0]


def test_math_chat_format():
    assert math_reward([chat(" <think>1+1=2</think> \\boxed{2}")], answer=["2"]) == [1.0]


def test_boxed_count():
    assert boxed_count(" \\boxed{1} and \\boxed{\\boxed{2}}") == 3
    assert boxed_count("none") == 0
    assert boxed_count(chat(" \\boxed{1}")) == 1


# --------------------------------------------------------------------------- #
# science
# --------------------------------------------------------------------------- #
def test_science_right_wrong_malformed():
    comps = [
        " <think>cells</think> <answer>B</answer>",
        " <think>cells</think> <answer>C</answer>",
        " <think>cells</think> B",
        " <think>cells</think> <answer>B",
        " <think>x</think> <answer>B) mitochondria</answer>",
    ]
    assert science_reward(comps, answer=["B"] * 5, **EXTRA) == [1.0, 0.0, 0.0, 0.0, 0.0]


def test_science_tolerated_variants_and_last_tag():
    comps = [
        " <think>x</think> <answer> b </answer>",
        " <think>x</think> <answer>(B)</answer>",
        " <think>x</think> <answer>B.</answer>",
        " <think>x</think> <ANSWER>B:</ANSWER>",
        " <think>x</think> <answer>A</answer> hmm <answer>B</answer>",
        " <think>x</think> <answer>B</answer> hmm <answer>A</answer>",
        chat(" <think>x</think> <answer>B</answer>"),
    ]
    assert science_reward(comps, answer=["B"] * 7) == [1, 1, 1, 1, 1, 0, 1]


# --------------------------------------------------------------------------- #
# tooluse
# --------------------------------------------------------------------------- #
REF1 = json.dumps({"actions": ["get_weather"], "input": {"city": "Paris"}})
REF2 = json.dumps({"actions": ["search", "get_weather"], "input": {"city": "Paris", "q": "x"}})


def test_tooluse_right_wrong_malformed():
    comps = [
        ' <think>weather</think> Action: get_weather\nAction Input: {"city": "Paris"}',
        ' <think>weather</think> Action: get_weather\nAction Input: {"city": "Rome"}',
        ' <think>weather</think> Action: get_time\nAction Input: {"city": "Paris"}',
        ' <think>weather</think> Action: get_weather\nAction Input: {"city": "Paris"',  # bad JSON
        " <think>weather</think> Action: get_weather\nAction Input: city=Paris",
        " <think>weather</think> I would call get_weather for Paris.",
        ' <think>weather</think> Action: get_weather\nAction Input: ["Paris"]',
    ]
    assert tooluse_reward(comps, answer=[REF1] * len(comps), **EXTRA) == [1, 0, 0, 0, 0, 0, 0]


def test_tooluse_multiset_and_merge():
    ok_order = (
        ' <think>two</think> Action: get_weather\nAction Input: {"city": "Paris"}\n'
        'Action: search\nAction Input: {"q": "x"}'
    )
    same_order = (
        ' <think>two</think> Action: search\nAction Input: {"q": "x"}\n'
        'Action: get_weather\nAction Input: {"city": "Paris"}'
    )
    missing = ' <think>one</think> Action: search\nAction Input: {"q": "x", "city": "Paris"}'
    duplicate = same_order + '\nAction: search\nAction Input: {"q": "x"}'
    overwrite = (
        ' <think>o</think> Action: search\nAction Input: {"q": "y", "city": "Paris"}\n'
        'Action: get_weather\nAction Input: {"q": "x"}'
    )
    extra_key = same_order + ' \nAction Input: {"units": "C"}'
    comps = [ok_order, same_order, missing, duplicate, overwrite, extra_key]
    assert tooluse_reward(comps, answer=[REF2] * len(comps)) == [1, 1, 0, 0, 1, 0]


def test_tooluse_json_spanning_rest_of_line_and_chat():
    text = ' <think>w</think> Action: get_weather\nAction Input: {"city": "Paris", "note": "a } b"}  \n'
    ref = json.dumps({"actions": ["get_weather"], "input": {"city": "Paris", "note": "a } b"}})
    assert tooluse_reward([text, chat(text)], answer=[ref, ref]) == [1.0, 1.0]
    # reference given as a dict also works
    assert tooluse_reward([text], answer=[json.loads(ref)]) == [1.0]
    # think blocks are ignored
    tricky = ' <think>Action: search</think> Action: get_weather\nAction Input: {"city": "Paris"}'
    assert tooluse_reward([tricky], answer=[REF1]) == [1.0]


# --------------------------------------------------------------------------- #
# code
# --------------------------------------------------------------------------- #
GOOD = " <think>add 7</think> ```python\ndef f(x):\n    return x+7\n```"
WRONG = " <think>add 6</think> ```python\ndef f(x):\n    return x+6\n```"
SYNTAX = " <think>oops</think> ```python\ndef f(x)\n    return x+7\n```"
NOBLOCK = " <think>add 7</think> def f(x): return x+7"
TESTS = ["assert f(1) == 8", "assert f(-3) == 4"]


def test_extract_code_block_longest_and_tags():
    text = " <think>t</think> ```\nshort = 1\n``` and ```py\nlonger_block = 2\nmore = 3\n```"
    assert extract_code_block(text) == "longer_block = 2\nmore = 3\n"
    assert extract_code_block(GOOD) == "def f(x):\n    return x+7\n"
    assert extract_code_block(NOBLOCK) is None
    assert extract_code_block(" ```python\nunterminated") is None


def test_parse_tests_list_and_json():
    assert parse_tests(TESTS) == TESTS
    assert parse_tests(json.dumps(TESTS)) == TESTS
    assert parse_tests("assert f(1) == 8") == ["assert f(1) == 8"]
    assert parse_tests(None) == [] and parse_tests("[]") == []


def test_code_reward_cases():
    comps = [GOOD, WRONG, SYNTAX, NOBLOCK, chat(GOOD)]
    tests = [TESTS, TESTS, TESTS, TESTS, json.dumps(TESTS)]
    assert code_reward(comps, tests=tests, **EXTRA) == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_code_reward_longest_block_chosen():
    longest_good = (
        " <think>t</think> ```python\ndef f(x):\n    return 0\n```\n"
        "```python\ndef f(x):\n    # the real one\n    return x + 7\n```"
    )
    longest_bad = (
        " <think>t</think> ```python\ndef f(x):\n    return x+7\n```\n"
        "```python\ndef f(x):\n    # a longer but wrong version\n    return x - 7\n```"
    )
    assert code_reward([longest_good, longest_bad], tests=[TESTS, TESTS]) == [1.0, 0.0]


def test_code_reward_cannot_fake_success():
    fakes = [
        " <think>x</think> ```python\nimport os\nos._exit(0)\n```",
        " <think>x</think> ```python\nimport sys\nsys.exit(0)\n```",
        " <think>x</think> ```python\nimport builtins\nbuiltins.exec = lambda *a, **k: None\n```",
        ' <think>x</think> ```python\ndef f(x):\n    return x+7\n"""\n```',  # swallow tests
    ]
    assert code_reward(fakes, tests=[TESTS] * len(fakes)) == [0.0] * len(fakes)


def test_code_reward_no_tests_is_zero():
    assert code_reward([GOOD], tests=[[]]) == [0.0]


def test_make_code_reward_name():
    fn = rewards.make_code_reward(timeout_s=1.0)
    assert fn.__name__ == "code_reward"
    assert fn([GOOD], tests=[TESTS]) == [1.0]
