"""Science (multiple-choice) reward: the letter inside the last ``<answer>...</answer>``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sdpocl.rewards.text import _column, completion_text

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def _clean_choice(s: str) -> str:
    t = s.strip()
    prev = None
    while t != prev:
        prev = t
        t = t.rstrip(".:").strip()
        if len(t) >= 2 and t[0] == "(" and t[-1] == ")":
            t = t[1:-1].strip()
    return t.upper()


def extract_choice(text: Any) -> str | None:
    """Content of the last ``<answer>...</answer>``, cleaned (upper-case, without
    surrounding parentheses / trailing ``.`` or ``:``), or None."""
    found = _ANSWER_TAG.findall(completion_text(text))
    if not found:
        return None
    return _clean_choice(found[-1])


def science_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff the last ``<answer>`` tag holds the reference letter."""
    answers = _column(answer, len(completions), "answer")
    out = []
    for c, a in zip(completions, answers):
        pred = extract_choice(c)
        ref = _clean_choice(str(a)) if a is not None else ""
        out.append(1.0 if pred and ref and pred == ref else 0.0)
    return out
