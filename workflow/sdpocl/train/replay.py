"""Replay (a mitigation, issue 14): a share of a stage's prompt pool drawn from the earlier domains.

Stage k of a chain keeps every prompt of its own domain (``n`` of them) and adds
``m = round(frac * n / (1 - frac))`` prompts of the domains 1..k-1, so that ``m / (n + m)`` is
``frac`` (up to rounding). The ``m`` are split evenly over the earlier domains (the remainder to
the earliest ones) and drawn without replacement from each domain's training set (whole passes over
a shuffled copy when a set is smaller than its share), with a generator seeded by the run's seed
and the chain: the same seed draws the same prompts, another seed others. Each record keeps its
``domain`` column, so :func:`sdpocl.rewards.make_routed_reward` scores it with its own domain's
reward. TRL's sampler shuffles the pool, so each rollout batch holds the share ``frac`` in expectation.
"""

from __future__ import annotations

import random


def replay_count(n_current: int, frac: float) -> int:
    """Prompts to add to ``n_current`` so that they make a share ``frac`` of the pool."""
    if not 0 <= frac < 1:
        raise ValueError(f"replay fraction must be in [0, 1), got {frac}")
    return round(frac * n_current / (1 - frac))


def split_evenly(m: int, k: int) -> list[int]:
    """``m`` split over ``k`` parts, the remainder to the first ones."""
    return [m // k + (1 if i < m % k else 0) for i in range(k)]


def replay_rng(seed: int, chain) -> random.Random:
    """The generator of a stage's replay draw (string seeds hash deterministically, across processes too)."""
    return random.Random(f"sdpocl-replay|{seed}|{'/'.join(chain)}")


def draw(pool: list[dict], n: int, rng: random.Random) -> list[dict]:
    """``n`` records of ``pool``, without replacement within each pass over it."""
    if n and not pool:
        raise ValueError("cannot draw replay prompts from an empty training set")
    out: list[dict] = []
    while len(out) < n:
        order = list(range(len(pool)))
        rng.shuffle(order)
        out += [pool[i] for i in order[: n - len(out)]]
    return out


def mix_replay(
    current: list[dict], pools: dict[str, list[dict]], frac: float, seed: int, chain
) -> tuple[list[dict], dict]:
    """The stage's prompt pool: ``current`` plus replayed records of ``pools`` (earlier domain ->
    its training records, in chain order); returns (records, summary of the draw)."""
    m = replay_count(len(current), frac)
    rng = replay_rng(seed, chain)
    replayed: list[dict] = []
    per_domain = {}
    for (domain, pool), k in zip(pools.items(), split_evenly(m, len(pools))):
        picked = [{**r, "domain": r.get("domain") or domain} for r in draw(pool, k, rng)]
        replayed += picked
        per_domain[domain] = k
    summary = {
        "frac": frac,
        "current_prompts": len(current),
        "replayed_prompts": len(replayed),
        "replayed_share": len(replayed) / max(1, len(current) + len(replayed)),
        "per_domain": per_domain,
        "seed": seed,
    }
    return current + replayed, summary
