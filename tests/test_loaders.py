"""Paper-preset loaders (sdpocl.data.loaders) on small offline fixtures in each source's own schema."""

import json
import logging
from pathlib import Path

import pytest

from sdpocl.data import loaders
from sdpocl.data.loaders import SOURCES, load_records, prepare_paper_dataset
from sdpocl.rewards import REWARD_FUNCS, bfcl, code_reward, parse_tool_call_list, reward_for

FIX = Path(__file__).resolve().parent / "fixtures" / "paper"
SCHEMA = ("prompt", "answer", "tests", "domain", "dataset", "solution")

#: (source, split, fixture, expected record count)
CASES = [
    ("dapo_math", "train", "dapo_math.jsonl", 3),  # 4 rows, one duplicate problem
    ("sciknoweval", "train", "sciknoweval.jsonl", 3),  # 4 Chemistry-L3-mcq4 rows, 90/10
    ("sciknoweval", "test", "sciknoweval.jsonl", 1),
    ("toolalpaca", "train", "toolalpaca_train.json", 2),  # getDetails / no-step instances dropped
    ("toolalpaca", "test", "toolalpaca_eval.json", 3),
    ("dolci_code", "train", "dolci_code.jsonl", 3),  # 4 code rows (1 math row filtered), 90/10
    ("dolci_code", "test", "dolci_code.jsonl", 1),
    ("livecodebench_train", "train", "livecodebench.jsonl", 1),  # before 2025-02-01
    ("livecodebench_v6", "test", "livecodebench.jsonl", 2),  # 2025-02-01 .. 2025-05-01
    ("aime24", "test", "aime24.jsonl", 3),
    ("aime25", "test", "aime25.jsonl", 3),
    ("math500", "test", "math500.jsonl", 3),
    ("gpqa_diamond", "test", "gpqa_diamond.jsonl", 4),
    ("mmlu_redux", "test", "mmlu_redux.jsonl", 3),  # one wrong_groundtruth row dropped
    ("zebralogic", "test", "zebralogic.jsonl", 3),
    # 10 rows: simple, multiple, parallel (2), a literal dict below a dict parameter, an empty
    # possible-answer list (kept: BFCL scores it 0), irrelevance; one expects a function that is not
    # offered (skipped and counted). parallel_178, live_multiple_121-46-0, live_simple_112-68-0 and
    # irrelevance_0 are copied from the bfcl-eval 2026.3.23 wheel (Apache-2.0), the rest hand-written.
    ("bfcl_v4", "test", "bfcl_v4.jsonl", 9),
]


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Every case converted once through prepare_paper_dataset(..., data_files=fixture)."""
    out_dir = tmp_path_factory.mktemp("paper")
    result = {}
    for name, split, fixture, _ in CASES:
        out = out_dir / f"{name}_{split}.jsonl"
        count = prepare_paper_dataset(name, split, out, data_files=str(FIX / fixture))
        result[name, split] = (count, _read(out))
    return result


@pytest.mark.parametrize("name,split,fixture,expected", CASES)
def test_converts_fixture_to_common_schema(prepared, name, split, fixture, expected):
    count, records = prepared[name, split]
    assert count == len(records) == expected
    for rec in records:
        assert set(SCHEMA) <= set(rec) <= set(SCHEMA) | {"system", "category"}
        assert ("category" in rec) == (name == "bfcl_v4")  # BFCL's test category, for the per-category Acc
        assert all(isinstance(rec[k], str) for k in ("prompt", "answer", "domain", "dataset", "solution"))
        assert isinstance(rec["tests"], list) and all(isinstance(t, str) for t in rec["tests"])
        assert rec["domain"] == SOURCES[name].domain and rec["dataset"] == name
        assert rec["prompt"] == rec["prompt"].rstrip() and rec["prompt"]


def test_registry_is_complete_and_consistent():
    covered = {name for name, *_ in CASES}
    assert covered == set(SOURCES)
    for src in SOURCES.values():
        assert src.domain in REWARD_FUNCS and src.role in ("train", "benchmark")
        assert set(src.splits) <= {"train", "test"} and callable(src.convert)
    assert {n for n, s in SOURCES.items() if s.role == "train"} >= set(loaders.TRAINING_SETS.values())
    for domain, name in loaders.TRAINING_SETS.items():
        assert SOURCES[name].domain == domain and "train" in SOURCES[name].splits
        for bench, split in loaders.IN_DOMAIN_EVAL[domain]:
            assert split in SOURCES[bench].splits and SOURCES[bench].domain == domain
    assert all(SOURCES[b].role == "benchmark" for b in loaders.OOD_BENCHMARKS)


@pytest.mark.parametrize("name,split", [(n, s) for n, s, _, _ in CASES if SOURCES[n].domain != "code"])
def test_reference_answers_score_one(prepared, name, split):
    """The reference, formatted as a model would answer, gets reward 1.0 from the domain's reward
    (BFCL: except on the row whose every answer BFCL's checker rejects, which scores 0 whatever is
    answered); an answer without the reference scores 0 (BFCL irrelevance: a call scores 0)."""
    _, records = prepared[name, split]
    domain = SOURCES[name].domain
    for rec in records:
        wrapped = {
            "math": f"Let me think.\n\nSo the final answer is {rec['solution']}",
            "science": (
                f"<reasoning>\nThe options compare as follows.\n</reasoning>\n<answer>\n{rec['answer']}\n</answer>"
            ),
            "tooluse": f"Thought: I should call the tool.\n{rec['solution']}",
            "bfcl": f"Thought: I should call the tool.\n{rec['solution']}",
        }[domain]
        wrong = "I do not know."
        if domain == "bfcl" and rec["category"] == "irrelevance":
            wrong = f"Action: {json.loads(rec['answer'])['functions'][0]['name']}\nAction Input: {{}}"
        if domain == "bfcl" and not rec["solution"]:
            assert rec["prompt"].endswith("classify it appropriately?")  # live_simple_112-68-0: [] for required ones
            ref = json.loads(rec["answer"])
            tries = [bfcl.react_text(bfcl.reference_calls(ref, c)) for c in bfcl.CHOICES]
            assert reward_for(domain)(tries, answer=[rec["answer"]] * 3) == [0.0] * 3
            continue
        assert reward_for(domain)([wrapped, rec["solution"]], answer=[rec["answer"]] * 2) == [1.0, 1.0], rec
        assert reward_for(domain)([wrong], answer=[rec["answer"]]) == [0.0]


def test_math_prompt_format(prepared):
    for key in [("dapo_math", "train"), ("aime24", "test"), ("aime25", "test"), ("math500", "test")]:
        for rec in prepared[key][1]:
            assert rec["prompt"].endswith("\n\nPlease reason step by step, and put your final answer within \\boxed{}.")
            assert "Answer:" not in rec["prompt"]  # DAPO's own "Answer:" instruction is removed
    dapo = prepared["dapo_math", "train"][1]
    assert len({r["prompt"] for r in dapo}) == len(dapo)
    assert prepared["aime24", "test"][1][1]["answer"] == "025"


def test_science_prompt_format(prepared):
    for key in [("sciknoweval", "train"), ("sciknoweval", "test"), ("mmlu_redux", "test"), ("zebralogic", "test")]:
        for rec in prepared[key][1]:
            assert rec["prompt"].endswith("\nPlease reason step by step.")
            assert "\n\nA: " in rec["prompt"] and "\nB: " in rec["prompt"]
            assert "<reasoning>" in rec["system"] and "<answer>" in rec["system"]
    rec = prepared["sciknoweval", "train"][1][0]
    assert rec["system"] == loaders.SCIKNOWEVAL_SYSTEM
    assert "(A, B, C, or D)" in rec["system"]
    zebra = {r["answer"] for r in prepared["zebralogic", "test"][1]}
    assert zebra == {"A", "B"}


def test_sciknoweval_split_is_seeded_deterministic_and_disjoint():
    path = str(FIX / "sciknoweval.jsonl")
    train = [r["prompt"] for r in load_records("sciknoweval", "train", data_files=path)]
    test = [r["prompt"] for r in load_records("sciknoweval", "test", data_files=path)]
    assert not set(train) & set(test)
    assert len(train) + len(test) == 4  # only Chemistry / L3 / mcq-4-choices rows
    assert all("Which element" not in p and "benzene" not in p for p in train + test)
    assert train == [r["prompt"] for r in load_records("sciknoweval", "train", data_files=path)]
    assert test == [r["prompt"] for r in load_records("sciknoweval", "test", data_files=path)]
    other = [r["prompt"] for r in load_records("sciknoweval", "test", seed=0, data_files=path)]
    assert len(other) == 1  # another seed: still 90/10 (which row is held out may change)


def _gpqa_orders(seed: int) -> list[str]:
    recs = load_records("gpqa_diamond", "test", seed=seed, data_files=str(FIX / "gpqa_diamond.jsonl"))
    return [r["prompt"].split("\nOptions: ")[1] for r in recs]


def test_gpqa_options_are_seeded():
    first = _gpqa_orders(42)
    assert first == _gpqa_orders(42)
    assert any(_gpqa_orders(s) != first for s in (0, 1, 2))
    recs = load_records("gpqa_diamond", "test", data_files=str(FIX / "gpqa_diamond.jsonl"))
    for rec in recs:
        assert rec["prompt"].startswith("Return your final response within \\boxed{} and only include the letter")
        options = rec["prompt"].split("\nOptions: ")[1].split("\nAnswer:")[0]
        assert options.startswith("A) ") and ", D) " in options
    spin = next(r for r in recs if "spin-1/2" in r["prompt"])
    options = spin["prompt"].split("\nOptions: ")[1]
    assert f"{spin['answer']}) 1/2" in options  # the letter points at the correct option


def test_tooluse_prompt_never_leaks_the_reference(prepared):
    for key in [("toolalpaca", "train"), ("toolalpaca", "test"), ("bfcl_v4", "test")]:
        for rec in prepared[key][1]:
            prompt = rec["prompt"]
            assert "system" not in rec
            assert prompt.startswith("Your task is to answer the user's question using available tools.")
            assert "\nThought: you should always think about what to do\nAction: " in prompt
            assert "\n\nBegin!\nQuestion: " in prompt
            assert rec["answer"] not in prompt and (rec["solution"] not in prompt or not rec["solution"])
            assert "Action Input: {" not in prompt
            ref = json.loads(rec["answer"])
            if key[0] == "bfcl_v4":  # BFCL's possible answers and the documents of every offered function
                assert set(ref) == {"category", "functions", "ground_truth"} and ref["category"] == rec["category"]
                assert all(f"{fn['name']}: " in prompt for fn in ref["functions"])
                assert loaders.BFCL_NOTE in prompt  # several calls, or none, are answers too
                assert (ref["ground_truth"] is None) == (rec["category"] == "irrelevance")
            else:
                assert set(ref) == {"actions", "input"} and ref["actions"]


def test_toolalpaca_references():
    train = load_records("toolalpaca", "train", data_files=str(FIX / "toolalpaca_train.json"))
    oslo = next(r for r in train if "Oslo" in r["prompt"])
    assert json.loads(oslo["answer"]) == {
        "actions": ["getForecast", "getCurrentWeather"],
        "input": {"city": "Oslo", "days": 3},
    }
    assert "Hint:" not in oslo["prompt"]
    test = load_records("toolalpaca", "test", data_files=str(FIX / "toolalpaca_eval.json"))
    both = json.loads(test[2]["answer"])
    assert both["actions"] == ["searchAxolotlImages"] * 2 and both["input"]["size"] == "large"
    assert reward_for("tooluse")([test[2]["solution"]], answer=[test[2]["answer"]]) == [1.0]


def _bfcl_records() -> dict[str, dict]:
    """The fixture's BFCL records by their question."""
    return {
        r["prompt"].rsplit("Question: ", 1)[1]: r
        for r in load_records("bfcl_v4", "test", data_files=str(FIX / "bfcl_v4.jsonl"))
    }


