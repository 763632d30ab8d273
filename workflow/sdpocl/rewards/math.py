"""Math reward: the last ``\\boxed{}`` in the final 100 characters equals the reference answer.

Equal means, as upstream (docs/paper.md, "Rewards"): the normalised strings are equal; else, when both
are plain numbers, they are numerically equal (relative 1e-9; this decides, so the tiny preset's
integer answers never reach sympy -- math-verify would round both to 6 decimals first); else HF
math-verify decides, ``verify(parse(gold), parse(pred))`` with both wrapped in ``\\boxed{}``, in a
worker process with a per-answer timeout and a per-batch budget (:mod:`sdpocl.rewards.mathverify`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import sdpocl.rewards.mathverify as mathverify
from sdpocl.rewards.text import RewardFunc, _column, completion_text

MATH_TIMEOUT_S = mathverify.MATH_TIMEOUT_S  # math-verify time per answer (config: rewards.math_timeout_s)

BOXED_WINDOW = 100  # the scored \boxed{...} must start within the final 100 chars

_BOX = "\\boxed{"


def boxed_count(text: Any) -> int:
    """Number of ``\\boxed{`` occurrences (accepts a string or a chat completion)."""
    return completion_text(text).count(_BOX)


def _match_brace(text: str, open_idx: int) -> int | None:
    """Index of the ``}`` matching the ``{`` at ``open_idx`` (``\\{``/``\\}`` are
    literal braces), or None if unbalanced."""
    depth = 0
    i = open_idx
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n and text[i + 1] in "{}":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def extract_all_boxed(text: str) -> list[tuple[int, str | None]]:
    """All top-level ``\\boxed{...}``: (start index, content or None if unbalanced).

    Boxes nested inside another box are part of the outer box's content."""
    out: list[tuple[int, str | None]] = []
    i = text.find(_BOX)
    while i != -1:
        brace = i + len(_BOX) - 1
        end = _match_brace(text, brace)
        if end is None:
            out.append((i, None))
            i = text.find(_BOX, i + len(_BOX))
            continue
        out.append((i, text[brace + 1 : end]))
        i = text.find(_BOX, end + 1)
    return out


def extract_boxed(text: Any, window: int | None = BOXED_WINDOW) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` starting within the final
    ``window`` characters (``None``: anywhere), or None (no box, or the last such
    box is unterminated)."""
    s = completion_text(text).rstrip()
    boxes = extract_all_boxed(s)
    if window is not None:
        cutoff = len(s) - window
        boxes = [b for b in boxes if b[0] >= cutoff]
    if not boxes:
        return None
    content = boxes[-1][1]
    # \boxed{\boxed{68}} -> 68
    while content is not None:
        inner = content.strip()
        if inner.startswith(_BOX) and _match_brace(inner, len(_BOX) - 1) == len(inner) - 1:
            content = inner[len(_BOX) : -1]
        else:
            break
    return content


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_TEXT_WRAP = re.compile(r"^\\(?:text|mathrm|textbf|mathbf)\{")


def normalise_math_answer(s: Any) -> str:
    """Whitespace removed, surrounding ``$``, ``\\text{}`` and a trailing ``.``
    stripped, thousands separators in plain numbers removed."""
    t = "".join(str(s).split())
    prev = None
    while t != prev:
        prev = t
        if len(t) >= 2 and t[0] == "$" and t[-1] == "$":
            t = t[1:-1]
        m = _TEXT_WRAP.match(t)
        if m and _match_brace(t, m.end() - 1) == len(t) - 1:
            t = t[m.end() : -1]
        t = t.rstrip(".")
    if _THOUSANDS.match(t):
        t = t.replace(",", "")
    return t


def _as_number(s: str) -> float | None:
    try:
        v = float(s)
    except (ValueError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _fast_equal(pred: Any, ref: Any) -> bool | None:
    """String / numeric verdict, or None when math-verify has to decide."""
    if pred is None or ref is None:
        return False
    p, r = normalise_math_answer(pred), normalise_math_answer(ref)
    if not p:
        return False
    if p == r:
        return True
    pv, rv = _as_number(p), _as_number(r)
    if pv is not None and rv is not None:
        return math.isclose(pv, rv, rel_tol=1e-9, abs_tol=1e-12)
    return None


def math_answers_equal(pred: Any, ref: Any, *, timeout_s: float | None = None) -> bool:
    """Normalised string equality; numeric equality if both are plain numbers; else math-verify
    (``timeout_s`` per answer, default the configured one)."""
    fast = _fast_equal(pred, ref)
    if fast is not None:
        return fast
    return mathverify.verify_pairs([(ref, pred)], timeout_s=timeout_s or _limits["timeout_s"])[0]


def score_math(completions: Sequence[Any], answers: Sequence[Any], timeout_s: float) -> list[float]:
    """1.0 / 0.0 per completion: its final box against its answer (one math-verify batch)."""
    out = [0.0] * len(completions)
    todo: list[int] = []
    pairs: list[tuple[Any, str]] = []
    for i, (c, a) in enumerate(zip(completions, answers)):
        pred = extract_boxed(c)
        fast = _fast_equal(pred, a)
        if fast is None:
            todo.append(i)
            pairs.append((a, pred))
        elif fast:
            out[i] = 1.0
    if pairs:
        for i, ok in zip(todo, mathverify.verify_pairs(pairs, timeout_s=timeout_s)):
            out[i] = 1.0 if ok else 0.0
    return out


_limits = {"timeout_s": MATH_TIMEOUT_S}


def configure_math(timeout_s: float = MATH_TIMEOUT_S) -> None:
    """Set the math-verify time per answer that :func:`math_reward` (``reward_for("math")``) uses."""
    if not timeout_s > 0:
        raise ValueError("math timeout_s must be positive")
    _limits["timeout_s"] = float(timeout_s)


def make_math_reward(timeout_s: float = MATH_TIMEOUT_S) -> RewardFunc:
    """A math reward function (named ``math_reward``) with its own math-verify time per answer."""
    if not timeout_s > 0:
        raise ValueError("math timeout_s must be positive")

    def math_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
        """1.0 iff the last ``\\boxed{}`` in the final 100 characters equals ``answer``."""
        return score_math(completions, _column(answer, len(completions), "answer"), timeout_s)

    math_reward.__qualname__ = "math_reward"
    return math_reward


def math_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff the last ``\\boxed{}`` in the final 100 characters equals ``answer`` (string,
    number, then math-verify with the configured time per answer: :func:`configure_math`)."""
    return score_math(completions, _column(answer, len(completions), "answer"), _limits["timeout_s"])
