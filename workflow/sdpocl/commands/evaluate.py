"""``sdpocl`` commands of evaluation through lm-eval, its tasks, its table and the goals report: each command's
arguments and its handler, side by side."""

from __future__ import annotations

import json
from pathlib import Path

from sdpocl.commands.base import SETTINGS_EVAL, Command, arg, threads
from sdpocl.io import write_csv


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


def cmd_goals(a) -> None:
    from sdpocl.evaluate.goals import goal_report

    report = goal_report(a.results)
    print(report, end="")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(report)


COMMANDS: list[Command] = [
    Command(
        "write-eval-task",
        "write the lm-eval task YAML of one benchmark",
        cmd_write_eval_task,
        [
            arg("--benchmark", required=True),
            arg("--data", required=True, help="benchmark JSONL (common schema)"),
            SETTINGS_EVAL,
            arg("--out", required=True, help="task YAML"),
        ],
    ),
    Command(
        "evaluate",
        "Acc@k of one checkpoint on every benchmark (lm-eval-harness)",
        cmd_evaluate,
        [
            arg("--model", required=True, help="checkpoint directory (or hub id with --hub-model)"),
            arg("--hub-model", action="store_true", help="--model is a hub id, not a local directory"),
            arg("--tasks", required=True, help="directory of lm-eval task YAMLs"),
            arg("--benchmarks", nargs="+", required=True),
            SETTINGS_EVAL,
            arg("--meta", help="JSON identifying the checkpoint (run, method, alpha, seed, chain)"),
            arg("--out", required=True, help="output directory (scores.json, samples/)"),
            arg(
                "--state",
                help="resume directory: finished benchmarks kept there (outside --out, which Snakemake "
                "deletes before a retry) are skipped by a rerun; removed when done",
            ),
            threads(),
        ],
    ),
    Command(
        "aggregate-eval",
        "tidy eval table (RelPerf, gain, forgetting) + teacher stability",
        cmd_aggregate_eval,
        [
            arg("--scores", nargs="+", required=True, help="scores.json files (the base model's included)"),
            arg("--domains", nargs="+", required=True, help="the continual sequence"),
            arg("--out", required=True, help="eval.csv"),
            arg("--out-teacher", required=True, help="teacher_stability.csv"),
            arg("--variant-runs", nargs="*", default=[], help="runs left out of Table 1 (CoT, masking)"),
            arg(
                "--labels",
                default=None,
                help="JSON: run name -> the label its rows show (default: the label in each score file's metadata)",
            ),
        ],
    ),
    Command(
        "goals",
        "print the study's headline checks (the goal tables of docs/experiments/) from a results folder's tables",
        cmd_goals,
        [
            arg("results", help="the results folder (its tables/ and runs/)"),
            arg("--out", help="also write the table here (markdown)"),
        ],
    ),
]
