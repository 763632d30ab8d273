"""Continual-learning figures: RelPerf per domain vs task learned, OOD bars, teacher stability (Table 1)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sdpocl.plot.style import (
    _DOMAINS,
    BASE_LABEL,
    CI,
    _domain_colours,
    _finals,
    _methods,
    _ncols,
    _note,
    _note_figure,
    _numeric,
    _remove_unused,
    _runs,
    _stage_ticks,
    _table,
    acc_name,
    apply_style,
    legend_columns,
    method_order,
    method_styles,
    pretty_label,
    save,
    set_compressive_yaxis,
)

# ----------------------------------------------------------------------------------------------
# Figure 1: continual-learning performance


def _continual_eval(tables) -> pd.DataFrame:
    ev = _runs(_table(tables, "eval"))
    ev = _numeric(ev, ["relperf", "acc"])
    ev = ev[ev["continual"] & ~ev["_base"] & (ev["stage"] >= 1)]
    return _finals(ev)


def _relperf_rows(ev: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Rows of one benchmark kind ("in-domain" or "ood") that have a RelPerf (the base scored > 0)."""
    return ev[(ev["kind"].astype(str) == kind) & ev["relperf"].notna()]


def plot_cl_performance(tables, style: dict, out_stem: Path) -> list[Path]:
    """RelPerf (%) per benchmark domain vs task learned, one panel per method (paper Fig. 1, left)."""
    st = apply_style(style)
    title = "Continual learning: relative performance per domain"
    ev = _continual_eval(tables)
    ind = _relperf_rows(ev, "in-domain")
    if ind.empty:
        return _note_figure(title, "eval.csv has no continual in-domain rows with a RelPerf", st, out_stem)
    keys = ["label", "seed", "stage"]
    # one value per (run, stage, domain): the mean over the domain's benchmarks; seeds give the CI
    per = ind.groupby([*keys, "bench_domain"], dropna=False)["relperf"].mean().reset_index()
    ood = _relperf_rows(ev, "ood")
    ood = ood.groupby(keys, dropna=False)["relperf"].mean().reset_index()
    stage_ticks = _stage_ticks(ev)
    present = set(per["bench_domain"].astype(str))
    domains = [d for d in _DOMAINS if d in present] + sorted(present - set(_DOMAINS))
    dom_col = _domain_colours(domains)
    dom_mark = dict(zip(domains, ["o", "s", "^", "D", "v", "P", "X", "h"] * 4))
    labels = method_order(set(per["label"]) | set(ood["label"]))
    styles = method_styles(labels, st["palette"])
    ncols, nrows = _ncols(len(labels))
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(2.9 * ncols + 0.4, 2.7 * nrows + 0.7),
        sharex=True,
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    values = pd.concat([per["relperf"], ood["relperf"]])
    compressed = values.abs().max() > 150
    for ax, label in zip(axes.flat, labels):
        p, o = per[per["label"] == label], ood[ood["label"] == label]
        for d in domains:
            g = p[p["bench_domain"] == d]
            if not g.empty:
                sns.lineplot(
                    data=g,
                    x="stage",
                    y="relperf",
                    color=dom_col[d],
                    marker=dom_mark[d],
                    errorbar=CI,
                    ax=ax,
                    legend=False,
                )
        if not o.empty:
            sns.lineplot(
                data=o,
                x="stage",
                y="relperf",
                color="0.15",
                marker="X",
                linestyle="--",
                errorbar=CI,
                ax=ax,
                legend=False,
            )
        if p.empty and o.empty:
            _note(ax, "no data")
        ax.axhline(0, color="0.4", lw=0.8, zorder=0)
        ax.set_title(pretty_label(label), color=styles[label][0], fontweight="bold")
        ax.set_xlabel("Task learned")
        ax.set_ylabel("RelPerf (%)")
    _remove_unused(axes, len(labels))
    ax0 = axes.flat[0]
    ax0.set_xticks(list(stage_ticks), list(stage_ticks.values()))
    ax0.set_xlim(min(stage_ticks) - 0.3, max(stage_ticks) + 0.3)
    if compressed:
        set_compressive_yaxis(ax0, values.abs().max() * 1.15)
    handles = [Line2D([], [], color=dom_col[d], marker=dom_mark[d], label=f"{d} (in-domain)") for d in domains]
    if not ood.empty:
        handles.append(Line2D([], [], color="0.15", marker="X", linestyle="--", label="OOD (mean)"))
    ncol = legend_columns(len(handles), ncols)
    fig.legend(handles=handles, loc="outside upper center", ncol=ncol, title="Benchmark domain")
    return save(fig, out_stem, st)


