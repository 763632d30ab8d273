"""Bench: SDPO train-step time / GRPO train-step time on the same batch shape (target <= 1.5).

Runs each method's real train-stage path (TRL trainers, same model, data, prompts x samples,
completion length and seed), interleaved and repeated so that machine noise hits both alike,
and prints the per-step times and their ratio.

    python bench/step_time.py --config config/config.yaml --results results --steps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.train.stage import train_stage


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--domain", default="math")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precisions", default=None, help="e.g. no,bf16: each method under each train.mixed_precision")
    a = p.parse_args()

    config = load_config(a.config)
    results = Path(a.results or config["results"])
    runs = {"GRPO": "grpo_s0", "SDPO_0": "sdpo_a0_s0", "SDPO_5%": "sdpo_a0.05_s0"}
    precisions = a.precisions.split(",") if a.precisions else [None]
    runs = {f"{k} {p}" if p else k: (v, p) for k, v in runs.items() for p in precisions}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for rep in range(a.repeats):
        for label, (name, precision) in runs.items():
            settings = stage_settings(config, run_by_name(config, name), (a.domain,))
            settings = settings.replace(steps=a.steps, save_every=10 * a.steps)
            if precision:
                settings = settings.replace(mixed_precision=precision)
            with tempfile.TemporaryDirectory() as tmp:
                summary = train_stage(
                    settings,
                    results / "base" / "model",
                    results / "data" / a.domain / "train.jsonl",
                    Path(tmp) / "out",
                    Path(tmp) / "state",
                    threads=a.threads,
                )
            times[label].append(summary["seconds_per_step"])
            print(f"[bench] repeat {rep} {label}: {summary['seconds_per_step']:.4f} s/step", flush=True)
    # Ratios are taken within each repeat (the methods ran back to back), then the median.
    ref = next(iter(times))  # GRPO (under the first precision)
    ratios = {k: [t / g for t, g in zip(v, times[ref])] for k, v in times.items() if k != ref}
    report = {
        "steps": a.steps,
        "batch": f"{config['train']['prompts_per_step']} prompts x {config['train']['num_generations']} samples",
        "seconds_per_step": times,
        "ratio_over_grpo_per_repeat": ratios,
        "median_ratio_over_grpo": {k: statistics.median(v) for k, v in ratios.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
