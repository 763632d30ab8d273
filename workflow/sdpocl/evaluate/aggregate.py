"""Tidy tables from per-checkpoint results: eval.csv (with RelPerf / gain / forgetting against the
base model, docs/paper.md "Evaluation") and teacher_stability.csv (paper Table 1)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sdpocl.chain import parent_chain
from sdpocl.data.benchmarks import benchmark
from sdpocl.io import read_jsonl
from sdpocl.plot.tables import BASE_META, EVAL_COLUMNS, TEACHER_STABILITY_COLUMNS  # noqa: F401 (BASE_META re-exported)


def identity(meta: dict, domains: list[str]) -> dict:
    """The RUN_COLUMNS of one checkpoint from its metadata (chain "" = the base model)."""
    chain = [d for d in (meta.get("chain") or "").split("/") if d]
    return {
        "run": meta["run"],
        "label": meta.get("label", meta["run"]),
        "method": meta["method"],
        "alpha": meta.get("alpha"),
        "seed": meta.get("seed"),
        "chain": "/".join(chain),
        "stage": len(chain),
        "domain": chain[-1] if chain else "base",
        "continual": bool(chain) and chain == list(domains[: len(chain)]),
        "single_domain": len(chain) == 1,
    }


def relative_performance(acc: pd.Series, base_acc: pd.Series) -> pd.Series:
    """RelPerf = 100 (Acc - Acc_base) / Acc_base; undefined (NaN) where the base scores 0."""
    base = base_acc.where(base_acc > 0)
    return 100.0 * (acc - base) / base


def per_prompt_acc(samples_dir: Path, bench: str) -> pd.Series | None:
    """Acc@k of each prompt (by lm-eval doc_id) from an evaluation's sample log, or None without one."""
    path = Path(samples_dir) / f"{bench}.jsonl"
    if not path.exists():
        return None
    # prompts without scores are left out, as summarize() leaves them out of Acc@k
    accs = {r["doc_id"]: sum(r["scores"]) / len(r["scores"]) for r in read_jsonl(path) if r["scores"]}
    return pd.Series(accs, dtype=float)


def paired_change(after: pd.Series | None, before: pd.Series | None) -> tuple[float, float, float]:
    """(before, change, stderr) over the prompts both were scored on: the change in Acc@k of one model
    against its starting model on the same prompts, with the stderr of the per-prompt changes. Paired,
    because the prompts differ far more from each other than a stage changes one of them: with the
    unpaired stderrs combined, a real gain of a few points would never clear the noise."""
    if after is None or before is None:
        return math.nan, math.nan, math.nan
    both = after.index.intersection(before.index)
    if len(both) == 0:
        return math.nan, math.nan, math.nan
    diff = after[both] - before[both]
    stderr = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan
    return float(before[both].mean()), float(diff.mean()), stderr


def _parent_changes(df: pd.DataFrame, dirs: list[Path]) -> pd.DataFrame:
    """parent_acc / change / change_stderr of every row against the stage's starting model: the
    previous stage's final checkpoint of the same run, or the base model for a first stage."""
    by_stage: dict = {}  # (run, chain) of a final checkpoint, or ("base", seed) -> its file's index
    for row in df.drop_duplicates("file_index").itertuples():
        if row.method == "base":
            by_stage[("base", row.base_seed)] = row.file_index
        elif row.checkpoint == "final":
            by_stage[(row.run, row.chain)] = row.file_index
    cache: dict = {}

    def accs(file_index: int, bench: str):
        key = (file_index, bench)
        if key not in cache:
            cache[key] = per_prompt_acc(dirs[file_index] / "samples", bench)
        return cache[key]

    out = []
    for row in df.itertuples():
        if row.method == "base":
            out.append((math.nan, math.nan, math.nan))
            continue
        start = parent_chain(tuple(row.chain.split("/")))
        parent = by_stage.get((row.run, "/".join(start)) if start else ("base", row.base_seed))
        if parent is None:
            out.append((math.nan, math.nan, math.nan))
            continue
        out.append(paired_change(accs(row.file_index, row.benchmark), accs(parent, row.benchmark)))
    return pd.DataFrame(out, columns=["parent_acc", "change", "change_stderr"], index=df.index)


_ANY_SEED = -1  # a base evaluation without a seed (made before bases were evaluated per seed) serves every seed