def plot_ood_bars(tables, style: dict, out_stem: Path) -> list[Path]:
    """Per-OOD-benchmark RelPerf after the last stage, bars per method, compressive axis (Fig. 1, right)."""
    st = apply_style(style)
    title = "OOD relative performance after the last stage"
    ev = _continual_eval(tables)
    ood = _relperf_rows(ev, "ood")
    if ood.empty:
        return _note_figure(title, "eval.csv has no continual OOD rows with a RelPerf", st, out_stem)
    last = ood["stage"].max()
    ood = ood[ood["stage"] == last]
    domain = ood["domain"].iloc[0]
    mean = ood.groupby(["label", "seed"], dropna=False)["relperf"].mean().reset_index().assign(benchmark="OOD mean")
    data = pd.concat([ood[["label", "seed", "benchmark", "relperf"]], mean], ignore_index=True)
    data["benchmark"] = data["benchmark"].astype(str)
    data, order, colours, markers = _methods(data, st["palette"])
    benches = sorted(set(data["benchmark"]) - {"OOD mean"}) + ["OOD mean"]
    width = min(18.0, max(6.5, 1.2 + len(benches) * (0.22 * len(order) + 0.45)))
    fig, ax = plt.subplots(figsize=(width, 4.2), layout="constrained")
    sns.barplot(
        data=data,
        x="benchmark",
        y="relperf",
        hue="_m",
        order=benches,
        hue_order=order,
        palette=colours,
        errorbar=CI,
        saturation=1,
        capsize=0.15,
        err_kws={"linewidth": 0.9},
        ax=ax,
        legend=False,
    )
    set_compressive_yaxis(ax, data["relperf"].abs().max() * 1.2)
    ax.axhline(0, color="0.2", lw=0.9)
    ax.axvline(len(benches) - 1.5, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("OOD benchmark")
    ax.set_ylabel("RelPerf after the last stage (%)\n(symmetric log scale)")
    ax.set_title(f"{title} (stage {int(last)}: {domain})")
    ax.tick_params(axis="x", labelrotation=25)
    for t in ax.get_xticklabels():
        t.set_ha("right")
        t.set_rotation_mode("anchor")
    handles = [Patch(color=colours[m], label=m) for m in order]
    fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 6), title="Method")
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# Table 1 as a figure: teacher stability

TEACHER_ORDER = ["Base", "Frozen", "EMA 5%", "StableSDPO"]


def _teacher_label(method, alpha) -> str:
    """The run label whose colour a teacher row takes (same colour as that method elsewhere)."""
    method = str(method)
    if method == "base":
        return BASE_LABEL
    if method == "grpo":
        return "GRPO"
    if method == "stable_sdpo":
        return "StableSDPO"
    if method == "sdpo" and pd.notna(alpha):
        return "SDPO_0" if alpha == 0 else f"SDPO_{alpha * 100:g}%"
    return method


def plot_teacher_stability(tables, style: dict, out_stem: Path) -> list[Path]:
    """Acc@k on MATH after the MATH stage per teacher (paper Table 1: Acc@8), stderr or 95% CI bars."""
    st = apply_style(style)
    ts = _numeric(_table(tables, "teacher_stability"), ["acc", "stderr", "alpha", "seed"]).dropna(subset=["acc"])
    metric = acc_name(ts)
    title = f"Teacher stability: {metric} after the MATH stage"
    if ts.empty:
        return _note_figure(title, "teacher_stability.csv is empty", st, out_stem)
    ts["teacher"] = ts["teacher"].astype(str)
    ts["benchmark"] = ts["benchmark"].astype(str)
    scale = 1 if ts["acc"].abs().max() > 1 else 100
    ts["acc100"], ts["se100"] = ts["acc"] * scale, ts["stderr"] * scale
    teachers = [t for t in TEACHER_ORDER if t in set(ts["teacher"])] + list(
        dict.fromkeys(t for t in ts["teacher"] if t not in TEACHER_ORDER)
    )
    run_of = {t: _teacher_label(g["method"].iloc[0], g["alpha"].iloc[0]) for t, g in ts.groupby("teacher")}
    styles = method_styles(run_of.values(), st["palette"])
    colours = {t: styles[run_of[t]][0] for t in teachers}
    benches = list(dict.fromkeys(ts["benchmark"]))
    several_seeds = ts.groupby(["teacher", "benchmark"]).size().max() > 1
    fig, axes = plt.subplots(
        1,
        len(benches),
        figsize=(0.9 + 1.1 * len(teachers) * len(benches), 4.0),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    for ax, bench in zip(axes.flat, benches):
        g = ts[ts["benchmark"] == bench]
        present = [t for t in teachers if t in set(g["teacher"])]
        if several_seeds:
            sns.barplot(
                data=g,
                x="teacher",
                y="acc100",
                hue="teacher",
                order=present,
                hue_order=present,
                palette=colours,
                errorbar=CI,
                saturation=1,
                capsize=0.2,
                err_kws={"linewidth": 1},
                legend=False,
                ax=ax,
            )
            means = g.groupby("teacher")["acc100"].mean()
            top = g.groupby("teacher")["acc100"].max().to_dict()  # a bootstrap CI of the mean stays below
        else:
            agg = g.groupby("teacher")[["acc100", "se100"]].mean().reindex(present)
            ax.bar(
                range(len(present)),
                agg["acc100"],
                yerr=agg["se100"].fillna(0),
                capsize=5,
                color=[colours[t] for t in present],
                error_kw={"lw": 1},
            )
            ax.set_xticks(range(len(present)), present)
            means = agg["acc100"]
            top = {t: means[t] + (0 if pd.isna(agg["se100"][t]) else agg["se100"][t]) for t in present}
        ymax = max([*(top[t] for t in present), 1.0])
        for i, t in enumerate(present):
            ax.text(i, top[t] + 0.02 * ymax, f"{means[t]:.1f}", ha="center", va="bottom", fontsize="small")
        ax.set_ylim(0, ymax * 1.15 + 1e-9)
        ax.set_title(bench)
        ax.set_xlabel("Teacher")
        ax.set_ylabel(f"{metric} (%)")
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(title + ("\n(mean, 95% CI over seeds)" if several_seeds else " (± stderr)"))  # 2 lines fit one panel
    return save(fig, out_stem, st)
