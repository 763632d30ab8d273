"""Tests for sdpocl.rewards (binary rewards, TRL signature)."""

from __future__ import annotations

import json
import time

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


# MATH-500 answer kinds: (reference, an equivalent answer a model writes)
EQUIVALENT = [
    ("\\frac{1}{2}", "0.5"),  # fraction / decimal
    ("0.5", "\\frac{1}{2}"),
    ("-\\frac{1}{2}", "-0.5"),
    ("\\frac{14}{3}", "\\dfrac{14}{3}"),  # \dfrac / \tfrac
    ("\\frac{3}{4}", "\\tfrac{3}{4}"),
    ("\\frac{1}{2}", "\\frac12"),  # brace-less fraction
    ("\\frac{1}{2}", "1/2"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),  # \left( ... \right)
    ("(-\\infty, 2]", "(-\\infty,2]"),  # intervals
    ("[2, 5)", "[2,5)"),
    ("(-\\infty,-2) \\cup (3,\\infty)", "(-\\infty,-2)\\cup(3,\\infty)"),
    ("\\{1,2\\}", "\\{2,1\\}"),  # sets
    ("1,2", "\\{1,2\\}"),
    ("10^\\circ", "10"),  # degrees
    ("10", "10^{\\circ}"),
    ("10\\text{ cm}", "10"),  # units and \text{}
    ("5", "5\\text{ inches}"),
    ("\\text{Evelyn}", "Evelyn"),
    ("\\text{(C)}", "C"),
    ("\\$18.90", "18.90"),
    ("12\\%", "12"),
    ("2\\sqrt{2}", "\\sqrt{8}"),  # radicals
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}"),
    ("5", "x=5"),  # equations
    ("x=5", "5"),
    ("x^2+2x+1", "(x+1)^2"),  # expressions
    ("1000", "10^3"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
]
NOT_EQUIVALENT = [
    ("\\frac{1}{2}", "\\frac{1}{3}"),
    ("\\frac{14}{3}", "\\dfrac{3}{14}"),
    ("0.5", "0.50001"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{3})"),
    ("[2,5)", "(2,5)"),  # open vs half-open
    ("(-\\infty, 2]", "(-\\infty,2)"),
    ("\\{1,2\\}", "\\{1,3\\}"),
    ("10^\\circ", "20"),
    ("10\\text{ cm}", "100"),
    ("\\text{east}", "\\text{west}"),
    ("\\text{(C)}", "D"),
    ("2\\sqrt{2}", "\\sqrt{7}"),
    ("5", "x=6"),
    ("x^2+2x+1", "(x-1)^2"),
    ("\\pi", "3.14"),
    ("4", "\\text{four}"),
    ("68", "69"),
]


def boxed(answer: str) -> str:
    return f" <think>work</think> The answer is \\boxed{{{answer}}}."


def test_math_latex_equivalent_answers_score_one():
    preds = [boxed(pred) for _, pred in EQUIVALENT]
    got = math_reward(preds, answer=[ref for ref, _ in EQUIVALENT])
    assert got == [1.0] * len(EQUIVALENT), [pair for pair, g in zip(EQUIVALENT, got) if g != 1.0]


def test_math_latex_different_answers_score_zero():
    preds = [boxed(pred) for _, pred in NOT_EQUIVALENT]
    got = math_reward(preds, answer=[ref for ref, _ in NOT_EQUIVALENT])
    assert got == [0.0] * len(NOT_EQUIVALENT), [pair for pair, g in zip(NOT_EQUIVALENT, got) if g != 0.0]


def test_math_verify_needs_the_delimiters_we_add():
    """math-verify finds LaTeX only inside math delimiters: unwrapped, \\dfrac{14}{3} does not
    parse, so the reward wraps both sides itself."""
    from math_verify import parse

    for bare in ("\\dfrac{14}{3}", "\\sqrt{8}", "\\{1,2\\}"):
        assert parse(bare) == [], bare
    assert rewards.math_answers_equal("\\dfrac{14}{3}", "\\frac{14}{3}")
    assert rewards.math_answers_equal("$\\sqrt{8}$", "2\\sqrt{2}")  # its own $...$ is stripped first


def test_math_plain_numbers_never_reach_math_verify(monkeypatch):
    """The tiny preset's answers are numbers: string / numeric equality decides them alone."""
    from sdpocl.rewards import mathverify

    def boom(*a, **k):
        raise AssertionError("math-verify called for plain numbers")

    monkeypatch.setattr(mathverify, "verify_pairs", boom)
    comps = [boxed("68"), boxed("68.0"), boxed("69"), boxed("1,000"), boxed("-.5"), " no box"]
    assert math_reward(comps, answer=["68", "68", "68", "1000", "-0.5", "68"]) == [1, 1, 0, 1, 1, 0]


def test_math_reward_from_another_thread():
    """TRL and lm-eval may call rewards outside the main thread, where math-verify's own
    signal-based timeouts raise: the worker process runs it in its own main thread."""
    import threading

    out = {}
    thread = threading.Thread(target=lambda: out.update(r=math_reward([boxed("\\frac12")], answer=["0.5"])))
    thread.start()
    thread.join(60)
    assert out["r"] == [1.0]


