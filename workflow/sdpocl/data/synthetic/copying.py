"""A copy task for the tiny base's warm-up: repeat a string of random letters from the prompt.

A pretrained model copies a span from its context (a query named in a request, a value in a
demonstration) whatever the span is. The tiny base's warm-up never needs that: every name it
sees comes from a short list, which it memorises instead (docs/tiny-preset.md, row 53). Random
strings cannot be memorised, so these examples are the stand-in for that pretrained skill."""

from __future__ import annotations

import random
import string
from typing import Any

from sdpocl.data.synthetic.common import _stable_int

_TEMPLATES = (
    "Repeat the words: {s}",
    "Say {s} again.",
    "Write back the text '{s}' exactly.",
    "Copy this: {s}",
)


def _word(rng: random.Random) -> str:
    w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
    return w.capitalize() if rng.random() < 0.3 else w


def copy_examples(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` examples ``{"prompt", "completion"}``: a prompt naming 1-3 random words, the words back."""
    rng = random.Random(_stable_int("sdpocl-copy", seed))
    out = []
    for _ in range(n):
        s = " ".join(_word(rng) for _ in range(rng.randint(1, 3)))
        out.append({"prompt": rng.choice(_TEMPLATES).format(s=s), "completion": f" {s}"})
    return out
