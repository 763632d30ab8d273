"""Seeded, deterministic synthetic data for the offline "tiny preset": the face of :mod:`sdpocl.data.synthetic`.

Four domains, trained in the order of :data:`DOMAINS`, one module each:
:mod:`~sdpocl.data.synthetic.math` (``tiny_math``, addition), :mod:`~sdpocl.data.synthetic.science`
(``tiny_science``, boiling-point multiple choice over :data:`COMPOUNDS`),
:mod:`~sdpocl.data.synthetic.tooluse` (``tiny_tooluse``, single tool calls over :data:`TOOLS`) and
:mod:`~sdpocl.data.synthetic.code` (``tiny_code``, one-line integer functions, :data:`CODE_OPS`).
How hard the tasks are is set by a :class:`Difficulty` (config ``data.difficulty``); its defaults
are the data the domain modules describe, byte for byte. :func:`split_of` puts each problem in
``train`` or ``test`` by a hash of its prompt; :func:`generate` draws seeded, stratified samples
(:mod:`~sdpocl.data.synthetic.sampling`); :mod:`~sdpocl.data.synthetic.sft` builds the base model's
warm-up (:func:`sft_mixture`, :func:`corpus`) and the SDPO teacher's re-prompt.

Records are dicts::

    {"prompt": str, "answer": str, "tests": list[str], "domain": str,
     "dataset": str, "solution": str}

``prompt`` never ends with whitespace; ``solution`` (the reference completion) starts
with exactly one space and contains a short ``<think>...</think>`` reasoning part before
the final answer.
"""

from __future__ import annotations

from sdpocl.data.synthetic.code import CODE_OPS
from sdpocl.data.synthetic.common import (
    DATASETS,
    DOMAINS,
    SPLITS,
    TEST_FRACTION,
    Difficulty,
    split_of,
)
from sdpocl.data.synthetic.sampling import generate, num_problems
from sdpocl.data.synthetic.science import COMPOUNDS
from sdpocl.data.synthetic.sft import (
    REPROMPT_TEMPLATE,
    SOLUTION_TEMPLATE,
    corpus,
    reprompt_example,
    sft_mixture,
    teacher_prompt,
)
from sdpocl.data.synthetic.tooluse import TOOLS

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
