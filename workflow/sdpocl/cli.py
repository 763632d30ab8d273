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


def cmd_prepare_data(a) -> None:
    from .domains import generate

    if a.preset != "tiny":
        raise ValueError(f"prepare-data for the {a.preset!r} preset (hub datasets) is not implemented yet; "
                         "only the offline 'tiny' preset can be prepared")
    records = generate(a.domain, a.split, a.n, a.seed)
    _write_jsonl(Path(a.out), records)
    print(f"[prepare-data] {len(records)} {a.domain}/{a.split} records -> {a.out}")


def cmd_build_base(a) -> None:
    from .base import build_base

    cfg = json.loads(a.settings)
    summary = build_base(cfg["base"], cfg["data"], Path(a.out), threads=a.threads)
    Path(a.report).write_text(json.dumps(summary, indent=2))


def cmd_prepare_benchmark(a) -> None:
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def _stage_settings_from_config(a) -> dict:
    from .chain import parse_chain
    from .config import load_config, run_by_name, stage_settings

    config = load_config(a.config)
    return stage_settings(config, run_by_name(config, a.run), parse_chain(a.chain))


def cmd_train_stage(a) -> None:
    from .train import train_stage

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

    s = sub.add_parser("prepare-data", help="write one domain split of the tiny preset as JSONL")
    s.add_argument("--preset", default="tiny", choices=["tiny", "paper"])
    s.add_argument("--domain", required=True)
    s.add_argument("--split", required=True, choices=["train", "test"])
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_prepare_data)

    s = sub.add_parser("build-base", help="train the tokenizer and SFT-warm the tiny base model")
    s.add_argument("--settings", required=True, help="JSON with base and data settings")
    s.add_argument("--out", required=True, help="model directory")
    s.add_argument("--report", required=True, help="JSON report (sizes, SFT loss)")
    s.add_argument("--threads", type=int, default=2)
    s.set_defaults(func=cmd_build_base)

    s = sub.add_parser("prepare-benchmark", help="write one OOD benchmark of the tiny preset as JSONL")
    s.add_argument("--name", required=True)
    s.add_argument("--n", type=int, required=True)
    s.add_argument("--seed", type=int, required=True)
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

    s = sub.add_parser("show-grid", help="list the runs and chains a config expands to")
    s.add_argument("--config", required=True)
    s.set_defaults(func=cmd_show_grid)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"sdpocl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
