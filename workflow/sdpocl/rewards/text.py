"""Completion handling shared by every reward: plain strings and chat completions, column checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

RewardFunc = Callable[..., list[float]]


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
