"""The ``science`` domain (dataset ``tiny_science``): multiple choice over fixed tables of made-up
compounds ("highest" / "lowest boiling point", and with ``science_properties`` > 1 also melting point
and density, :data:`PROPERTIES`; :class:`~sdpocl.data.synthetic.common.Difficulty`: 2-6 options);
answer in ``<answer>L</answer>``. The tables are knowledge the base must recall, as SciKnowEval's
questions ask a model's chemistry knowledge: more properties, more facts to keep apart."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from typing import Any

from sdpocl.data.synthetic.common import Difficulty, _record, _stable_int

#: Made-up compounds and their boiling points (integers, all distinct). The values were
#: drawn once with ``random.Random(20240607).sample(range(20, 400), 12)`` and are frozen
#: here as literals so the table never depends on the ``random`` implementation.
COMPOUNDS: dict[str, int] = {
    "Zorbane": 212,
    "Quillex": 87,
    "Vantrol": 341,
    "Mirodine": 45,
    "Kelthane": 158,
    "Brovium": 276,
    "Tasselite": 119,
    "Norvex": 389,
    "Plumidor": 63,
    "Gravenol": 234,
    "Fenlox": 301,
    "Sarnite": 176,
}

#: A second and a third property of the same compounds (``data.difficulty.science_properties``: 2 or
#: 3), drawn once with ``random.Random(20261203)`` / ``(20261204).sample(range(20, 400), 12)`` and frozen
#: as literals like :data:`COMPOUNDS`.
MELTING_POINTS: dict[str, int] = dict(zip(COMPOUNDS, (84, 42, 109, 178, 158, 63, 298, 206, 86, 67, 344, 294)))
DENSITIES: dict[str, int] = dict(zip(COMPOUNDS, (394, 271, 24, 200, 62, 124, 108, 71, 290, 306, 210, 110)))

#: property name (as the question words it) -> table, in the order ``science_properties`` takes them
PROPERTIES: dict[str, dict[str, int]] = {
    "boiling point": COMPOUNDS,
    "melting point": MELTING_POINTS,
    "density": DENSITIES,
}
_KINDS = {"max": "highest", "min": "lowest"}
_LETTERS = "ABCDEF"


def science_reasoning(opts: Sequence[str], vals: Sequence[int], kind: str, tag: str = "") -> str:
    """The reference reasoning of a property question: the table's ``tag`` (with more than one
    property), each option with its letter and value,
    then the extreme one with its letter again, so the answer is a copy of the token after the
    chosen name. Measured (docs/experiments/2026-12-01-row-07-balanced-tooluse.md): the tiny base
    answers at chance with this layout as with names alone (Acc@8 0.27): it finds the right compound
    but does not copy from its context."""
    best = max(vals) if kind == "max" else min(vals)
    idx = list(vals).index(best)
    listing = ", ".join(f"{o} {L} {v}" for L, o, v in zip(_LETTERS, opts, vals))
    return f"{tag + ': ' if tag else ''}{listing}; {kind} {opts[idx]} {_LETTERS[idx]}"


#: For more than four options, the orderings kept per set of compounds (all of them up to four
#: options: 24 per set; 6! = 720 per set would make a universe of over a million prompts).
_SCIENCE_ORDERS_PER_SET = 24


def _science_option_tuples(k: int) -> Iterator[tuple[str, ...]]:
    """Ordered option tuples of ``k`` distinct compounds: every permutation up to four options (the
    order of the nested loops this replaced), beyond that every set of compounds in
    :data:`_SCIENCE_ORDERS_PER_SET` orderings drawn by a hash of the set."""
    names = list(COMPOUNDS)
    if k <= 4:
        yield from itertools.permutations(names, k)
        return
    for combo in itertools.combinations(names, k):
        rng = random.Random(_stable_int("sdpocl-science-orders", *combo))
        orders: set[tuple[str, ...]] = set()
        while len(orders) < _SCIENCE_ORDERS_PER_SET:
            orders.add(tuple(rng.sample(combo, k)))
        yield from sorted(orders)


def _science_universe(difficulty: Difficulty) -> list[tuple[Any, dict[str, Any]]]:
    """Every question, grouped by (property, highest/lowest). With one property the records are those
    of the one-table generator byte for byte (no tag in the reasoning)."""
    out = []
    props = list(PROPERTIES)[: difficulty.science_properties]
    for prop, kind in itertools.product(props, _KINDS):
        table, question = PROPERTIES[prop], f"Which compound has the {_KINDS[kind]} {prop}?"
        tag = prop.split()[0] if len(props) > 1 else ""  # the reasoning names the table it recalls
        group = kind if len(props) == 1 else (prop, kind)
        for opts in _science_option_tuples(difficulty.science_options):
            vals = [table[o] for o in opts]
            best = max(vals) if kind == "max" else min(vals)
            letter = _LETTERS[vals.index(best)]
            prompt = (
                question
                + "\n\n"
                + "\n".join(f"{L}: {o}" for L, o in zip(_LETTERS, opts))
                + "\nPlease reason step by step."
            )
            solution = f" <think>{science_reasoning(opts, vals, kind, tag)}</think> <answer>{letter}</answer>"
            out.append((group, _record(prompt, letter, "science", solution)))
    return out
