"""Run every check in order: ``sdpocl preflight`` (:mod:`sdpocl.commands.grid`) and the rule ``preflight``
(workflow/rules/preflight.smk)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sdpocl.preflight.checks import (
    check_base,
    check_cost,
    check_disk,
    check_gpus,
    check_memory,
    check_slurm,
    check_vllm,
)
from sdpocl.preflight.probes import visible_gpus
from sdpocl.preflight.report import Check, failed, format_report, header
from sdpocl.preflight.slurm import DEFAULT_PROFILE, read_profile


def run_preflight(
    config: dict,
    profile_path: str | Path | None = None,
    *,
    results: str | Path | None = None,
    gpu_memory_gib: float | None = None,
    config_name: str | None = None,
    gpu_check: str | Path | None = None,
) -> list[Check]:
    """Every check, in order; ``config`` is a validated config (sdpocl.config.load_config), ``config_name``
    its file (named in the fixes instead of ``<config>``)."""
    results = Path(results if results is not None else config.get("results", "results"))
    gpus = visible_gpus()
    checks = [check_gpus(config, gpus), check_vllm(config, gpus)]
    base, info = check_base(config, results)
    checks.append(base)
    memory, need = check_memory(config, info, gpus, gpu_memory_gib)
    checks.append(memory)
    profile = None
    path = Path(profile_path) if profile_path is not None else DEFAULT_PROFILE
    try:
        profile = read_profile(path)
    except Exception:  # noqa: BLE001 - reported by check_slurm
        profile = None
    jobs = (profile or {}).get("jobs")
    checks.append(check_disk(config, results, info, jobs=int(jobs) if isinstance(jobs, int) else None))
    checks.append(check_slurm(config, path, need))
    checks.append(check_cost(config, results, info, gpu_check))
    if config_name:
        checks = [replace(c, fix=c.fix.replace("<config>", config_name)) for c in checks]
    return checks


def preflight_rule(config: dict, profile: str | Path, results: str, configfiles: list, out: str, log: str) -> None:
    """The rule ``preflight`` (workflow/rules/preflight.smk): the report printed and written to ``log``, and to
    ``out`` only when no check fails; a failed check raises (the job fails, ``out`` is not made)."""
    name = " ".join(str(f) for f in configfiles) or "<config>"
    checks = run_preflight(config, profile, results=results, config_name=name)
    report = format_report(checks, header(name, config, results))
    print(report, end="", flush=True)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(report)
    if failed(checks):
        raise RuntimeError(f"preflight: a check failed (the [FAIL] lines above; the report: {log})")
    Path(out).write_text(report)
