"""Seeded, deterministic synthetic data for the offline "tiny preset".

Four domains, trained in the order of :data:`DOMAINS`:

* ``math``    (dataset ``tiny_math``):    two-number addition ``a+b`` with a in [10, 99], b in [2, 9], reasoning
  units first (``7+8=15; 40+15=55``);
  the final answer is written as ``\\boxed{N}``.
* ``science`` (dataset ``tiny_science``): four-way multiple choice over the fixed
  :data:`COMPOUNDS` table ("highest" / "lowest boiling point"); answer in
  ``<answer>L</answer>``.
* ``tooluse`` (dataset ``tiny_tooluse``): ReAct-style single tool calls over :data:`TOOLS`;
  the completion ends with ``Action: name`` / ``Action Input: {json}``.
* ``code``    (dataset ``tiny_code``):    one-line integer functions (``x plus k``,
  ``x minus k``, ``x times k``, ``x modulo k``, with k given as "the sum of a and b",
  a in 10..29, b in 2..9) written in a fenced ``python`` block and checked by three ``assert`` strings.

How hard the tasks are is set by a :class:`Difficulty` (config ``data.difficulty``); its defaults
are the data described above, byte for byte.

Every domain has a finite, deterministically enumerated *problem universe*. Each problem
is assigned to the ``train`` or ``test`` split by a stable SHA-256 hash of its prompt
(about 20% go to ``test``), independently of any seed, so train and test sets generated
with any seeds, in any order, in any process, never share a prompt. :func:`generate`
then draws ``n`` distinct problems from the requested split with a ``random.Random``
seeded by a SHA-256 of ``(domain, split, seed)``, stratified over a per-domain group key
(question type, tool, or code operation) so that small groups are not swamped.

Records are dicts::

    {"prompt": str, "answer": str, "tests": list[str], "domain": str,
     "dataset": str, "solution": str}

``prompt`` never ends with whitespace; ``solution`` (the reference completion) starts
with exactly one space and contains a short ``<think>...</think>`` reasoning part before
the final answer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "DOMAINS",
    "SPLITS",
    "DATASETS",
    "TEST_FRACTION",
    "COMPOUNDS",
    "TOOLS",
    "CODE_OPS",
    "SOLUTION_TEMPLATE",
    "Difficulty",
    "REPROMPT_TEMPLATE",
    "generate",
    "num_problems",
    "split_of",
    "reprompt_example",
    "teacher_prompt",
    "sft_mixture",
    "corpus",
]

DOMAINS: tuple[str, ...] = ("math", "science", "tooluse", "code")
SPLITS: tuple[str, ...] = ("train", "test")
DATASETS: dict[str, str] = {d: f"tiny_{d}" for d in DOMAINS}

#: Fraction (in thousandths of the hash space) of each universe that goes to ``test``.
TEST_FRACTION = 0.2
_TEST_PERMILLE = int(round(TEST_FRACTION * 1000))

# SDPO / TRL-style teacher re-prompt templates (the integrator may adjust them).
SOLUTION_TEMPLATE = "\nCorrect solution:\n\n{successful_previous_attempt}\n\n"
REPROMPT_TEMPLATE = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question.\n"
_THINK = re.compile(r"<think>.*?</think>", flags=re.DOTALL)


# ---------------------------------------------------------------------------------------
# stable hashing / seeding
# ---------------------------------------------------------------------------------------


def _stable_int(*parts: object) -> int:
    """A 64-bit integer from a SHA-256 of the parts (stable across processes/versions)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def split_of(prompt: str) -> str:
    """The split ("train" or "test") a problem with this prompt belongs to."""
    return "test" if _stable_int("sdpocl-split", prompt) % 1000 < _TEST_PERMILLE else "train"


def _check_domain(domain: str) -> None:
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; valid domains: {', '.join(DOMAINS)}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")


def _record(prompt: str, answer: str, domain: str, solution: str, tests: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "answer": answer,
        "tests": list(tests),
        "domain": domain,
        "dataset": DATASETS[domain],
        "solution": solution,
    }


