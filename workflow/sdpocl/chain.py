"""Chain path helpers: a stage directory encodes the domains learned so far.

``runs/<run>/math/`` is both the MATH-only run and stage 1 of the chain;
``runs/<run>/math/science/`` is stage 2 and starts from its parent's final checkpoint.
"""

from __future__ import annotations

from sdpocl.data.domains import DOMAINS

#: Snakemake wildcard constraint for a chain: one or more domains separated by '/'.
CHAIN_REGEX = "(?:{d})(?:/(?:{d}))*".format(d="|".join(DOMAINS))


def parse_chain(chain: str) -> tuple[str, ...]:
    """'math/science' -> ('math', 'science'); raises ValueError naming an unknown domain."""
    parts = tuple(p for p in chain.strip("/").split("/") if p)
    if not parts:
        raise ValueError("empty chain")
    for p in parts:
        if p not in DOMAINS:
            raise ValueError(f"unknown domain {p!r} in chain {chain!r}; domains: {', '.join(DOMAINS)}")
    if len(set(parts)) != len(parts):
        raise ValueError(f"chain {chain!r} repeats a domain")
    return parts


def chain_str(chain: tuple[str, ...] | list[str]) -> str:
    return "/".join(chain)


def parent_chain(chain: tuple[str, ...]) -> tuple[str, ...] | None:
    """The chain this stage starts from, or None when it starts from the base model."""
    return tuple(chain[:-1]) or None


def stage_dir(results: str, run: str, chain: tuple[str, ...] | str) -> str:
    chain = chain if isinstance(chain, str) else chain_str(chain)
    return f"{results}/runs/{run}/{chain}"


def state_dir(results: str, run: str, chain: tuple[str, ...] | str) -> str:
    """Resume state of a stage: outside the declared outputs, which Snakemake deletes before a rerun.
    Flat (``math+science``), so removing one stage's state never touches another's."""
    chain = chain if isinstance(chain, str) else chain_str(chain)
    return f"{results}/state/{run}/{chain.replace('/', '+')}"
