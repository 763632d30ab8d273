"""Bench: ``generate`` with each distinct prompt prefilled once (sdpocl.generation.prefill) against the plain prefill.

Two measurements, each interleaved (plain, then shared, repeated) so that machine noise hits both alike,
the fastest repeat of each:
- generation: a rollout batch (``prompts_per_step`` training prompts x ``num_generations``) of each domain,
  sampled from one seed as a rollout step samples, CPU seconds of this process; the two must sample the
  same tokens;
- with ``--eval-settings`` (the JSON the evaluate rule passes; ``snakemake -n -p`` prints it): one whole
  evaluation of the base on every benchmark (``evaluate_model``, lm-eval), wall seconds, three ways:
  neither change, lm-eval's environment report once per evaluation (``env_info_once``), and that with
  the shared prefill (today's evaluation). The scores must agree.

    python bench/prefill_speed.py --results results --domains math,tooluse --repeats 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from unittest import mock

import torch
from base_evaluation import timed_base_evaluation
from transformers import AutoModelForCausalLM, AutoTokenizer

from sdpocl.config import load_config
from sdpocl.generation import model_kwargs
from sdpocl.generation.prefill import share_generation_prefill
from sdpocl.io import read_jsonl
from sdpocl.prompts import plain_text


def generation_cpu_s(
    model_dir: Path, prompts: list[str], samples: int, new_tokens: int, repeats: int, models: dict | None = None
) -> dict:
    """CPU seconds of one rollout batch's ``generate``, the fastest repeat, per way of generating: ``models``
    maps a name to what is done to a freshly loaded model (default: nothing, and the shared prefill)."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    setups = models or {"plain": lambda model: None, "shared": share_generation_prefill}
    models = {}
    for name, setup in setups.items():
        models[name] = AutoModelForCausalLM.from_pretrained(model_dir, **model_kwargs(on_cpu=True)).eval()
        setup(models[name])
    batch = tok(
        [p for p in prompts for _ in range(samples)], return_tensors="pt", padding=True, add_special_tokens=False
    )
    best: dict[str, float] = {}
    tokens = set()
    for _ in range(repeats):
        for name, model in models.items():
            torch.manual_seed(0)
            t0 = time.process_time()
            out = model.generate(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                do_sample=True,
                top_k=0,
                max_new_tokens=new_tokens,
                pad_token_id=tok.pad_token_id,
            )
            best[name] = min(best.get(name, float("inf")), time.process_time() - t0)
            tokens.add(hash(out.numpy().tobytes()))
    if len(tokens) != 1:
        raise SystemExit(f"{' and '.join(models)} sampled different tokens from the same seed")
    return best


def generation_by_domain(
    results: Path, train: dict, domains: list[str], repeats: int, models: dict | None = None
) -> dict:
    """:func:`generation_cpu_s` on each domain's first rollout batch (``prompts_per_step`` training prompts x
    ``num_generations``, to the domain's completion limit), printed as it goes: per domain the CPU seconds of
    each way and ``ratio_<second>_over_<first>``."""
    report = {}
    for domain in domains:
        rows = read_jsonl(results / "data" / domain / "train.jsonl")[: train["prompts_per_step"]]
        new_tokens = train["max_completion_length"][domain]
        gen = generation_cpu_s(
            results / "base" / "model",
            [plain_text(r) for r in rows],
            train["num_generations"],
            new_tokens,
            repeats,
            models=models,
        )
        (first, a), (second, b) = list(gen.items())[:2]
        report[domain] = {
            "rows": len(rows) * train["num_generations"],
            "max_new_tokens": new_tokens,
            "cpu_seconds": {k: round(v, 3) for k, v in gen.items()},
            f"ratio_{second}_over_{first}": round(b / a, 3),
        }
        print(f"[bench] {domain}: {report[domain]}", flush=True)
    return report


def evaluation_seconds(results: Path, settings: str, repeats: int) -> dict:
    from lm_eval import evaluator

    import sdpocl.evaluate.run as run
    import sdpocl.generation.prefill as prefill

    original, share = evaluator.add_env_info, prefill.share_generation_prefill
    off = lambda model: False  # noqa: E731  (sdpocl.generation.speed_up imports it when it runs)
    modes = {
        "neither": {"env_info_once": lambda: None, "off": off},
        "env report once": {"off": off},
        "env report once, shared prefill": {},
    }
    best: dict[str, float] = {}
    accs: dict[str, dict] = {}
    for _ in range(repeats):
        for name, patches in modes.items():
            with (
                mock.patch.object(evaluator, "add_env_info", original),  # each mode starts from lm-eval's own
                mock.patch.object(run, "env_info_once", patches.get("env_info_once", run.env_info_once)),
                mock.patch.object(prefill, "share_generation_prefill", patches.get("off", share)),
            ):
                seconds, doc = timed_base_evaluation(results, settings)
            best[name] = min(best.get(name, float("inf")), seconds)
            accs[name] = {b: s["acc"] for b, s in doc["benchmarks"].items()}
            print(f"[bench] {name}: evaluation of the base in {seconds:.1f} s", flush=True)
    if len({json.dumps(a, sort_keys=True) for a in accs.values()}) != 1:
        raise SystemExit(f"the evaluations scored differently: {accs}")
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--domains", default="math,tooluse")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--eval-settings", help="the evaluate rule's --settings JSON: also time one whole evaluation")
    a = p.parse_args()

    torch.set_num_threads(1)
    config = load_config(a.config)
    results = Path(a.results or config["results"])
    train = config["train"]
    report: dict = {"generation": generation_by_domain(results, train, a.domains.split(","), a.repeats)}
    if a.eval_settings:
        ev = evaluation_seconds(results, a.eval_settings, a.repeats)
        report["evaluation"] = {
            "wall_seconds": {k: round(v, 1) for k, v in ev.items()},
            "ratio_today_over_neither": round(ev["env report once, shared prefill"] / ev["neither"], 3),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
