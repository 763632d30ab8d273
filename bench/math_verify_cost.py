"""Bench: the math reward's cost per 1,000 scored answers, with math-verify and without.

Answers take the forms of MATH-500's (fractions and decimals, ``\\dfrac``, ``\\frac12``,
``\\left( .. \\right)`` tuples, intervals, sets, degrees, units in ``\\text{}``, radicals,
equations ``x = ..``, polynomials, matrices), with random numbers so that no two references are
alike (math-verify's parse cache does not help), half of them equivalent to the reference and
half not, each in a ``\\boxed{}`` at the end of a completion.  Scored by ``math_reward`` in
batches of ``--batch`` (a training step's 32 prompts x 8 samples = 256) and printed:

* worker start (first call: importing sympy and math-verify);
* 1,000 distinct answers, all decided by math-verify;
* 1,000 answers as groups of 8 samples per prompt with 3 distinct answers per group (what
  GRPO/SDPO rollouts look like; equal pairs are sent to the worker once);
* 1,000 plain-number answers (the tiny preset, DAPO, AIME: string/numeric equality, no worker).

    python bench/math_verify_cost.py --n 1000 --batch 256 --seed 0
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from sdpocl.rewards import math_reward, mathverify

KINDS = 11


def _pair(rng: random.Random, kind: int | None = None) -> tuple[str, str, str]:
    """(reference, equivalent answer, different answer) of a MATH-500-like ``kind`` (random if None)."""
    a, b = rng.randint(2, 400), rng.randint(2, 400)
    while b == a:
        b = rng.randint(2, 400)
    k, m = rng.randint(2, 40), rng.choice([2, 3, 5, 6, 7, 10, 11, 13])
    kind = rng.randrange(KINDS) if kind is None else kind
    if kind == 0:
        den = rng.choice([2, 4, 5, 8, 10, 20, 25])
        return f"\\frac{{{a}}}{{{den}}}", f"{a / den:g}", f"{a / den + 1:g}"
    if kind == 1:
        return f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a}}}{{{b}}}", f"\\dfrac{{{b}}}{{{a}}}"
    if kind == 2:
        x, y = rng.randint(1, 9), rng.randint(1, 9)
        return f"\\frac{{{x}}}{{{y + 10}}}", f"\\frac{x}{{{y + 10}}}", f"\\frac{x}{{{y + 11}}}"
    if kind == 3:
        return (
            f"\\left( {a}, \\frac{{\\pi}}{{{k}}} \\right)",
            f"({a},\\frac{{\\pi}}{{{k}}})",
            f"({a},\\frac{{\\pi}}{{{k + 1}}})",
        )
    if kind == 4:
        lo, hi = sorted((a, b))
        return f"[{lo}, {hi})", f"[{lo},{hi})", f"({lo},{hi})"
    if kind == 5:
        return f"\\{{{a},{b}\\}}", f"\\{{{b}, {a}\\}}", f"\\{{{a},{b + 1}\\}}"
    if kind == 6:
        return f"{a}^\\circ", f"{a}", f"{a + 1}^\\circ"
    if kind == 7:
        return f"{a}\\text{{ cm}}", f"{a}", f"{a * 10}"
    if kind == 8:
        return f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}", f"\\sqrt{{{k * k * m + 1}}}"
    if kind == 9:
        return f"{a}", f"x={a}", f"x={a + 1}"
    return f"x^2+{2 * k}x+{k * k}", f"(x+{k})^2", f"(x-{k})^2"


def _completion(answer: str) -> str:
    return f" <think>work</think> So the answer is $\\boxed{{{answer}}}$."


def distinct_answers(n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    comps, refs = [], []
    for i in range(n):
        ref, same, other = _pair(rng)
        comps.append(_completion(same if i % 2 == 0 else other))
        refs.append(ref)
    return comps, refs


def grouped_answers(n: int, rng: random.Random, group: int = 8, distinct: int = 3) -> tuple[list[str], list[str]]:
    comps, refs = [], []
    while len(comps) < n:
        ref, same, other = _pair(rng)
        choices = [same, other, _pair(rng)[2]][:distinct]
        for _ in range(group):
            comps.append(_completion(rng.choice(choices)))
            refs.append(ref)
    return comps[:n], refs[:n]


def number_answers(n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    refs = [str(rng.randint(0, 999)) for _ in range(n)]
    return [_completion(r if i % 2 == 0 else str(int(r) + 1)) for i, r in enumerate(refs)], refs


def score(comps: list[str], refs: list[str], batch: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    total = 0.0
    for i in range(0, len(comps), batch):
        total += sum(math_reward(comps[i : i + batch], answer=refs[i : i + batch]))
    return time.perf_counter() - t0, total / len(comps)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    t0 = time.perf_counter()
    mathverify.verify_pairs([("\\frac{1}{2}", "0.5")])
    start = time.perf_counter() - t0
    print(f"math reward, {a.n} answers per run, batches of {a.batch}, best / median of {a.repeats} runs")
    print(f"  worker start (import sympy + math-verify, first call only): {start:.2f} s")
    cases = {
        "distinct, all via math-verify": distinct_answers,
        "8 samples/prompt, 3 distinct": grouped_answers,
        "plain numbers (no math-verify)": number_answers,
    }
    rng = random.Random(a.seed)
    per_kind = []
    for kind in range(KINDS):
        comps, refs = [], []
        for i in range(40):
            ref, same, other = _pair(rng, kind)
            comps.append(_completion(same if i % 2 == 0 else other))
            refs.append(ref)
        secs, _ = score(comps, refs, a.batch)
        per_kind.append(f"{refs[0]} {secs / 40 * 1e3:.0f}")
    print("  ms per answer by kind (40 each; example reference):\n    " + "\n    ".join(per_kind))
    for label, make in cases.items():
        secs, acc = [], 0.0
        for r in range(a.repeats):
            comps, refs = make(a.n, random.Random(a.seed * 1000 + r))
            s, acc = score(comps, refs, a.batch)
            secs.append(s)
        per_k = 1000 / a.n
        print(
            f"  {label:32s} {min(secs) * per_k:8.3f} s / 1,000 answers (median {statistics.median(secs) * per_k:.3f} s;"
            f" {min(secs) / a.n * 1e3:.3f} ms each; mean reward {acc:.2f})"
        )


if __name__ == "__main__":
    main()
