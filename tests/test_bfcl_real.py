"""BFCL v4 on the real data of the ``bfcl-eval`` wheel: the loader over every scored category, and
the ``bfcl`` reward against BFCL's own AST checker (run from the wheel) on every row.

The wheel is downloaded at test time (``tests/bfcl_wheel.py``); without PyPI access these tests
fail, saying so. Every answer below is scored twice, by ``sdpocl.rewards.bfcl`` from the record
the loader wrote and by BFCL's checker from the raw files, and the two must agree everywhere.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from bfcl_wheel import BFCL_VERSION, CHECKER_MODEL, DATA, bfcl_checker, category_rows, fetch_wheel

from sdpocl.data.loaders import load_records
from sdpocl.data.loaders.tooluse import BFCL_CATEGORIES
from sdpocl.rewards import bfcl, reward_for
from sdpocl.rewards.bfcl import BFCL_AST_CATEGORIES, BFCL_IRRELEVANCE_CATEGORIES

#: rows of bfcl-eval 2026.3.23 on which BFCL's checker rejects every answer: a required parameter
#: whose possible-answer list is empty (live_simple), an expected parameter the function's document
#: lacks and that is not optional (862), a required parameter missing from the possible answer (964)
UNANSWERABLE = {"live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_862-181-3", "live_multiple_964-207-0"}
#: right call sets that BFCL's greedy parallel matching rejects in reversed order: expected call 0
#: accepts either company and takes Apple's January call before Microsoft's
GREEDY_ORDER = {"parallel_178"}


@pytest.fixture(scope="session")
def wheel() -> zipfile.ZipFile:
    try:
        path = fetch_wheel()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    with zipfile.ZipFile(path) as zf:
        yield zf


@pytest.fixture(scope="module")
def raw(wheel) -> dict[str, list[dict]]:
    """Every scored category's rows, ground truth joined, straight from the wheel."""
    return {c: category_rows(wheel, c) for c in BFCL_CATEGORIES}


@pytest.fixture(scope="module")
def loaded(wheel, tmp_path_factory) -> tuple[list[dict], dict]:
    """The bfcl_v4 source loaded from the wheel's files (as a local mirror would hold them)."""
    root = tmp_path_factory.mktemp("bfcl") / "data"
    files = []
    for name in wheel.namelist():
        rel = name[len(DATA) :]
        if (
            name.startswith(DATA)
            and rel.endswith(".json")
            and rel.split("/")[-1][len("BFCL_v4_") : -5] in BFCL_CATEGORIES
        ):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(wheel.read(name))
            if "/" not in rel:
                files.append(str(root / rel))
    stats: dict = {}
    records = load_records("bfcl_v4", "test", data_files=sorted(files), stats=stats)
    return records, stats


@pytest.fixture(scope="module")
def checker(wheel):
    return bfcl_checker(wheel)


def test_every_row_loads_or_is_counted(raw, loaded):
    records, stats = loaded
    groups = stats["groups"]
    print(f"\nBFCL v4 ({BFCL_VERSION}) rows loaded / skipped / without an answer BFCL accepts, by category:")
    for c in BFCL_CATEGORIES:
        g = groups[c]
        print(
            f"  {c:24s} {g['rows']:5d} rows {g['converted']:5d} loaded {g['skipped']} skipped {g['without_reference']}"
        )
    assert set(groups) == set(BFCL_CATEGORIES)
    for c in BFCL_CATEGORIES:
        assert groups[c]["rows"] == len(raw[c]) == groups[c]["converted"] + groups[c]["skipped"]
        assert groups[c]["records"] == groups[c]["converted"]
    assert stats["skipped"] == 0  # this version has no row the loader cannot represent
    assert sum(len(rows) for rows in raw.values()) == len(records) == 3475
    assert Counter(r["category"] for r in records) == {c: len(raw[c]) for c in BFCL_CATEGORIES}
    no_reference = {r["category"] for r in records if not r["solution"]}
    assert {c: groups[c]["without_reference"] for c in no_reference} == {"live_simple": 2, "live_multiple": 2}


def _decode(text: str) -> list[dict]:
    out = bfcl.decode_calls(text)
    assert out is not None, text
    return out


def _wrong_value(value, options: list):
    """A value of the same JSON type that the parameter's listed ``options`` do not hold (None:
    no such change, e.g. both booleans listed)."""
    if isinstance(value, bool):
        wrong = not value
    elif isinstance(value, str):
        wrong = "zz wrong value zz"
    elif isinstance(value, int):
        wrong = value + 987654
    elif isinstance(value, float):
        wrong = value + 987.25
    elif isinstance(value, list):
        wrong = [*value, value[-1]] if value else ["zz wrong value zz"]
    elif isinstance(value, dict):
        wrong = {**value, "zz_wrong_key": "zz"}
    else:
        return None
    return None if wrong in options else wrong


def _sweep(ref: dict) -> list[list[tuple[str, dict]]]:
    """Every listed value of every parameter once (the others at their first listed value), and
    the omission of every optional parameter that lists ""."""
    base = bfcl.reference_calls(ref, "first")
    out = []
    for i, expected in enumerate(ref["ground_truth"]):
        ((name, params),) = expected.items()
        fn = bfcl.find_description(ref["functions"], name)
        props, required = fn["parameters"]["properties"], set(fn["parameters"]["required"])
        for param, options in params.items():
            if param not in props:
                continue
            for option in options:
                args = dict(base[i][1])
                if option == "":
                    if param in required:
                        continue
                    args.pop(param, None)
                else:
                    args[param] = bfcl.concrete_value(option, props[param], "first")
                out.append([*base[:i], (name, args), *base[i + 1 :]])
    return out


