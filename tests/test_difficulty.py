"""The tiny preset's difficulty knob (config ``data.difficulty``, sdpocl.data.domains.Difficulty)."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter

import pytest

from sdpocl.cli import main as cli_main
from sdpocl.data import domains as D
from sdpocl.data.synthetic.sampling import _universe

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
    the experiments of docs/experiments/ 2026-12-01 (rows 7-11) and of every results directory made since. A
    change of the default data must change this on purpose (and rebuild every base)."""
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


@pytest.mark.parametrize("n_props", [2, 3])
def test_science_properties_ask_each_table_and_recall_it(n_props):
    """Each question asks one of the first ``n_props`` tables; the reasoning names that table and lists
    its values, and the answer is the extreme of that table (not of the boiling points)."""
    from sdpocl.data.synthetic.science import PROPERTIES

    difficulty = {"science_options": 6, "science_properties": n_props}
    asked = Counter()
    for r in D.generate("science", "train", 400, seed=5, difficulty=difficulty):
        lines = r["prompt"].split("\n")
        kind, prop = re.fullmatch(r"Which compound has the (highest|lowest) (.+)\?", lines[0]).groups()
        table = PROPERTIES[prop]
        opts = [line.split(": ")[1] for line in lines[2:8]]
        vals = [table[o] for o in opts]
        best = vals.index(max(vals) if kind == "highest" else min(vals))
        assert r["answer"] == "ABCDEF"[best]
        tag = prop.split()[0]
        listing = ", ".join(f"{o} {L} {v}" for L, o, v in zip("ABCDEF", opts, vals))
        assert r["solution"].startswith(f" <think>{tag}: {listing}; "), r["solution"]
        asked[prop, kind] += 1
    assert sorted(asked) == sorted((p, k) for p in list(PROPERTIES)[:n_props] for k in ("highest", "lowest"))
    assert max(asked.values()) - min(asked.values()) <= 1  # stratified over (property, kind)
    assert len(set(PROPERTIES["melting point"].values())) == 12 and set(PROPERTIES["density"]) == set(D.COMPOUNDS)


def test_computed_tool_arguments_are_worked_out_in_the_thought():
    """``tooluse_args: computed``: the request never names the argument it asks for (except a search
    query), and the reference Thought derives it before the Action."""
    from sdpocl.data.synthetic.tooluse import _CAPITALS, _CURRENCY_NAMES

    difficulty = {"tooluse_args": "computed"}
    tools = Counter()
    for split in D.SPLITS:
        for r in D.generate("tooluse", split, 300, seed=6, difficulty=difficulty):
            request = r["prompt"].split("Request: ")[1]
            answer = json.loads(r["answer"])
            (tool,), args = answer["actions"], answer["input"]
            thought = re.fullmatch(rf" <think>(.*)use {tool}</think> Action: {tool}\nAction Input: (.*)", r["solution"])
            assert thought and json.loads(thought.group(2)) == args, r["solution"]
            work = thought.group(1)
            if tool == "get_weather":
                country = re.search(r"capital of (\w+)", request).group(1)
                assert args == {"city": _CAPITALS[country]} and args["city"] not in request
                assert work == f"capital of {country} is {args['city']}; "
            elif tool == "convert_currency":
                amount, src, tgt = re.search(r"(\d+) (\w+) (?:to|in|for) (\w+)", request).groups()
                assert args == {"amount": int(amount), "source": _CURRENCY_NAMES[src], "target": _CURRENCY_NAMES[tgt]}
                assert args["source"] not in request and args["target"] not in request
            elif tool == "set_alarm":
                clock, half = re.search(r"(\d+) (am|pm)", request).groups()
                assert args == {"hour": int(clock) + (12 if half == "pm" else 0)}
                assert work == f"{clock} {half} is {args['hour']}; "
            else:
                assert args["query"] in request and work == ""
            tools[split, tool] += 1
    assert all(v >= 20 for v in tools.values()) and len(tools) == 8  # every tool in both splits