@dataclasses.dataclass(frozen=True)
class Difficulty:
    """How hard the synthetic tasks are (config ``data.difficulty``): the knob that sets a base
    model's starting accuracy, so RL has headroom (right in some samples, not reliably). The
    defaults are the data of docs/tiny-preset.md's rows 7-11 exactly; a base trained long enough to
    copy from its prompt saturates them (row 10), harder settings give it room again.

    ``math_addend_max``: the second addend is drawn from [2, max] (9: one digit; up to 99: two
    two-digit numbers, so the units carry into the tens). ``math_terms``: 2 or 3 addends (the
    third drawn like the second). ``science_options``: options per
    question (2-6), each to be compared. ``code_addend_max``: the same for the constant of a code
    task (given as "the sum of a and b")."""

    math_addend_max: int = 9
    math_terms: int = 2
    science_options: int = 4
    code_addend_max: int = 9

    def __post_init__(self) -> None:
        bounds = (
            ("math_addend_max", 2, 99),
            ("math_terms", 2, 3),
            ("science_options", 2, 6),
            ("code_addend_max", 2, 99),
        )
        for name, lo, hi in bounds:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise ValueError(f"data.difficulty.{name} must be an integer in [{lo}, {hi}], got {value!r}")

    @classmethod
    def of(cls, value: Difficulty | Mapping[str, Any] | None) -> Difficulty:
        """A :class:`Difficulty` from a config mapping (unknown keys are an error), or the default."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown data.difficulty key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**value)


# ---------------------------------------------------------------------------------------
# math
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# science
# ---------------------------------------------------------------------------------------

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

_SCIENCE_QUESTIONS: dict[str, str] = {
    "max": "Which compound has the highest boiling point?",
    "min": "Which compound has the lowest boiling point?",
}
_LETTERS = "ABCDEF"


def science_reasoning(opts: Sequence[str], vals: Sequence[int], kind: str) -> str:
    """The reference reasoning of a boiling-point question: each option with its letter and value,
    then the extreme one with its letter again, so the answer is a copy of the token after the
    chosen name. Measured (docs/tiny-preset.md): the tiny base answers at chance with this layout as
    with names alone (Acc@8 0.27): it finds the right compound but does not copy from its context."""
    best = max(vals) if kind == "max" else min(vals)
    idx = list(vals).index(best)
    listing = ", ".join(f"{o} {L} {v}" for L, o, v in zip(_LETTERS, opts, vals))
    return f"{listing}; {kind} {opts[idx]} {_LETTERS[idx]}"


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
    out = []
    for kind, question in _SCIENCE_QUESTIONS.items():
        for opts in _science_option_tuples(difficulty.science_options):
            vals = [COMPOUNDS[o] for o in opts]
            best = max(vals) if kind == "max" else min(vals)
            letter = _LETTERS[vals.index(best)]
            prompt = (
                question
                + "\n\n"
                + "\n".join(f"{L}: {o}" for L, o in zip(_LETTERS, opts))
                + "\nPlease reason step by step."
            )
            solution = f" <think>{science_reasoning(opts, vals, kind)}</think> <answer>{letter}</answer>"
            out.append((kind, _record(prompt, letter, "science", solution)))
    return out


# ---------------------------------------------------------------------------------------
# tooluse
# ---------------------------------------------------------------------------------------

#: name -> (argument names, description)
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "get_weather": (("city",), "Get the current weather in a city."),
    "convert_currency": (("amount", "source", "target"), "Convert an amount of money from one currency to another."),
    "search_web": (("query",), "Search the web for a query."),
    "set_alarm": (("hour",), "Set an alarm for an hour of the day."),
}

_CITIES = (
    "Paris",
    "London",
    "Tokyo",
    "Berlin",
    "Madrid",
    "Rome",
    "Cairo",
    "Lima",
    "Oslo",
    "Delhi",
    "Sydney",
    "Toronto",
    "Moscow",
    "Beijing",
    "Mumbai",
    "Lagos",
    "Dallas",
    "Perth",
    "Bergen",
    "Porto",
    "Kyoto",
    "Osaka",
    "Hanoi",
    "Munich",
)
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CNY", "INR", "CAD", "CHF")
_AMOUNTS = (10, 20, 50, 100, 200, 500)
_QUERIES = (
    "pasta recipes",
    "cheap flights",
    "chess openings",
    "solar panels",
    "jazz history",
    "running shoes",
    "python lists",
    "moon phases",
    "yoga poses",
    "bird songs",
    "train times",
    "tax rules",
    "dog training",
    "sushi places",
    "car insurance",
    "pizza dough",
    "desk lamps",
    "tennis rules",
    "coffee beans",
    "ski resorts",
    "movie times",
    "museum hours",
    "guitar chords",
    "rain boots",
)
#: 24 cities, 24 queries, 23 hours and 7-8 wordings give every tool at least ~160 distinct prompts, so
#: a 500-prompt train split holds each tool about equally (with 12 values and 3-4 wordings the other tools
#: ran out of prompts and `convert_currency` filled 84% of it, against 62% of the test split)
_HOURS = tuple(range(1, 24))

_TOOL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "get_weather": (
        "What is the weather in {city}?",
        "Tell me the weather in {city} today.",
        "Is it raining in {city}?",
        "How warm is it in {city} right now?",
        "What's the forecast for {city}?",
        "Check the weather in {city}.",
        "Will it snow in {city} tomorrow?",
        "Do I need an umbrella in {city}?",
    ),
    "convert_currency": (
        "Convert {amount} {source} to {target}.",
        "How much is {amount} {source} in {target}?",
        "Exchange {amount} {source} for {target}.",
    ),
    "search_web": (
        "Search the web for {query}.",
        "Find information about {query}.",
        "Look up {query} online.",
        "Search for {query}.",
        "Can you look up {query}?",
        "Web search: {query}.",
        "Find me pages on {query}.",
    ),
    "set_alarm": (
        "Set an alarm for {hour} o'clock.",
        "Wake me up at {hour} o'clock.",
        "Please set an alarm at {hour}.",
        "Alarm at {hour} o'clock, please.",
        "I need an alarm at {hour}.",
        "Ring me at {hour} o'clock.",
        "Set my alarm to {hour}.",
    ),
}

#: Signatures only (descriptions in :data:`TOOLS` stay documentation): a short prompt keeps the
#: tool-use stage, whose prompts are the longest, affordable on a CPU.
_TOOLUSE_HEADER = (
    "Tools: "
    + ", ".join(f"{name}({', '.join(args)})" for name, (args, _desc) in TOOLS.items())
    + ".\nAnswer with Thought, Action and Action Input.\nRequest: "
)


def _tool_arg_sets(name: str) -> Iterator[dict[str, Any]]:
    if name == "get_weather":
        for c in _CITIES:
            yield {"city": c}
    elif name == "convert_currency":
        for amount in _AMOUNTS:
            for src in _CURRENCIES:
                for tgt in _CURRENCIES:
                    if src != tgt:
                        yield {"amount": amount, "source": src, "target": tgt}
    elif name == "search_web":
        for q in _QUERIES:
            yield {"query": q}
    elif name == "set_alarm":
        for h in _HOURS:
            yield {"hour": h}
    else:  # pragma: no cover - TOOLS and this function are kept in sync
        raise AssertionError(name)


def _tooluse_universe(difficulty: Difficulty) -> list[tuple[Any, dict[str, Any]]]:
    del difficulty  # no knob yet: the tiny base's tool-use accuracy is limited by copying, not by task size
    out = []
    for name in TOOLS:
        for template in _TOOL_TEMPLATES[name]:
            for args in _tool_arg_sets(name):
                prompt = _TOOLUSE_HEADER + template.format(**args)
                solution = f" <think>use {name}</think> Action: {name}\nAction Input: {json.dumps(args)}"
                answer = json.dumps({"actions": [name], "input": args})
                out.append((name, _record(prompt, answer, "tooluse", solution)))
    return out


# ---------------------------------------------------------------------------------------
# code
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# universe / sampling
# ---------------------------------------------------------------------------------------

_BUILDERS = {
    "math": _math_universe,
    "science": _science_universe,
    "tooluse": _tooluse_universe,
    "code": _code_universe,
}


@functools.cache
def _problems(domain: str, difficulty: Difficulty) -> tuple[tuple[Any, dict[str, Any]], ...]:
    """Every (group, record) pair of a domain, both splits (built once per process: seconds for the
    larger universes)."""
    return tuple(_BUILDERS[domain](difficulty))


@functools.cache
def _universe(domain: str, split: str, difficulty: Difficulty = Difficulty()) -> tuple[tuple[Any, dict[str, Any]], ...]:
    """All (group, record) pairs of a domain's split, deduplicated by prompt, in a fixed order."""
    seen: set[str] = set()
    out = []
    for group, rec in _problems(domain, difficulty):
        p = rec["prompt"]
        if p in seen or split_of(p) != split:
            continue
        seen.add(p)
        out.append((group, rec))
    return tuple(out)


