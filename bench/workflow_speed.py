"""Bench: how fast the workflow answers from its cache.

Prints (1) the time to regenerate every figure from the cached tables (``figures/`` deleted, then
``snakemake figures``), (2) the time of a no-op run (``snakemake`` on up-to-date results), (3) the
dry-run time and job count of the paper grid (``config/paper.yaml``) and, if that grid has fewer
than 1,000 jobs, of a larger one (the paper grid with more seeds). Targets (DESIGN.md): figures
<= 30 s, no-op <= 5 s, dry run of >= 1,000 jobs <= 3 s. Wall time and the CPU time of the
snakemake process (and its jobs) are both shown: a loaded machine inflates the first only. Each dry run
is shown beside Snakemake's floor: a one-rule workflow of as many jobs, dry-run in the same loop.

    python bench/workflow_speed.py /tmp/cache_smoke --configfile config/smoke.yaml --cores 2

RESULTS must be a finished results directory of that config (``--dry-run-only`` needs none), e.g. made with
``snakemake --profile profiles/local --configfile config/smoke.yaml --config results=/tmp/cache_smoke``.
Its figures are deleted and regenerated; nothing else in it is changed.
"""

from __future__ import annotations

import argparse
import math
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def snakemake(
    *args: str, configfile: str, results: str, cores: int
) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run snakemake from the repository root; (process, wall s, CPU s of it and its children)."""
    cmd = [SNAKEMAKE, *args, "--cores", str(cores), "--configfile", configfile, "--config", f"results={results}"]
    cpu, t = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t, children_cpu() - cpu
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc, wall, cpu


def job_counts(output: str) -> dict[str, int]:
    """Per-rule counts of the first 'Job stats' table in a snakemake log (empty: nothing to do)."""
    counts: dict[str, int] = {}
    in_table = False
    for line in output.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
        elif in_table:
            m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
            if m:
                counts[m.group(1)] = int(m.group(2))
            elif counts and not line.strip().startswith("-"):
                break
    return counts


#: the least a workflow of N jobs costs Snakemake to dry-run: one rule, no input functions, no params,
#: but the directives every sdpocl rule has (log, benchmark, a directory output, threads, resources)
FLOOR_SNAKEFILE = """
rule all:
    input: expand("out/{{i}}/x.txt", i=range({n}))
rule a:
    output: "out/{{i}}/x.txt", directory("out/{{i}}/d")
    log: "logs/{{i}}.log"
    benchmark: "bench/{{i}}.tsv"
    threads: 1
    resources: mem_mb=2000
    shell: "echo {{wildcards.i}} > {{output[0]}} 2> {{log}}"
"""


def floor_dry_run(n_jobs: int, where: Path) -> float:
    """Wall seconds of ``snakemake -n`` on FLOOR_SNAKEFILE with ``n_jobs - 1`` jobs plus ``all``: what
    Snakemake itself needs for a DAG of that size on this machine, the yardstick for the grid's dry run."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "Snakefile").write_text(FLOOR_SNAKEFILE.format(n=max(n_jobs - 1, 1)))
    t = time.perf_counter()
    proc = subprocess.run([SNAKEMAKE, "-n", "--cores", "1"], cwd=where, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"floor dry run failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def verdict(value: float, target: float) -> str:
    return f"target <= {target:g} s: {'ok' if value <= target else 'MISSED'}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="?", help="a finished results directory of --configfile (not for --dry-run-only)")
    p.add_argument("--dry-run-only", action="store_true", help="only (3): the dry runs, no results directory needed")
    p.add_argument("--configfile", default="config/smoke.yaml", help="the config RESULTS was made with")
    p.add_argument("--paper-config", default="config/paper.yaml")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="repeats of the no-op run and of each dry run (median shown)")
    p.add_argument(
        "--min-jobs", type=int, default=1000, help="grow the paper grid's seeds until a dry run has this many jobs"
    )
    a = p.parse_args()
    if not a.dry_run_only and not a.results:
        p.error("RESULTS is required unless --dry-run-only")
    results = str(Path(a.results or ".").resolve())

    def run(*args, cfg: str = a.configfile, res: str = results):
        return snakemake(*args, configfile=cfg, results=res, cores=a.cores)

    if not a.dry_run_only:
        cached_runs(a, run, results)
    dry_runs(a, run)


