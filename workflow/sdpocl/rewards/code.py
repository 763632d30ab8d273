"""Code reward: the longest fenced block passes every unit test, each test in its own sandboxed process.

As upstream (docs/paper.md, "Rewards"): every test runs in its own process -- the code block, then the
test -- with its own wall-clock limit (``timeout_s``, upstream the problem's time limit + 1 s) and
address-space limit (``memory_mb``, upstream 1 GB); a sample scores 1 iff every test passes, and
no test starts after one has failed.  The limits come from the config (``rewards.code_timeout_s``,
``rewards.code_memory_mb``), the same in training (:func:`make_code_reward`) and evaluation
(:func:`configure_code`, which sets what :func:`code_reward` uses).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import sdpocl.rewards.sandbox as sandbox
from sdpocl.rewards.text import RewardFunc, _column, completion_text

CODE_TIMEOUT_S = 2.0  # per test: the prompts' 1 s time limit + 1 s, as upstream
CODE_MEMORY_MB = 1024  # per test process: upstream's 1 GB address space

_FENCE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code_block(text: Any) -> str | None:
    """The longest fenced code block (```` ``` ```` with optional language tag), or None."""
    blocks = [m.group(2) for m in _FENCE.finditer(completion_text(text))]
    blocks = [b for b in blocks if b.strip()]
    if not blocks:
        return None
    return max(blocks, key=len)  # first of equally long blocks


def parse_tests(tests: Any) -> list[str]:
    """``tests`` as a list of assert-statement strings; accepts a list/tuple or a
    JSON string of a list (a single non-JSON string counts as one test)."""
    if tests is None:
        return []
    if isinstance(tests, bytes):
        tests = tests.decode("utf-8", "replace")
    if isinstance(tests, str):
        stripped = tests.strip()
        if stripped.startswith("["):
            try:
                tests = json.loads(stripped)
            except ValueError:
                tests = [tests]
        else:
            tests = [tests] if stripped else []
    return [str(t) for t in tests if str(t).strip()]


def score_code(
    completions: Sequence[Any],
    tests: Sequence[Any],
    *,
    timeout_s: float,
    memory_mb: int,
    max_workers: int | None = None,
) -> list[float]:
    """1.0 / 0.0 per completion: its longest code block passes every one of its tests (one
    sandbox batch).  No code block or no tests -> 0.0.  Identical programs (the same code block
    with the same tests: the samples of a group often agree) run once, and every copy gets
    that result."""
    rewards = [0.0] * len(completions)
    programs: dict[tuple[str, tuple[str, ...]], int] = {}  # (code, tests) -> index of its run
    where: list[tuple[int, int]] = []  # (completion, run)
    for i, (c, t) in enumerate(zip(completions, tests)):
        code = extract_code_block(c)
        test_list = parse_tests(t)
        if code is None or not test_list:
            continue
        where.append((i, programs.setdefault((code, tuple(test_list)), len(programs))))
    if programs:
        results = sandbox.run_batch(
            [code for code, _ in programs],
            tests=[list(test_list) for _, test_list in programs],
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_workers=max_workers,
        )
        for i, j in where:
            rewards[i] = 1.0 if results[j].ok else 0.0
    return rewards


def _check_limits(timeout_s: float, memory_mb: int) -> None:
    if not timeout_s > 0:
        raise ValueError("code timeout_s must be positive")
    if int(memory_mb) < 16:
        raise ValueError("code memory_mb must be at least 16")


def make_code_reward(
    timeout_s: float = CODE_TIMEOUT_S,
    memory_mb: int = CODE_MEMORY_MB,
    max_workers: int | None = None,
) -> RewardFunc:
    """A code reward function (named ``code_reward``) with the given limits per test."""
    _check_limits(timeout_s, memory_mb)

    def code_reward(completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs) -> list[float]:
        """1.0 iff the longest fenced code block passes every test, each in its own sandboxed
        process.  No code block or no tests -> 0.0."""
        all_tests = _column(tests, len(completions), "tests")
        return score_code(
            completions, all_tests, timeout_s=timeout_s, memory_mb=int(memory_mb), max_workers=max_workers
        )

    code_reward.__qualname__ = "code_reward"
    return code_reward


_limits: dict[str, Any] = {"timeout_s": CODE_TIMEOUT_S, "memory_mb": CODE_MEMORY_MB}


def configure_code(timeout_s: float = CODE_TIMEOUT_S, memory_mb: int = CODE_MEMORY_MB) -> None:
    """Set the limits per test that :func:`code_reward` (``reward_for("code")``) uses."""
    _check_limits(timeout_s, memory_mb)
    _limits.update(timeout_s=float(timeout_s), memory_mb=int(memory_mb))


def code_reward(completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff the longest fenced code block passes every test, each in its own sandboxed process,
    with the configured limits (:func:`configure_code`).  No code block or no tests -> 0.0."""
    all_tests = _column(tests, len(completions), "tests")
    return score_code(completions, all_tests, timeout_s=_limits["timeout_s"], memory_mb=_limits["memory_mb"])