def test_sft_mixture_keeps_every_tool_a_quarter_when_it_repeats():
    """12,800 warm-up examples draw 3,200 tool calls from ~1,200 train prompts, two thirds of them
    ``convert_currency``: cycling within each tool keeps the four tools equal."""
    mix = D.sft_mixture(12800, 0, 0.25)
    tools = Counter(e["completion"].split("Action: ")[1].split("\n")[0] for e in mix if e["domain"] == "tooluse")
    assert sorted(tools.values()) == [800, 800, 800, 800], tools
    with pytest.raises(ValueError, match="exceeds"):
        D.generate("tooluse", "train", 5000, 0)  # without cycling, too many is still an error


@pytest.mark.parametrize("args", ["copied", "computed"])
def test_two_call_tooluse_requests(args):
    """``tooluse_calls: 2``: half the requests join two requests of two different tools; the Thought holds
    both workings before the first Action, both calls follow in the request's order, the reference scores
    1.0 and either call alone 0.0 (ToolAlpaca's rule: the multiset of names and the merged inputs)."""
    from sdpocl.rewards.tooluse import tooluse_reward

    difficulty = {"tooluse_args": args, "tooluse_calls": 2, "reasoning": "visible"}
    singles = {r["prompt"]: r for r in D.generate("tooluse", "train", 500, 1234, {"tooluse_args": args})}
    records = D.generate("tooluse", "train", 500, 1234, difficulty)
    pairs = [r for r in records if len(json.loads(r["answer"])["actions"]) == 2]
    assert 0.4 <= len(pairs) / len(records) <= 0.6, len(pairs)
    calls = Counter()
    for r in records:
        answer = json.loads(r["answer"])
        calls.update(answer["actions"])
        if len(answer["actions"]) == 1:
            assert r["solution"].count("\nAction: ") == 1 and "Also," not in r["prompt"]
            continue
        (name1, name2), merged = answer["actions"], answer["input"]
        assert name1 != name2 and name1 in D.TOOLS and name2 in D.TOOLS
        m = re.fullmatch(
            rf" Thought: (.*)use {name1} and {name2}\nAction: {name1}\nAction Input: (\{{.*\}})"
            rf"\nAction: {name2}\nAction Input: (\{{.*\}})",
            r["solution"],
        )
        assert m, r["solution"]
        args1, args2 = json.loads(m.group(2)), json.loads(m.group(3))
        assert list(args1) == list(D.TOOLS[name1][0]) and list(args2) == list(D.TOOLS[name2][0])
        assert merged == {**args1, **args2} and len(merged) == len(args1) + len(args2)
        work = m.group(1)  # both workings, in the request's order, before the first Action
        if args == "computed":
            for name, a in ((name1, args1), (name2, args2)):
                if name == "get_weather":
                    assert f" is {a['city']}; " in work
                elif name == "set_alarm":
                    assert f" is {a['hour']}; " in work
                elif name == "convert_currency":
                    assert f" {a['source']}, " in work and f" {a['target']}; " in work
            if "search_web" not in (name1, name2):
                assert work.count("; ") >= 2, work
        else:
            assert work == ""
        request = r["prompt"].split("Request: ")[1]
        assert r["prompt"] not in singles and len(re.findall(r"[.?] ", request)) >= 1
        assert tooluse_reward([r["solution"]], answer=[r["answer"]]) == [1.0]
        one_call = r["solution"].split("\nAction: " + name2)[0]
        assert tooluse_reward([one_call], answer=[r["answer"]]) == [0.0]
        second_only = f"Action: {name2}\nAction Input: {json.dumps(args2)}"
        assert tooluse_reward([second_only], answer=[r["answer"]]) == [0.0]
    # every tool about equally often over all the calls (a quarter each, ±20%)
    assert max(calls.values()) < 1.2 * min(calls.values()), calls
    test = D.generate("tooluse", "test", 100, 1234, difficulty)
    assert 40 <= sum(len(json.loads(r["answer"])["actions"]) == 2 for r in test) <= 60
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in records}


