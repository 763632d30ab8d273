"""Bench: how an evaluation spends its samples: more prompts or more samples per prompt.

A stage is judged by its own domain's paired change (eval.csv's ``change`` / ``change_stderr``), whose
variance over prompts has two parts: how differently the stage moves each prompt (``between``: more
prompts shrink it, more samples do not) and the sampling noise of each prompt's Acc@k (``sampling``:
shrinks with both). Two measurements:

- ``--results``: the two parts of every own-domain change of a results folder, from its ``samples/``
  logs (per-sample scores of each stage's final model and of its starting model, on the same prompts),
  and the paired stderr they predict for other (prompts, samples) designs;
- ``--eval-settings``: one whole evaluation of that folder's base, wall seconds, per design, interleaved (one of
  each, repeated; the fastest repeat of each), on task files written for each design's samples into a
  temporary folder. ``generate`` prefills each distinct prompt once (sdpocl.generation.prefill), so a prompt costs
  its prefill once and each of its samples a decode: fewer samples on more prompts cost more than the
  product alone says.

    python bench/eval_design.py --results results-seeds --designs 100x8,200x4,300x3
    python bench/eval_design.py --results results-ev --designs 100x8/32,300x3/96 --eval-settings "$SETTINGS" --repeats 2
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from sdpocl.chain import stage_dir
from sdpocl.data.synthetic.common import DOMAINS
from sdpocl.io import read_jsonl


def _scores(samples_dir: Path, bench: str) -> dict[int, np.ndarray]:
    rows = read_jsonl(samples_dir / f"{bench}.jsonl")  # as aggregate.per_prompt_acc reads them
    return {r["doc_id"]: np.asarray(r["scores"], dtype=float) for r in rows if r["scores"]}


def variance_split(after: dict[int, np.ndarray], before: dict[int, np.ndarray]) -> dict:
    """The paired change of two evaluations of the same prompts (per-sample scores by doc_id) and its
    variance over prompts split into ``between`` (how differently the prompts moved) and ``sampling``
    (``var_j(a_ij - b_ij) / k``: sample j of both models is drawn from the same random numbers, which the
    within-prompt difference keeps); ``per_sample`` is ``sampling`` times k."""
    ids = sorted(set(after) & set(before))
    a, b = np.stack([after[i] for i in ids]), np.stack([before[i] for i in ids])
    (n, k), d = a.shape, a.mean(1) - b.mean(1)
    total = float(d.var(ddof=1))
    sampling = float((a - b).var(1, ddof=1).mean() / k) if k > 1 else math.nan
    return {
        "prompts": n,
        "samples": k,
        "change": float(d.mean()),
        "stderr": math.sqrt(total / n),  # aggregate.paired_change's, from the same per-prompt changes
        "between": max(total - sampling, 0.0),
        "per_sample": sampling * k,
    }


def own_domain_changes(results: Path, domains=DOMAINS) -> list[dict]:
    """:func:`variance_split` of every continual run's own-domain change per stage: its final model against
    the stage's starting model (the previous stage's, or the base's evaluation for the run's seed)."""
    out = []
    for run in sorted(p.name for p in (results / "runs").iterdir() if p.is_dir()):
        seed = run.rsplit("_s", 1)[-1]
        for k, domain in enumerate(domains):
            after = Path(stage_dir(results, run, "/".join(domains[: k + 1]))) / "eval" / "final" / "samples"
            before = (
                results / "base" / "eval" / f"seed-{seed}" / "samples"
                if k == 0
                else Path(stage_dir(results, run, "/".join(domains[:k]))) / "eval" / "final" / "samples"
            )
            if (after / f"{domain}.jsonl").exists() and (before / f"{domain}.jsonl").exists():
                split = variance_split(_scores(after, domain), _scores(before, domain))
                out.append({"run": run, "domain": domain, **split})
    return out


def predicted_stderr(row: dict, prompts: int, samples: int) -> float:
    return math.sqrt((row["between"] + row["per_sample"] / samples) / prompts)


def parse_design(text: str) -> tuple[int, int, int | None]:
    """``PxK`` or ``PxK/O``: P prompts x K samples per domain benchmark, O prompts per OOD set (default: the
    evaluation settings' own)."""
    main, _, ood = text.partition("/")
    prompts, samples = (int(x) for x in main.split("x"))
    return prompts, samples, int(ood) if ood else None


def timed_designs(results: Path, designs: list[str], repeats: int, settings: dict) -> dict[str, float]:
    """Wall seconds of one evaluation of ``results``'s base per design (the fastest of ``repeats``)."""
    from sdpocl.evaluate.run import evaluate_model
    from sdpocl.evaluate.tasks import write_task_yaml

    benchmarks = sorted(p.name for p in (results / "data").iterdir() if (p / "test.jsonl").exists())
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for samples in {parse_design(d)[1] for d in designs}:
            for b in benchmarks:
                write_task_yaml(
                    Path(tmp) / f"k{samples}" / f"{b}.yaml",
                    b,
                    results / "data" / b / "test.jsonl",
                    repeats=samples,
                    temperature=settings["temperature"],
                    top_p=settings["top_p"],
                    max_gen_toks=settings["max_gen_toks"],
                )
        first = {**settings, "samples": parse_design(designs[0])[1]}
        # untimed: lm-eval's first evaluation in a process also pays for its imports and task index
        evaluate_model(
            results / "base" / "model",
            Path(tmp) / f"k{first['samples']}",
            benchmarks[:1],
            Path(tmp) / "warm",
            settings=first,
            threads=1,
        )
        for r in range(repeats):
            for design in designs:
                prompts, samples, ood = parse_design(design)
                if ood is None:
                    ood = (
                        settings["n_prompts"]["ood"]
                        if isinstance(settings["n_prompts"], dict)
                        else settings["n_prompts"]
                    )
                s = {**settings, "samples": samples, "n_prompts": {"domains": prompts, "ood": ood}}
                t0 = time.perf_counter()
                evaluate_model(
                    results / "base" / "model",
                    Path(tmp) / f"k{samples}",
                    benchmarks,
                    Path(tmp) / f"out{r}_{design.replace('/', '_')}",
                    settings=s,
                    threads=1,
                )
                seconds = time.perf_counter() - t0
                best[design] = min(best.get(design, math.inf), seconds)
                print(f"[eval_design] repeat {r + 1}: {design} {seconds:.1f} s", flush=True)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument(
        "--designs",
        default="100x8,200x4,300x3",
        help="PxK[/O]: P prompts x K samples per domain benchmark[, O prompts per OOD set when timed]",
    )
    ap.add_argument(
        "--eval-settings",
        help="time one evaluation of the base per design: the JSON the evaluate rule passes (snakemake -n -p"
        " prints it); its samples and domain prompts are each design's, its OOD prompts too where a design names them",
    )
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    designs = a.designs.split(",")
    pk = [parse_design(d)[:2] for d in designs]
    rows = own_domain_changes(a.results)
    if not rows:
        raise SystemExit(f"no own-domain changes with samples/ logs under {a.results}")
    head = " ".join(f"{p}x{k:<3d}" for p, k in pk)
    print(f"{'run':22s} {'domain':8s} {'change':>7s} {'stderr':>7s} {'between':>8s} {'sampling':>8s} | {head}")
    for r in rows:
        preds = " ".join(f"{predicted_stderr(r, p, k):.4f} " for p, k in pk)
        print(
            f"{r['run']:22s} {r['domain']:8s} {r['change']:+.3f} {r['stderr']:7.4f} {r['between']:8.5f}"
            f" {r['per_sample'] / r['samples']:8.5f} | {preds}"
        )
    sampling = np.array([r["per_sample"] / r["samples"] for r in rows])
    total = np.array([r["between"] for r in rows]) + sampling
    share = sampling[total > 0] / total[total > 0]  # a change no prompt moved has no variance to split
    print(f"sampling's share of the variance at the folder's design: {np.nanmean(share):.2f} (mean over {len(share)})")
    for p, k in pk:
        se = [predicted_stderr(r, p, k) for r in rows]
        print(f"design {p}x{k}: predicted paired stderr mean {np.mean(se):.4f}, max {max(se):.4f}")
    report = {
        "changes": rows,
        "designs": {d: [predicted_stderr(r, p, k) for r in rows] for d, (p, k) in zip(designs, pk)},
    }
    if a.eval_settings:
        best = timed_designs(a.results, designs, a.repeats, json.loads(a.eval_settings))
        ref = best[designs[0]]
        for design, seconds in best.items():
            print(f"design {design}: {seconds:.1f} s per evaluation of the base ({seconds / ref:.2f}x {designs[0]})")
        report["wall_seconds"] = best
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
