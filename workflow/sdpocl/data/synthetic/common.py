"""What the synthetic domains share: their names and datasets, the stable hash behind every seed and
the train/test split, the record, the difficulty knob.

Every domain has a finite, deterministically enumerated *problem universe*. Each problem
is assigned to the ``train`` or ``test`` split by a stable SHA-256 hash of its prompt
(about 20% go to ``test``), independently of any seed, so train and test sets generated
with any seeds, in any order, in any process, never share a prompt (:func:`split_of`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

DOMAINS: tuple[str, ...] = ("math", "science", "tooluse", "code")
SPLITS: tuple[str, ...] = ("train", "test")
DATASETS: dict[str, str] = {d: f"tiny_{d}" for d in DOMAINS}

#: Fraction (in thousandths of the hash space) of each universe that goes to ``test``.
TEST_FRACTION = 0.2
_TEST_PERMILLE = int(round(TEST_FRACTION * 1000))

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


_THINK_SOLUTION = re.compile(r"^ <think>(.*?)</think> (.*)$", flags=re.DOTALL)
REASONING_STYLES = ("think", "visible")
TOOLUSE_ARGS = ("copied", "computed")
TOOLUSE_LISTS = ("short", "clock", "long")


def render_reasoning(solution: str, style: str = "think") -> str:
    """A reference solution (`` <think>R</think> ANSWER``) in a reasoning style.

    ``think``: as written. ``visible``: what a model with thinking off writes (the paper's setting,
    ``enable_thinking: false``): the reasoning in plain text before the answer, in the answer's own
    format: SciKnowEval's ``<reasoning>R</reasoning> <answer>L</answer>`` for a lettered answer, a
    ReAct ``Thought: R`` before an ``Action:``, else ``R`` then the answer. SDPO's re-prompt strips only
    ``<think>``, so a visible demonstration keeps its reasoning."""
    if style == "think":
        return solution
    if style != "visible":
        raise ValueError(f"reasoning style must be one of {', '.join(REASONING_STYLES)}, got {style!r}")
    m = _THINK_SOLUTION.match(solution)
    if m is None:
        return solution
    reasoning, answer = m.groups()
    if answer.startswith("<answer>"):
        return f" <reasoning>{reasoning}</reasoning> {answer}"
    if answer.startswith("Action:"):
        return f" Thought: {reasoning}\n{answer}"
    return f" {reasoning} {answer}"


@dataclasses.dataclass(frozen=True)
class Difficulty:
    """How hard the synthetic tasks are (config ``data.difficulty``): the knob that sets a base
    model's starting accuracy, so RL has headroom (right in some samples, not reliably). The
    defaults are the data of the first experiments exactly (docs/experiments/2026-12-01-row-07-balanced-tooluse.md
    to ...-row-11-sft-700-steps.md); a base trained long enough to copy from its prompt saturates them
    (docs/experiments/2026-12-01-row-10-sft-1200-steps.md), harder settings give it room again.

    ``math_addend_max``: the second addend is drawn from [2, max] (9: one digit; up to 99: two
    two-digit numbers, so the units carry into the tens). ``math_terms``: 2 or 3 addends (the
    third drawn like the second). ``science_options``: options per
    question (2-6), each to be compared. ``science_properties``: how many property tables of the same
    compounds the questions ask (1: boiling point; 2: and melting point; 3: and density): more facts to
    recall and keep apart. ``tooluse_args``: ``copied`` (the request names every argument) or
    ``computed`` (the request names a country, currency names, a 12-hour time; the argument is the
    capital, the ISO codes, the 24-hour hour, written in the Thought first; search queries stay copied).
    ``tooluse_calls``: 1 (one tool call per request) or 2 (half the requests join two requests of two
    different tools, as BFCL's "multiple" categories: the Thought holds both workings, then both calls
    follow in the request's order; the other half are the single requests of 1).
    ``tooluse_lists``: ``short`` (24 countries, 24 queries, 22 clock times) or ``long`` (with
    ``computed`` only: 48 countries, 56 queries, 44 clock times in two wordings of the day's half, 9
    set-alarm wordings), so every tool has ~75 test requests and the 300-prompt test set holds the tools
    equally, where ``short`` gives ``convert_currency`` 191 of them
    (docs/experiments/2026-12-06-row-52-tooluse-lists-long.md).
    ``code_addend_max``: the same for the constant of a code
    task (given as "the sum of a and b"). ``reasoning``: the format of the reference solutions the base
    is warmed up on (``think`` or ``visible``, :func:`render_reasoning`); not a task size, so the
    domains' data files do not depend on it, only the base model does."""

    math_addend_max: int = 9
    math_terms: int = 2
    science_options: int = 4
    science_properties: int = 1
    code_addend_max: int = 9
    tooluse_args: str = "copied"
    tooluse_calls: int = 1
    tooluse_lists: str = "short"
    #: the reference solutions' reasoning (:func:`render_reasoning`): what the base is warmed up to write
    reasoning: str = "think"

    def __post_init__(self) -> None:
        if self.reasoning not in REASONING_STYLES:
            raise ValueError(
                f"data.difficulty.reasoning must be one of {', '.join(REASONING_STYLES)}, got {self.reasoning!r}"
            )
        if self.tooluse_args not in TOOLUSE_ARGS:
            raise ValueError(
                f"data.difficulty.tooluse_args must be one of {', '.join(TOOLUSE_ARGS)}, got {self.tooluse_args!r}"
            )
        if self.tooluse_lists not in TOOLUSE_LISTS:
            raise ValueError(
                f"data.difficulty.tooluse_lists must be one of {', '.join(TOOLUSE_LISTS)}, got {self.tooluse_lists!r}"
            )
        if self.tooluse_lists != "short" and self.tooluse_args != "computed":
            raise ValueError(
                f"data.difficulty.tooluse_lists: {self.tooluse_lists} needs tooluse_args: computed"
                " (its lists are the computed ones)"
            )
        bounds = (
            ("math_addend_max", 2, 99),
            ("math_terms", 2, 3),
            ("science_options", 2, 6),
            ("science_properties", 1, 3),
            ("code_addend_max", 2, 99),
            ("tooluse_calls", 1, 2),
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