def test_bfcl_records_keep_possible_answers_and_reference_takes_first_listed_values():
    recs = _bfcl_records()
    answers = {json.loads(line)["id"]: json.loads(line)["ground_truth"] for line in _answer_lines()}

    def rec(start: str) -> dict:
        return next(v for k, v in recs.items() if k.startswith(start))

    def calls(r: dict) -> list:
        return parse_tool_call_list(r["solution"])

    derivative, fetch = rec("Calculate the derivative"), rec("Fetch records")
    taxi = rec("System: You are a helpful travel assistant.\nUser: Book me a taxi")
    # the reference: the first listed value of every parameter, "" first = optional, omitted
    assert calls(derivative) == [("calculate_derivative", {"function": "3x**2 + 2x - 1"})]
    assert calls(fetch) == [
        (
            "db_fetch_records",
            {
                "database_name": "StudentDB",
                "table_name": "students",
                "conditions": {"department": "Science", "school": "Bluebird High School"},
            },
        )
    ]
    assert calls(taxi) == [("taxi.book", {"pickup": "Marriott Berlin", "dropoff": "Tegel", "class": "comfort"})]
    # the answer keeps BFCL's possible answers verbatim, the category and the offered functions
    for r, row_id in ((derivative, "simple_python_14"), (fetch, "simple_python_89"), (taxi, "live_multiple_3-2-0")):
        ref = json.loads(r["answer"])
        assert ref["ground_truth"] == answers[row_id] and ref["category"] == r["category"] == row_id.rsplit("_", 1)[0]
    assert [f["name"] for f in json.loads(taxi["answer"])["functions"]] == ["taxi.book", "hotel.search"]
    assert {r["category"] for r in recs.values()} == {
        "simple_python",
        "live_multiple",
        "parallel",
        "live_simple",
        "irrelevance",
    }


