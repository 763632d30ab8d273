"""The ``math`` domain (dataset ``tiny_math``): two-number addition ``a+b`` with a in [10, 99], b in
[2, 9] (:class:`~sdpocl.data.synthetic.common.Difficulty`: larger addends, three terms), reasoning
units first (``7+8=15; 40+15=55``); the final answer is written as ``\\boxed{N}``."""

from __future__ import annotations

import random
from typing import Any

from sdpocl.data.synthetic.common import Difficulty, _record, _stable_int

_MATH_RANGE = range(10, 100)


def math_reasoning(*terms: int) -> str:
    """The units first, then the tens with the carried units: ``7+8=15; 40+15=55``, ``7+5=12;
    40+30+12=82``, ``7+5+3=15; 40+30+20+15=105`` (one-digit terms have no tens)."""
    units = [t % 10 for t in terms]
    tens = [t - t % 10 for t in terms if t >= 10]
    u = sum(units)
    return f"{'+'.join(map(str, units))}={u}; {'+'.join(map(str, tens + [u]))}={sum(terms)}"


#: Third addends kept per (a, b) with ``math_terms: 3`` (all of them would make ~860,000 prompts).
_MATH_THIRD_PER_PAIR = 3


def _math_universe(difficulty: Difficulty) -> list[tuple[Any, dict[str, Any]]]:
    out = []
    addends = range(2, difficulty.math_addend_max + 1)
    for a in _MATH_RANGE:
        # the second addend's range is the difficulty knob: one digit (the default) keeps a ~1M-parameter
        # base trained for 400 steps neither at 0% nor at 100%
        for b in addends:
            thirds: list[tuple[int, ...]] = [()]
            if difficulty.math_terms == 3:
                rng = random.Random(_stable_int("sdpocl-math-third", a, b))
                thirds = [(c,) for c in sorted(rng.sample(addends, min(_MATH_THIRD_PER_PAIR, len(addends))))]
            for rest in thirds:
                terms = (a, b, *rest)
                s = sum(terms)
                prompt = (
                    f"Compute {'+'.join(map(str, terms))}.\n\n"
                    "Please reason step by step, and put your final answer within \\boxed{}."
                )
                solution = f" <think>{math_reasoning(*terms)}</think> \\boxed{{{s}}}"
                out.append((None, _record(prompt, str(s), "math", solution)))
    return out
