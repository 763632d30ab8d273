"""Bench: transformers' ``sdpa`` attention against sdpocl.generation.attention's, on the tiny base.

Two measurements, each interleaved (stock, then CPU-GQA, repeated) so that machine noise hits both
alike; CPU seconds of this process, the fastest repeat of each:
- generation: one batch of a domain's training prompts (the rollout and evaluation batch size),
  sampled to a fixed length, as ``generate`` runs in a rollout step and in lm-eval;
- a train stage's rollout steps (``train_stage``, the real TRL path), seconds per step;
- with ``--eval-settings`` (the JSON the evaluate rule passes; ``snakemake -n -p`` prints it): one
  whole evaluation of the base on every benchmark (``evaluate_model``, lm-eval), wall seconds.

    python bench/attention_speed.py --results results --domain tooluse --steps 4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
from base_evaluation import timed_base_evaluation
from transformers import AutoModelForCausalLM, AutoTokenizer

import sdpocl.generation.attention as attention
from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.io import read_jsonl
from sdpocl.prompts import plain_text
from sdpocl.train.stage import train_stage

MODES = {"stock sdpa": "sdpa", "cpu gqa": attention.register()}


def jobs_use(name: str):
    """The jobs' models load with attention ``name`` (they ask sdpocl.generation.model_kwargs, which registers
    and names the workflow's)."""
    return mock.patch.object(attention, "register", lambda: name)


def generation_cpu_s(model_dir: Path, prompts: list[str], new_tokens: int, repeats: int) -> dict[str, float]:
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    best: dict[str, float] = {}
    tokens = set()
    for _ in range(repeats):
        for name, implementation in MODES.items():
            model.set_attn_implementation(implementation)
            torch.manual_seed(0)
            t0 = time.process_time()
            with torch.inference_mode():
                out = model.generate(
                    **batch,
                    do_sample=True,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    pad_token_id=tok.pad_token_id,
                    top_k=0,
                )
            best[name] = min(best.get(name, float("inf")), time.process_time() - t0)
            tokens.add(hash(out.numpy().tobytes()))
    if len(tokens) != 1:
        raise SystemExit("the two attentions sampled different tokens from the same seed")
    return best


def step_seconds(config: dict, results: Path, domain: str, steps: int, repeats: int) -> dict[str, float]:
    settings = stage_settings(config, run_by_name(config, "sdpo_a0_s0"), (domain,))
    settings = settings.replace(steps=steps, save_every=10 * steps)
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, implementation in MODES.items():
            with jobs_use(implementation), tempfile.TemporaryDirectory() as tmp:
                summary = train_stage(
                    settings,
                    results / "base" / "model",
                    results / "data" / domain / "train.jsonl",
                    Path(tmp) / "out",
                    Path(tmp) / "state",
                )
            best[name] = min(best.get(name, float("inf")), summary["seconds_per_step"])
            print(f"[bench] {name}: {summary['seconds_per_step']:.3f} s per SDPO_0 {domain} step", flush=True)
    return best


def evaluation_seconds(results: Path, settings: str, repeats: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, implementation in MODES.items():
            with jobs_use(implementation):
                seconds, _ = timed_base_evaluation(results, settings)
            best[name] = min(best.get(name, float("inf")), seconds)
            print(f"[bench] {name}: evaluation of the base in {seconds:.1f} s", flush=True)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--domain", default="tooluse")
    p.add_argument("--steps", type=int, default=4, help="rollout steps per train-stage repeat (0: skip)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=40)
    p.add_argument("--eval-settings", help="the evaluate rule's --settings JSON: also time one whole evaluation")
    a = p.parse_args()

    torch.set_num_threads(1)
    config = load_config(a.config)
    results = Path(a.results or config["results"])
    batch = config["train"]["prompts_per_step"] * config["train"]["num_generations"]
    rows = read_jsonl(results / "data" / a.domain / "train.jsonl")[:batch]
    prompts = [plain_text(r) for r in rows]  # the tiny preset's prompt format
    gen = generation_cpu_s(results / "base" / "model", prompts, a.new_tokens, a.repeats)
    report = {
        "domain": a.domain,
        "generation": {
            "batch": len(prompts),
            "new_tokens": a.new_tokens,
            "cpu_ms_per_token": {k: round(1000 * v / a.new_tokens, 2) for k, v in gen.items()},
            "ratio_cpu_gqa_over_stock": round(gen["cpu gqa"] / gen["stock sdpa"], 3),
        },
    }
    if a.steps:
        steps = step_seconds(config, results, a.domain, a.steps, a.repeats)
        report["train_step"] = {
            "seconds_per_step": {k: round(v, 3) for k, v in steps.items()},
            "ratio_cpu_gqa_over_stock": round(steps["cpu gqa"] / steps["stock sdpa"], 3),
        }
    if a.eval_settings:
        ev = evaluation_seconds(results, a.eval_settings, a.repeats)
        report["evaluation"] = {
            "wall_seconds": {k: round(v, 1) for k, v in ev.items()},
            "ratio_cpu_gqa_over_stock": round(ev["cpu gqa"] / ev["stock sdpa"], 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