def _answer_lines() -> list[str]:
    return (FIX / "possible_answer" / "bfcl_v4.jsonl").read_text().splitlines()


def test_bfcl_any_listed_value_scores_one_as_bfcl_checker_does():
    """The old exact-match reference accepted only the first listed values: every listed value
    (BFCL's string standardisation and type rules included) now scores as BFCL's checker scores it."""
    recs = _bfcl_records()

    def score(start: str, *calls: tuple[str, dict]) -> float:
        r = next(v for k, v in recs.items() if k.startswith(start))
        text = "Thought: call it.\n" + bfcl.react_text(calls)
        return reward_for("bfcl")([text], answer=[r["answer"]])[0]

    taxi = "System: You are a helpful travel assistant.\nUser: Book me a taxi"
    assert score(taxi, ("taxi.book", {"pickup": "Marriott, Berlin", "dropoff": "Tegel Airport", "class": "comfort"}))
    assert score(taxi, ("taxi.book", {"pickup": "marriott berlin", "dropoff": "TEGEL", "class": "Comfort"}))
    assert not score(taxi, ("taxi.book", {"pickup": "Marriott Berlin", "dropoff": "Tegel"}))  # listed without ""
    assert not score(taxi, ("taxi.book", {"pickup": "Hilton Berlin", "dropoff": "Tegel", "class": "comfort"}))
    assert not score(taxi, ("hotel.search", {"city": "Berlin"}))
    derivative = "Calculate the derivative"
    assert score(derivative, ("calculate_derivative", {"function": "lambda x: 3x**2 + 2x - 1", "x_value": 0}))
    assert score(derivative, ("calculate_derivative", {"function": "3x**2+2x-1", "x_value": 0.0}))  # int or float
    assert not score(derivative, ("calculate_derivative", {"x_value": 0.0}))  # required one missing
    assert not score(derivative, ("calculate_derivative", {"function": "3x**2 + 2x - 1", "x": 1}))  # unexpected
    fetch = "Fetch records"
    full = {"database_name": "StudentDB", "table_name": "students", "fetch_limit": 0}
    assert score(
        fetch, ("db_fetch_records", {**full, "conditions": {"department": "Science", "school": "Bluebird HS"}})
    )
    assert not score(fetch, ("db_fetch_records", {**full, "conditions": {"department": "Science"}}))
    triangle = "Find the area of a triangle"
    assert score(triangle, ("calculate_triangle_area", {"base": 10, "height": 5}))
    assert score(triangle, ("calculate_triangle_area", {"base": 10, "height": 5, "unit": "units"}))
    assert not score(triangle, ("calculate_triangle_area", {"base": 10.0, "height": 5}))  # a float is no integer
    one = ("calculate_triangle_area", {"base": 10, "height": 5})
    assert not score(triangle, one, one)  # an extra call
    # a literal dict below a dict parameter's possible-answer map is a plain value (it aborted the
    # old loader); 50 == 50.0 as in Python
    headway = "Could you determine the distance to the closest leading object"
    ego = {"position": {"lateral": 10.5, "longitudinal": 50.0}, "orientation": 30}
    lane = {"lane_id": "L123", "lane_type": "regular"}
    box = [{"x": 60.2, "y": 12.3}]
    assert score(headway, ("get_headway", {"ego_info": ego, "lane_info": lane, "bounding_boxes": box}))
    moved = {**ego, "position": {"lateral": 10.5, "longitudinal": 51}}
    assert not score(headway, ("get_headway", {"ego_info": moved, "lane_info": lane, "bounding_boxes": box}))
    # parallel calls in any order
    spotify = "Play songs from the artists"
    a, b = (
        ("spotify.play", {"artist": "Taylor Swift", "duration": 20}),
        ("spotify.play", {"artist": "Maroon 5", "duration": 15}),
    )
    assert score(spotify, a, b) and score(spotify, b, a)
    assert not score(spotify, a) and not score(spotify, a, b, b) and not score(spotify, a, a)
    # ... as BFCL matches them: greedily, each expected call taking the first call it accepts, so
    # one order of a right answer fails where expected call 0 accepts either company (parallel_178)
    stock = "What were the closing stock prices"
    calls = [
        ("get_stock_price", {"company_name": c, "date": d, "exchange": "NASDAQ"})
        for c, d in (
            ("Microsoft", "2022-01-01"),
            ("Microsoft", "2022-02-01"),
            ("Apple", "2022-01-01"),
            ("Apple", "2022-02-01"),
        )
    ]
    assert score(stock, *calls) and score(stock, calls[1], calls[0], calls[3], calls[2])
    assert not score(stock, *calls[::-1]) and not score(stock, calls[2], *calls[:2], calls[3])  # Apple/Jan first
    # irrelevance: no call is right, any call is wrong
    irrelevant = "Calculate the area of a triangle"
    assert score(irrelevant) == 1.0
    assert score(irrelevant, ("determine_body_mass_index", {"weight": 70, "height": 1.75})) == 0.0


