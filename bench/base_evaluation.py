"""One whole evaluation of a results folder's base model on every benchmark it has tasks for, timed: what
the benches that compare two ways of evaluating (attention_speed.py, prefill_speed.py) repeat per mode."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path


def timed_base_evaluation(results: Path, settings: str) -> tuple[float, dict]:
    """(wall seconds, the scores document) of ``evaluate_model`` on ``results``'s base, one thread, in a
    temporary folder; ``settings`` is the evaluate rule's ``--settings`` JSON."""
    from sdpocl.evaluate.run import evaluate_model

    benchmarks = sorted(p.stem for p in (results / "eval_tasks").glob("*.yaml"))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        doc = evaluate_model(
            str(results / "base" / "model"),
            str(results / "eval_tasks"),
            benchmarks,
            str(Path(tmp) / "out"),
            settings=json.loads(settings),
            state_dir=str(Path(tmp) / "state"),
            threads=1,
        )
        return time.perf_counter() - t0, doc
