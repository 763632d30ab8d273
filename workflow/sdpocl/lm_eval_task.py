"""Backward-compatible import path of the lm-eval task functions.

Task YAMLs written before the package layout moved name ``!function sdpocl.lm_eval_task.*``;
lm-eval resolves those names here. New YAMLs name :mod:`sdpocl.evaluate.tasks`.
"""

from sdpocl.evaluate.tasks import (
    doc_to_text,
    prescore,
    process_results,
    score_samples,
    task_name,
    write_task_yaml,
)

__all__ = ["doc_to_text", "prescore", "process_results", "score_samples", "task_name", "write_task_yaml"]