HOSTILE = [
    "9^{9^{9^{9}}}",
    "(x+1)^{100000}",
    "99999999!",
    "+".join(["\\frac{1}{2}"] * 20000),  # 240 kB
    "{" * 50000 + "1" + "}" * 50000,
    "\\sqrt{" * 3000 + "2" + "}" * 3000,
]


def test_math_hostile_answers_cannot_hang_a_batch():
    """Each answer has math_timeout_s; the batch has its budget; good answers around hostile
    ones still score."""
    from sdpocl.rewards import mathverify

    mathverify.verify_pairs([("1", "1.0")])  # worker started: its start is not the batch's time
    comps, answers = [], []
    for h in HOSTILE:
        comps += [boxed("\\frac{1}{2}"), boxed(h)]
        answers += ["0.5", "5"]
    reward = rewards.make_math_reward(timeout_s=1.0)
    t0 = time.monotonic()
    got = reward(comps, answer=answers)
    elapsed = time.monotonic() - t0
    print(f"\n{len(comps)} answers, {len(HOSTILE)} hostile: {elapsed:.2f} s")
    assert got == [1.0, 0.0] * len(HOSTILE)
    assert elapsed < len(HOSTILE) * 1.0 + 2.0  # each hostile answer costs at most its 1 s


def test_math_batch_budget_runs_out_and_worker_is_replaced(caplog):
    from sdpocl.rewards import mathverify

    pairs = [("5", "9^{9^{9^{9}}}"), ("5", "(x+1)^{100000}"), ("\\frac{1}{2}", "0.5")]
    t0 = time.monotonic()
    assert mathverify.verify_pairs(pairs, timeout_s=5.0, budget_s=1.5) == [False, False, False]
    assert time.monotonic() - t0 < 1.5 + 1.0
    assert "budget" in caplog.text
    # a fresh worker takes the next batch
    assert mathverify.verify_pairs([("\\frac{1}{2}", "0.5")]) == [True]


def test_math_stuck_worker_is_killed_and_the_rest_of_the_batch_goes_on(monkeypatch, caplog):
    """A worker that gives no verdict within timeout + grace (e.g. stuck in C code, where its
    alarm cannot reach) is killed; that answer scores 0 and a new worker scores the rest."""
    from sdpocl.rewards import mathverify

    mathverify.verify_pairs([("1", "1.0")])
    # the caller gives up 0.5 s after each verdict while the worker's own alarm is at 3 s
    monkeypatch.setattr(mathverify, "_GRACE_S", -2.5)
    first = mathverify._worker
    pairs = [("\\frac{1}{2}", "0.5"), ("5", "9^{9^{9^{9}}}"), ("\\frac{14}{3}", "\\dfrac{14}{3}")]
    t0 = time.monotonic()
    assert mathverify.verify_pairs(pairs, timeout_s=3.0, budget_s=30.0) == [True, False, True]
    assert time.monotonic() - t0 < 3.0
    assert mathverify._worker is not first and first.proc.poll() is not None  # killed, replaced
    assert "no verdict" in caplog.text


def test_math_timeouts_come_from_the_limits():
    assert rewards.make_math_reward(timeout_s=2.0).__name__ == "math_reward"
    with pytest.raises(ValueError):
        rewards.make_math_reward(timeout_s=0)


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


def test_code_limits_are_per_test():
    """Each test gets the whole time limit (upstream: its own process per test)."""
    slow = "import time\ntime.sleep(0.6)\nassert f(1) == 8"
    fn = rewards.make_code_reward(timeout_s=1.0, max_workers=1)
    assert fn([GOOD, WRONG], tests=[[slow] * 3, [slow] * 3]) == [1.0, 0.0]
    assert rewards.make_code_reward(timeout_s=0.3)([GOOD], tests=[[slow]]) == [0.0]
    big = "x = bytearray(600 * 2**20)\nassert f(1) == 8"
    assert rewards.make_reward("code", {"code_memory_mb": 1024})([GOOD], tests=[[big]]) == [1.0]
    assert rewards.make_reward("code", {"code_memory_mb": 256})([GOOD], tests=[[big]]) == [0.0]


def test_configure_sets_the_limits_reward_for_uses():
    slow = "import time\ntime.sleep(0.6)\nassert f(1) == 8"
    try:
        assert rewards.configure({"code_timeout_s": 0.3})["code_memory_mb"] == rewards.CODE_MEMORY_MB
        assert reward_for("code")([GOOD], tests=[[slow]]) == [0.0]
        rewards.configure({"code_timeout_s": 2.0})
        assert reward_for("code")([GOOD], tests=[[slow]]) == [1.0]
        with pytest.raises(ValueError, match="unknown reward limit"):
            rewards.configure({"code_timeout": 1})
    finally:
        rewards.configure()
    assert rewards.current_limits() == rewards.REWARD_LIMITS
    assert rewards.make_reward("math", {"math_timeout_s": 2.0}).__name__ == "math_reward"
    assert rewards.make_reward("science", {"code_timeout_s": 1.0}) is rewards.science_reward


def test_reward_limit_defaults_match_the_config_schema():
    from sdpocl.config import load_schema

    props = load_schema()["properties"]["rewards"]["properties"]
    assert {k: v["default"] for k, v in props.items()} == rewards.REWARD_LIMITS
