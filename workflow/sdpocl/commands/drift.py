"""``sdpocl`` commands of parameter and response drift, domain distances, the drift tables: each command's arguments
and its handler, side by side."""

from __future__ import annotations

import json
from pathlib import Path

from sdpocl.commands.base import EMBEDDING, Command, arg, threads
from sdpocl.io import write_csv


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


COMMANDS: list[Command] = [
    Command(
        "compute-drift",
        "parameter drift of every checkpoint of a stage against the base",
        cmd_compute_drift,
        [
            arg("--base", required=True, help="base model directory"),
            arg("--stage", required=True, help="stage directory (model/ and checkpoints/step-N/)"),
            arg("--top-k", type=int, default=32),
            arg("--mask-frac", type=float, default=0.05),
            arg("--tol", type=float, default=1e-6),
            arg(
                "--update-rule", default="bf16", choices=["bf16", "abs", "rel"], help="when an entry counts as updated"
            ),
            arg("--out", required=True, help="CSV: mean/median/p10/p90 per checkpoint, overall and per matrix type"),
            arg("--out-matrices", required=True, help="CSV: one row per checkpoint and matrix"),
        ],
    ),
    Command(
        "response-drift",
        "response drift of every stage of one run against the base model",
        cmd_response_drift,
        [
            arg("--base", required=True, help="the base model's eval samples directory"),
            arg("--chains", nargs="+", required=True, help="the run's chains, e.g. math math/science"),
            arg("--samples", nargs="+", required=True, help="eval samples directory per chain (same order)"),
            arg("--meta", required=True, help="JSON identity of the run (run, label, method, alpha, seed)"),
            arg("--domains", nargs="+", required=True, help="the continual sequence"),
            EMBEDDING,
            arg("--n-samples", type=int, default=4, help="responses per prompt compared (sample i vs i)"),
            arg("--n-prompts", type=int, default=None, help="each benchmark's first N prompts (default: all)"),
            threads(),
            arg("--out", required=True, help="CSV, one row per (stage, benchmark, prompt)"),
        ],
    ),
    Command(
        "domain-distance",
        "MMD between every pair of prompt sets, and their t-SNE map",
        cmd_domain_distance,
        [
            arg(
                "--dataset",
                nargs="+",
                required=True,
                metavar="NAME=ROLE:PATH",
                help="a prompt set: name, role (train, in-domain, ood) and JSONL path",
            ),
            EMBEDDING,
            arg("--n-prompts", type=int, default=200),
            arg("--seed", type=int, default=0),
            arg("--bandwidth", type=float, default=None, help="RBF bandwidth (default: median heuristic)"),
            arg("--perplexity", type=float, default=30),
            threads(),
            arg("--out-mmd", required=True),
            arg("--out-tsne", required=True),
        ],
    ),
    Command(
        "aggregate-drift",
        "tidy drift tables (parameters with positions, responses)",
        cmd_aggregate_drift,
        [
            arg("--params", nargs="*", default=[], help="per-stage drift_params.csv files"),
            arg("--responses", nargs="*", default=[], help="per-run response_drift.csv files"),
            arg("--results", required=True, help="results directory (runs/<run>/<chain>/ is parsed from paths)"),
            arg("--grid", required=True, help="JSON: runs (identity per run), domains, steps, save_every"),
            arg("--out-params", required=True),
            arg("--out-responses", required=True),
        ],
    ),
]
