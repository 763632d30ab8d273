"""Bench: how well a finished run kept its cores busy, from Snakemake's own log.

Reads a run's log (``.snakemake/log/<time>.snakemake.log``: each job's start with its rule, its
``Finished jobid`` line), and prints the wall time from the first start to the last finish, each
rule's job seconds, and the seconds in which fewer jobs' threads ran than the machine has cores.
A grid's wall time is its work over the cores plus the time a core stands idle; the job priorities
(``sdpocl.priorities``) aim that idle time at zero
(docs/experiments/2026-12-06-row-50-drift-prompts-priorities.md). Log timestamps have one-second
resolution. The last thing printed is the report as JSON.

    python bench/core_use.py --log .snakemake/log/2026-12-06T045258.123456.snakemake.log --cores 2
    python bench/core_use.py --workdir . --cores 2      # the newest log of a working directory
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]")
_RULE = re.compile(r"^(?:local)?rule (\w+):")
_JOBID = re.compile(r"^\s+jobid: (\d+)")
_THREADS = re.compile(r"^\s+threads: (\d+)")
_FINISHED = re.compile(r"^Finished jobid: (\d+)")


def parse_log(text: str) -> list[dict]:
    """Every finished job of a Snakemake log: ``{"jobid", "rule", "threads", "start", "end"}`` (datetimes)."""
    now = rule = jobid = None
    started: dict[str, dict] = {}
    done = []
    for line in text.splitlines():
        if m := _STAMP.match(line):
            now = dt.datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif m := _RULE.match(line):
            rule, jobid = m.group(1), None
        elif (m := _JOBID.match(line)) and rule:
            jobid = m.group(1)
            started[jobid] = {"jobid": jobid, "rule": rule, "threads": 1, "start": now}
        elif (m := _THREADS.match(line)) and jobid in started:
            started[jobid]["threads"] = int(m.group(1))
        elif (m := _FINISHED.match(line)) and m.group(1) in started:
            done.append({**started.pop(m.group(1)), "end": now})
            rule = jobid = None
    return done


def core_use(jobs: list[dict], cores: int) -> dict:
    """Wall seconds, busy core-seconds, seconds with at least one idle core, job seconds per rule."""
    if not jobs:
        raise ValueError("the log has no finished job")
    t0, t1 = min(j["start"] for j in jobs), max(j["end"] for j in jobs)
    wall = int((t1 - t0).total_seconds())
    busy = [0] * wall
    per_rule: Counter[str] = Counter()
    for j in jobs:
        a, b = int((j["start"] - t0).total_seconds()), int((j["end"] - t0).total_seconds())
        per_rule[j["rule"]] += b - a
        for s in range(a, b):
            busy[s] += min(j["threads"], cores)
    return {
        "first_started": sorted(j["rule"] for j in jobs if j["start"] == t0),
        "wall_s": wall,
        "busy_core_s": sum(min(u, cores) for u in busy),
        "seconds_with_an_idle_core": sum(1 for u in busy if u < cores),
        "seconds_all_idle": sum(1 for u in busy if u == 0),
        "job_seconds": dict(per_rule.most_common()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--log", type=Path, help="a Snakemake log file")
    where.add_argument("--workdir", type=Path, help="a working directory: its newest .snakemake/log/*.log")
    ap.add_argument("--cores", type=int, required=True, help="the cores the run had")
    a = ap.parse_args()
    log = a.log or max((a.workdir / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.name)
    use = core_use(parse_log(log.read_text()), a.cores)
    print(f"{log}: wall {use['wall_s']} s, busy {use['busy_core_s']} of {use['wall_s'] * a.cores} core-seconds")
    print(f"seconds with an idle core: {use['seconds_with_an_idle_core']} (all idle: {use['seconds_all_idle']})")
    for rule, sec in use["job_seconds"].items():
        print(f"  {rule:30s} {sec:7d} job seconds")
    print(json.dumps(use, indent=1))


if __name__ == "__main__":
    main()
