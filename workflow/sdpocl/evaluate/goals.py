"""The study's headline checks from a results folder (the goal tables of docs/experiments/), so the
numbers in a report come from one command over the workflow's own tables, not from hand arithmetic.

Reads ``tables/eval.csv``, ``tables/teacher_stability.csv``, ``tables/drift_params.csv``,
``tables/drift_responses.csv`` (each optional), every stage's ``summary.json`` and the first stages'
``resolved_config.json`` (optimizer steps per rollout step, for drift at equal updates). Each check is
given per seed, then as the seed mean with its 95% t-interval (the docs' goal tables use it; the
figures draw a percentile bootstrap, ``plot.style.ci95``, which is narrower at three seeds); with one
seed the interval is empty and a stage's paired z (change / paired stderr, ``eval.csv``) is the only
error bar. The pooled z is the seed mean over the stderr its seeds' paired stderrs give
(``sqrt(sum se^2) / n``): the evaluation's sampling error alone, where the t-interval also holds the
training's seed-to-seed spread. The paper's comparisons (forgetting and drift against GRPO, Table 1
against the EMA teacher) are differences taken seed by seed, so what the seeds share cancels.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from sdpocl.chain import stage_dir
from sdpocl.plot.style import _finals, acc_name  # _finals: the figures' choice of rows (each stage's final checkpoint)

#: OOD base Acc@k range in which RelPerf can move both ways (issue 12, goal 3)
OOD_RANGE = (0.15, 0.7)


def t_interval(values: Iterable[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval); the half-width is NaN below two values."""
    v = pd.Series([float(x) for x in values], dtype=float).dropna()
    if v.empty:
        return math.nan, math.nan
    if len(v) < 2:
        return float(v.mean()), math.nan
    from scipy import stats

    if stats.sem(v) == 0:  # identical values: scipy's interval is NaN at zero scale
        return float(v.mean()), 0.0
    lo, hi = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    return float(v.mean()), float(hi - lo) / 2


def pooled_z(changes: Iterable[float], stderrs: Iterable[float]) -> float:
    """Mean of independent changes over the stderr of that mean, ``sqrt(sum se_i^2) / n``."""
    c, se = pd.Series(list(changes), dtype=float), pd.Series(list(stderrs), dtype=float)
    keep = c.notna() & se.notna()
    if not keep.any() or (se[keep] <= 0).all():
        return math.nan
    return float(c[keep].mean() / (math.sqrt((se[keep] ** 2).sum()) / keep.sum()))


def reward_rise(summary_path: Path) -> tuple[float, float]:
    """Training reward in the first and the last fifth of a stage's rollout steps, as the stage's own
    ``summary.json`` reports it (``sdpocl.train.steplog.summarize``)."""
    if not Path(summary_path).exists():
        return math.nan, math.nan
    summary = json.loads(Path(summary_path).read_text())
    return summary.get("reward_first_fifth", math.nan), summary.get("reward_last_fifth", math.nan)


def stage_learning(ev: pd.DataFrame, results: Path) -> pd.DataFrame:
    """One row per continual stage and in-domain benchmark of the stage's domain: the change against
    the stage's starting model with its paired z, and the training reward's rise over the stage."""
    rows = _finals(ev)
    rows = rows[
        (rows.method != "base") & rows.continual & (rows.kind == "in-domain") & (rows.bench_domain == rows.domain)
    ].copy()
    rows["z"] = rows.change / rows.change_stderr.where(rows.change_stderr > 0)
    rewards = {
        (run, chain): reward_rise(Path(stage_dir(results, run, chain)) / "summary.json")
        for run, chain in rows[["run", "chain"]].drop_duplicates().itertuples(index=False)
    }
    rows["reward_first"] = [rewards[(r, c)][0] for r, c in zip(rows.run, rows.chain)]
    rows["reward_last"] = [rewards[(r, c)][1] for r, c in zip(rows.run, rows.chain)]
    cols = ["label", "run", "seed", "stage", "domain", "benchmark", "parent_acc", "acc", "change", "change_stderr"]
    return rows[[*cols, "z", "reward_first", "reward_last"]].sort_values(["label", "seed", "stage", "benchmark"])


def forgetting(ev: pd.DataFrame) -> pd.DataFrame:
    """Per continual run: for each domain trained before the last stage, its in-domain Acc@k right
    after its own stage minus after the last stage (positive = forgotten), and their mean."""
    rows = _finals(ev)
    rows = rows[(rows.method != "base") & rows.continual & (rows.kind == "in-domain")]
    out = []
    for (label, run, seed), g in rows.groupby(["label", "run", "seed"], dropna=False):
        last = g.stage.max()
        per = {}
        for domain, d in g[g.stage < last].groupby("domain"):
            own = d[d.bench_domain == domain]
            stage = own.stage.max()
            after_own = own[own.stage == stage].acc.mean()
            after_last = g[(g.stage == last) & (g.bench_domain == domain)].acc.mean()
            per[domain] = after_own - after_last
        if per:
            out.append({"label": label, "run": run, "seed": seed, **per, "mean": sum(per.values()) / len(per)})
    return pd.DataFrame(out)


