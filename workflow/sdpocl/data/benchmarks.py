"""Evaluation benchmarks of the tiny preset: the four in-domain test splits plus six OOD sets.

The OOD sets stand in for the paper's six OOD benchmarks and sit at graded distances from the
training domains (near / intermediate / far). Each emits the answer format of one training
domain, so the *same* reward functions score them (``domain`` of a record = its reward family):

================  ====================================  =======  ====================  =================
name              what                                  reward   distance (nearest)    paper analogue
================  ====================================  =======  ====================  =================
arith_words       addition asked in new words           math     near (math)           MATH-500
code_reworded     code tasks in new words               code     near (code)           LiveCodeBench v6
science_reworded  boiling-point MC, new wording/layout  science  intermediate (sci.)   GPQA-diamond
tool_schema2      a second tool schema (new words/tool)  tooluse  intermediate (tool)   BFCLv4
logic_grid        3-house colour puzzles, MC            science  far                   ZebraLogic
knowledge_mc      capital-city MC (never trained)       science  far                   MMLU-Redux
================  ====================================  =======  ====================  =================

Generators are seeded and deterministic in ``(name, n, seed)``; records follow the common
schema of :mod:`sdpocl.data.domains` (``dataset`` = the benchmark name).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdpocl.data.synthetic.common import DOMAINS, SPLITS, _stable_int, render_reasoning, split_of
from sdpocl.data.synthetic.science import COMPOUNDS, science_reasoning
from sdpocl.data.synthetic.tooluse import _CITIES, _QUERIES

__all__ = [
    "Benchmark",
    "BENCHMARKS",
    "OOD_GENERATORS",
    "benchmark",
    "generate_ood",
    "general_examples",
    "benchmarks_for",
]


@dataclass(frozen=True)
class Benchmark:
    name: str
    kind: str  # "in-domain" | "ood"
    bench_domain: str  # the training domain it belongs to (OOD: the nearest one)
    reward: str  # reward family scoring it (a key of sdpocl.rewards.REWARD_FUNCS)
    distance: str  # "in-domain" | "near" | "intermediate" | "far"
    analogue: str  # the paper's benchmark it stands in for


def _record(
    name: str, reward: str, prompt: str, answer: str, solution: str, tests: list[str] | None = None
) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "answer": answer,
        "tests": list(tests or []),
        "domain": reward,
        "dataset": name,
        "solution": solution,
    }


def _mc_solution(reasoning: str, letter: str) -> str:
    return f" <think>{reasoning}</think> <answer>{letter}</answer>"


def _arith_words(rng: random.Random) -> dict[str, Any]:
    a, b = rng.randrange(10, 100), rng.randrange(2, 10)
    prompt = f"What is {a} plus {b}?\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
    units = a % 10
    solution = f" <think>{units}+{b}={units + b}; {a - units}+{units + b}={a + b}</think> \\boxed{{{a + b}}}"
    return _record("arith_words", "math", prompt, str(a + b), solution)


_LETTERS = "ABCD"


def _science_reworded(rng: random.Random) -> dict[str, Any]:
    opts = rng.sample(sorted(COMPOUNDS), 4)
    hot = rng.random() < 0.5
    vals = [COMPOUNDS[o] for o in opts]
    idx = vals.index(max(vals) if hot else min(vals))
    question = (
        "Which of these compounds boils at the highest temperature?"
        if hot
        else "Which of these compounds boils at the lowest temperature?"
    )
    prompt = (
        question + "\n\n" + "\n".join(f"({L}) {o}" for L, o in zip(_LETTERS, opts)) + "\nPlease reason step by step."
    )
    solution = _mc_solution(science_reasoning(opts, vals, "max" if hot else "min"), _LETTERS[idx])
    return _record("science_reworded", "science", prompt, _LETTERS[idx], solution)


#: a second schema: two trained tools asked in new words, and a new tool (get_time); the values
#: include places and topics never seen in training, which the answer must copy from the request
_MORE_CITIES = (
    "Dublin",
    "Vienna",
    "Prague",
    "Lisbon",
    "Seoul",
    "Bangkok",
    "Nairobi",
    "Quito",
    "Havana",
    "Manila",
    "Warsaw",
    "Athens",
    "Helsinki",
    "Dakar",
    "Denver",
    "Austin",
    "Boston",
    "Chicago",
    "Miami",
    "Zurich",
)
_MORE_QUERIES = (
    "tea gardens",
    "bike repair",
    "star maps",
    "paper cranes",
    "rock climbing",
    "bread baking",
    "tide tables",
    "violin lessons",
    "garden snails",
    "kite making",
    "river fishing",
    "lamp design",
)
_TOOLS2 = {
    "search_web": (("query",), _QUERIES + _MORE_QUERIES),
    "get_weather": (("city",), _CITIES + _MORE_CITIES),
    "get_time": (("city",), _CITIES + _MORE_CITIES),
}
_TOOL2_TEMPLATES = {
    "search_web": (
        "Please search the web for {query}.",
        "I need information about {query}.",
        "Browse for {query}.",
        "Any web results on {query}?",
        "Go online and find {query}.",
    ),
    "get_weather": (
        "Weather report for {city}.",
        "Will it be sunny in {city}?",
        "Forecast for {city}, please.",
        "Is it cold in {city} today?",
        "How is the weather over in {city}?",
    ),
    "get_time": (
        "What time is it in {city}?",
        "Tell me the local time in {city}.",
        "Current time in {city}.",
        "Which hour is it now in {city}?",
        "Clock check for {city}, please.",
    ),
}
_TOOL2_HEADER = (
    "Tools: "
    + ", ".join(f"{n}({', '.join(a)})" for n, (a, _) in _TOOLS2.items())
    + ".\nAnswer with Thought, Action and Action Input.\nRequest: "
)


def _tool_schema2(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(sorted(_TOOLS2))
    (arg,), values = _TOOLS2[name]
    args = {arg: rng.choice(values)}
    prompt = _TOOL2_HEADER + rng.choice(_TOOL2_TEMPLATES[name]).format(**args)
    solution = f" <think>use {name}</think> Action: {name}\nAction Input: {json.dumps(args)}"
    return _record("tool_schema2", "tooluse", prompt, json.dumps({"actions": [name], "input": args}), solution)


_CODE_HEADER = "You are a coding expert. Provide the complete code in a code block enclosed with ``` ```.\n"


def _code_reworded(rng: random.Random) -> dict[str, Any]:
    a, b = rng.randrange(10, 30), rng.randrange(2, 10)
    op, sym = rng.choice((("plus", "+"), ("minus", "-"), ("times", "*")))
    f, x = rng.choice(("f", "g", "solve")), rng.choice(("x", "n"))
    prompt = _CODE_HEADER + f"Create a Python function {f}({x}) which gives {x} {op} the sum of {a} and {b}."
    fn = {"+": lambda v: v + a + b, "-": lambda v: v - (a + b), "*": lambda v: v * (a + b)}[sym]
    tests = [f"assert {f}({v}) == {fn(v)}" for v in rng.sample(range(0, 30), 3)]
    expr = f"{x}{sym}{a + b}"
    solution = f" <think>{a}+{b}={a + b}; return {expr}</think> ```python\ndef {f}({x}):\n    return {expr}\n```"
    return _record("code_reworded", "code", prompt, "", solution, tests)


_COLOURS = ("red", "blue", "green", "white", "yellow")
_ORDINALS = ("first", "second", "third")


def _logic_grid(rng: random.Random) -> dict[str, Any]:
    colours = rng.sample(_COLOURS, 3)
    ask = rng.randrange(3)
    clues = [f"{colours[i]} is {_ORDINALS[i]}" for i in range(3) if i != ask]
    rng.shuffle(clues)
    opts = list(colours) + [rng.choice([c for c in _COLOURS if c not in colours])]
    rng.shuffle(opts)
    prompt = (
        f"Three houses are {', '.join(sorted(colours))}; {' and '.join(clues)}. "
        f"Which house is {_ORDINALS[ask]}?\n\n"
        + "\n".join(f"{L}: {o}" for L, o in zip(_LETTERS, opts))
        + "\nPlease reason step by step."
    )
    letter = _LETTERS[opts.index(colours[ask])]
    solution = _mc_solution(f"{' and '.join(sorted(clues))}; {_ORDINALS[ask]} {colours[ask]}", letter)
    return _record("logic_grid", "science", prompt, letter, solution)


_CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Egypt": "Cairo",
    "Peru": "Lima",
    "Norway": "Oslo",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Germany": "Berlin",
    "Canada": "Ottawa",
    "Kenya": "Nairobi",
    "Chile": "Santiago",
    "Greece": "Athens",
}


def _knowledge_mc(rng: random.Random) -> dict[str, Any]:
    country = rng.choice(sorted(_CAPITALS))
    wrong = rng.sample(sorted(c for k, c in _CAPITALS.items() if k != country), 3)
    opts = wrong + [_CAPITALS[country]]
    rng.shuffle(opts)
    prompt = (
        f"What is the capital of {country}?\n\n"
        + "\n".join(f"{L}: {o}" for L, o in zip(_LETTERS, opts))
        + "\nPlease reason step by step."
    )
    letter = _LETTERS[opts.index(_CAPITALS[country])]
    return _record("knowledge_mc", "science", prompt, letter, _mc_solution(f"{country}: {_CAPITALS[country]}", letter))


OOD_GENERATORS: dict[str, tuple[Callable[[random.Random], dict], Benchmark]] = {
    "arith_words": (_arith_words, Benchmark("arith_words", "ood", "math", "math", "near", "MATH-500")),
    "code_reworded": (_code_reworded, Benchmark("code_reworded", "ood", "code", "code", "near", "LiveCodeBench v6")),
    "science_reworded": (
        _science_reworded,
        Benchmark("science_reworded", "ood", "science", "science", "intermediate", "GPQA-diamond"),
    ),
    "tool_schema2": (_tool_schema2, Benchmark("tool_schema2", "ood", "tooluse", "tooluse", "intermediate", "BFCLv4")),
    "logic_grid": (_logic_grid, Benchmark("logic_grid", "ood", "science", "science", "far", "ZebraLogic")),
    "knowledge_mc": (_knowledge_mc, Benchmark("knowledge_mc", "ood", "science", "science", "far", "MMLU-Redux")),
}

_ANALOGUES = {
    "math": "AIME 24/25",
    "science": "SciKnowEval test",
    "tooluse": "ToolAlpaca test",
    "code": "coding held-out",
}
BENCHMARKS: dict[str, Benchmark] = {
    **{d: Benchmark(d, "in-domain", d, d, "in-domain", _ANALOGUES[d]) for d in DOMAINS},
    **{name: meta for name, (_, meta) in OOD_GENERATORS.items()},
}


def benchmark(name: str) -> Benchmark:
    """Metadata of a benchmark; paper-preset names unknown here count as OOD of unknown domain."""
    if name in BENCHMARKS:
        return BENCHMARKS[name]
    return Benchmark(name, "ood", "", "", "", name)


def generate_ood(name: str, n: int, seed: int, split: str = "test", *, strict: bool = True) -> list[dict[str, Any]]:
    """``n`` distinct problems of OOD benchmark ``name`` from ``split`` (deterministic in name, n, seed).

    As for the training domains (:func:`sdpocl.data.domains.split_of`), a problem belongs to the
    ``test`` split (the benchmark) or the ``train`` split by a stable hash of its prompt, so the
    base model's general-skills warm-up (``train``, :func:`general_examples`) never sees a benchmark
    problem. ``strict=False`` returns fewer when fewer exist instead of raising."""
    if name not in OOD_GENERATORS:
        raise ValueError(f"unknown OOD benchmark {name!r}; known: {', '.join(OOD_GENERATORS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    gen = OOD_GENERATORS[name][0]
    key = ("sdpocl-ood", name, seed) if split == "test" else ("sdpocl-ood", name, split, seed)
    rng = random.Random(_stable_int(*key))
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for _ in range(200 * n + 2000):
        if len(out) == n:
            break
        rec = gen(rng)
        if rec["prompt"] not in seen and split_of(rec["prompt"]) == split:
            seen.add(rec["prompt"])
            out.append(rec)
    if len(out) < n and strict:
        raise ValueError(f"{name}: cannot draw {n} distinct {split} problems (only {len(out)} exist)")
    return out


def general_examples(n: int, seed: int, reasoning: str = "think") -> list[dict[str, Any]]:
    """``n`` warm-up examples of the OOD benchmarks' task types (their ``train`` split, evenly over
    the benchmarks): the tiny preset's stand-in for the general skills a real base model brings from
    pretraining, which the OOD benchmarks probe and the RL stages never train. ``reasoning``: the
    solutions' style, as the domains' (:func:`~sdpocl.data.synthetic.common.render_reasoning`)."""
    names = sorted(OOD_GENERATORS)
    counts = [n // len(names) + (1 if i < n % len(names) else 0) for i in range(len(names))]
    out = []
    for name, k in zip(names, counts):
        pool = generate_ood(name, k, seed, split="train", strict=False)
        out += [pool[j % len(pool)] for j in range(k)]  # a small task type repeats
    if reasoning != "think":
        out = [{**r, "solution": render_reasoning(r["solution"], reasoning)} for r in out]
    return out


def benchmarks_for(config: dict) -> list[str]:
    """Benchmarks evaluated for ``config``: the trained domains' test sets, then the OOD sets."""
    return list(config["domains"]) + list(config["evaluate"]["ood"])
