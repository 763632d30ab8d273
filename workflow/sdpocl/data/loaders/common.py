"""Helpers shared by the paper loaders: the common record, column access, row errors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class RowError(ValueError):
    """A source row that cannot be converted (the caller adds the source name and row index)."""


def _record(
    prompt: str,
    answer: str,
    domain: str,
    dataset: str,
    solution: str = "",
    tests: Sequence[str] = (),
    system: str | None = None,
) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "prompt": prompt.rstrip(),  # a prompt never ends in whitespace (tokenisation trap, NOTES.md)
        "answer": answer,
        "tests": list(tests),
        "domain": domain,
        "dataset": dataset,
        "solution": solution,
    }
    if system is not None:
        rec["system"] = system
    return rec


def _field(row: Mapping[str, Any], *names: str) -> Any:
    """The first present, non-empty column of ``names`` (mirrors spell columns differently)."""
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    raise RowError(f"missing column {' / '.join(names)}")
