"""The ``code`` domain (dataset ``tiny_code``): one-line integer functions (``x plus k``, ``x minus k``,
``x times k``, ``x modulo k``, with k given as "the sum of a and b", a in 10..29, b in 2..9;
:class:`~sdpocl.data.synthetic.common.Difficulty`: larger b) written in a fenced ``python`` block
and checked by three ``assert`` strings."""

from __future__ import annotations

import itertools
import random
from typing import Any

from sdpocl.data.synthetic.common import Difficulty, _record, _stable_int
from sdpocl.data.synthetic.math import math_reasoning

_CODE_HEADER = "You are a coding expert. Provide the complete code in a code block enclosed with ``` ```.\n"
_CODE_A = tuple(range(10, 30))
#: op -> (description template, expression template); ``{x}`` is the argument name and the
#: constant ``{k}`` is given as "the sum of a and b", so the model must add before it codes.
CODE_OPS: dict[str, tuple[str, str]] = {
    "plus": ("{x} plus the sum of {a} and {b}", "{x}+{k}"),
    "minus": ("{x} minus the sum of {a} and {b}", "{x}-{k}"),
    "times": ("{x} times the sum of {a} and {b}", "{x}*{k}"),
    "modulo": ("{x} modulo the sum of {a} and {b}", "{x}%{k}"),
}
_CODE_FUNCS = ("f", "g", "h", "solve", "compute")
_CODE_ARGS = ("x", "n", "a")
_CODE_TEMPLATES = (
    "Write a Python function {f}({x}) that returns {desc}.",
    "Implement {f}({x}) in Python so that it returns {desc}.",
    "Define a Python function {f}({x}) returning {desc}.",
)
_CODE_INPUTS = range(0, 21)


#: Wordings kept per (operation, a, b) when b has two digits (all 45 of them with one digit; all
#: of them with two would make a universe of ~350,000 prompts).
_CODE_VARIANTS_PER_PROBLEM = 5


def _code_test_inputs(op: str, k: int, rng: random.Random, difficulty: Difficulty) -> list[int]:
    """Three test inputs. ``x % k`` on inputs below k is ``x``, so for ``modulo`` with larger constants
    (``code_addend_max`` above its default, k up to 128) the inputs are one of [0, k), [k, 2k) and
    [2k, 3k): neither ``return x`` nor ``return x - k`` passes. At the default size the inputs stay
    0..20 for every operation, the data of the documented experiments (there ``return x`` passes the
    modulo tasks with k of 21-38, a known flaw kept for the byte-identical default data)."""
    if op == "modulo" and difficulty.code_addend_max != Difficulty().code_addend_max:
        return [rng.randrange(i * k, (i + 1) * k) for i in range(3)]
    return rng.sample(list(_CODE_INPUTS), 3)


def _code_universe(difficulty: Difficulty) -> list[tuple[Any, dict[str, Any]]]:
    out = []
    variants = list(itertools.product(_CODE_TEMPLATES, _CODE_FUNCS, _CODE_ARGS))
    for op, (desc_t, expr_t) in CODE_OPS.items():
        for a, b in itertools.product(_CODE_A, range(2, difficulty.code_addend_max + 1)):
            k = a + b
            chosen = variants
            if b >= 10:
                rng = random.Random(_stable_int("sdpocl-code-variants", op, a, b))
                chosen = sorted(rng.sample(variants, _CODE_VARIANTS_PER_PROBLEM), key=variants.index)
            # with a two-digit b the constant is worked out as in MATH (units, then tens)
            thought = f"{a}+{b}={k}" if b < 10 else math_reasoning(a, b)
            for template, f, x in chosen:
                desc = desc_t.format(x=x, a=a, b=b)
                expr = expr_t.format(x=x, k=k)
                prompt = _CODE_HEADER + template.format(f=f, x=x, desc=desc)
                solution = f" <think>{thought}; return {expr}</think> ```python\ndef {f}({x}):\n    return {expr}\n```"
                # Test inputs are seeded by the problem itself, so a problem's
                # record is the same whichever seed selects it.
                rng = random.Random(_stable_int("sdpocl-code-tests", prompt))
                inputs = _code_test_inputs(op, k, rng, difficulty)
                fn = eval(f"lambda {x}: {expr}")  # trusted, module-built expression
                tests = [f"assert {f}({v}) == {fn(v)}" for v in inputs]
                out.append(((op, a), _record(prompt, "", "code", solution, tests)))
    return out
