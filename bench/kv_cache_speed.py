"""Bench: generation on sdpocl.generation.kv_cache's growing cache against transformers' ``DynamicCache``, and
with the rows that have ended dropped from the batch (sdpocl.generation.finished_rows).

Every way (``--modes``, from ``dynamic``, ``growing`` and ``dropping``) runs the workflow's shared-prefill
``generate`` (sdpocl.generation.prefill): ``dynamic`` on transformers' cache, ``growing`` on the growing cache
with every row computed to the end, ``dropping`` on the growing cache without the rows that have ended (the
workflow's).
Each measurement is interleaved (the modes in turn, repeated) so that machine noise hits all alike,
the fastest repeat of each; ratios are to the first mode:
- generation: a rollout batch (``prompts_per_step`` training prompts x ``num_generations``) of each domain,
  sampled to the domain's completion limit from one seed, CPU seconds of this process; all must
  sample the same tokens;
- with ``--steps``: a train stage of GRPO and of SDPO_0 on the first domain (``train_stage``, the real TRL
  path), seconds per rollout step; all must log the same rewards and losses;
- with ``--eval-settings`` (the JSON the evaluate rule passes; ``snakemake -n -p`` prints it): one whole
  evaluation of the base on every benchmark (``evaluate_model``, lm-eval), wall seconds; the scores must
  agree.

    python bench/kv_cache_speed.py --results results --domains math,tooluse --steps 6 --repeats 2
    python bench/kv_cache_speed.py --results results --modes growing,dropping --domains tooluse,code --repeats 3
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

import sdpocl.generation.prefill as prefill
from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.io import read_jsonl
from sdpocl.train.stage import train_stage

MODES = ("dynamic", "growing", "dropping")


def sharing(mode: str):
    """``share_generation_prefill`` in ``mode`` (see the module docstring)."""
    return functools.partial(
        prefill.share_generation_prefill,
        grow_cache=mode != "dynamic",
        drop_ended=mode == "dropping",
    )


def patched(mode: str):
    """``share_generation_prefill`` in ``mode`` where the jobs call it (they import it when they run)."""
    return mock.patch.object(prefill, "share_generation_prefill", sharing(mode))


def stage_seconds(config: dict, results: Path, run: str, domain: str, steps: int, repeats: int, modes) -> dict:
    settings = stage_settings(config, run_by_name(config, run), (domain,))
    settings = settings.replace(steps=steps, save_every=10 * steps)
    best: dict[str, float] = {}
    logs: dict[str, list] = {}
    for _ in range(repeats):
        for mode in modes:
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
    if len({json.dumps(log) for log in logs.values()}) != 1:
        raise SystemExit(f"{run}: the modes trained differently: {logs}")
    return best


def evaluation_seconds(results: Path, settings: str, repeats: int, modes) -> dict[str, float]:
    best: dict[str, float] = {}
    accs: dict[str, dict] = {}
    for _ in range(repeats):
        for mode in modes:
            with patched(mode):
                seconds, doc = timed_base_evaluation(results, settings)
            best[mode] = min(best.get(mode, float("inf")), seconds)
            accs[mode] = {b: s["acc"] for b, s in doc["benchmarks"].items()}
            print(f"[bench] {mode}: evaluation of the base in {seconds:.1f} s", flush=True)
    if len({json.dumps(a, sort_keys=True) for a in accs.values()}) != 1:
        raise SystemExit(f"the evaluations scored differently: {accs}")
    return best


def ratios(seconds: dict[str, float]) -> dict[str, float]:
    """Each later mode's seconds over the first's."""
    (first, base), *rest = seconds.items()
    return {f"ratio_{mode}_over_{first}": round(s / base, 3) for mode, s in rest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--domains", default="math,tooluse")
    p.add_argument("--steps", type=int, default=0, help="rollout steps per train-stage repeat (0: no stage)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--modes", default="dynamic,growing", help=f"comma-separated, from {','.join(MODES)}")
    p.add_argument("--eval-settings", help="the evaluate rule's --settings JSON: also time one whole evaluation")
    a = p.parse_args()

    torch.set_num_threads(1)
    modes = a.modes.split(",")
    if len(modes) < 2 or set(modes) - set(MODES):
        raise SystemExit(f"--modes: two or more of {list(MODES)}, got {modes}")
    config = load_config(a.config)
    results = Path(a.results or config["results"])
    report: dict = {
        "generation": generation_by_domain(
            results, config["train"], a.domains.split(","), a.repeats, models={mode: sharing(mode) for mode in modes}
        )
    }
    if a.steps:
        domain = a.domains.split(",")[0]
        report["train_step"] = {}
        for run in ("grpo_s0", "sdpo_a0_s0"):
            steps = stage_seconds(config, results, run, domain, a.steps, a.repeats, modes)
            report["train_step"][f"{run} {domain}"] = {
                "seconds_per_step": {k: round(v, 3) for k, v in steps.items()},
                **ratios(steps),
            }
    if a.eval_settings:
        ev = evaluation_seconds(results, a.eval_settings, a.repeats, modes)
        report["evaluation"] = {"wall_seconds": {k: round(v, 1) for k, v in ev.items()}, **ratios(ev)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
