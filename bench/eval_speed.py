"""Bench: one whole evaluation of the base per generation batch size and sampler.

Times ``evaluate_model`` on a results folder's base (bench/base_evaluation.py, one thread) for each
``--batch-sizes`` value with transformers' sampling (``hf``: top-p sorts the vocabulary, ``torch.multinomial``
draws over it) and with the evaluation's own sampler (``top_k``: sdpocl.evaluate.sampling, the same
distribution drawn over the top-k tokens), interleaved, the fastest repeat of each. The ways draw different
tokens, so their scores differ by sampling noise; each score is printed beside its time. Ratios are to the
first batch size with ``hf`` (docs/tiny-preset.md row 57).

    python bench/eval_speed.py --results results --batch-sizes 128,512 --repeats 2 \\
        --eval-settings '<the evaluate rule's --settings JSON>'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from unittest import mock

import torch
from base_evaluation import timed_base_evaluation

import sdpocl.evaluate.sampling as sampling
from sdpocl.cpu_attention import use_workflow_attention

SAMPLERS = ("hf", "top_k")


def timed(results: Path, settings: dict, batch_size: int, sampler: str) -> tuple[float, dict]:
    """(wall seconds, accuracy per benchmark) of one evaluation of the base."""
    keep = sampler == "top_k"
    with mock.patch.object(sampling, "sample_over_top_k", sampling.sample_over_top_k if keep else lambda model: None):
        seconds, doc = timed_base_evaluation(results, json.dumps({**settings, "batch_size": batch_size}))
    return seconds, {b: round(s["acc"], 4) for b, s in doc["benchmarks"].items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, help="results folder holding base/model and eval_tasks/")
    p.add_argument("--eval-settings", required=True, help="the evaluate rule's --settings JSON (snakemake -n -p)")
    p.add_argument("--batch-sizes", default="128,512")
    p.add_argument("--samplers", default=",".join(SAMPLERS))
    p.add_argument("--repeats", type=int, default=2)
    a = p.parse_args()

    torch.set_num_threads(1)
    use_workflow_attention()
    settings = json.loads(a.eval_settings)
    ways = [(int(b), s) for b in a.batch_sizes.split(",") for s in a.samplers.split(",")]
    if unknown := {s for _, s in ways} - set(SAMPLERS):
        raise SystemExit(f"--samplers: unknown {sorted(unknown)}; choose from {list(SAMPLERS)}")
    best: dict[str, float] = {}
    accs: dict[str, dict] = {}
    for _ in range(a.repeats):
        for batch_size, sampler in ways:
            name = f"batch {batch_size}, {sampler}"
            seconds, accs[name] = timed(Path(a.results), settings, batch_size, sampler)
            best[name] = min(best.get(name, float("inf")), seconds)
            print(f"[bench] {name}: evaluation of the base in {seconds:.1f} s", flush=True)
    first = next(iter(best))
    report = {
        name: {"wall_seconds": round(s, 1), "ratio_to_first": round(s / best[first], 3), "acc": accs[name]}
        for name, s in best.items()
    }
    print(json.dumps({"first": first, "evaluation": report}, indent=2))


if __name__ == "__main__":
    main()
