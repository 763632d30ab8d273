"""Reward routing by the record's ``domain`` column: a stage that replays earlier domains' prompts
scores each completion with its own domain's reward (one call per domain on its rows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sdpocl.rewards.text import RewardFunc, _column


def make_routed_reward(funcs: dict[str, RewardFunc]) -> RewardFunc:
    """A TRL reward function that routes each row to ``funcs[row's domain]``; every list-valued
    keyword aligned with ``completions`` (dataset columns, prompts, completion ids) is split with it."""

    def routed_reward(completions: Sequence[Any], domain: Sequence[str] | None = None, **kwargs) -> list[float]:
        n = len(completions)
        domains = _column(domain, n, "domain")
        unknown = sorted(set(domains) - set(funcs))
        if unknown:
            raise ValueError(f"no reward for domain(s) {', '.join(unknown)}; known: {', '.join(sorted(funcs))}")
        out = [0.0] * n
        for d in dict.fromkeys(domains):
            rows = [i for i, x in enumerate(domains) if x == d]
            sub = {
                k: ([v[i] for i in rows] if isinstance(v, (list, tuple)) and len(v) == n else v)
                for k, v in kwargs.items()
            }
            for i, score in zip(rows, funcs[d]([completions[i] for i in rows], domain=[d] * len(rows), **sub)):
                out[i] = score
        return out

    routed_reward.__qualname__ = routed_reward.__name__ = "routed_reward"
    return routed_reward
