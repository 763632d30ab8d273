"""Binary (0.0 / 1.0) reward functions for the four synthetic domains.

Every function has TRL's reward-function signature
``f(completions, **dataset_columns) -> list[float]``: ``completions`` is a list of
plain strings or of chat completions (lists of ``{"role", "content"}`` messages;
the last assistant message is scored), dataset columns arrive as keyword lists
aligned with ``completions``, and any other keyword (``prompts``,
``completion_ids``, ``trainer_state``, ...) is accepted and ignored.

=========  =====================================================  ==============
domain     expected completion                                    column(s)
=========  =====================================================  ==============
math       `` <think>23+45=68</think> \\boxed{68}``                 ``answer``
science    `` <think>...</think> <answer>B</answer>``              ``answer``
tooluse    `` <think>...</think> Action: f\\nAction Input: {...}``  ``answer`` (JSON)
code       `` <think>...</think> ```python\\n...\\n``` ``            ``tests``
=========  =====================================================  ==============

One module per domain (:mod:`.math`, :mod:`.science`, :mod:`.tooluse`, :mod:`.code`); code is
executed only through :mod:`sdpocl.rewards.sandbox` (separate, limited process).
"""

from __future__ import annotations

from sdpocl.rewards.code import (
    CODE_MEMORY_MB,
    CODE_TIMEOUT_S,
    code_reward,
    extract_code_block,
    make_code_reward,
    parse_tests,
)
from sdpocl.rewards.math import (
    BOXED_WINDOW,
    boxed_count,
    extract_all_boxed,
    extract_boxed,
    math_answers_equal,
    math_reward,
    normalise_math_answer,
)
from sdpocl.rewards.routing import make_routed_reward
from sdpocl.rewards.science import extract_choice, science_reward
from sdpocl.rewards.text import RewardFunc, completion_text
from sdpocl.rewards.tooluse import parse_tool_calls, tooluse_reward

__all__ = [
    "REWARD_FUNCS",
    "reward_for",
    "math_reward",
    "science_reward",
    "tooluse_reward",
    "code_reward",
    "make_code_reward",
    "make_routed_reward",
    "domain_rewards",
    "completion_text",
    "boxed_count",
    "extract_boxed",
    "extract_all_boxed",
    "normalise_math_answer",
    "math_answers_equal",
    "extract_choice",
    "parse_tool_calls",
    "extract_code_block",
    "parse_tests",
    "BOXED_WINDOW",
    "CODE_TIMEOUT_S",
    "CODE_MEMORY_MB",
]

REWARD_FUNCS: dict[str, RewardFunc] = {
    "math": math_reward,
    "science": science_reward,
    "tooluse": tooluse_reward,
    "code": code_reward,
}


def reward_for(domain: str) -> RewardFunc:
    """The reward function of ``domain``; ``ValueError`` for an unknown domain."""
    try:
        return REWARD_FUNCS[domain]
    except (KeyError, TypeError):
        raise ValueError(f"unknown domain {domain!r}; known domains: {', '.join(sorted(REWARD_FUNCS))}") from None


def domain_rewards(code_timeout_s: float = CODE_TIMEOUT_S) -> dict[str, RewardFunc]:
    """Every domain's reward, the code reward with the given sandbox time limit."""
    return {**REWARD_FUNCS, "code": make_code_reward(timeout_s=code_timeout_s)}