def _base_seeds(df: pd.DataFrame) -> pd.Series:
    """The base evaluation each row is compared with: the one drawn with the row's training seed, or
    the one base evaluation without a seed. Two base evaluations of one seed are an error."""
    base = df[df.method == "base"].drop_duplicates("file_index")
    seeds = base.seed.fillna(_ANY_SEED).astype(int)
    dup = sorted({s for s in seeds[seeds.duplicated()]})
    if dup:
        which = ", ".join("without a seed" if s == _ANY_SEED else f"seed {s}" for s in dup)
        raise ValueError(f"more than one base-model score file for the same seed among the inputs ({which})")
    if set(seeds) == {_ANY_SEED}:
        return pd.Series(_ANY_SEED, index=df.index)
    return df.seed.fillna(_ANY_SEED).astype(int)


def eval_table(
    score_files: list[str | Path], *, domains: list[str], labels: dict[str, str] | None = None
) -> pd.DataFrame:
    """One row per (checkpoint, benchmark) with Acc@k, stderr, artifacts, RelPerf, gain, forgetting,
    and the change against the stage's starting model with its paired stderr (from the ``samples/``
    logs beside the score files; NaN where they are missing). ``labels`` (run name -> label) names
    the runs it holds; the others keep the label of their score files' metadata."""
    rows = []
    dirs = []
    for path in score_files:
        doc = json.loads(Path(path).read_text())
        meta = doc["meta"]
        ident = identity(meta, domains)
        dirs.append(Path(path).parent)
        for name, s in doc["benchmarks"].items():
            b = benchmark(name)
            rows.append(
                {
                    **ident,
                    "checkpoint": meta.get("checkpoint", "final"),
                    "benchmark": name,
                    "kind": b.kind,
                    "bench_domain": b.bench_domain,
                    **s,
                    "file_index": len(dirs) - 1,
                }
            )
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=EVAL_COLUMNS)
    if labels:
        df["label"] = df["run"].map(labels).fillna(df["label"])
    df["base_seed"] = _base_seeds(df)
    base = df[df.method == "base"].set_index(["base_seed", "benchmark"])["acc"]
    keys = pd.MultiIndex.from_arrays([df.base_seed, df.benchmark])
    missing = sorted({f"{b} (seed {s})" if s != _ANY_SEED else b for s, b in keys.difference(base.index)})
    if missing:
        raise ValueError(f"no base-model score for benchmark(s) {', '.join(missing)}: RelPerf needs them")
    df["base_acc"] = base.reindex(keys).to_numpy()
    df["relperf"] = relative_performance(df.acc, df.base_acc)
    df["gain"] = df.relperf.clip(lower=0)
    df["forgetting"] = (-df.relperf).clip(lower=0)
    df = df.join(_parent_changes(df, dirs))
    df = df.sort_values(["method", "run", "stage", "chain", "kind", "benchmark"], kind="stable")
    return df[EVAL_COLUMNS].reset_index(drop=True)


def teacher_label(method: str, alpha) -> str | None:
    if method == "base":
        return "Base"
    if method == "stable_sdpo":
        return "StableSDPO"
    if method == "sdpo":
        return "Frozen" if not alpha else f"EMA {alpha * 100:g}%"
    return None


def teacher_stability(table: pd.DataFrame, *, first_domain: str, variant_runs: set[str] = frozenset()) -> pd.DataFrame:
    """Table 1: in-domain Acc@k on the first domain after the first stage, per teacher kind.

    Plain SDPO / StableSDPO runs only: ``variant_runs`` (CoT, token masking, ...) are left out.
    """
    sel = table[
        (table.benchmark == first_domain)
        & ((table.method == "base") | (table.chain == first_domain))
        & ~table.run.isin(variant_runs)
    ].copy()
    sel["teacher"] = [teacher_label(m, a) for m, a in zip(sel.method, sel.alpha)]
    sel = sel[sel.teacher.notna()]
    order = {"Base": 0, "Frozen": 1, "StableSDPO": 3}
    sel["_o"] = [order.get(t, 2) for t in sel.teacher]
    sel = sel.sort_values(["_o", "alpha", "seed"], na_position="first")
    return sel[TEACHER_STABILITY_COLUMNS].reset_index(drop=True)