def cached_runs(a: argparse.Namespace, run, results: str) -> None:
    """(1) figures from cached tables and (2) a no-op run, on a finished results directory."""
    # the results must be up to date first, or the numbers below mean nothing
    proc, _, _ = run("-n")
    pending = job_counts(proc.stdout + proc.stderr)
    if pending:
        sys.exit(f"{results} is not up to date for {a.configfile}: a dry run schedules {pending}")

    # (1) figures from cached tables
    figures = Path(results) / "figures"
    shutil.rmtree(figures, ignore_errors=True)
    proc, wall, cpu = run("figures")
    jobs = job_counts(proc.stdout + proc.stderr)
    n_files = len([f for f in figures.iterdir() if f.is_file()])
    extra = sorted(r for r in jobs if r not in ("figures", "total") and not r.startswith("plot_"))
    print(
        f"figures from cached tables: {wall:.1f} s wall, {cpu:.1f} s CPU; "
        f"{sum(n for r, n in jobs.items() if r.startswith('plot_'))} plot jobs, {n_files} files"
        f"{'; OTHER JOBS RAN: ' + str(extra) if extra else ''}  [{verdict(wall, 30)}]"
    )

    # (2) no-op run on up-to-date results
    walls, cpus = [], []
    for _ in range(a.repeats):
        proc, wall, cpu = run()
        jobs = job_counts(proc.stdout + proc.stderr)
        if jobs:  # "Nothing to be done" prints no table
            sys.exit(f"the no-op run ran jobs: {jobs}")
        walls.append(wall), cpus.append(cpu)
    print(
        f"no-op run: {statistics.median(walls):.2f} s wall (min {min(walls):.2f}), "
        f"{statistics.median(cpus):.2f} s CPU, median of {a.repeats}  [{verdict(statistics.median(walls), 5)}]"
    )


def dry_runs(a: argparse.Namespace, run) -> None:
    """(3) dry run of the paper grid (and a larger one if it is under --min-jobs), each beside the floor."""
    paper = yaml.safe_load((ROOT / a.paper_config).read_text())
    with tempfile.TemporaryDirectory(prefix="sdpocl-dry-") as tmp:

        def dry(cfg_path: str, what: str) -> int:
            """Median dry run of the grid, each repeat next to one of the floor workflow of as many jobs."""
            walls, cpus, floors, total = [], [], [], 0
            for _ in range(a.repeats):
                proc, wall, cpu = run("-n", cfg=cfg_path, res=f"{tmp}/results")
                total = job_counts(proc.stdout + proc.stderr).get("total", 0)
                walls.append(wall), cpus.append(cpu)
                floors.append(floor_dry_run(total, Path(tmp) / "floor"))
            med, floor = statistics.median(walls), statistics.median(floors)
            target = verdict(med, 3) if total >= a.min_jobs else f"under {a.min_jobs} jobs"
            print(
                f"dry run, {what}: {total} jobs in {med:.2f} s wall (min {min(walls):.2f}), "
                f"{statistics.median(cpus):.2f} s CPU, median of {a.repeats}  [{target}]\n"
                f"  floor: a one-rule workflow of {total} independent jobs dry-runs in {floor:.2f} s wall "
                f"(min {min(floors):.2f}); the grid takes {med / floor:.2f}x that"
            )
            return total

        total = dry(str(ROOT / a.paper_config), f"{a.paper_config} (seeds {paper.get('seeds', [0])})")
        seeds = len(paper.get("seeds", [0]))
        while total < a.min_jobs:
            # first the paper grid with five seeds, then as many seeds as reach --min-jobs
            seeds = 5 if seeds < 5 else math.ceil(seeds * a.min_jobs / max(total, 1))
            bigger = {**paper, "seeds": list(range(seeds))}
            path = Path(tmp) / f"paper_seeds{seeds}.yaml"
            path.write_text(yaml.safe_dump(bigger, sort_keys=False))
            total = dry(str(path), f"{a.paper_config} with seeds {bigger['seeds']}")


if __name__ == "__main__":
    main()