def test_two_call_tooluse_keeps_half_the_warm_up_and_one_call_is_the_default():
    """The SFT warm-up stratifies over four single and four two-call groups: half its tool-use examples
    are two-call. ``tooluse_calls: 1`` is the data of an unset key, and only TOOLUSE changes with 2."""
    difficulty = {"tooluse_args": "computed", "tooluse_calls": 2}
    mix = [e for e in D.sft_mixture(2000, 1234, 0.25, difficulty) if e["domain"] == "tooluse"]
    two_call = sum(e["completion"].count("Action Input: ") == 2 for e in mix)
    assert abs(two_call - len(mix) / 2) <= 4, two_call  # 8 groups: the last, partial round is off by <= 4
    for domain in D.DOMAINS:
        for split, n in (("train", 500), ("test", 100)):
            plain = D.generate(domain, split, n, 1234, {"tooluse_args": "computed"})
            assert D.generate(domain, split, n, 1234, {"tooluse_args": "computed", "tooluse_calls": 1}) == plain
            assert (D.generate(domain, split, n, 1234, difficulty) == plain) == (domain != "tooluse")
    assert D.Difficulty.of({"tooluse_calls": 1}) == D.Difficulty()


def test_long_tool_lists_balance_the_test_set_and_compute_every_argument():
    """``tooluse_lists: long``: the 300-prompt test set and the 800-prompt train set hold the four tools
    equally (``short`` gives ``convert_currency`` 191 of the 300), every new argument is computed in the
    Thought and scores 1.0 under the tool-use reward, and none is one of tool_schema2's unseen values."""
    from sdpocl.data.benchmarks import _MORE_CITIES
    from sdpocl.data.benchmarks import _MORE_QUERIES as UNSEEN_QUERIES
    from sdpocl.data.synthetic.tooluse import _CAPITALS, _LONG_QUERIES, _MORE_CAPITALS, _QUERIES
    from sdpocl.rewards.tooluse import tooluse_reward

    short = {"tooluse_args": "computed", "reasoning": "visible"}
    long = {**short, "tooluse_lists": "long"}

    def tools(records):
        return Counter(json.loads(r["answer"])["actions"][0] for r in records)

    assert tools(D.generate("tooluse", "test", 300, 1234, short))["convert_currency"] > 150
    test = D.generate("tooluse", "test", 300, 1234, long)
    train = D.generate("tooluse", "train", 800, 1234, long)
    assert sorted(tools(test).values()) == [75] * 4 and sorted(tools(train).values()) == [200] * 4
    assert not {r["prompt"] for r in test} & {r["prompt"] for r in train}
    assert not set(_MORE_CAPITALS.values()) & set(_MORE_CITIES + tuple(_CAPITALS.values()))
    assert not set(_LONG_QUERIES) & set(UNSEEN_QUERIES + _QUERIES) and len(set(_LONG_QUERIES)) == 32
    capitals, halves = {**_CAPITALS, **_MORE_CAPITALS}, Counter()
    for r in test + train:
        request = r["prompt"].split("Request: ")[1]
        answer = json.loads(r["answer"])
        (tool,), args = answer["actions"], answer["input"]
        assert tooluse_reward([r["solution"]], answer=[r["answer"]]) == [1.0]
        work = re.fullmatch(rf" Thought: (.*)use {tool}\nAction: {tool}\nAction Input: .*", r["solution"]).group(1)
        if tool == "get_weather":
            country = re.search(r"capital of (\w+)", request).group(1)
            assert args == {"city": capitals[country]} and work == f"capital of {country} is {args['city']}; "
        elif tool == "set_alarm":
            clock, half = re.search(r"(\d+) (am|pm|in the morning|in the afternoon|in the evening)", request).groups()
            hour = int(clock) + (0 if half in ("am", "in the morning") else 12)
            assert args == {"hour": hour} and work == f"{clock} {half} is {hour}; " and 1 <= hour <= 23
            assert half != "in the afternoon" or int(clock) <= 5
            assert half != "in the evening" or int(clock) >= 6
            halves[half] += 1
        elif tool == "search_web":
            assert args["query"] in request and work == ""
    assert set(halves) == {"am", "pm", "in the morning", "in the afternoon", "in the evening"}, halves
    assert any(
        r["prompt"].endswith(("Make an alarm for 7 in the evening.", "Can you wake me at 7 in the evening?"))
        for r in D.generate("tooluse", "train", 1500, 0, long)
    )


