"""Data and benchmark loaders of the *paper* preset (real datasets through ``datasets``).

:mod:`.registry` names every source (:data:`SOURCES`: where it lives, its splits, its reward
family, its converter) and documents the record schema and the unconfirmed source schemas;
:mod:`.reader` reads a source's raw rows; :mod:`.load` converts them to records
(:func:`load_records`, :func:`prepare_paper_dataset`); the converters live in one module per
source family (:mod:`.math`, :mod:`.science`, :mod:`.tooluse`, :mod:`.code`, helpers in
:mod:`.common`).
"""

from __future__ import annotations

from sdpocl.data.loaders.code import CODE_PROMPT, decode_lcb_tests
from sdpocl.data.loaders.common import RowError
from sdpocl.data.loaders.load import load_records, prepare_paper_dataset
from sdpocl.data.loaders.math import GPQA_PROMPT, MATH_SUFFIX
from sdpocl.data.loaders.registry import IN_DOMAIN_EVAL, OOD_BENCHMARKS, SOURCES, TRAINING_SETS, Source
from sdpocl.data.loaders.science import SCIKNOWEVAL_SYSTEM
from sdpocl.data.loaders.tooluse import BFCL_NOTE, TOOL_PROMPT

__all__ = [
    "Source",
    "SOURCES",
    "TRAINING_SETS",
    "IN_DOMAIN_EVAL",
    "OOD_BENCHMARKS",
    "RowError",
    "load_records",
    "prepare_paper_dataset",
    "MATH_SUFFIX",
    "SCIKNOWEVAL_SYSTEM",
    "CODE_PROMPT",
    "GPQA_PROMPT",
    "TOOL_PROMPT",
    "BFCL_NOTE",
    "decode_lcb_tests",
]
