"""Paper-preset loaders (sdpocl.data.loaders) on small offline fixtures in each source's own schema."""

import json
import logging
from pathlib import Path

import pytest

from sdpocl.data import loaders
from sdpocl.data.loaders import SOURCES, load_records, prepare_paper_dataset
from sdpocl.rewards import REWARD_FUNCS, code_reward, reward_for

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
    ("bfcl_v4", "test", "bfcl_v4.jsonl", 4),  # the parallel entry dropped
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
        assert set(SCHEMA) <= set(rec) <= set(SCHEMA) | {"system"}
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
    """The reference, formatted as a model would answer, gets reward 1.0 from the domain's reward."""
    _, records = prepared[name, split]
    domain = SOURCES[name].domain
    for rec in records:
        wrapped = {
            "math": f"Let me think.\n\nSo the final answer is {rec['solution']}",
            "science": (
                f"<reasoning>\nThe options compare as follows.\n</reasoning>\n<answer>\n{rec['answer']}\n</answer>"
            ),
            "tooluse": f"Thought: I should call the tool.\n{rec['solution']}",
        }[domain]
        assert reward_for(domain)([wrapped, rec["solution"]], answer=[rec["answer"]] * 2) == [1.0, 1.0], rec
        assert reward_for(domain)(["I do not know."], answer=[rec["answer"]]) == [0.0]


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
            assert rec["answer"] not in prompt and rec["solution"] not in prompt
            assert "Action Input: {" not in prompt
            ref = json.loads(rec["answer"])
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


def test_bfcl_reference_takes_first_listed_values():
    recs = {
        r["prompt"].rsplit("Question: ", 1)[1]: json.loads(r["answer"])
        for r in load_records("bfcl_v4", "test", data_files=str(FIX / "bfcl_v4.jsonl"))
    }

    def ref(start: str) -> dict:
        return next(v for k, v in recs.items() if k.startswith(start))

    assert ref("Calculate the derivative")["input"] == {"function": "3x**2 + 2x - 1"}  # "" first: omitted
    assert ref("Fetch records")["input"] == {
        "database_name": "StudentDB",
        "table_name": "students",
        "conditions": {"department": "Science", "school": "Bluebird High School"},
    }
    taxi = ref("System: You are a helpful travel assistant.\nUser: Book me a taxi")
    assert taxi == {
        "actions": ["taxi.book"],
        "input": {"pickup": "Marriott Berlin", "dropoff": "Tegel", "class": "comfort"},
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