def test_clock_lists_lengthen_set_alarm_only():
    """``tooluse_lists: clock``: set_alarm's requests are ``long``'s (44 clock times, 9 wordings), the other
    tools' are ``short``'s, so set_alarm holds 77 of the 300 test prompts instead of 27."""
    short = {"tooluse_args": "computed", "reasoning": "visible"}

    def by_tool(lists, split):
        out = {}
        for _, rec in _universe("tooluse", split, D.Difficulty.of({**short, "tooluse_lists": lists})):
            out.setdefault(json.loads(rec["answer"])["actions"][0], []).append(rec)
        return out

    for split in D.SPLITS:
        clock, s, long = by_tool("clock", split), by_tool("short", split), by_tool("long", split)
        assert clock["set_alarm"] == long["set_alarm"] and len(clock["set_alarm"]) > len(s["set_alarm"])
        assert all(clock[tool] == s[tool] for tool in ("get_weather", "search_web", "convert_currency"))
    test = D.generate("tooluse", "test", 300, 1234, {**short, "tooluse_lists": "clock"})
    alarms = sum(json.loads(r["answer"])["actions"] == ["set_alarm"] for r in test)
    assert alarms == 77, alarms


def test_short_tool_lists_are_the_unset_key_and_long_changes_only_tooluse():
    for domain in D.DOMAINS:
        plain = D.generate(domain, "test", 100, 1234, {"tooluse_args": "computed"})
        assert D.generate(domain, "test", 100, 1234, {"tooluse_args": "computed", "tooluse_lists": "short"}) == plain
        long = D.generate(domain, "test", 100, 1234, {"tooluse_args": "computed", "tooluse_lists": "long"})
        assert (long == plain) == (domain != "tooluse")
    assert D.Difficulty.of({"tooluse_lists": "short"}) == D.Difficulty()


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
        ({"science_properties": 4}, r"data\.difficulty\.science_properties must be an integer in \[1, 3\], got 4"),
        ({"tooluse_args": "copy"}, r"data\.difficulty\.tooluse_args must be one of copied, computed, got 'copy'"),
        ({"tooluse_calls": 0}, r"data\.difficulty\.tooluse_calls must be an integer in \[1, 2\], got 0"),
        ({"tooluse_calls": 3}, r"data\.difficulty\.tooluse_calls must be an integer in \[1, 2\], got 3"),
        ({"tooluse_calls": "2"}, r"data\.difficulty\.tooluse_calls must be an integer in \[1, 2\], got '2'"),
        (
            {"tooluse_lists": "longer"},
            r"data\.difficulty\.tooluse_lists must be one of short, clock, long, got 'longer'",
        ),
        ({"tooluse_lists": "long"}, r"data\.difficulty\.tooluse_lists: long needs tooluse_args: computed"),
        ({"tooluse_lists": "clock"}, r"data\.difficulty\.tooluse_lists: clock needs tooluse_args: computed"),
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


def test_the_schema_knows_every_difficulty_key_and_its_choices():
    """The config schema's ``data.difficulty`` lists every :class:`Difficulty` field, and an enum field's
    choices are the ones the dataclass accepts: a new key cannot be validated away or left undocumented."""
    import dataclasses

    from sdpocl.config import load_schema
    from sdpocl.data.synthetic.common import REASONING_STYLES, TOOLUSE_ARGS, TOOLUSE_LISTS

    props = load_schema()["properties"]["data"]["properties"]["difficulty"]["properties"]
    assert set(props) == {f.name for f in dataclasses.fields(D.Difficulty)}
    assert tuple(props["reasoning"]["enum"]) == REASONING_STYLES
    assert tuple(props["tooluse_args"]["enum"]) == TOOLUSE_ARGS
    assert tuple(props["tooluse_lists"]["enum"]) == TOOLUSE_LISTS
    for name, spec in props.items():
        if "default" in spec:
            assert spec["default"] == getattr(D.Difficulty(), name), name