def test_bfcl_unrepresentable_rows_are_skipped_and_counted_per_category(caplog):
    stats: dict = {}
    with caplog.at_level(logging.INFO, logger="sdpocl.data.loaders"):
        records = load_records("bfcl_v4", "test", data_files=str(FIX / "bfcl_v4.jsonl"), stats=stats)
    assert len(records) == 9 and stats["rows"] == 10 and stats["skipped"] == 1 and stats["records"] == 9
    groups = stats["groups"]
    assert groups["simple_python"] == {
        "rows": 4,
        "skipped": 1,
        "no_record": 0,
        "converted": 3,
        "without_reference": 0,
        "records": 3,
    }
    assert groups["live_simple"]["without_reference"] == 1 and groups["live_simple"]["records"] == 1
    assert {g: c["records"] for g, c in groups.items()} == {
        "simple_python": 3,
        "live_multiple": 2,
        "parallel": 2,
        "live_simple": 1,
        "irrelevance": 1,
    }
    lines = [r.getMessage() for r in caplog.records]
    assert any("length.convert" in m and "not among the offered functions" in m for m in lines)
    assert any(
        "simple_python: 4 rows, 3 converted (0 without a reference), 1 skipped, 3 records kept" in m for m in lines
    )
    sub: dict = {}
    assert len(load_records("bfcl_v4", "test", n=4, data_files=str(FIX / "bfcl_v4.jsonl"), stats=sub)) == 4
    assert sub["converted"] == 9 and sum(c["records"] for c in sub["groups"].values()) == 4


