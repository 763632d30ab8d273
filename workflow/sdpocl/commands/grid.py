"""``sdpocl`` commands of the grid as a whole: the pre-grid checks and its runs: each command's arguments and its
handler, side by side."""

from __future__ import annotations

from pathlib import Path

from sdpocl.commands.base import Command, arg


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


def cmd_show_grid(a) -> None:
    from sdpocl.chain import chain_str
    from sdpocl.config import chains_for, expand_runs, load_config

    config = load_config(a.config)
    for run in expand_runs(config):
        print(f"{run.name:28s} {run.label:14s} " + "  ".join(chain_str(c) for c in chains_for(config, run)))


COMMANDS: list[Command] = [
    Command(
        "preflight",
        "before the grid, on a GPU node: GPUs, vLLM, the base model offline, GPU memory, disk, the Slurm requests, "
        "the grid's GPU-hours",
        cmd_preflight,
        [
            arg("--config", required=True, help="config YAML, e.g. config/paper.yaml"),
            arg("--profile", help="Snakemake profile folder or its config.yaml (default: profiles/slurm)"),
            arg("--results", help="results folder (default: the config's `results`)"),
            arg(
                "--gpu-memory-gib",
                type=float,
                help="GPU memory to compare the estimate with when no GPU is visible (e.g. 80 on a login node)",
            ),
            arg(
                "--gpu-check",
                help="the GPU check's report (bench/gpu_check.py's JSON): its measured update time replaces the "
                "FLOPs estimate of the updates in the cost",
            ),
            arg("--out", help="also write the report here"),
        ],
    ),
    Command(
        "show-grid",
        "list the runs and chains a config expands to",
        cmd_show_grid,
        [
            arg("--config", required=True),
        ],
    ),
]
