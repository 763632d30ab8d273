"""What each ``sdpocl`` subcommand does: one handler per command of the table (:mod:`sdpocl.commands`),
taking the parsed arguments and calling the library. Heavy imports happen inside the handlers so that
``sdpocl --help`` stays instant. (``job-server``'s handler is the front door's, :mod:`sdpocl.cli`.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sdpocl.io import write_csv, write_json, write_jsonl


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
    from sdpocl.train.base import build_base, world

    cfg = json.loads(a.settings)
    summary = build_base(cfg["base"], cfg["data"], Path(a.out), threads=a.threads)
    if world()[0] == 0:  # under torchrun (base.sft_ranks > 1) rank 0 reports
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
    from sdpocl.evaluate.tasks import DEFAULT_TOP_K, write_task_yaml

    s = json.loads(a.settings)
    write_task_yaml(
        Path(a.out),
        a.benchmark,
        a.data,
        repeats=s["samples"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        top_k=s.get("top_k", DEFAULT_TOP_K),
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

    table = eval_table(a.scores, domains=a.domains, labels=json.loads(a.labels) if a.labels else None)
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
        n_prompts=a.n_prompts,
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
    # a run's response drift records its default label (common.smk run_meta); the grid holds the one shown
    labels = {run: ident["label"] for run, ident in grid["runs"].items()}
    responses["label"] = responses["run"].map(labels).fillna(responses["label"])
    write_csv(responses, a.out_responses)
    print(f"[aggregate-drift] {len(params)} parameter-drift rows, {len(responses)} response-drift rows")


def cmd_plot_figure(a) -> None:
    from sdpocl.plot.figures import make_figure

    for path in make_figure(a.figure, a.tables, json.loads(a.style), a.out):
        print(f"[plot-figure] {path}")


def _stage_settings_from_config(a):
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
    from sdpocl.train import curves
    from sdpocl.train.stage import train_stage

    code = _relaunch_on_gpus(a.argv)
    if code is not None:
        if code:
            raise SystemExit(code)
        return

    from sdpocl.config.stage import StageSettings

    if a.settings:
        settings = StageSettings.from_json(a.settings)
    elif a.config and a.run and a.chain:
        settings = _stage_settings_from_config(a)
    else:
        raise SystemExit("train-stage needs --settings JSON, or --config, --run and --chain")
    root = a.tensorboard if a.tensorboard is not None else os.environ.get(curves.ROOT_ENV, "")
    train_stage(
        settings,
        a.parent,
        a.data,
        a.out,
        a.state,
        threads=a.threads,
        reference=a.reference,
        replay_data=a.replay_data or [],
        curves_dir=curves.stage_curves_dir(root, settings.run["name"], list(settings.chain)) if root else None,
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
        from sdpocl.config.stage import StageSettings

        options = options_from_settings(StageSettings.from_json(a.settings))
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
    from sdpocl.preflight.report import failed, format_report, header
    from sdpocl.preflight.run import run_preflight

    config = load_config(a.config)
    results = a.results or config["results"]
    checks = run_preflight(
        config,
        a.profile,
        results=results,
        gpu_memory_gib=a.gpu_memory_gib,
        config_name=a.config,
        gpu_check=a.gpu_check,
    )
    report = format_report(checks, header(a.config, config, results))
    print(report, end="", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)
    if failed(checks):
        raise SystemExit(1)