def test_prepare_benchmark_writes_counts_beside_the_data(tmp_path, capsys):
    from sdpocl.cli import main

    sources = json.dumps({"bfcl_v4": str(FIX / "bfcl_v4.jsonl")})
    out = tmp_path / "bfcl_v4" / "test.jsonl"
    args = ["prepare-benchmark", "--preset", "paper", "--name", "bfcl_v4", "--seed", "42", "--sources", sources]
    assert main([*args, "--out", str(out)]) == 0
    meta = json.loads((out.parent / "meta.json").read_text())
    assert meta["records"] == 9 == len(_read(out)) and meta["benchmark"] == "bfcl_v4"
    counts = meta["sources"]["bfcl_v4"]
    assert counts["skipped"] == 1 and counts["groups"]["simple_python"]["skipped"] == 1
    assert (
        "bfcl_v4 simple_python: 4 rows, 3 loaded (0 without a reference answer), 1 skipped" in capsys.readouterr().out
    )
    assert sorted(p.name for p in out.parent.iterdir()) == ["meta.json", "test.jsonl"]  # atomic: no temporary
    elsewhere = tmp_path / "meta" / "bfcl.json"
    assert (
        main(
            ["prepare-benchmark", "--name", "arith_words", "--n", "3", "--seed", "1"]
            + ["--out", str(out), "--meta", str(elsewhere)]
        )
        == 0
    )
    assert json.loads(elsewhere.read_text()) == {
        "benchmark": "arith_words",
        "preset": "tiny",
        "seed": 1,
        "n": 3,
        "records": 3,
    }


