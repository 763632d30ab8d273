"""How many prompts of a benchmark an evaluation judges: config ``evaluate.n_prompts``.

The value is an integer (every benchmark's first N prompts), ``null`` (all of them), or a mapping
``{domains: N, ood: M}``: N for the continual domains' own benchmarks (named after the training
domains, ``config["domains"]``; :func:`sdpocl.data.benchmarks.benchmarks_for`), M for the OOD
sets (``evaluate.ood``), each an integer or ``null``. A stage's change on its own domain needs more
prompts for a small paired stderr than the OOD sets need.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sdpocl.data.domains import DOMAINS

#: the keys of the mapping form of ``evaluate.n_prompts``
KINDS = ("domains", "ood")


def n_prompts_for(value: Any, benchmark: str, domains: Collection[str] = DOMAINS) -> int | None:
    """The prompt limit of ``benchmark`` (an int, or None = every prompt) under ``evaluate.n_prompts``.

    An int or None applies to every benchmark; a mapping ``{domains: N, ood: M}`` gives N to a
    benchmark in ``domains`` (default: the four training domains, whose test sets are the domain
    benchmarks of both presets) and M to any other (the OOD sets)."""
    if isinstance(value, dict):
        if set(value) != set(KINDS):
            raise ValueError(f"evaluate.n_prompts: a mapping needs exactly the keys {', '.join(KINDS)}, got {value!r}")
        return value["domains" if benchmark in domains else "ood"]
    return value


def canonical_n_prompts(value: Any, ood: Collection[str]) -> Any:
    """``evaluate.n_prompts`` as the evaluation jobs' tracked settings hold it: a mapping whose limits
    agree (or whose ``ood`` limit has no benchmark, ``ood`` empty) becomes that one limit, so writing
    ``{domains: 32, ood: 32}`` for ``32`` reruns nothing; anything else is returned as is."""
    if not isinstance(value, dict) or set(value) != set(KINDS):
        return value
    if not ood or value["domains"] == value["ood"]:
        return value["domains"]
    return dict(value)


def describe_n_prompts(value: Any, benchmarks: list[str], domains: Collection[str] = DOMAINS) -> str:
    """``"10 benchmarks x 32 prompts"``, or per kind: ``"4 domain benchmarks x 100 prompts + 6 OOD x 32 prompts"``
    (``all`` for no limit): the progress line of an evaluation."""
    if not isinstance(value, dict):
        return f"{len(benchmarks)} benchmarks x {value or 'all'} prompts"
    n_own = sum(b in domains for b in benchmarks)
    n_dom, n_ood = (value.get(kind) for kind in KINDS)
    return (
        f"{n_own} domain benchmark{'s' * (n_own != 1)} x {n_dom or 'all'} prompts + "
        f"{len(benchmarks) - n_own} OOD x {n_ood or 'all'} prompts"
    )
