"""Snakemake job priorities: the longest chain of work first, the leaves last.

With two cores and four chains the grid's wall time is its work over two, plus whatever time a core
stands idle. A core idles at the start when a small job holds it while the base (two SFT ranks, the
only job the rest waits for) cannot start, and at the end when one chain still has stages to train
while the other chains are done: the default run of 626ae2a left a core idle for about 3 of its 30
minutes that way (docs/experiments/2026-12-06-row-50-drift-prompts-priorities.md). Snakemake starts
the ready jobs of the highest ``priority`` first, so the base comes first, then the seconds-long data
jobs every stage and evaluation reads, then each train stage ranked by the stages its chain still has
to train, and the evaluations and drift jobs (leaves: nothing but the tables waits for them) fill the
cores around them.

Snakemake's scheduler maximises the *sum* of the priorities of the jobs it starts together, so a job
that takes c cores must outrank c one-core jobs: at 100 the two-rank base tied two data jobs at 50, and
the run of d710f00 started the data jobs first.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the base model (two SFT ranks, two cores): every stage and evaluation waits for it
BASE_PRIORITY = 1000
#: the data and benchmark files (seconds each): every stage and evaluation reads them
DATA_PRIORITY = 50
#: a train stage: this plus the number of stages left in its run (itself included)
STAGE_PRIORITY = 10


def stages_left(chains: Iterable[tuple[str, ...]], chain: tuple[str, ...]) -> int:
    """Stages of a run that start from ``chain`` or are ``chain`` (its chains; ``chain`` among them)."""
    chains = list(chains)
    if tuple(chain) not in chains:
        raise ValueError(f"chain {'/'.join(chain)!r} is not one of the run's chains")
    n = len(chain)
    return sum(1 for c in chains if len(c) >= n and tuple(c[:n]) == tuple(chain))


def stage_priority(chains: Iterable[tuple[str, ...]], chain: tuple[str, ...]) -> int:
    """Priority of a train stage: higher the more stages still depend on it, below the base's."""
    return STAGE_PRIORITY + stages_left(chains, chain)