def test_code_records_and_sandboxed_reward(prepared):
    """Reference programs, fenced as a model would answer, pass the converted tests in the sandbox;
    wrong or unguarded programs do not."""
    v6 = prepared["livecodebench_v6", "test"][1]
    dolci = prepared["dolci_code", "train"][1] + prepared["dolci_code", "test"][1]
    for rec in v6 + dolci:
        assert rec["prompt"].startswith("You are a coding expert.") and rec["answer"] == "" and rec["tests"]
    call = next(r for r in v6 if "maxPairSum" in r["prompt"])
    stdio = next(r for r in v6 if "decimal digits" in r["prompt"])
    assert "def maxPairSum(nums: List[int], k: int) -> int:" in call["prompt"]  # signature without self
    assert len(call["tests"]) == 3  # 1 public + 2 compressed private
    assert "main()" in stdio["prompt"] and len(stdio["tests"]) == 3
    by_fn = {fn: next(r for r in dolci if f"`{fn}" in r["prompt"]) for fn in ("running_max", "is_palindrome", "double")}
    summing = next(r for r in dolci if "print their sum" in r["prompt"])

    def fence(code: str) -> str:
        return f"Here is my solution.\n\n```python\n{code}\n```"

    cases = [
        (
            call,
            "from typing import List\nclass Solution:\n    def maxPairSum(self, nums: List[int], k: int) -> int:\n"
            "        s = sorted(nums)\n        return s[-1] * 2 ** k + s[-2]",
            1.0,
        ),
        (call, "def maxPairSum(nums, k):\n    s = sorted(nums)\n    return s[-1] * 2 ** k + s[-2]", 1.0),
        (call, "def maxPairSum(nums, k):\n    return sum(nums)", 0.0),
        (
            stdio,
            "import sys\n\ndef main():\n    n = sys.stdin.buffer.readline().decode().strip()\n"
            "    sys.stdout.write(str(sum(map(int, n))) + '\\n')\n\nif __name__ == '__main__':\n    main()",
            1.0,
        ),
        (stdio, 'def main():\n    print(sum(int(c) for c in input()))\n\nif __name__ == "__main__":\n    main()', 1.0),
        (stdio, "print(sum(int(c) for c in input()))", 0.0),  # reads stdin at import: no main()
        (
            by_fn["running_max"],
            "def running_max(nums):\n    out = []\n    for x in nums:\n"
            "        out.append(x if not out else max(out[-1], x))\n    return out",
            1.0,
        ),
        (
            by_fn["is_palindrome"],
            "def is_palindrome(s):\n    t = [c for c in s.lower() if c.isalnum()]\n    return t == t[::-1]",
            1.0,
        ),
        (by_fn["double"], "def double(x):\n    return 2 * x", 1.0),
        (
            summing,
            "def main():\n    input()\n    print(sum(map(int, input().split())))\n\n"
            "if __name__ == '__main__':\n    main()",
            1.0,
        ),
    ]
    rewards = code_reward([fence(code) for _, code, _ in cases], tests=[rec["tests"] for rec, _, _ in cases])
    assert rewards == [want for _, _, want in cases]


