"""Domain-distance figures: gain/forgetting vs MMD (Fig. 4), the MMD heatmap (Fig. 5), t-SNE (Fig. 6)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdpocl.plot.style import (
    BOOT_SEED,
    _finals,
    _method_handles,
    _methods,
    _note,
    _note_figure,
    _numeric,
    _runs,
    _table,
    apply_style,
    ci95,
    save,
)
from sdpocl.plot.tables import ROLES

# ----------------------------------------------------------------------------------------------
# Figure 4: gain / forgetting vs domain distance


def _distance_rows(tables) -> tuple[pd.DataFrame, str]:
    """Single-domain eval rows with ``mmd100`` = 100 x MMD(<domain>_train, benchmark); (rows, why empty)."""
    ev = _runs(_table(tables, "eval"))
    ev = _numeric(ev, ["gain", "forgetting", "relperf"])
    ev = _finals(ev[ev["single_domain"] & ~ev["_base"] & (ev["stage"] >= 1)])
    if ev.empty:
        return ev, "eval.csv has no single-domain rows (config single_domain_runs; config/tiny-full.yaml has them)"
    mmd = _numeric(_table(tables, "domain_mmd"), ["mmd"])
    fwd = mmd[mmd["role_a"].astype(str) == "train"][["dataset_a", "dataset_b", "mmd"]]
    rev = mmd[mmd["role_b"].astype(str) == "train"].rename(columns={"dataset_a": "dataset_b", "dataset_b": "dataset_a"})
    pairs = pd.concat([fwd, rev[["dataset_a", "dataset_b", "mmd"]]]).dropna()
    pairs = pairs.astype({"dataset_a": str, "dataset_b": str}).drop_duplicates(["dataset_a", "dataset_b"])
    # methods of the single-domain grid (config single_domain_runs) train several domains alone; the
    # others' only single-domain stage is their chain's first one, which is not kept when such exist
    n_domains = ev.groupby("label")["domain"].nunique()
    if (n_domains > 1).any():
        ev = ev[ev["label"].isin(n_domains[n_domains > 1].index)]
    ev = ev.assign(dataset_a=ev["domain"] + "_train", dataset_b=ev["benchmark"].astype(str))
    ev = ev.merge(pairs, on=["dataset_a", "dataset_b"], how="inner")
    ev["mmd100"] = ev["mmd"] * 100
    if ev.empty:
        return ev, "no domain_mmd.csv distance between '<domain>_train' and the benchmarks of the single-domain rows"
    return ev, ""


def plot_gain_forgetting_distance(tables, style: dict, out_stem: Path) -> list[Path]:
    """Gain and forgetting of single-domain runs vs MMD distance to the training domain, fit per method."""
    st = apply_style(style)
    title = "Gain and forgetting vs domain distance (single-domain runs)"
    ev, why = _distance_rows(tables)
    if ev.empty:
        return _note_figure(title, why, st, out_stem)
    ev, order, colours, markers = _methods(ev, st["palette"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), squeeze=False, layout="constrained")
    for ax, (col, ylabel) in zip(axes.flat, [("gain", "Gain (%)"), ("forgetting", "Forgetting (%)")]):
        drawn = False
        for m in order:
            g = ev[(ev["_m"] == m) & ev[col].notna()]
            if g.empty:
                continue
            # one point per (trained domain, benchmark): the mean over seeds with its 95% CI
            pts = g.groupby(["domain", "benchmark"])[[col, "mmd100"]].agg(
                y=(col, "mean"), x=("mmd100", "first"), lo=(col, lambda v: ci95(v)[0]), hi=(col, lambda v: ci95(v)[1])
            )
            yerr = np.vstack([pts["y"] - pts["lo"], pts["hi"] - pts["y"]])
            ax.errorbar(
                pts["x"],
                pts["y"],
                yerr=np.where(np.isnan(yerr), 0, yerr),
                fmt=markers[m],
                color=colours[m],
                ms=5,
                alpha=0.85,
                elinewidth=0.9,
                capsize=0,
                zorder=3,
            )
            if g["mmd100"].nunique() >= 2:  # the fit uses every seed's point; its band is a 95% bootstrap CI
                sns.regplot(
                    data=g,
                    x="mmd100",
                    y=col,
                    scatter=False,
                    color=colours[m],
                    ci=95,
                    n_boot=300,
                    seed=BOOT_SEED,
                    truncate=True,
                    line_kws={"lw": 1.6},
                    ax=ax,
                )
            drawn = True
        if not drawn:
            _note(ax, f"no data: {col} is empty")
        ax.set_xlabel("MMD (RBF) to the training domain (× 100)")
        ax.set_ylabel(ylabel)
        ax.set_title(ylabel.split(" ")[0])
    fig.legend(
        handles=_method_handles(order, colours, markers),
        loc="outside upper center",
        ncol=len(order),
        title="Method (linear fit, 95% CI)",
    )
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# Figures 5 and 6: domain distance map


def _dataset_order(frame: pd.DataFrame, pairs) -> tuple[list[str], dict[str, str]]:
    """Datasets ordered by role (train, in-domain, ood, other), then first appearance; {dataset: role}."""
    roles = {}
    for ds_col, role_col in pairs:
        for ds, role in zip(frame[ds_col].astype(str), frame[role_col].astype(str)):
            roles.setdefault(ds, role)
    rank = {r: i for i, r in enumerate(ROLES)}
    order = sorted(roles, key=lambda d: (rank.get(roles[d], len(ROLES)), list(roles).index(d)))
    return order, roles


def plot_mmd_heatmap(tables, style: dict, out_stem: Path) -> list[Path]:
    """MMD (x100, 2 decimals) between every pair of datasets (paper Fig. 5)."""
    st = apply_style(style)
    title = "Domain distance: MMD (RBF) between prompt embeddings"
    mmd = _numeric(_table(tables, "domain_mmd"), ["mmd", "bandwidth"]).dropna(subset=["mmd"])
    if mmd.empty:
        return _note_figure(title, "domain_mmd.csv is empty", st, out_stem)
    order, roles = _dataset_order(mmd, [("dataset_a", "role_a"), ("dataset_b", "role_b")])
    grid = (
        mmd.astype({"dataset_a": str, "dataset_b": str})
        .pivot_table(index="dataset_a", columns="dataset_b", values="mmd", aggfunc="mean")
        .reindex(index=order, columns=order)
        * 100
    )
    n = len(order)
    side = 0.5 * n + 2.6
    fig, ax = plt.subplots(figsize=(side + 1.2, side), layout="constrained")
    sns.heatmap(
        grid,
        annot=True,
        fmt=".2f",
        cmap="rocket_r",
        square=True,
        linewidths=0.4,
        linecolor="white",
        annot_kws={"fontsize": max(5.0, min(9.0, 110 / n))},
        cbar_kws={"label": "MMD × 100", "shrink": 0.75},
        ax=ax,
    )
    bounds = [i for i in range(1, n) if roles[order[i]] != roles[order[i - 1]]]
    for b in bounds:
        ax.axhline(b, color="0.1", lw=1.2)
        ax.axvline(b, color="0.1", lw=1.2)
    ax.set_xticks(
        np.arange(n) + 0.5, [f"{d} ({roles[d]})" for d in order], rotation=45, ha="right", rotation_mode="anchor"
    )
    ax.set_yticks(np.arange(n) + 0.5, [f"{d} ({roles[d]})" for d in order], rotation=0)
    ax.set_xlabel("dataset b")
    ax.set_ylabel("dataset a")
    bw = mmd["bandwidth"].dropna().unique()
    ax.set_title(title + (f"\nbandwidth {bw[0]:.3g}" if len(bw) == 1 else ""))
    return save(fig, out_stem, st)


_ROLE_MARKERS = {"train": "o", "in-domain": "s", "ood": "^"}


def plot_tsne(tables, style: dict, out_stem: Path) -> list[Path]:
    """t-SNE map of the prompt embeddings, coloured by dataset, marker by role (paper Fig. 6)."""
    st = apply_style(style)
    title = "t-SNE of prompt embeddings"
    ts = _numeric(_table(tables, "tsne"), ["x", "y"]).dropna(subset=["x", "y"])
    if ts.empty:
        return _note_figure(title, "tsne.csv is empty", st, out_stem)
    ts = ts.astype({"dataset": str, "role": str})
    order, roles = _dataset_order(ts, [("dataset", "role")])
    role_order = [r for r in ROLES if r in set(ts["role"])] + sorted(set(ts["role"]) - set(ROLES))
    markers = {r: _ROLE_MARKERS.get(r, "D") for r in role_order}
    palette = sns.color_palette("tab10" if len(order) <= 10 else "tab20", len(order))
    fig, ax = plt.subplots(figsize=(8.6, 6.0), layout="constrained")
    sns.scatterplot(
        data=ts,
        x="x",
        y="y",
        hue="dataset",
        hue_order=order,
        style="role",
        style_order=role_order,
        markers=markers,
        palette=dict(zip(order, palette)),
        s=16,
        alpha=0.75,
        linewidth=0,
        ax=ax,
    )
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", markerscale=1.4)
    ax.set_xlabel("t-SNE 1 (a.u.)")
    ax.set_ylabel("t-SNE 2 (a.u.)")
    ax.set_title(title)
    return save(fig, out_stem, st)
