"""Artifact metrics of sampled responses: the collapse symptoms the paper reports.

Repeated ``\\boxed``, degenerate repetition, responses that never stop, and length. Computed per
benchmark from the sample logs, so they are comparable across checkpoints and methods.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sdpocl.rewards import boxed_count

NGRAM = 4
_WORD = re.compile(r"\w+|[^\w\s]")


def ngram_repeat_rate(text: str, n: int = NGRAM) -> float:
    """Share of the word n-grams of ``text`` that already occurred earlier in it (0 = none)."""
    words = _WORD.findall(text)
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def artifact_metrics(responses: Sequence[str], n_tokens: Sequence[int], truncated: Sequence[bool]) -> dict:
    """Means over all responses: ``\\boxed`` count, share with >= 2, n-gram repetition,
    truncation rate (hit the generation limit without EOS), length in tokens."""
    n = len(responses)
    if n == 0:
        return {
            "boxed_per_response": float("nan"),
            "multi_boxed_share": float("nan"),
            "ngram_repeat": float("nan"),
            "truncation_rate": float("nan"),
            "mean_length": float("nan"),
        }
    boxed = [boxed_count(r) for r in responses]
    return {
        "boxed_per_response": sum(boxed) / n,
        "multi_boxed_share": sum(b >= 2 for b in boxed) / n,
        "ngram_repeat": sum(ngram_repeat_rate(r) for r in responses) / n,
        "truncation_rate": sum(bool(t) for t in truncated) / n,
        "mean_length": sum(n_tokens) / n,
    }