def test_bfcl_reward_agrees_with_bfcl_checker_on_every_row(raw, loaded, checker):
    """Reference answers (first / last listed values, optional ones omitted), every other listed
    value of every parameter, parallel calls reversed, and wrong answers (a wrong value, a
    missing required parameter, an extra or missing call, another function): our reward on the
    loaded record equals BFCL's checker on the raw row, and is 1 exactly where it should be."""
    module, language = checker
    ast_checker = module.ast_checker
    by_row = {}  # the loader keeps the files' row order: pair raw rows and records in order
    for c in BFCL_AST_CATEGORIES:
        recs = [r for r in loaded[0] if r["category"] == c]
        assert len(recs) == len(raw[c])
        by_row.update({row["id"]: (row, rec) for row, rec in zip(raw[c], recs)})
    counts: Counter = Counter()
    for row_id, (row, rec) in by_row.items():
        category = rec["category"]
        ref = json.loads(rec["answer"])
        assert ref["ground_truth"] == row["ground_truth"] and ref["functions"] == row["function"]
        cases: list[tuple[str, list]] = [(f"reference:{c}", bfcl.reference_calls(ref, c)) for c in bfcl.CHOICES]
        cases += [("alternative", calls) for calls in _sweep(ref)]
        if "parallel" in category:
            cases += [(f"reversed:{c}", bfcl.reference_calls(ref, c)[::-1]) for c in bfcl.CHOICES]
        first = bfcl.reference_calls(ref, "first")
        name, args = first[0]
        wrong = [("wrong:extra call", [*first, first[0]]), ("wrong:function", [(name + "_v2", args), *first[1:]])]
        fn = bfcl.find_description(ref["functions"], name)
        listed = list(ref["ground_truth"][0].values())[0]
        changes = ((p, _wrong_value(v, listed[p])) for p, v in args.items())
        changed = next(((p, v) for p, v in changes if v is not None), None)
        if changed:
            wrong.append(("wrong:value", [(name, {**args, changed[0]: changed[1]}), *first[1:]]))
        missing = next((p for p in fn["parameters"]["required"] if p in args), None)
        if missing:
            wrong.append(
                ("wrong:missing required", [(name, {k: v for k, v in args.items() if k != missing}), *first[1:]])
            )
        if len(first) > 1:
            wrong.append(("wrong:missing call", first[:-1]))
        texts = [f"Thought: I call the tools.\n{bfcl.react_text(calls)}" for _, calls in cases + wrong]
        ours = reward_for("bfcl")(texts, answer=[rec["answer"]] * len(texts))
        for (kind, _), text, mine in zip(cases + wrong, texts, ours):
            theirs = ast_checker(
                row["function"], _decode(text), row["ground_truth"], language.PYTHON, category, CHECKER_MODEL
            )
            assert mine == float(theirs["valid"]), (row_id, kind, text, theirs)
            counts[kind, mine] += 1
            kind = kind.split(":")[0]
            if row_id in UNANSWERABLE:
                expected = 0.0
            elif kind == "reversed" and row_id in GREEDY_ORDER:
                expected = mine  # BFCL rejects some orders here; checked below
            else:
                expected = 0.0 if kind == "wrong" else 1.0
            assert mine == expected, (row_id, kind, text, theirs)
    print("\nBFCL answers scored (kind, reward): count, all equal to BFCL's checker:")
    for key, n in sorted(counts.items(), key=str):
        print(f"  {key}: {n}")
    n_rows, n_parallel = len(by_row), sum(len(raw[c]) for c in BFCL_AST_CATEGORIES if "parallel" in c)
    assert (n_rows, n_parallel) == (2351, 440)
    # every row gets an extra call and another function; a wrong value all but the 31 rows whose
    # first expected call has no parameter to give; a missing one all whose function requires one
    assert counts["wrong:extra call", 0.0] == counts["wrong:function", 0.0] == n_rows
    assert (counts["wrong:value", 0.0], counts["wrong:missing required", 0.0]) == (2320, 2117)
    assert counts["wrong:missing call", 0.0] == n_parallel
    assert not any(mine for (kind, mine) in counts if kind.startswith("wrong"))
    for c in bfcl.CHOICES:  # the references score 1 on every row but the unanswerable ones
        assert (counts[f"reference:{c}", 1.0], counts[f"reference:{c}", 0.0]) == (n_rows - 4, len(UNANSWERABLE))
    assert counts["alternative", 1.0] == 13571 and counts["alternative", 0.0] == 11  # 0: unanswerable rows
    # reversed orders fail only on GREEDY_ORDER (asserted per answer above): there, two of three
    assert sum(counts[f"reversed:{c}", 0.0] for c in bfcl.CHOICES) == 2


def test_irrelevance_rows_score_one_without_a_call_and_zero_with_one(raw, loaded):
    records = [r for r in loaded[0] if r["category"] in BFCL_IRRELEVANCE_CATEGORIES]
    assert len(records) == sum(len(raw[c]) for c in BFCL_IRRELEVANCE_CATEGORIES) == 240 + 884
    for rec in records:
        offered = json.loads(rec["answer"])["functions"]  # 4 live_irrelevance rows offer none
        name = offered[0]["name"] if offered else "search"
        texts = [
            rec["solution"],
            "Thought: none of these tools computes that; the answer is 42.",
            f"Action: {name}\nAction Input: not JSON",  # does not decode: no call, as in BFCL
            f"Thought: try it.\nAction: {name}\nAction Input: {{}}",
            'Action: some_other_tool\nAction Input: {"x": 1}',  # any call counts as one
        ]
        assert reward_for("bfcl")(texts, answer=[rec["answer"]] * len(texts)) == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_reward_module_does_not_import_bfcl_eval():
    source = Path(bfcl.__file__).read_text()
    assert "import bfcl_eval" not in source and "from bfcl_eval" not in source