def ood_after_chain(ev: pd.DataFrame) -> pd.DataFrame:
    """Per continual run, seed and OOD benchmark: Acc@k after the chain's last stage minus its base's
    (``change``; ``base_acc``, which ``aggregate_eval`` matched to the run's seed). Goal 2's "SDPO forgets more
    than GRPO, the intermediate-distance sets most" is read here, per set, where in-domain forgetting cannot
    show how far from the trained domains it reaches."""
    if "base_acc" not in ev:
        return pd.DataFrame()
    rows = _finals(ev)
    runs = rows[(rows.kind == "ood") & (rows.method != "base") & rows.continual]
    last = runs[runs.stage == runs.groupby("run").stage.transform("max")]
    out = last.groupby(["label", "run", "seed", "benchmark"], as_index=False)[["acc", "base_acc"]].mean()
    return out.assign(change=out.acc - out.base_acc).dropna(subset=["change"])


#: eval.csv's artifact columns the report reads (sdpocl.evaluate.artifacts), as fractions per response
ARTIFACTS = ("truncation_rate", "ngram_repeat", "boxed_per_response")


def stage_artifacts(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per continual stage and seed: the collapse symptoms (goal 2) of the stage's final model on
    its own domain, the mean over that domain's in-domain benchmarks, with the base's on the same ones."""
    if not set(ARTIFACTS) <= set(ev.columns):
        return pd.DataFrame()
    rows = _finals(ev)
    own = rows[(rows.kind == "in-domain") & (rows.bench_domain == rows.domain)]
    own = own[(own.method != "base") & own.continual]
    base = rows[(rows.method == "base") & (rows.kind == "in-domain")]
    base = base.groupby("bench_domain")[list(ARTIFACTS)].mean().add_prefix("base_")
    per = own.groupby(["label", "run", "seed", "stage", "domain"], as_index=False)[list(ARTIFACTS)].mean()
    return per.join(base, on="domain").sort_values(["label", "seed", "stage"])


def drift_after_chain(params: pd.DataFrame | None, responses: pd.DataFrame | None) -> pd.DataFrame:
    """Per continual run: NSS and PM update of the chain's last checkpoint (all matrices), and the mean
    response similarity to the base after the first and after the last stage."""
    out: dict = {}
    if params is not None and not params.empty:
        p = params[(params.matrix_type.astype(str) == "all") & params.continual & params.point_index.notna()]
        for (label, run, seed), g in p.groupby(["label", "run", "seed"], dropna=False):
            last = g.loc[g.point_index.idxmax()]
            out[run] = {
                "label": label,
                "run": run,
                "seed": seed,
                "nss": last.nss_mean,
                "pm_update": last.pm_update_mean,
            }
    if responses is not None and not responses.empty:
        r = responses[responses.continual & (responses.stage >= 1)]
        for (label, run, seed), g in r.groupby(["label", "run", "seed"], dropna=False):
            row = out.setdefault(run, {"label": label, "run": run, "seed": seed})
            by_stage = g.groupby("stage").similarity.mean()
            row["similarity_first"], row["similarity_last"] = by_stage.iloc[0], by_stage.iloc[-1]
    return pd.DataFrame(list(out.values()))


def optimizer_steps_per_rollout(results: Path, run: str, chain: str) -> int:
    """Optimizer steps a stage took per rollout step, from its ``resolved_config.json`` (GRPO
    ``train.grpo_minibatches``, SDPO 1: ``sdpocl.train.plan``)."""
    path = Path(stage_dir(results, run, chain)) / "resolved_config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the drift table names a stage the results folder lacks")
    return int(json.loads(path.read_text())["stage_settings"]["optimizer_steps_per_rollout"])


def first_stage_drift_at_equal_updates(params: pd.DataFrame | None, results: Path) -> pd.DataFrame:
    """Per continual run: NSS and PM update of its first stage's checkpoint at the largest optimizer
    step that every run's first stage saved. Checkpoints are taken at equal *rollout* steps, where GRPO
    has taken ``grpo_minibatches`` optimizer steps to SDPO's one, so the drift after the chain compares
    unequal numbers of updates; the paper's "SDPO drifts further in parameters" is a claim per update."""
    cols = ["label", "run", "seed", "optimizer_step", "nss", "pm_update"]
    if params is None or params.empty:
        return pd.DataFrame(columns=cols)
    p = params[(params.matrix_type.astype(str) == "all") & params.continual & (params.stage == 1)].copy()
    if p.empty:
        return pd.DataFrame(columns=cols)
    per_rollout = {
        (run, chain): optimizer_steps_per_rollout(results, run, chain)
        for run, chain in p[["run", "chain"]].drop_duplicates().itertuples(index=False)
    }
    p["optimizer_step"] = [c * per_rollout[(r, ch)] for r, ch, c in zip(p.run, p.chain, p.checkpoint.astype(int))]
    shared = set.intersection(*(set(g.optimizer_step) for _, g in p.groupby("run")))
    if not shared:
        return pd.DataFrame(columns=cols)
    at = p[p.optimizer_step == max(shared)]
    return at.rename(columns={"nss_mean": "nss", "pm_update_mean": "pm_update"})[cols].reset_index(drop=True)


def _read(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.exists() else None


def _ci(values, fmt: str = "{:+.3f}") -> str:
    """``mean ± half-width`` of the seed values' 95% t-interval (the mean alone below two seeds)."""
    mean, half = t_interval(values)
    return fmt.format(mean) if math.isnan(half) else f"{fmt.format(mean)} ± {fmt.replace('+', '').format(half)}"


def _seeds(g: pd.DataFrame, col: str, fmt: str = "{:+.3f}") -> str:
    return " / ".join(fmt.format(x) for x in g.sort_values("seed")[col])


def _minus(g: pd.DataFrame, ref: pd.DataFrame | None, col: str, fmt: str = "{:+.3f}") -> str:
    """``g`` minus ``ref`` seed by seed (the seeds both have): seed mean ± 95% CI; empty without ``ref``."""
    if ref is None or col not in ref:
        return ""
    both = g.set_index("seed")[col].sub(ref.set_index("seed")[col]).dropna()
    return _ci(both, fmt) if len(both) else ""


def _grpo(frame: pd.DataFrame) -> pd.DataFrame | None:
    """The GRPO rows of ``frame``, the reference of the "minus GRPO" columns; None without a GRPO run."""
    return frame[frame.label == "GRPO"] if (frame.label == "GRPO").any() else None


def _section(title: str, columns: list[str]) -> list[str]:
    """A markdown section: a blank line, the heading and the table's header."""
    return ["", f"## {title}", "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def _drift_section(title: str, drift: pd.DataFrame, metrics: tuple[str, ...]) -> list[str]:
    """A drift table: per method and metric (those with a value) the seeds, their mean ± CI and minus GRPO."""
    lines = _section(title, ["method", "metric", "per seed", "seed mean ± 95% CI", "minus GRPO, seed by seed"])
    grpo = _grpo(drift)
    for label, g in drift.groupby("label"):
        for col in metrics:
            if col in g and g[col].notna().any():
                minus = "" if label == "GRPO" else _minus(g, grpo, col, "{:+.4g}")
                lines.append(f"| {label} | {col} | {_seeds(g, col, '{:.4g}')} | {_ci(g[col], '{:.4g}')} | {minus} |")
    return lines


def goal_report(results: str | Path) -> str:
    """The goal table of ``results`` as markdown (per seed ``a / b / c``, then the seed mean ± 95% CI)."""
    results = Path(results)
    tables = results / "tables"
    ev = _read(tables / "eval.csv")
    if ev is None or ev.empty:
        raise FileNotFoundError(f"{tables / 'eval.csv'} is missing or empty: run the workflow (aggregate_eval) first")
    metric = acc_name(ev)  # Acc@8 in the paper; the tiny preset's samples per prompt
    lines = [f"# Goals: {results}"]
    learn = stage_learning(ev, results)
    lines += _section(
        "Learning: each stage's own domain against the stage's start (paired z; reward first -> last fifth)",
        ["method", "stage", "change per seed (z)", "seed mean ± 95% CI", "pooled z", "reward rise", "z >= 2"],
    )
    for (label, stage, domain), g in learn.groupby(["label", "stage", "domain"], sort=True):
        # a domain with several benchmarks: their mean change, its stderr from theirs (NaN if one lacks it)
        aggs = {c: (c, "mean") for c in ("change", "z", "reward_first", "reward_last")}
        aggs |= {"var": ("var", lambda v: v.sum(min_count=len(v))), "k": ("var", "size")}
        g = g.assign(var=g.change_stderr**2).groupby("seed", as_index=False).agg(**aggs)
        se = g["var"] ** 0.5 / g.k
        per = " / ".join(f"{c:+.3f} ({z:.1f})" for c, z in zip(g.change, g.z))
        rise = _ci(g.reward_last - g.reward_first)
        lines.append(
            f"| {label} | {int(stage)} {domain} | {per} | {_ci(g.change)} | {pooled_z(g.change, se):.1f} | {rise}"
            f" | {(g.z >= 2).sum()} of {len(g)} |"
        )
    fg = forgetting(ev)
    if not fg.empty:
        lines += _section(
            f"Forgetting after the chain (own-stage {metric} minus after the last stage; mean over earlier domains)",
            ["method", "per seed", "seed mean ± 95% CI", "minus GRPO, seed by seed"],
        )
        grpo = _grpo(fg)
        for label, g in fg.groupby("label"):
            minus = "" if label == "GRPO" else _minus(g, grpo, "mean")
            lines.append(f"| {label} | {_seeds(g, 'mean')} | {_ci(g['mean'])} | {minus} |")
    ood = ood_after_chain(ev)
    if not ood.empty:
        lines += _section(
            f"OOD after the chain ({metric} after the last stage minus the same seed's base, per set)",
            ["method", "benchmark", "per seed", "seed mean ± 95% CI", "minus GRPO, seed by seed"],
        )
        for bench, gb in ood.groupby("benchmark"):
            grpo = _grpo(gb)
            for label, g in gb.groupby("label"):
                minus = "" if label == "GRPO" else _minus(g, grpo, "change")
                lines.append(f"| {label} | {bench} | {_seeds(g, 'change')} | {_ci(g.change)} | {minus} |")
    arts = stage_artifacts(ev)
    if not arts.empty:
        lines += _section(
            "Artifacts: each stage's own domain after the stage (% of responses truncated, % of 4-grams repeated,"
            " \\boxed per response; the base's in brackets)",
            ["method", "stage", "truncated % per seed", "seed mean ± 95% CI", "repeated %", "\\boxed"],
        )
        for (label, stage, domain), g in arts.groupby(["label", "stage", "domain"], sort=True):
            pct = g.assign(t=100 * g.truncation_rate)
            b = g.iloc[0]
            lines.append(
                f"| {label} | {int(stage)} {domain} | {_seeds(pct, 't', '{:.1f}')} | {_ci(pct.t, '{:.1f}')}"
                f" ({100 * b.base_truncation_rate:.1f}) | {100 * g.ngram_repeat.mean():.1f}"
                f" ({100 * b.base_ngram_repeat:.1f}) | {g.boxed_per_response.mean():.2f}"
                f" ({b.base_boxed_per_response:.2f}) |"
            )
    ts = _read(tables / "teacher_stability.csv")
    if ts is not None and not ts.empty:
        by = {
            t: g.groupby("seed", as_index=False, dropna=False).acc.mean() for t, g in ts.groupby("teacher", sort=False)
        }
        ema = next((t for t in by if t.startswith("EMA")), None)  # the first EMA row: the others' reference
        lines += _section(
            f"Table 1: {metric} on the first domain after the first stage",
            ["teacher", "per seed", "seed mean ± 95% CI", f"minus {ema or 'EMA'}, seed by seed"],
        )
        for teacher, g in by.items():
            minus = "" if teacher in ("Base", ema) else _minus(g, by.get(ema), "acc")
            lines.append(f"| {teacher} | {_seeds(g, 'acc', '{:.3f}')} | {_ci(g.acc, '{:.3f}')} | {minus} |")
    params = _read(tables / "drift_params.csv")
    drift = drift_after_chain(params, _read(tables / "drift_responses.csv"))
    if not drift.empty:
        lines += _drift_section(
            "Drift after the chain (NSS, PM update %, response similarity to the base after stage 1 / last)",
            drift,
            ("nss", "pm_update", "similarity_first", "similarity_last"),
        )
    try:
        equal = first_stage_drift_at_equal_updates(params, results)
    except FileNotFoundError as e:  # tables copied without the runs: the other sections still stand
        lines += ["", f"(drift at equal optimizer steps not computed: {e})"]
        equal = pd.DataFrame()
    if not equal.empty:
        step = int(equal.optimizer_step.iloc[0])
        title = f"Drift in the first stage at equal optimizer steps ({step}; the largest every run saved)"
        lines += _drift_section(title, equal, ("nss", "pm_update"))
    base = ev[(ev.method == "base") & (ev.kind == "ood")].groupby("benchmark").acc.mean()
    if not base.empty:
        inside = [b for b, a in base.items() if OOD_RANGE[0] <= a <= OOD_RANGE[1]]
        lines += [
            "",
            f"## OOD base {metric} (seed mean; in {OOD_RANGE[0]}-{OOD_RANGE[1]}: {len(inside)} of {len(base)})",
            "",
        ]
        lines.append(", ".join(f"{b} {a:.3f}" for b, a in base.items()))
    return "\n".join(lines) + "\n"
