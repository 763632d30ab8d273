"""Helpers for tests that drive Snakemake as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: The tests run Snakemake concurrently in this one checkout (pytest-xdist workers), each on its own
#: results. Snakemake 9.27's unlock removes the whole `.snakemake/locks/` directory at the end of a
#: run, so another run writing its lock at that moment fails (FileNotFoundError; seen in CI), and
#: its locks are deleted anyway. The tests' outputs never overlap, so they run without the lock.
NOLOCK = ("--nolock",)


def snakemake(
    *args: str,
    results: Path | str | None = None,
    configfile: str = "config/smoke.yaml",
    cores: int = 2,
    check: bool = True,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "snakemake"), *args, *NOLOCK, "--cores", str(cores), "--configfile", configfile]
    if results is not None:
        cmd += ["--config", f"results={results}"]
    full_env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", **(env or {})}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def scheduled_jobs(dry_run_output: str) -> dict[str, int]:
    """Job counts per rule from a dry run's 'Job stats' table."""
    counts: dict[str, int] = {}
    in_table = False
    for line in dry_run_output.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
            continue
        if in_table:
            m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
            if m and m.group(1) != "total":
                counts[m.group(1)] = int(m.group(2))
            elif (line.strip().startswith("total") or not line.strip()) and counts:
                break
    return counts


def stage_wildcards(dry_run_output: str, rule: str = "train_stage") -> list[tuple[str, str]]:
    """(run, chain) of every job of ``rule`` listed in a dry run."""
    out = []
    blocks = re.split(r"\n(?=rule |localrule )", dry_run_output)
    for block in blocks:
        if block.startswith((f"rule {rule}:", f"localrule {rule}:")):
            m = re.search(r"wildcards: run=([^,\n]+), chain=([^\n]+)", block)
            if m:
                out.append((m.group(1).strip(), m.group(2).strip()))
    return out


def dry_run_jobs(dry_run_output: str) -> list[dict]:
    """Every job block of a dry run (``snakemake -n``) as ``{"rule", "wildcards", "reason", "priority"}``:
    ``wildcards`` is a dict (empty for rules without wildcards), ``reason`` the job's reason line,
    ``priority`` the job's Snakemake priority (0 where the block names none)."""
    jobs = []
    for block in re.split(r"\n(?=rule |localrule )", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if not m:
            continue
        wildcards: dict[str, str] = {}
        wc = re.search(r"^\s+wildcards: (.+)$", block, re.M)
        if wc:
            for item in wc.group(1).split(", "):
                key, _, value = item.partition("=")
                wildcards[key.strip()] = value.strip()
        reason = re.search(r"^\s+reason: (.+)$", block, re.M)
        priority = re.search(r"^\s+priority: (\S+)$", block, re.M)
        jobs.append(
            {
                "rule": m.group(1),
                "wildcards": wildcards,
                "reason": reason.group(1) if reason else "",
                "priority": float(priority.group(1)) if priority else 0,
            }
        )
    return jobs


def job_wildcards(dry_run_output: str, rule: str) -> list[dict[str, str]]:
    """The wildcards of every job of ``rule`` listed in a dry run (e.g. ``{"run": ..., "chain": ...,
    "ckpt": ...}`` for evaluate_checkpoint, ``{"run": ...}`` for response_drift)."""
    return [job["wildcards"] for job in dry_run_jobs(dry_run_output) if job["rule"] == rule]


def describe_jobs(dry_run_output: str, limit: int = 40) -> str:
    """One line per scheduled job (rule, wildcards, reason) for assertion messages."""
    lines = []
    for job in dry_run_jobs(dry_run_output)[:limit]:
        wc = ", ".join(f"{k}={v}" for k, v in job["wildcards"].items())
        lines.append(f"{job['rule']}({wc}): {job['reason'][:300]}")
    return "\n".join(lines)
