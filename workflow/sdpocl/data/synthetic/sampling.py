"""The synthetic domains' registry and sampling: every domain's problem universe by split, and
:func:`generate`, which draws ``n`` distinct problems from a split with a ``random.Random`` seeded by
a SHA-256 of ``(domain, split, seed)``, stratified over a per-domain group key (question type, tool,
or code operation) so that small groups are not swamped."""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping
from typing import Any

from sdpocl.data.synthetic.code import _code_universe
from sdpocl.data.synthetic.common import (
    Difficulty,
    _check_domain,
    _check_split,
    _stable_int,
    render_reasoning,
    split_of,
)
from sdpocl.data.synthetic.math import _math_universe
from sdpocl.data.synthetic.science import _science_universe
from sdpocl.data.synthetic.tooluse import _tooluse_universe

_BUILDERS = {
    "math": _math_universe,
    "science": _science_universe,
    "tooluse": _tooluse_universe,
    "code": _code_universe,
}


@functools.cache
def _problems(domain: str, difficulty: Difficulty) -> tuple[tuple[Any, dict[str, Any]], ...]:
    """Every (group, record) pair of a domain, both splits (built once per process: seconds for the
    larger universes)."""
    problems = _BUILDERS[domain](difficulty)
    if difficulty.reasoning != "think":
        problems = [
            (group, {**rec, "solution": render_reasoning(rec["solution"], difficulty.reasoning)})
            for group, rec in problems
        ]
    return tuple(problems)


@functools.cache
def _universe(
    domain: str,
    split: str,
    difficulty: Difficulty = Difficulty(),  # noqa: B008 - frozen, hashable
) -> tuple[tuple[Any, dict[str, Any]], ...]:
    """All (group, record) pairs of a domain's split, deduplicated by prompt, in a fixed order."""
    seen: set[str] = set()
    out = []
    for group, rec in _problems(domain, difficulty):
        p = rec["prompt"]
        if p in seen or split_of(p) != split:
            continue
        seen.add(p)
        out.append((group, rec))
    return tuple(out)


def num_problems(domain: str, split: str, difficulty: Difficulty | Mapping[str, Any] | None = None) -> int:
    """Number of distinct problems (prompts) available in ``domain``'s ``split``."""
    _check_domain(domain)
    _check_split(split)
    return len(_universe(domain, split, Difficulty.of(difficulty)))


def _copy(rec: dict[str, Any]) -> dict[str, Any]:
    out = dict(rec)
    out["tests"] = list(rec["tests"])
    return out


def generate(
    domain: str,
    split: str,
    n: int,
    seed: int,
    difficulty: Difficulty | Mapping[str, Any] | None = None,
    *,
    cycle: bool = False,
) -> list[dict[str, Any]]:
    """``n`` distinct problems of ``domain`` from ``split`` ("train"/"test"), deterministic in
    ``(domain, split, n, seed, difficulty)`` (see :class:`Difficulty`; ``None``: the defaults).

    Sampling is without replacement and stratified over the domain's group key (science:
    question type; tooluse: tool; code: operation and constant): every round takes one
    problem from each group that still has problems left, in a seeded order. Train and
    test never share a prompt (see :func:`split_of`).

    With ``cycle`` (the SFT warm-up, which draws more examples than some domains have) a group that
    runs out starts again from its first problem instead of dropping out, so every group keeps its
    share: the tools stay a quarter each where ``convert_currency``'s many argument sets would
    otherwise fill two thirds of the repeats. Without it, raises ``ValueError`` for an ``n`` larger
    than :func:`num_problems` for that split.

    Raises ``ValueError`` for an unknown domain or split or a negative ``n``.
    """
    _check_domain(domain)
    _check_split(split)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    universe = _universe(domain, split, Difficulty.of(difficulty))
    if n > len(universe) and not (cycle and universe):
        raise ValueError(f"n={n} exceeds the {len(universe)} distinct {domain} problems available in the {split} split")
    rng = random.Random(_stable_int("sdpocl-generate", domain, split, seed))
    groups: dict[Any, list[dict[str, Any]]] = {}
    for group, rec in universe:
        groups.setdefault(group, []).append(rec)
    pools = []
    for recs in groups.values():
        recs = list(recs)
        rng.shuffle(recs)
        pools.append(recs)
    picked: list[dict[str, Any]] = []
    cursors = [0] * len(pools)
    while len(picked) < n:
        if cycle:
            cursors = [c % len(pool) for c, pool in zip(cursors, pools)]
        active = [i for i, pool in enumerate(pools) if cursors[i] < len(pool)]
        rng.shuffle(active)
        for i in active:
            if len(picked) >= n:
                break
            picked.append(_copy(pools[i][cursors[i]]))
            cursors[i] += 1
    return picked
