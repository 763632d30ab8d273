"""Bench: generation on sdpocl.kv_cache's growing cache against transformers' ``DynamicCache``.

Both ways run the workflow's shared-prefill ``generate`` (sdpocl.prefill), with ``grow_cache`` on and off.
Each measurement is interleaved (dynamic, then growing, repeated) so that machine noise hits both alike,
the fastest repeat of each:
- generation: a rollout batch (``prompts_per_step`` training prompts x ``num_generations``) of each domain,
  sampled to the domain's completion limit from one seed, CPU seconds of this process; the two must
  sample the same tokens;
- with ``--steps``: a train stage of GRPO and of SDPO_0 on the first domain (``train_stage``, the real TRL
  path), seconds per rollout step; the two must log the same rewards and losses;
- with ``--eval-settings`` (the JSON the evaluate rule passes; ``snakemake -n -p`` prints it): one whole
  evaluation of the base on every benchmark (``evaluate_model``, lm-eval), wall seconds; the scores must
  agree.

    python bench/kv_cache_speed.py --results results --domains math,tooluse --steps 6 --repeats 2
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
from pathlib import Path
from unittest import mock

import torch
from base_evaluation import timed_base_evaluation
from prefill_speed import generation_by_domain

import sdpocl.prefill as prefill
from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.cpu_attention import use_workflow_attention
from sdpocl.io import read_jsonl
from sdpocl.train.stage import train_stage

MODES = ("dynamic", "growing")


def sharing(mode: str):
    """``share_generation_prefill`` with or without the growing cache."""
    return functools.partial(prefill.share_generation_prefill, grow_cache=mode == "growing")


def patched(mode: str):
    """``share_generation_prefill`` in ``mode`` where the jobs call it (they import it when they run)."""
    return mock.patch.object(prefill, "share_generation_prefill", sharing(mode))


def stage_seconds(config: dict, results: Path, run: str, domain: str, steps: int, repeats: int) -> dict:
    settings = stage_settings(config, run_by_name(config, run), (domain,))
    settings.update(steps=steps, save_every=10 * steps)
    best: dict[str, float] = {}
    logs: dict[str, list] = {}
    for _ in range(repeats):
        for mode in MODES:
            with patched(mode), tempfile.TemporaryDirectory() as tmp:
                summary = train_stage(
                    settings,
                    results / "base" / "model",
                    results / "data" / domain / "train.jsonl",
                    Path(tmp) / "out",
                    Path(tmp) / "state",
                )
                rows = read_jsonl(Path(tmp) / "out" / "train_log.jsonl")
            logs[mode] = [{k: r.get(k) for k in ("step", "reward", "loss")} for r in rows]
            best[mode] = min(best.get(mode, float("inf")), summary["seconds_per_step"])
            print(f"[bench] {mode}: {summary['seconds_per_step']:.3f} s per {run} {domain} step", flush=True)
    if logs["dynamic"] != logs["growing"]:
        raise SystemExit(f"{run}: the two caches trained differently: {logs}")
    return best


def evaluation_seconds(results: Path, settings: str, repeats: int) -> dict[str, float]:
    best: dict[str, float] = {}
    accs: dict[str, dict] = {}
    for _ in range(repeats):
        for mode in MODES:
            with patched(mode):
                seconds, doc = timed_base_evaluation(results, settings)
            best[mode] = min(best.get(mode, float("inf")), seconds)
            accs[mode] = {b: s["acc"] for b, s in doc["benchmarks"].items()}
            print(f"[bench] {mode}: evaluation of the base in {seconds:.1f} s", flush=True)
    if accs["dynamic"] != accs["growing"]:
        raise SystemExit(f"the evaluations scored differently: {accs}")
    return best


def ratio(seconds: dict[str, float]) -> float:
    return round(seconds["growing"] / seconds["dynamic"], 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--domains", default="math,tooluse")
    p.add_argument("--steps", type=int, default=0, help="rollout steps per train-stage repeat (0: no stage)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--eval-settings", help="the evaluate rule's --settings JSON: also time one whole evaluation")
    a = p.parse_args()

    torch.set_num_threads(1)
    use_workflow_attention()
    config = load_config(a.config)
    results = Path(a.results or config["results"])
    report: dict = {
        "generation": generation_by_domain(
            results, config["train"], a.domains.split(","), a.repeats, models={mode: sharing(mode) for mode in MODES}
        )
    }
    if a.steps:
        domain = a.domains.split(",")[0]
        report["train_step"] = {}
        for run in ("grpo_s0", "sdpo_a0_s0"):
            steps = stage_seconds(config, results, run, domain, a.steps, a.repeats)
            report["train_step"][f"{run} {domain}"] = {
                "seconds_per_step": {k: round(v, 3) for k, v in steps.items()},
                "ratio_growing_over_dynamic": ratio(steps),
            }
    if a.eval_settings:
        ev = evaluation_seconds(results, a.eval_settings, a.repeats)
        report["evaluation"] = {
            "wall_seconds": {k: round(v, 1) for k, v in ev.items()},
            "ratio_growing_over_dynamic": ratio(ev),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
