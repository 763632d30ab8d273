"""Bench: a whole grid from scratch with and without the job server (sdpocl.jobserver).

Runs ``snakemake --profile profiles/local`` on CONFIG into fresh results directories, once with
``job_server=true`` and once with ``job_server=false``, alternating for --repeats rounds, and
prints each run's wall time, the per-rule wall time summed from ``results/benchmarks/`` and the
ratio. One run's alternation keeps the comparison fair on a shared machine (compare ratios).

    python bench/job_server.py --configfile config/smoke.yaml --repeats 1
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def run_grid(configfile: str, results: Path, server: bool) -> float:
    cmd = [SNAKEMAKE, "--profile", "profiles/local", "--configfile", configfile, "--config"]
    cmd += [f"results={results}", f"job_server={str(server).lower()}"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t


def job_walls(results: Path) -> dict[str, float]:
    """Summed wall seconds of the benchmarked jobs, by benchmark folder (rule family)."""
    out: dict[str, float] = defaultdict(float)
    for tsv in (results / "benchmarks").rglob("*.tsv"):
        rows = list(csv.DictReader(tsv.open(), delimiter="\t"))
        family = tsv.relative_to(results / "benchmarks").parts[0].removesuffix(".tsv")
        out[family] += float(rows[-1]["s"])
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configfile", default="config/smoke.yaml")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-jobserver-") as tmp:
        for r in range(args.repeats):
            for server in (True, False) if r % 2 == 0 else (False, True):
                results = Path(tmp) / f"r{r}_{'on' if server else 'off'}"
                wall = run_grid(args.configfile, results, server)
                walls[server].append(wall)
                jobs = ", ".join(f"{k} {v:.0f}s" for k, v in sorted(job_walls(results).items()))
                print(f"round {r} job server {'on ' if server else 'off'}: {wall:6.1f} s wall  (jobs: {jobs})")
    on, off = statistics.median(walls[True]), statistics.median(walls[False])
    print(f"median wall: with server {on:.1f} s, without {off:.1f} s, ratio {off / on:.2f}x")


if __name__ == "__main__":
    main()