def num_problems(domain: str, split: str, difficulty: Difficulty | Mapping[str, Any] | None = None) -> int:
    """Number of distinct problems (prompts) available in ``domain``'s ``split``."""
    _check_domain(domain)
    _check_split(split)
    return len(_universe(domain, split, Difficulty.of(difficulty)))


def _copy(rec: dict[str, Any]) -> dict[str, Any]:
    out = dict(rec)
    out["tests"] = list(rec["tests"])
    return out


def generate(
    domain: str, split: str, n: int, seed: int, difficulty: Difficulty | Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``n`` distinct problems of ``domain`` from ``split`` ("train"/"test"), deterministic in
    ``(domain, split, n, seed, difficulty)`` (see :class:`Difficulty`; ``None``: the defaults).

    Sampling is without replacement and stratified over the domain's group key (science:
    question type; tooluse: tool; code: operation and constant): every round takes one
    problem from each group that still has problems left, in a seeded order. Train and
    test never share a prompt (see :func:`split_of`).

    Raises ``ValueError`` for an unknown domain or split, a negative ``n``, or an ``n``
    larger than :func:`num_problems` for that split.
    """
    _check_domain(domain)
    _check_split(split)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    universe = _universe(domain, split, Difficulty.of(difficulty))
    if n > len(universe):
        raise ValueError(f"n={n} exceeds the {len(universe)} distinct {domain} problems available in the {split} split")
    rng = random.Random(_stable_int("sdpocl-generate", domain, split, seed))
    groups: dict[Any, list[dict[str, Any]]] = {}
    for group, rec in universe:
        groups.setdefault(group, []).append(rec)
    pools = []
    for recs in groups.values():
        recs = list(recs)
        rng.shuffle(recs)
        pools.append(recs)
    picked: list[dict[str, Any]] = []
    cursors = [0] * len(pools)
    while len(picked) < n:
        active = [i for i, pool in enumerate(pools) if cursors[i] < len(pool)]
        rng.shuffle(active)
        for i in active:
            if len(picked) >= n:
                break
            picked.append(_copy(pools[i][cursors[i]]))
            cursors[i] += 1
    return picked


# ---------------------------------------------------------------------------------------
# SFT warm-up helpers
# ---------------------------------------------------------------------------------------


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
    four domains' train splits (via :func:`generate` with the same ``seed``; a domain with fewer
    distinct problems than its share is repeated), in a seeded
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
        pool = generate(domain, "train", min(k, num_problems(domain, "train", difficulty)), seed, difficulty)
        records.extend(pool[j % len(pool)] for j in range(k))  # repeat when a domain is small
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
