"""Drift figures: parameter drift along the chain (Fig. 2) and response drift (Fig. 3)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from sdpocl.plot.style import (
    CI,
    _method_handles,
    _methods,
    _note,
    _note_figure,
    _numeric,
    _runs,
    _stage_ticks,
    _table,
    apply_style,
    method_order,
    pretty_label,
    save,
)

# ----------------------------------------------------------------------------------------------
# Figure 2: model (parameter) drift

_DRIFT_METRICS = [
    ("nss", "NSS (relative spectral shift)"),
    ("max_pa_deg", "Max PA (deg)"),
    ("pm_overlap", "PM overlap (%)"),
    ("pm_update", "PM update (%)"),
]


def plot_model_drift(tables, style: dict, out_stem: Path) -> list[Path]:
    """NSS, Max PA, PM overlap, PM update vs checkpoint along the chain, mean line + p10-p90 band."""
    st = apply_style(style)
    title = "Parameter drift from the base model"
    dp = _runs(_table(tables, "drift_params"))
    cols = [f"{m}_{s}" for m, _ in _DRIFT_METRICS for s in ("mean", "p10", "p90")]
    dp = _numeric(dp, [*cols, "point_index"])
    dp = dp[(dp["matrix_type"].astype(str) == "all") & dp["continual"] & ~dp["_base"] & dp["point_index"].notna()]
    if dp.empty:
        return _note_figure(title, "drift_params.csv has no continual rows with matrix_type 'all'", st, out_stem)
    dp, order, colours, markers = _methods(dp, st["palette"])
    points = dp[["point_index", "point"]].drop_duplicates("point_index").sort_values("point_index")
    stages = dp.groupby("stage").agg(lo=("point_index", "min"), hi=("point_index", "max"), domain=("domain", "first"))
    # NSS is ~1e-5: scale it into the axis label instead of an offset text that collides with the stage names
    top = dp[[f"nss_{s}" for s in ("mean", "p10", "p90")]].abs().max().max()
    exp = int(math.floor(math.log10(top))) if pd.notna(top) and top > 0 else 0
    if -2 <= exp <= 3:
        exp = 0
    dp[[f"nss_{s}" for s in ("mean", "p10", "p90")]] *= 10.0**-exp
    labels = dict(_DRIFT_METRICS)
    if exp:
        labels["nss"] = f"NSS (× 10$^{{{exp}}}$, relative spectral shift)"
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.2), sharex=True, squeeze=False, layout="constrained")
    for i, (ax, metric) in enumerate(zip(axes.flat, labels)):
        ylabel = labels[metric]
        for j, (_, s) in enumerate(stages.iterrows()):
            if j % 2:
                ax.axvspan(s.lo - 0.5, s.hi + 0.5, color="0.93", zorder=0, lw=0)
            if j:
                ax.axvline(s.lo - 0.5, color="0.55", lw=0.8, ls="--", zorder=0)
            if i < 2:
                ax.text(
                    (s.lo + s.hi) / 2,
                    1.01,
                    str(s.domain),
                    ha="center",
                    va="bottom",
                    fontsize="small",
                    transform=blended_transform_factory(ax.transData, ax.transAxes),
                )
        drawn = False
        for m in order:
            g = dp[(dp["_m"] == m) & dp[f"{metric}_mean"].notna()]
            if g.empty:
                continue
            band = g.groupby("point_index")[[f"{metric}_p10", f"{metric}_p90"]].mean()
            ax.fill_between(band.index, band.iloc[:, 0], band.iloc[:, 1], color=colours[m], alpha=0.15, lw=0)
            sns.lineplot(
                data=g,
                x="point_index",
                y=f"{metric}_mean",
                color=colours[m],
                marker=markers[m],
                markersize=5,
                errorbar=CI,
                err_style="bars",
                ax=ax,
                legend=False,
            )
            drawn = True
        if not drawn:
            _note(ax, f"no data: {metric} is empty")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("Checkpoint (domain@step)")
    for ax in axes.flat:
        ax.set_xticks(points["point_index"].tolist())
        ax.set_xlim(points["point_index"].min() - 0.6, points["point_index"].max() + 0.6)
    for ax in axes[-1]:
        ax.set_xticklabels(
            points["point"].astype(str).tolist(), rotation=55, ha="right", rotation_mode="anchor", fontsize="small"
        )
    handles = [*_method_handles(order, colours, markers), Patch(color="0.6", alpha=0.35, label="p10–p90 over matrices")]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 7))
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# Figure 3: response drift


def plot_response_drift(tables, style: dict, out_stem: Path) -> list[Path]:
    """Split violins of response similarity to the base per stage, GRPO vs SDPO_0 (paper Fig. 3)."""
    st = apply_style(style)
    title = "Response drift from the base model"
    dr = _runs(_table(tables, "drift_responses"))
    dr = _numeric(dr, ["similarity"])
    dr = dr[dr["continual"] & ~dr["_base"] & (dr["stage"] >= 1) & dr["similarity"].notna()]
    if dr.empty:
        return _note_figure(title, "drift_responses.csv has no continual rows", st, out_stem)
    present = method_order(dr["label"].unique())
    pick = [x for x in ("GRPO", "SDPO_0") if x in present]
    note = ""
    if len(pick) < 2:
        missing = [x for x in ("GRPO", "SDPO_0") if x not in present]
        note = f" ({', '.join(pretty_label(x) for x in missing)}: no data)"
        if not pick:
            pick = present[:2]
    dr = dr[dr["label"].isin(pick)]
    dr, order, colours, _ = _methods(dr, st["palette"])
    ticks = _stage_ticks(dr)
    dr["_stage"] = dr["stage"].astype(int).map(ticks)
    kinds = [k for k in ("in-domain", "ood") if k in set(dr["kind"].astype(str))]
    panels = [(k, dr[dr["kind"].astype(str) == k]) for k in kinds] or [("all benchmarks", dr)]
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(1.0 + 1.6 * len(ticks) * len(panels), 4.0),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax, (kind, g) in zip(axes.flat, panels):
        sns.violinplot(
            data=g,
            x="_stage",
            y="similarity",
            hue="_m",
            order=list(ticks.values()),
            hue_order=order,
            palette=colours,
            saturation=1,
            split=len(order) == 2,
            inner="quart",
            cut=0,
            density_norm="width",
            linewidth=0.8,
            gap=0.06 if len(order) == 2 else 0,
            ax=ax,
            legend=False,
        )
        ax.set_title({"ood": "OOD benchmarks", "in-domain": "in-domain benchmarks"}.get(kind, kind))
        ax.set_xlabel("Stage (domain learned)")
        ax.set_ylabel("Similarity to base response (cosine × 100)")
    handles = [Patch(color=colours[m], label=m) for m in order]
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), title="Method" + note)
    return save(fig, out_stem, st)
