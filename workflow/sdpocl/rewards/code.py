"""Code reward: the longest fenced block, followed by the unit tests, runs in :mod:`sdpocl.rewards.sandbox`."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sdpocl.rewards import sandbox
from sdpocl.rewards.text import RewardFunc, _column, completion_text

CODE_TIMEOUT_S = 2.0
CODE_MEMORY_MB = 256

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


def make_code_reward(
    timeout_s: float = CODE_TIMEOUT_S,
    memory_mb: int = CODE_MEMORY_MB,
    max_workers: int | None = None,
) -> RewardFunc:
    """A code reward function (named ``code_reward``) with the given sandbox limits."""

    def code_reward(completions: Sequence[Any], tests: Sequence[Any] | None = None, **kwargs) -> list[float]:
        """1.0 iff the longest fenced code block followed by every test runs
        without error in the sandbox.  No code block or no tests -> 0.0."""
        all_tests = _column(tests, len(completions), "tests")
        rewards = [0.0] * len(completions)
        programs: list[list[str]] = []
        where: list[int] = []
        for i, (c, t) in enumerate(zip(completions, all_tests)):
            code = extract_code_block(c)
            test_list = parse_tests(t)
            if code is None or not test_list:
                continue
            programs.append([code, *test_list])
            where.append(i)
        if programs:
            results = sandbox.run_batch(programs, timeout_s=timeout_s, memory_mb=memory_mb, max_workers=max_workers)
            for i, res in zip(where, results):
                rewards[i] = 1.0 if res.ok else 0.0
        return rewards

    code_reward.__qualname__ = "code_reward"
    return code_reward


code_reward = make_code_reward()
