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

Code is executed only through :mod:`sdpocl.sandbox` (separate, limited process).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

from . import sandbox

__all__ = [
    "REWARD_FUNCS",
    "reward_for",
    "math_reward",
    "science_reward",
    "tooluse_reward",
    "code_reward",
    "make_code_reward",
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
]

log = logging.getLogger(__name__)

BOXED_WINDOW = 100  # the scored \boxed{...} must start within the final 100 chars
CODE_TIMEOUT_S = 2.0
CODE_MEMORY_MB = 256

RewardFunc = Callable[..., list[float]]


# --------------------------------------------------------------------------- #
# Completion handling
# --------------------------------------------------------------------------- #
def _content_to_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal-style [{"type": "text", "text": ...}]
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text", "") or ""))
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def completion_text(completion: Any) -> str:
    """Text of a completion: a plain string, or the content of the last assistant
    message of a chat completion (falls back to the last message)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_to_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        for msg in reversed(msgs):
            if msg.get("role") == "assistant":
                return _content_to_text(msg.get("content"))
        if msgs:
            return _content_to_text(msgs[-1].get("content"))
        return ""
    return str(completion)


def _column(values: Any, n: int, name: str) -> list:
    if values is None:
        raise TypeError(f"reward function needs the dataset column {name!r}")
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Iterable):
        values = [values] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"column {name!r} has {len(values)} rows for {n} completions")
    return values


# --------------------------------------------------------------------------- #
# math
# --------------------------------------------------------------------------- #
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


def math_answers_equal(pred: Any, ref: Any) -> bool:
    """Normalised string equality, or numeric equality if both parse as numbers."""
    if pred is None or ref is None:
        return False
    p, r = normalise_math_answer(pred), normalise_math_answer(ref)
    if not p:
        return False
    if p == r:
        return True
    pv, rv = _as_number(p), _as_number(r)
    if pv is None or rv is None:
        return False
    return math.isclose(pv, rv, rel_tol=1e-9, abs_tol=1e-12)


def math_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff the last ``\\boxed{}`` in the final 100 characters equals ``answer``."""
    answers = _column(answer, len(completions), "answer")
    return [
        1.0 if math_answers_equal(extract_boxed(c), a) else 0.0
        for c, a in zip(completions, answers)
    ]


# --------------------------------------------------------------------------- #
# science (multiple choice)
# --------------------------------------------------------------------------- #
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


# --------------------------------------------------------------------------- #
# tool use (ReAct)
# --------------------------------------------------------------------------- #
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ACTION = re.compile(r"(?<![\w])Action[ \t]*:[ \t]*([^\n]*)")
_ACTION_INPUT = re.compile(r"(?<![\w])Action[ \t]+Input[ \t]*:[ \t]*")
_DECODER = json.JSONDecoder()


def parse_tool_calls(text: Any) -> tuple[list[str], dict] | None:
    """``(action names, merged Action Input dict)`` or None if an ``Action
    Input`` is not a valid JSON object.  ``<think>`` blocks are ignored."""
    s = _THINK.sub(" ", completion_text(text))
    names = [m.group(1).strip().strip("`'\"").strip() for m in _ACTION.finditer(s)]
    merged: dict = {}
    for m in _ACTION_INPUT.finditer(s):
        start = m.end()
        while start < len(s) and s[start] in " \t":
            start += 1
        if start >= len(s) or s[start] != "{":
            return None
        try:
            obj, _ = _DECODER.raw_decode(s, start)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        merged.update(obj)
    return names, merged


def _load_tool_reference(ref: Any) -> tuple[list[str], dict] | None:
    try:
        if isinstance(ref, (str, bytes)):
            ref = json.loads(ref)
        actions = ref["actions"]
        inp = ref.get("input", {})
        if isinstance(actions, str):
            actions = [actions]
        if not isinstance(inp, dict):
            return None
        return [str(a).strip() for a in actions], inp
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def tooluse_reward(completions: Sequence[Any], answer: Sequence[Any] | None = None, **kwargs) -> list[float]:
    """1.0 iff the multiset of ``Action:`` names equals the reference actions and
    the merged ``Action Input:`` JSON objects equal the reference input."""
    answers = _column(answer, len(completions), "answer")
    out = []
    for c, a in zip(completions, answers):
        ref = _load_tool_reference(a)
        pred = parse_tool_calls(c)
        if ref is None:
            log.warning("tooluse_reward: malformed reference answer %r", a)
        ok = (
            ref is not None
            and pred is not None
            and bool(pred[0])
            and Counter(pred[0]) == Counter(ref[0])
            and pred[1] == ref[1]
        )
        out.append(1.0 if ok else 0.0)
    return out


# --------------------------------------------------------------------------- #
# code
# --------------------------------------------------------------------------- #
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
            results = sandbox.run_batch(
                programs, timeout_s=timeout_s, memory_mb=memory_mb, max_workers=max_workers
            )
            for i, res in zip(where, results):
                rewards[i] = 1.0 if res.ok else 0.0
        return rewards

    code_reward.__qualname__ = "code_reward"
    return code_reward


code_reward = make_code_reward()

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
        raise ValueError(
            f"unknown domain {domain!r}; known domains: {', '.join(sorted(REWARD_FUNCS))}"
        ) from None
