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
