"""The tiny preset's difficulty knob (config ``data.difficulty``, sdpocl.data.domains.Difficulty)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest

from sdpocl.cli import main as cli_main
from sdpocl.data import domains as D

HARD = {"math_addend_max": 99, "science_options": 6, "code_addend_max": 99}


def data_digest(**kw) -> str:
    """SHA-256 of the default preset's data (train 500 / test 100 per domain, seed 1234), a 2,000-example
    SFT mixture and the tokenizer corpus."""
    h = hashlib.sha256()
    for d in D.DOMAINS:
        for split, n in (("train", 500), ("test", 100)):
            h.update(json.dumps(D.generate(d, split, n, 1234, **kw), sort_keys=True).encode())
    h.update(json.dumps(D.sft_mixture(2000, 1234, 0.25, **kw), sort_keys=True).encode())
    h.update(json.dumps(list(D.corpus(1234, **kw))).encode())
    return h.hexdigest()


def test_defaults_are_the_data_of_the_documented_experiments():
    """Computed with the generators before the knob existed (commit 3629353): the data of
    docs/tiny-preset.md rows 7-11 and of every results directory made since. A change of the default
    data must change this on purpose (and rebuild every base)."""
    golden = "0117d96424c9b6378543603536c44ed25910f72ab186ff28055f3f988786312a"
    assert data_digest() == golden
    defaults = {"math_addend_max": 9, "math_terms": 2, "science_options": 4, "code_addend_max": 9}
    assert data_digest(difficulty=defaults) == golden


def _check_sum_reasoning(thought: str, a: int, b: int) -> None:
    """Every ``x+y(+z)=s`` step in ``thought`` is true arithmetic and the last one ends in a+b."""
    steps = re.findall(r"(\d+(?:\+\d+)+)=(\d+)", thought)
    assert steps, thought
    for terms, total in steps:
        assert sum(int(t) for t in terms.split("+")) == int(total), thought
    assert int(steps[-1][1]) == a + b


def test_hard_math_is_two_digit_addition_with_a_true_carry_chain():
    bs = set()
    for split in D.SPLITS:
        for r in D.generate("math", split, 300, seed=2, difficulty=HARD):
            a, b = map(int, re.match(r"Compute (\d+)\+(\d+)\.", r["prompt"]).groups())
            assert 10 <= a <= 99 and 2 <= b <= 99
            assert r["answer"] == str(a + b)
            thought = re.fullmatch(r" <think>(.*)</think> \\boxed\{(\d+)\}", r["solution"])
            assert thought and thought.group(2) == str(a + b), r["solution"]
            _check_sum_reasoning(thought.group(1), a, b)
            bs.add(b)
    assert max(bs) >= 50 and min(bs) < 10  # both regimes are drawn
    assert D.num_problems("math", "train", HARD) > 10 * D.num_problems("math", "train")


@pytest.mark.parametrize("max_addend", [9, 99])
def test_three_term_math(max_addend):
    difficulty = {"math_terms": 3, "math_addend_max": max_addend}
    for r in D.generate("math", "test", 200, seed=1, difficulty=difficulty):
        terms = [int(t) for t in re.match(r"Compute (\d+\+\d+\+\d+)\.", r["prompt"]).group(1).split("+")]
        assert 10 <= terms[0] <= 99 and all(2 <= t <= max_addend for t in terms[1:])
        assert r["answer"] == str(sum(terms))
        thought = re.fullmatch(r" <think>(.*)</think> \\boxed\{(\d+)\}", r["solution"]).group(1)
        assert thought.startswith("+".join(str(t % 10) for t in terms) + "=")
        _check_sum_reasoning(thought, sum(terms[:-1]), terms[-1])


@pytest.mark.parametrize("k", [2, 3, 5, 6])
def test_science_options_count(k):
    letters = Counter()
    difficulty = {"science_options": k}
    n = min(200, D.num_problems("science", "test", difficulty))
    for r in D.generate("science", "test", n, seed=3, difficulty=difficulty):
        lines = r["prompt"].split("\n")
        opts = [re.fullmatch(rf"{L}: (\w+)", line).group(1) for L, line in zip("ABCDEF"[:k], lines[2 : 2 + k])]
        assert lines[2 + k] == "Please reason step by step." and len(set(opts)) == k
        vals = [D.COMPOUNDS[o] for o in opts]
        best = vals.index(max(vals) if "highest" in lines[0] else min(vals))
        assert r["answer"] == "ABCDEF"[best]
        assert r["solution"].endswith(f"{opts[best]} {'ABCDEF'[best]}</think> <answer>{'ABCDEF'[best]}</answer>")
        letters[r["answer"]] += 1
    assert set(letters) == set("ABCDEF"[:k])
    # the universe stays enumerable: at most 24 orderings per set of compounds
    assert D.num_problems("science", "train", difficulty) < 60_000


def test_hard_code_reference_passes_its_tests_and_reasons_to_the_constant():
    ks = set()
    for r in D.generate("code", "train", 200, seed=4, difficulty=HARD):
        a, b = map(int, re.search(r"the sum of (\d+) and (\d+)\.$", r["prompt"]).groups())
        thought = re.match(r" <think>(.*); return ", r["solution"]).group(1)
        _check_sum_reasoning(thought, a, b)
        body = re.search(r"```python\n(.*?)```", r["solution"], re.S).group(1)
        ns: dict = {}
        exec(body + "\n" + "\n".join(r["tests"]), ns)  # trusted reference code and its asserts
        ks.add(a + b)
    assert max(ks) > 100


def test_hard_modulo_tasks_need_the_constant():
    """With two-digit constants (k up to 128) no modulo task passes with ``return x`` or ``return x - k``
    (inputs 0..20 are all below k: ``x % k == x`` there); the other operations keep inputs 0..20."""
    ops = Counter()
    for split in ("train", "test"):
        for r in D.generate("code", split, 500, seed=1234, difficulty=HARD):
            f, x = re.search(r"def (\w+)\((\w+)\):", r["solution"]).groups()
            inputs = [int(re.match(rf"assert {f}\((\d+)\)", t).group(1)) for t in r["tests"]]
            if "modulo" not in r["prompt"]:
                assert max(inputs) <= 20
                continue
            ops["modulo"] += 1
            a, b = map(int, re.search(r"the sum of (\d+) and (\d+)\.$", r["prompt"]).groups())
            for shortcut in (f"{x}", f"{x} - {a + b}"):
                ns: dict = {}
                exec(f"def {f}({x}):\n    return {shortcut}", ns)  # trusted: the shortcut under test
                assert not all(eval(t.removeprefix("assert "), ns) for t in r["tests"]), (r["prompt"], shortcut)
    assert ops["modulo"] > 100


def test_hard_splits_are_disjoint():
    for domain in ("math", "science", "code"):
        train = {r["prompt"] for r in D.generate(domain, "train", 400, seed=0, difficulty=HARD)}
        test = {r["prompt"] for r in D.generate(domain, "test", 100, seed=0, difficulty=HARD)}
        assert not train & test


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"science_options": 7}, r"data\.difficulty\.science_options must be an integer in \[2, 6\], got 7"),
        ({"math_addend_max": 1}, r"data\.difficulty\.math_addend_max .* got 1"),
        ({"math_terms": 4}, r"data\.difficulty\.math_terms must be an integer in \[2, 3\], got 4"),
        ({"code_addend_max": "9"}, r"data\.difficulty\.code_addend_max .* got '9'"),
        ({"maths_addend_max": 9}, r"unknown data\.difficulty key\(s\) maths_addend_max"),
    ],
)
def test_bad_difficulty_names_the_key(bad, message):
    with pytest.raises(ValueError, match=message):
        D.generate("math", "train", 5, 0, difficulty=bad)


def test_prepare_data_cli_passes_the_difficulty(tmp_path, capsys):
    out = tmp_path / "math.jsonl"
    cli_main(
        ["prepare-data", "--domain", "math", "--split", "train", "--n", "40", "--seed", "1"]
        + ["--difficulty", json.dumps({"math_addend_max": 99}), "--out", str(out)]
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records == D.generate("math", "train", 40, 1, {"math_addend_max": 99})
    assert records != D.generate("math", "train", 40, 1)
