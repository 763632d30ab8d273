"""Bench: one whole evaluation of the base per generation batch size and sampler.

Times ``evaluate_model`` on a results folder's base (bench/base_evaluation.py, one thread) for each
``--batch-sizes`` value with transformers' sampling (``hf``: top-p sorts the vocabulary, ``torch.multinomial``
draws over it) and with the evaluation's own sampler (``top_k``: sdpocl.evaluate.sampling, the same
distribution drawn over the top-k tokens), interleaved, the fastest repeat of each. The ways draw different
tokens, so their scores differ by sampling noise; each score is printed beside its time. Ratios are to the
first batch size with ``hf`` (docs/experiments/2026-12-06-row-57-eval-batch-size.md).

With ``--paired-model`` (a trained model of the same results folder, e.g. a first stage's ``runs/<run>/math/model``)
each way also evaluates that model on ``--paired-benchmarks`` from the same seed, and reports the share of
responses identical to the base's and the paired stderr of its change (the stderr of the per-prompt
changes, as ``sdpocl.evaluate.aggregate.paired_change``): a paired change is more precise where two models
that agree draw the same tokens from one seed (common random numbers).

    python bench/eval_speed.py --results results --batch-sizes 128,512 --repeats 2 \\
        --eval-settings '<the evaluate rule's --settings JSON>'
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from unittest import mock

import torch
from base_evaluation import timed_base_evaluation

import sdpocl.generation.sampling as sampling

SAMPLERS = ("hf", "top_k")


def with_sampler(sampler: str):
    """The evaluation's own sampler (``top_k``, what it runs with) or transformers' (``hf``: not installed)."""
    keep = sampler == "top_k"
    return mock.patch.object(sampling, "sample_over_top_k", sampling.sample_over_top_k if keep else lambda model: None)


def timed(results: Path, settings: dict, batch_size: int, sampler: str) -> tuple[float, dict]:
    """(wall seconds, accuracy per benchmark) of one evaluation of the base."""
    with with_sampler(sampler):
        seconds, doc = timed_base_evaluation(results, json.dumps({**settings, "batch_size": batch_size}))
    return seconds, {b: round(s["acc"], 4) for b, s in doc["benchmarks"].items()}


def samples(model: Path, results: Path, settings: dict, benchmarks: list[str], tmp: Path) -> dict[str, dict]:
    """Each benchmark's sample records of ``model`` (``doc_id`` -> record) from one evaluation."""
    from sdpocl.evaluate.run import evaluate_model

    out = tmp / f"eval-{len(list(tmp.iterdir()))}"
    evaluate_model(
        str(model), str(results / "eval_tasks"), benchmarks, str(out), settings=settings, state_dir=str(out / "state")
    )
    return {
        b: {r["doc_id"]: r for r in map(json.loads, (out / "samples" / f"{b}.jsonl").read_text().splitlines())}
        for b in benchmarks
    }


def paired(results: Path, other: Path, settings: dict, batch_size: int, sampler: str, benchmarks: list[str]) -> dict:
    """Per benchmark: identical responses of the base and ``other`` (share), and the paired change and stderr."""
    settings = {**settings, "batch_size": batch_size}
    with with_sampler(sampler), tempfile.TemporaryDirectory() as tmp:
        before = samples(results / "base" / "model", results, settings, benchmarks, Path(tmp))
        after = samples(other, results, settings, benchmarks, Path(tmp))
    report = {}
    for b in benchmarks:
        docs = sorted(before[b].keys() & after[b].keys())
        pairs = [(x, y) for d in docs for x, y in zip(before[b][d]["responses"], after[b][d]["responses"])]
        diffs = [statistics.mean(after[b][d]["scores"]) - statistics.mean(before[b][d]["scores"]) for d in docs]
        report[b] = {
            "identical_responses": round(sum(x == y for x, y in pairs) / len(pairs), 3),
            "change": round(statistics.mean(diffs), 4),
            "paired_stderr": round(statistics.stdev(diffs) / math.sqrt(len(diffs)), 4),
        }
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", required=True, help="results folder holding base/model and eval_tasks/")
    p.add_argument("--eval-settings", required=True, help="the evaluate rule's --settings JSON (snakemake -n -p)")
    p.add_argument("--batch-sizes", default="128,512")
    p.add_argument("--samplers", default=",".join(SAMPLERS))
    p.add_argument("--repeats", type=int, default=2, help="timed evaluations per way (0: none)")
    p.add_argument("--paired-model", type=Path, help="also: a trained model against the base, per way (see above)")
    p.add_argument("--paired-benchmarks", default="math")
    a = p.parse_args()

    torch.set_num_threads(1)
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
    out: dict = {}
    if best:  # --repeats 0: the paired measurement only
        first = next(iter(best))
        out["first"] = first
        out["evaluation"] = {
            name: {"wall_seconds": round(s, 1), "ratio_to_first": round(s / best[first], 3), "acc": accs[name]}
            for name, s in best.items()
        }
    if a.paired_model:
        out["paired"] = {
            f"batch {b}, {s}": paired(Path(a.results), a.paired_model, settings, b, s, a.paired_benchmarks.split(","))
            for b, s in ways
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
