"""Mitigations figure (issue 14): in-domain gain against forgetting after the full chain, one point
per method label (mean over seeds, 95% CIs in both axes), with the Pareto front drawn.

The numbers, from ``eval.csv`` alone (continual rows, final checkpoints, in-domain benchmarks):

* **in-domain gain** of a seed's run = the mean over the stages k = 1..K of the ``gain`` column
  (max(RelPerf, 0), %) of the domain just learned, d_k, right after stage k (a domain with several
  in-domain benchmarks: their mean);
* **forgetting** = the mean over the earlier domains d_1..d_{K-1} of their ``forgetting`` column
  (max(-RelPerf, 0), %) after the last stage K (RelPerf against the base, as in the paper).

Runs whose chain does not reach the last stage are left out (and named in the figure).

Beside the figure, ``figures/mitigations.csv`` holds the numbers it plots and the rest of the
comparison a reader asks for next, per label (mean over seeds with 95% CIs): gain, forgetting, the
parameter drift of the chain's last model from the base (``nss``, ``pm_update``: ``drift_params``,
all matrices, the last checkpoint of the last stage) and its formatting artifacts on the in-domain
benchmarks (``boxed_per_response``, ``ngram_repeat``, ``truncation_rate``: ``eval``, the last stage's
final checkpoint, mean over the in-domain benchmarks).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sdpocl.io import write_csv
from sdpocl.plot.style import (
    _finals,
    _note_figure,
    _numeric,
    _runs,
    _table,
    apply_style,
    ci95,
    method_order,
    method_styles,
    pretty_label,
    save,
)


def _chain_domains(ev: pd.DataFrame) -> list[str]:
    """The continual sequence, from the longest chain in the rows."""
    chains = ev["chain"].dropna().astype(str)
    longest = max(chains, key=lambda c: len(c.split("/")), default="")
    return [d for d in longest.split("/") if d]


#: artifact counters of the chain's last model, from eval.csv (in-domain benchmarks)
ARTIFACTS = ["boxed_per_response", "ngram_repeat", "truncation_rate"]
#: parameter drift of the chain's last model from the base, from drift_params.csv (all matrices)
DRIFT = ["nss", "pm_update"]
#: per-seed numbers of a run; the summary gives each a mean and a 95% CI over seeds
METRICS = ["gain", "forgetting", *DRIFT, *ARTIFACTS]


def _last_drift(tables, last: int) -> pd.DataFrame:
    """Per run: NSS and PM update (means over the matrices) of the last checkpoint of stage ``last``."""
    cols = [f"{m}_mean" for m in DRIFT]
    dp = _numeric(_runs(_table(tables, "drift_params")), [*cols, "point_index"])
    dp = dp[(dp["matrix_type"].astype(str) == "all") & (dp["stage"] == last) & dp["continual"]]
    if dp.empty:
        return pd.DataFrame(columns=["run", *DRIFT])
    dp = dp.sort_values("point_index").groupby("run", sort=True).tail(1)
    return dp[["run", *cols]].rename(columns={f"{m}_mean": m for m in DRIFT})


def mitigation_points(tables) -> tuple[pd.DataFrame, str]:
    """One row per seed's run: run, label, seed and :data:`METRICS` (see the module docstring);
    returns (rows, why empty / which runs were left out)."""
    ev = _runs(_table(tables, "eval"))
    ev = _numeric(ev, ["gain", "forgetting", *ARTIFACTS])
    ev = _finals(ev[ev["continual"] & ~ev["_base"] & (ev["stage"] >= 1) & (ev["kind"].astype(str) == "in-domain")])
    columns = ["run", "label", "seed", *METRICS]
    if ev.empty:
        return pd.DataFrame(columns=columns), "eval.csv has no continual rows"
    ev = ev.assign(bench_domain=ev["bench_domain"].astype(str), chain=ev["chain"].astype(str))
    domains = _chain_domains(ev)
    last = len(domains)
    rows, incomplete = [], []
    for run, g in ev.groupby("run", sort=True):
        if last < 2 or not (g["stage"] == last).any():
            incomplete.append(str(run))
            continue
        # gain: the domain just learned, right after its stage (mean over its benchmarks), mean over stages
        own = g[g["bench_domain"] == g["domain"]]
        per_stage = own.groupby("stage")["gain"].mean()
        # forgetting: the earlier domains after the last stage (mean over each domain's benchmarks, then domains)
        end = g[(g["stage"] == last) & g["bench_domain"].isin(domains[:-1])]
        per_domain = end.groupby("bench_domain")["forgetting"].mean()
        rows.append(
            {
                "run": run,
                "label": g["label"].iloc[0],
                "seed": g["seed"].iloc[0],
                "gain": per_stage.mean() if len(per_stage) else np.nan,
                "forgetting": per_domain.mean() if len(per_domain) else np.nan,
                **g[g["stage"] == last][ARTIFACTS].mean().to_dict(),
            }
        )
    out = pd.DataFrame(rows, columns=[c for c in columns if c not in DRIFT])
    out = out.merge(_last_drift(tables, last), on="run", how="left").reindex(columns=columns)
    out = out.dropna(subset=["gain", "forgetting"]).reset_index(drop=True)
    why = ""
    if out.empty:
        why = "no run has gain and forgetting after the full chain"
        if ev["gain"].isna().all():
            why += " (gain and forgetting are empty: RelPerf is undefined where the base scores 0)"
    if incomplete:
        why += ("; " if why else "") + f"left out (chain incomplete): {', '.join(incomplete)}"
    return out, why


def mitigation_summary(points: pd.DataFrame) -> pd.DataFrame:
    """Per label: mean gain and forgetting over seeds with 95% bootstrap CIs, and the Pareto flag."""
    rows = []
    for label, g in points.groupby("label", sort=False):
        row = {"label": label, "n_seeds": len(g)}
        for col in METRICS:
            lo, hi = ci95(g[col])
            row.update({col: g[col].mean(), f"{col}_lo": lo, f"{col}_hi": hi})
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out.assign(pareto=pd.Series(dtype=bool))
    out["pareto"] = pareto_front(out["gain"].to_numpy(), out["forgetting"].to_numpy())
    order = {label: i for i, label in enumerate(method_order(out["label"]))}
    return out.sort_values("label", key=lambda s: s.map(order)).reset_index(drop=True)


#: figures/mitigations.csv, one row per label
SUMMARY_COLUMNS = ["label", "n_seeds", *(f"{m}{s}" for m in METRICS for s in ("", "_lo", "_hi")), "pareto"]


def pareto_front(gain, forgetting) -> np.ndarray:
    """True for the points no other point dominates (higher or equal gain and lower or equal
    forgetting, one of them strictly)."""
    gain, forgetting = np.asarray(gain, dtype=float), np.asarray(forgetting, dtype=float)
    out = np.ones(len(gain), dtype=bool)
    for i in range(len(gain)):
        better_eq = (gain >= gain[i]) & (forgetting <= forgetting[i])
        strictly = (gain > gain[i]) | (forgetting < forgetting[i])
        out[i] = not np.any(better_eq & strictly)
    return out


def plot_mitigations(tables, style: dict, out_stem: Path) -> list[Path]:
    """In-domain gain vs forgetting after the full chain, one point per method label, Pareto front."""
    st = apply_style(style)
    title = "Mitigations: in-domain gain vs forgetting after the full chain"
    points, why = mitigation_points(tables)
    summary = mitigation_summary(points)
    write_csv(summary.reindex(columns=SUMMARY_COLUMNS), Path(out_stem).with_suffix(".csv"))
    if points.empty:
        return _note_figure(title, why, st, out_stem)
    styles = method_styles(summary["label"], st["palette"])
    fig, ax = plt.subplots(figsize=(7.4, 5.2), layout="constrained")
    for _, r in summary.iterrows():
        colour, marker = styles[r["label"]]
        xerr = [[r["forgetting"] - r["forgetting_lo"]], [r["forgetting_hi"] - r["forgetting"]]]
        yerr = [[r["gain"] - r["gain_lo"]], [r["gain_hi"] - r["gain"]]]
        ax.errorbar(
            r["forgetting"],
            r["gain"],
            xerr=np.nan_to_num(np.asarray(xerr, dtype=float)),
            yerr=np.nan_to_num(np.asarray(yerr, dtype=float)),
            fmt=marker,
            color=colour,
            ms=8 if r["pareto"] else 6,
            mec="black" if r["pareto"] else colour,
            mew=1.2,
            elinewidth=1.0,
            capsize=2,
            zorder=3,
            label=f"{pretty_label(r['label'])} (n={int(r['n_seeds'])})",
        )
        ax.annotate(
            pretty_label(r["label"]),
            (r["forgetting"], r["gain"]),
            xytext=(5, 5),
            textcoords="offset points",
            fontsize="x-small",
            color="0.2",
        )
    # the front as the boundary of the region it dominates (to its right and below it), shaded
    front = summary[summary["pareto"]].sort_values("forgetting")
    ax.margins(0.12)
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    fx, fy = front["forgetting"].to_numpy(), front["gain"].to_numpy()
    xs = np.concatenate([[fx[0]], np.repeat(fx, 2)[1:], [x1]])
    ys = np.concatenate([[y0], np.repeat(fy, 2)])
    ax.plot(xs, ys, color="0.25", lw=1.2, ls="--", zorder=2, label="Pareto front (higher gain, lower forgetting)")
    ax.fill_between(xs, ys, y0, color="0.5", alpha=0.08, zorder=1, lw=0)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_xlabel("Forgetting after the last stage (%, mean over earlier domains)")
    ax.set_ylabel("In-domain gain (%, mean over stages)")
    ax.set_title(title + (f"\n{why}" if why else ""), fontsize="medium")
    fig.legend(loc="outside right upper", fontsize="x-small", title="run (seeds)", title_fontsize="x-small")
    return save(fig, out_stem, st)
