"""What the tiny base model is warmed up on: SFT examples of the four domains, a share of them in the
SDPO teacher's re-prompt format (:func:`teacher_prompt`, the templates TRL's SDPOTrainer uses), and
the tokenizer's training corpus."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping
from typing import Any

from sdpocl.data.synthetic.common import DOMAINS, SPLITS, Difficulty, _stable_int
from sdpocl.data.synthetic.sampling import _universe, generate

# SDPO / TRL-style teacher re-prompt templates (the integrator may adjust them).
SOLUTION_TEMPLATE = "\nCorrect solution:\n\n{successful_previous_attempt}\n\n"
REPROMPT_TEMPLATE = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question.\n"
_THINK = re.compile(r"<think>.*?</think>", flags=re.DOTALL)


def teacher_prompt(prompt: str, demonstration: str, *, keep_thinking: bool = False) -> str:
    """The SDPO teacher's re-prompt exactly as TRL's SDPOTrainer builds it from these templates
    (the `<think>` part of the demonstration is dropped unless ``keep_thinking``, as for SDPO^CoT)."""
    demo = demonstration if keep_thinking else _THINK.sub("", demonstration).strip()
    solution = SOLUTION_TEMPLATE.format(successful_previous_attempt=demo)
    return REPROMPT_TEMPLATE.format(prompt=prompt, solution=solution, feedback="")


def reprompt_example(record: dict[str, Any], demonstration: str, *, keep_thinking: bool = False) -> dict[str, Any]:
    """An SFT example in the SDPO teacher re-prompt format, so the base model learns to read a
    demonstration. The prompt is byte-identical to the teacher prompt TRL builds (it ends with a
    newline; the completion starts with a space, so tokenisation matches at the boundary)."""
    return {
        "prompt": teacher_prompt(record["prompt"], demonstration, keep_thinking=keep_thinking),
        "completion": record["solution"],
        "domain": record["domain"],
    }


def _demonstration(record: dict[str, Any]) -> str:
    sol = record["solution"]
    return sol[1:] if sol.startswith(" ") else sol


def sft_mixture(
    n: int, seed: int, reprompt_frac: float = 0.25, difficulty: Difficulty | Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``n`` SFT examples ``{"prompt", "completion", "domain"}`` drawn evenly (±1) from the
    four domains' train splits (via :func:`generate` with the same ``seed``, stratified over each
    domain's groups; a group with fewer distinct problems than its share is repeated), in a seeded
    shuffled order; ``round(n * reprompt_frac)`` of them, at seeded positions, are in the
    :func:`reprompt_example` format with the record's own solution (leading space
    stripped) as the demonstration.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not 0.0 <= reprompt_frac <= 1.0:
        raise ValueError(f"reprompt_frac must be in [0, 1], got {reprompt_frac!r}")
    base, extra = divmod(n, len(DOMAINS))
    records: list[dict[str, Any]] = []
    for i, domain in enumerate(DOMAINS):
        k = base + (1 if i < extra else 0)
        # stratified within the domain too: a small tool repeats as often as a large one
        records.extend(generate(domain, "train", k, seed, difficulty, cycle=True))
    rng = random.Random(_stable_int("sdpocl-sft-mixture", n, seed, reprompt_frac))
    rng.shuffle(records)
    n_re = int(round(n * reprompt_frac))
    reprompt_idx = set(rng.sample(range(n), n_re))
    out = []
    for i, rec in enumerate(records):
        if i in reprompt_idx:
            # half with the reasoning kept, so the SDPO^CoT teacher is on-distribution too
            out.append(reprompt_example(rec, _demonstration(rec), keep_thinking=rng.random() < 0.5))
        else:
            out.append({"prompt": rec["prompt"], "completion": rec["solution"], "domain": rec["domain"]})
    return out


def corpus(
    seed: int,
    max_per_domain: int | None = 2000,
    reprompt_frac: float = 0.25,
    difficulty: Difficulty | Mapping[str, Any] | None = None,
) -> Iterator[str]:
    """Texts for training the BPE tokenizer.

    For each domain, the problems of both splits are shuffled (seeded) and truncated to
    ``max_per_domain`` (``None``: all of them) so no domain dominates the merges; for each
    problem the prompt and the solution are yielded, and for about ``reprompt_frac`` of
    them also the re-prompt prompt of :func:`reprompt_example`. Domains are interleaved.
    """
    rng = random.Random(_stable_int("sdpocl-corpus", seed))
    per_domain: list[list[dict[str, Any]]] = []
    for domain in DOMAINS:
        recs = [rec for split in SPLITS for _, rec in _universe(domain, split, Difficulty.of(difficulty))]
        rng.shuffle(recs)
        if max_per_domain is not None:
            recs = recs[:max_per_domain]
        per_domain.append(recs)
    longest = max(len(r) for r in per_domain)
    for i in range(longest):
        for recs in per_domain:
            if i < len(recs):
                rec = recs[i]
                yield rec["prompt"]
                yield rec["solution"]
                if rng.random() < reprompt_frac:
                    yield reprompt_example(rec, _demonstration(rec))["prompt"]