def test_livecodebench_windows_split_train_and_benchmark(prepared):
    v6 = prepared["livecodebench_v6", "test"][1]
    train = prepared["livecodebench_train", "train"][1]
    assert not {r["prompt"] for r in v6} & {r["prompt"] for r in train}
    assert "vowels" in train[0]["prompt"] and not any("minimum number of elements" in r["prompt"] for r in v6)


def test_unknown_name_or_split_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="valid: .*aime24.*zebralogic"):
        prepare_paper_dataset("aime2024", "test", tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="valid splits: test"):
        prepare_paper_dataset("aime24", "train", tmp_path / "x.jsonl")
    assert not (tmp_path / "x.jsonl").exists()


def test_unconvertible_row_names_source_and_index(tmp_path):
    rows = [json.loads(line) for line in (FIX / "aime25.jsonl").read_text().splitlines()]
    del rows[1]["answer"]
    bad = tmp_path / "aime25_bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"aime25 \(test\): cannot convert row 1: missing column answer"):
        prepare_paper_dataset("aime25", "test", tmp_path / "out.jsonl", data_files=str(bad))
    assert not (tmp_path / "out.jsonl").exists()


def test_known_bad_rows_are_skipped_and_counted(tmp_path, caplog):
    api = json.loads((FIX / "toolalpaca_eval.json").read_text())
    api[0]["Golden_Answers"][1][0]["Action_Input"] = "{color: wild}"  # not JSON
    bad = tmp_path / "eval_bad.json"
    bad.write_text(json.dumps(api))
    with caplog.at_level(logging.WARNING, logger="sdpocl.data.loaders"):
        count = prepare_paper_dataset("toolalpaca", "test", tmp_path / "out.jsonl", data_files=str(bad))
    assert count == 2
    assert any("skipping instruction" in r.getMessage() for r in caplog.records)


def test_subsample_is_seeded_and_write_is_atomic(tmp_path):
    out = tmp_path / "sub" / "gpqa.jsonl"
    path = str(FIX / "gpqa_diamond.jsonl")
    assert prepare_paper_dataset("gpqa_diamond", "test", out, n=2, seed=7, data_files=path) == 2
    first = out.read_text()
    assert prepare_paper_dataset("gpqa_diamond", "test", out, n=2, seed=7, data_files=path) == 2
    assert out.read_text() == first
    assert sorted(p.name for p in out.parent.iterdir()) == ["gpqa.jsonl"]  # no temporary file left
    assert prepare_paper_dataset("gpqa_diamond", "test", out, n=10, data_files=path) == 4


def test_lcb_compressed_tests_decode_without_globals():
    import base64
    import pickle
    import zlib

    payload = base64.b64encode(zlib.compress(pickle.dumps(json.dumps([{"input": "1", "output": "2"}])))).decode()
    assert loaders.decode_lcb_tests(payload) == [{"input": "1", "output": "2"}]
    evil = base64.b64encode(zlib.compress(pickle.dumps(Path("x")))).decode()
    with pytest.raises(loaders.RowError):
        loaders.decode_lcb_tests(evil)
