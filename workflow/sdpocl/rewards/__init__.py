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
bfcl       ``Action: f\\nAction Input: {...}`` per call             ``answer`` (JSON)
code       `` <think>...</think> ```python\\n...\\n``` ``            ``tests``
=========  =====================================================  ==============

One module per domain (:mod:`.math`, :mod:`.science`, :mod:`.tooluse`, :mod:`.code`), plus
:mod:`.bfcl` (BFCL v4's AST checker; it scores the ``bfcl_v4`` benchmark only); code is
executed only through :mod:`sdpocl.rewards.sandbox` (separate, limited process), math-verify
only in :mod:`sdpocl.rewards.mathverify`'s worker process.

Limits (the config's ``rewards`` block, :data:`REWARD_LIMITS` with their defaults) are the same in
training and evaluation: training builds its reward with :func:`make_reward` from the stage
settings; evaluation calls :func:`configure` before lm-eval scores, which sets the limits of the
functions :func:`reward_for` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sdpocl.rewards.bfcl import bfcl_reward
from sdpocl.rewards.code import (
    CODE_MEMORY_MB,
    CODE_TIMEOUT_S,
    code_reward,
    configure_code,
    extract_code_block,
    make_code_reward,
    parse_tests,
)
from sdpocl.rewards.math import (
    BOXED_WINDOW,
    MATH_TIMEOUT_S,
    boxed_count,
    configure_math,
    extract_all_boxed,
    extract_boxed,
    make_math_reward,
    math_answers_equal,
    math_reward,
    normalise_math_answer,
)
from sdpocl.rewards.routing import make_routed_reward
from sdpocl.rewards.science import extract_choice, science_reward
from sdpocl.rewards.text import RewardFunc, completion_text
from sdpocl.rewards.tooluse import parse_tool_call_list, parse_tool_calls, tooluse_reward

__all__ = [
    "REWARD_FUNCS",
    "REWARD_LIMITS",
    "reward_for",
    "make_reward",
    "configure",
    "current_limits",
    "make_math_reward",
    "configure_math",
    "configure_code",
    "math_reward",
    "science_reward",
    "tooluse_reward",
    "code_reward",
    "bfcl_reward",
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
    "parse_tool_call_list",
    "extract_code_block",
    "parse_tests",
    "BOXED_WINDOW",
    "CODE_TIMEOUT_S",
    "CODE_MEMORY_MB",
    "MATH_TIMEOUT_S",
]

#: the config's ``rewards`` block and its defaults (``workflow/schemas/config.schema.yaml``)
REWARD_LIMITS: dict[str, Any] = {
    "code_timeout_s": CODE_TIMEOUT_S,  # wall clock per unit test (its own process)
    "code_memory_mb": CODE_MEMORY_MB,  # address space per unit test process
    "math_timeout_s": MATH_TIMEOUT_S,  # math-verify time per answer
}

REWARD_FUNCS: dict[str, RewardFunc] = {
    "math": math_reward,
    "science": science_reward,
    "tooluse": tooluse_reward,
    "code": code_reward,
    "bfcl": bfcl_reward,
}


def reward_for(domain: str) -> RewardFunc:
    """The reward function of ``domain``; ``ValueError`` for an unknown domain."""
    try:
        return REWARD_FUNCS[domain]
    except (KeyError, TypeError):
        raise ValueError(f"unknown domain {domain!r}; known domains: {', '.join(sorted(REWARD_FUNCS))}") from None


def _limits(limits: Mapping[str, Any] | None) -> dict[str, Any]:
    given = dict(limits or {})
    unknown = sorted(set(given) - set(REWARD_LIMITS))
    if unknown:
        raise ValueError(f"unknown reward limit(s) {', '.join(unknown)}; known: {', '.join(REWARD_LIMITS)}")
    return {**REWARD_LIMITS, **given}


_current: dict[str, Any] = dict(REWARD_LIMITS)


def configure(limits: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Set the limits of the functions :func:`reward_for` returns from ``limits`` (the config's
    ``rewards`` block; a missing key takes its default) and return all of them."""
    full = _limits(limits)
    configure_code(timeout_s=full["code_timeout_s"], memory_mb=full["code_memory_mb"])
    configure_math(timeout_s=full["math_timeout_s"])
    _current.clear()
    _current.update(full)
    return dict(full)


def current_limits() -> dict[str, Any]:
    """The limits :func:`reward_for`'s functions use now."""
    return dict(_current)


def make_reward(domain: str, limits: Mapping[str, Any] | None = None) -> RewardFunc:
    """The reward function of ``domain`` with ``limits`` (keys of :data:`REWARD_LIMITS`; a missing
    key takes its default), independent of :func:`configure`."""
    full = _limits(limits)
    if domain == "code":
        return make_code_reward(timeout_s=full["code_timeout_s"], memory_mb=full["code_memory_mb"])
    if domain == "math":
        return make_math_reward(timeout_s=full["math_timeout_s"])
    return reward_for(domain)


def domain_rewards(limits: Mapping[str, Any] | None = None) -> dict[str, RewardFunc]:
    """Every domain's reward with ``limits`` (see :func:`make_reward`), e.g. for routing by domain."""
    return {domain: make_reward(domain, limits) for domain in REWARD_FUNCS}
