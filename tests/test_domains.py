"""Tests for sdpocl.data.domains (synthetic data generators of the tiny preset)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from sdpocl.data import domains as D

SAMPLE_N = 100


# ----------------------------------------------------------------------------- helpers


def _think_ok(solution: str) -> bool:
    return re.match(r"^ <think>[^<>]+</think> \S", solution) is not None


# ----------------------------------------------------------------------------- API basics


def test_domain_order_and_datasets():
    assert D.DOMAINS == ("math", "science", "tooluse", "code")
    assert {D.DATASETS[d] for d in D.DOMAINS} == {"tiny_math", "tiny_science", "tiny_tooluse", "tiny_code"}


def test_templates_literal():
    assert D.SOLUTION_TEMPLATE == "\nCorrect solution:\n\n{successful_previous_attempt}\n\n"
    assert D.REPROMPT_TEMPLATE == ("{prompt}{solution}{feedback}\n\nCorrectly solve the original question.\n")


@pytest.mark.parametrize("domain", D.DOMAINS)
def test_determinism(domain):
    a = D.generate(domain, "train", 50, seed=3)
    b = D.generate(domain, "train", 50, seed=3)
    assert a == b
    c = D.generate(domain, "train", 50, seed=4)
    assert [r["prompt"] for r in a] != [r["prompt"] for r in c]
    t1 = D.generate(domain, "test", 30, seed=3)
    t2 = D.generate(domain, "test", 30, seed=3)
    assert t1 == t2


def test_determinism_across_processes():
    code = textwrap.dedent("""
        import json
        from sdpocl.data import domains as D
        print(json.dumps([D.generate(d, s, 5, 11) for d in D.DOMAINS for s in D.SPLITS]))
    """)
    outs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": h}
        ).stdout
        for h in ("1", "2")
    ]
    assert outs[0] == outs[1]
    here = [D.generate(d, s, 5, 11) for d in D.DOMAINS for s in D.SPLITS]
    assert json.loads(outs[0]) == here


def test_no_duplicate_prompts():
    for d in D.DOMAINS:
        recs = D.generate(d, "train", 300, seed=0)
        prompts = [r["prompt"] for r in recs]
        assert len(set(prompts)) == len(prompts)


@pytest.mark.parametrize("domain", D.DOMAINS)
def test_train_test_disjoint(domain):
    n_train = D.num_problems(domain, "train")
    n_test = D.num_problems(domain, "test")
    assert n_train > 0 and n_test > 0
    # generated independently (different seeds, test first) and still disjoint
    test = D.generate(domain, "test", n_test, seed=1)
    train = D.generate(domain, "train", n_train, seed=2)
    tp = {r["prompt"] for r in train}
    sp = {r["prompt"] for r in test}
    assert len(tp) == n_train and len(sp) == n_test
    assert not tp & sp
    assert all(D.split_of(p) == "test" for p in sp)
    # test is a minority of the universe
    assert 0.1 < n_test / (n_train + n_test) < 0.3


def test_universe_sizes_reasonable():
    assert D.num_problems("math", "train") + D.num_problems("math", "test") == 90 * 8
    sci = D.num_problems("science", "train") + D.num_problems("science", "test")
    assert sci == 2 * 12 * 11 * 10 * 9
    for d in D.DOMAINS:
        assert D.num_problems(d, "test") >= 100


# ----------------------------------------------------------------------------- schema


@pytest.mark.parametrize("domain", D.DOMAINS)
@pytest.mark.parametrize("split", D.SPLITS)
def test_schema(domain, split):
    recs = D.generate(domain, split, SAMPLE_N, seed=7)
    assert len(recs) == SAMPLE_N
    for r in recs:
        assert set(r) == {"prompt", "answer", "tests", "domain", "dataset", "solution"}
        assert isinstance(r["prompt"], str) and isinstance(r["answer"], str)
        assert isinstance(r["solution"], str)
        assert isinstance(r["tests"], list) and all(isinstance(t, str) for t in r["tests"])
        assert r["domain"] == domain and r["dataset"] == D.DATASETS[domain]
        assert r["prompt"] and r["prompt"] == r["prompt"].rstrip()
        assert r["solution"].startswith(" ") and not r["solution"].startswith("  ")
        assert _think_ok(r["solution"]), r["solution"]
        assert r["solution"] == r["solution"].rstrip()
        if domain == "code":
            assert len(r["tests"]) == 3 and r["answer"] == ""
        else:
            assert r["tests"] == []
            assert r["answer"]


def test_records_are_copies():
    a = D.generate("code", "train", 3, seed=0)
    a[0]["tests"].append("assert False")
    a[0]["prompt"] = "x"
    b = D.generate("code", "train", 3, seed=0)
    assert b[0]["prompt"] != "x" and len(b[0]["tests"]) == 3


# ----------------------------------------------------------------------------- correctness


def test_math_correct():
    for split in D.SPLITS:
        for r in D.generate("math", split, 100, seed=5):
            m = re.fullmatch(
                r"Compute (\d+)\+(\d+)\.\n\nPlease reason step by step, and put your final "
                r"answer within \\boxed\{\}\.",
                r["prompt"],
            )
            assert m, r["prompt"]
            a, b = int(m.group(1)), int(m.group(2))
            assert 10 <= a <= 99 and 2 <= b <= 9
            assert r["answer"] == str(a + b)
            u = a % 10
            assert r["solution"] == f" <think>{u}+{b}={u + b}; {a - u}+{u + b}={a + b}</think> \\boxed{{{a + b}}}"
            boxed = re.findall(r"\\boxed\{([^}]*)\}", r["solution"])
            assert boxed == [str(a + b)]


def test_science_table():
    assert 10 <= len(D.COMPOUNDS) <= 14
    assert len(set(D.COMPOUNDS.values())) == len(D.COMPOUNDS)
    assert all(isinstance(v, int) for v in D.COMPOUNDS.values())
    assert all(re.fullmatch(r"[A-Z][a-z]+", k) for k in D.COMPOUNDS)


def test_science_correct():
    kinds = Counter()
    letters = Counter()
    for split in D.SPLITS:
        for r in D.generate("science", split, 500, seed=5):
            lines = r["prompt"].split("\n")
            question = lines[0]
            assert lines[1] == ""
            assert lines[-1] == "Please reason step by step."
            opts = {}
            for line, letter in zip(lines[2:6], "ABCD"):
                m = re.fullmatch(rf"{letter}: (\w+)", line)
                assert m, line
                opts[letter] = m.group(1)
            assert len(set(opts.values())) == 4
            vals = {k: D.COMPOUNDS[v] for k, v in opts.items()}
            if "highest" in question:
                want, word = max(vals, key=vals.get), "max"
            else:
                assert "lowest" in question
                want, word = min(vals, key=vals.get), "min"
            kinds[word] += 1
            letters[want] += 1
            assert r["answer"] == want
            assert re.findall(r"<answer>([A-D])</answer>", r["solution"]) == [want]
            listing = ", ".join(f"{opts[k]} {k} {vals[k]}" for k in "ABCD")
            assert r["solution"] == (f" <think>{listing}; {word} {opts[want]} {want}</think> <answer>{want}</answer>")
    assert kinds["max"] > 300 and kinds["min"] > 300
    assert all(letters[k] > 100 for k in "ABCD")


def test_tooluse_correct():
    tools = Counter()
    for split in D.SPLITS:
        for r in D.generate("tooluse", split, 200, seed=5):
            p = r["prompt"]
            assert p.startswith("Tools: ")
            for name, (args, _desc) in D.TOOLS.items():
                assert f"{name}({', '.join(args)})" in p.split("\n", 1)[0]
            assert "\nAnswer with Thought, Action and Action Input.\nRequest: " in p
            request = p.split("\nRequest: ", 1)[1]
            m = re.fullmatch(r" <think>use (\w+)</think> Action: (\w+)\nAction Input: (.+)", r["solution"])
            assert m, r["solution"]
            assert m.group(1) == m.group(2)
            name = m.group(2)
            args = json.loads(m.group(3))
            assert m.group(3) == json.dumps(args)
            assert name in D.TOOLS
            assert list(args) == list(D.TOOLS[name][0])
            assert json.loads(r["answer"]) == {"actions": [name], "input": args}
            assert r["answer"] == json.dumps({"actions": [name], "input": args})
            for v in args.values():
                assert str(v) in request
                if isinstance(v, int):
                    assert not isinstance(v, bool)
            tools[name] += 1
    assert set(tools) == set(D.TOOLS)
    # stratified sampling: balanced while every tool still has problems left ...
    small = Counter(json.loads(r["answer"])["actions"][0] for r in D.generate("tooluse", "train", 100, seed=9))
    assert sorted(small.values()) == [25, 25, 25, 25]
    # ... then the remaining tools fill up the rest
    avail = Counter(
        json.loads(r["answer"])["actions"][0]
        for r in D.generate("tooluse", "test", D.num_problems("tooluse", "test"), 0)
    )
    got = Counter(json.loads(r["answer"])["actions"][0] for r in D.generate("tooluse", "test", 200, seed=5))
    share = min(avail.values())
    assert all(got[t] >= min(avail[t], share) for t in D.TOOLS)


def test_tooluse_default_splits_hold_every_tool_about_equally():
    """The default preset's 500 train and 100 test prompts: every tool has enough distinct prompts
    in each split to take its quarter (issue 12: convert_currency once filled 84% of train)."""
    for split, n in (("train", 500), ("test", 100)):
        per_tool = Counter(json.loads(r["answer"])["actions"][0] for r in D.generate("tooluse", split, n, seed=0))
        assert sorted(per_tool.values()) == [n // 4] * 4, (split, per_tool)


def _run_code_record(r) -> str:
    m = re.search(r"```python\n(.*?)```", r["solution"], re.S)
    assert m, r["solution"]
    return m.group(1) + "\n" + "\n".join(r["tests"]) + "\n"


def test_code_correct_exec():
    for split in D.SPLITS:
        for r in D.generate("code", split, 300, seed=5):
            spec = r["prompt"].split("\n", 1)[1]
            assert r["prompt"].startswith(
                "You are a coding expert. Provide the complete code in a code block enclosed with ``` ```.\n"
            )
            m = re.search(r"function (\w+)\((\w+)\)|Implement (\w+)\((\w+)\)", spec)
            assert m, spec
            fname = m.group(1) or m.group(3)
            arg = m.group(2) or m.group(4)
            # independent oracle from the spec text
            om = re.search(rf"{arg} (plus|minus|times|modulo) the sum of (\d+) and (\d)\.$", spec)
            assert om, spec
            op, k = om.group(1), int(om.group(2)) + int(om.group(3))
            oracle = {
                "plus": lambda x, k=k: x + k,
                "minus": lambda x, k=k: x - k,
                "times": lambda x, k=k: x * k,
                "modulo": lambda x, k=k: x % k,
            }[op]
            assert 12 <= k <= 38
            ns: dict = {}
            exec(_run_code_record(r), ns)  # trusted reference code + its asserts
            for x in range(-5, 25):
                assert ns[fname](x) == oracle(x)
            inputs = []
            for t in r["tests"]:
                tm = re.fullmatch(rf"assert {fname}\((-?\d+)\) == (-?\d+)", t)
                assert tm, t
                inputs.append(int(tm.group(1)))
                assert oracle(int(tm.group(1))) == int(tm.group(2))
            assert len(set(inputs)) == 3


def test_code_solution_runs_in_subprocess():
    r = D.generate("code", "test", 1, seed=0)[0]
    res = subprocess.run([sys.executable, "-c", _run_code_record(r)], capture_output=True)
    assert res.returncode == 0, res.stderr


# ----------------------------------------------------------------------------- errors


def test_bad_domain():
    with pytest.raises(ValueError) as ei:
        D.generate("biology", "train", 1, 0)
    msg = str(ei.value)
    assert "biology" in msg and all(d in msg for d in D.DOMAINS)


def test_bad_split():
    with pytest.raises(ValueError) as ei:
        D.generate("math", "validation", 1, 0)
    msg = str(ei.value)
    assert "validation" in msg and "train" in msg and "test" in msg


def test_too_many():
    avail = D.num_problems("tooluse", "test")
    assert len(D.generate("tooluse", "test", avail, 0)) == avail
    with pytest.raises(ValueError) as ei:
        D.generate("tooluse", "test", avail + 1, 0)
    msg = str(ei.value)
    assert str(avail + 1) in msg and str(avail) in msg and "test" in msg


def test_bad_n():
    with pytest.raises(ValueError):
        D.generate("math", "train", -1, 0)
    assert D.generate("math", "train", 0, 0) == []


# ----------------------------------------------------------------------------- SFT helpers


def test_reprompt_example_matches_trl_teacher_prompt():
    r = D.generate("math", "train", 1, seed=0)[0]
    demo = r["solution"][1:]
    ex = D.reprompt_example(r, demo)
    assert set(ex) == {"prompt", "completion", "domain"}
    assert ex["completion"] == r["solution"] and ex["domain"] == "math"
    # TRL: reprompt_template.format(prompt, solution_template.format(demo with <think> removed), feedback="")
    stripped = demo.split("</think>", 1)[1].strip()
    assert "<think>" not in ex["prompt"][len(r["prompt"]) :]
    assert ex["prompt"] == (
        r["prompt"] + "\nCorrect solution:\n\n" + stripped + "\n\n\n\nCorrectly solve the original question.\n"
    )
    cot = D.reprompt_example(r, demo, keep_thinking=True)
    assert demo in cot["prompt"]


def test_sft_mixture():
    n = 402
    mix = D.sft_mixture(n, seed=1)
    assert len(mix) == n
    assert mix == D.sft_mixture(n, seed=1)
    assert mix != D.sft_mixture(n, seed=2)
    counts = Counter(e["domain"] for e in mix)
    assert set(counts) == set(D.DOMAINS)
    assert max(counts.values()) - min(counts.values()) <= 1
    re_n = 0
    for e in mix:
        assert set(e) == {"prompt", "completion", "domain"}
        assert e["completion"].startswith(" ") and _think_ok(e["completion"])
        if "\nCorrect solution:\n\n" in e["prompt"]:
            re_n += 1
            # the answer part of the demonstration is always there; <think> only for the CoT half
            assert e["completion"].split("</think>", 1)[1].strip() in e["prompt"]
            assert e["prompt"].endswith("Correctly solve the original question.\n")
            orig = e["prompt"].split("\nCorrect solution:\n\n", 1)[0]
            assert D.split_of(orig) == "train"
        else:
            assert e["prompt"] == e["prompt"].rstrip()
            assert D.split_of(e["prompt"]) == "train"
    assert re_n == round(n * 0.25)
    with_cot = sum("<think>" in e["prompt"] for e in mix)
    assert 0 < with_cot < re_n
    assert sum("Correct solution" in e["prompt"] for e in D.sft_mixture(100, 0, reprompt_frac=0.0)) == 0
    assert all("Correct solution" in e["prompt"] for e in D.sft_mixture(100, 0, reprompt_frac=1.0))
    with pytest.raises(ValueError):
        D.sft_mixture(10, 0, reprompt_frac=1.5)


def test_corpus():
    texts = list(D.corpus(0))
    assert texts == list(D.corpus(0))
    assert all(isinstance(t, str) and t for t in texts)
    joined = "\n".join(texts)
    for needle in ("Compute ", "boiling point", "Action Input:", "```python", "Correct solution:", "<think>"):
        assert needle in joined
    # both splits contribute
    prompts = {t for t in texts if t.startswith(("Compute ", "Which compound"))}
    assert {D.split_of(p) for p in prompts} == {"train", "test"}


# ----------------------------------------------------------------------------- reasoning style


def test_visible_reasoning_is_what_a_model_with_thinking_off_writes():
    """``data.difficulty.reasoning: visible``: the same problems and answers, the reasoning in plain text
    in each domain's own answer format, so SDPO's re-prompt (which strips only <think>) keeps it."""
    from sdpocl.data.benchmarks import general_examples
    from sdpocl.rewards import domain_rewards

    rewards = domain_rewards()
    for domain in D.DOMAINS:
        think = D.generate(domain, "train", 12, 0)
        visible = D.generate(domain, "train", 12, 0, {"reasoning": "visible"})
        assert [r["prompt"] for r in think] == [r["prompt"] for r in visible]
        for t, v in zip(think, visible):
            assert "<think>" in t["solution"] and "<think>" not in v["solution"]
            reasoning = re.search(r"<think>(.*?)</think>", t["solution"], re.S).group(1)
            demo = D.teacher_prompt(t["prompt"], v["solution"].strip())
            assert reasoning in v["solution"] and reasoning in demo  # the teacher sees the reasoning
            assert reasoning not in D.teacher_prompt(t["prompt"], t["solution"].strip())
            score = rewards[domain]([v["solution"]], answer=[v["answer"]], tests=[json.dumps(v["tests"])])
            assert score == [1.0], (domain, v["solution"])
    science = D.generate("science", "train", 1, 0, {"reasoning": "visible"})[0]["solution"]
    assert re.fullmatch(r" <reasoning>[^<]+</reasoning> <answer>[A-F]</answer>", science)
    tool = D.generate("tooluse", "train", 1, 0, {"reasoning": "visible"})[0]["solution"]
    assert tool.startswith(" Thought: use ") and "\nAction: " in tool
    assert all("<think>" not in r["solution"] for r in general_examples(12, 0, "visible"))
    with pytest.raises(ValueError, match="data.difficulty.reasoning must be one of think, visible"):
        D.Difficulty.of({"reasoning": "hidden"})
