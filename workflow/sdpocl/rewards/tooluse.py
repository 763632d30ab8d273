"""Tool-use (ReAct) reward: ``Action:`` names and merged ``Action Input:`` JSON equal the reference."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sdpocl.rewards.text import _column, completion_text

log = logging.getLogger(__name__)

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


def parse_tool_call_list(text: Any) -> list[tuple[str, dict]] | None:
    """Every call of a ReAct completion, each kept separately: ``[(name, input), ...]`` in order
    (``[]`` when there is no ``Action:``), or None when the calls cannot be decoded: an
    ``Action:`` without its own ``Action Input:`` (before the next ``Action:``), an ``Action
    Input:`` without an ``Action:``, an empty name, or an input that is not a JSON object on the
    ``Action Input:`` line. ``<think>`` blocks are ignored; the text is scanned left to right, so
    an ``Action:`` inside a JSON input is part of that input. Names are cleaned and inputs read as
    in :func:`parse_tool_calls`, which merges the inputs instead (the ToolAlpaca reward)."""
    s = _THINK.sub(" ", completion_text(text))
    calls: list[tuple[str, dict]] = []
    pos = 0
    while True:
        action = _ACTION.search(s, pos)
        inp = _ACTION_INPUT.search(s, pos)
        if action is None:
            return calls if inp is None else None
        if inp is not None and inp.start() < action.start():
            return None  # an input before (without) its action
        inp = _ACTION_INPUT.search(s, action.start(1))  # may follow the name on the same line
        if inp is None:
            return None
        line = s[action.start(1) : min(inp.start(), action.end())]
        following = _ACTION.search(s, action.end())
        if following is not None and following.start() < inp.start():
            return None  # this action has no input of its own
        name = line.strip().strip("`'\"").strip()
        start = inp.end()
        while start < len(s) and s[start] in " \t":
            start += 1
        if not name or start >= len(s) or s[start] != "{":
            return None
        try:
            obj, end = _DECODER.raw_decode(s, start)
        except json.JSONDecodeError:
            return None
        if not isinstance(obj, dict):
            return None
        calls.append((name, obj))
        pos = end


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
