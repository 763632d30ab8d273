"""Collapse figure (beyond the paper): formatting artifacts along the chain."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from sdpocl.plot.style import (
    CI,
    _finals,
    _method_handles,
    _methods,
    _note,
    _note_figure,
    _numeric,
    _percent,
    _runs,
    _stage_ticks,
    _table,
    apply_style,
    save,
)

# ----------------------------------------------------------------------------------------------
# Beyond the paper: formatting artifacts along the chain (collapse as it happens)

_ARTIFACTS = [
    ("boxed_per_response", r"\boxed{} per response (count)", False),
    ("multi_boxed_share", r"Responses with ≥ 2 \boxed{} (%)", True),
    ("ngram_repeat", "n-gram repetition (%)", True),
    ("truncation_rate", "Truncated responses (%)", True),
    ("mean_length", "Mean response length (tokens)", False),
]


def plot_artifacts(tables, style: dict, out_stem: Path) -> list[Path]:
    """Artifact counters (mean over in-domain and OOD benchmarks) vs stage, one line per method."""
    st = apply_style(style)
    title = "Formatting artifacts along the continual chain"
    cols = [c for c, _, _ in _ARTIFACTS]
    ev = _numeric(_runs(_table(tables, "eval")), cols)
    ev = _finals(ev)
    cont = ev[ev["continual"] & ~ev["_base"] & (ev["stage"] >= 1)]
    if cont.empty or cont[cols].isna().all().all():
        return _note_figure(title, "eval.csv has no continual rows with artifact counters", st, out_stem)
    keys = ["label", "seed", "stage", "domain"]
    per = cont.groupby(keys, dropna=False)[cols].mean().reset_index()
    base = ev[ev["_base"]]
    if not base.empty:  # the base model is everyone's stage 0
        b = base[cols].mean()
        per = pd.concat(
            [
                per,
                pd.DataFrame(
                    [
                        {**b.to_dict(), "label": lab, "seed": np.nan, "stage": 0, "domain": "base"}
                        for lab in per["label"].unique()
                    ]
                ),
            ],
            ignore_index=True,
        )
    for col, _, share in _ARTIFACTS:
        if share:
            per[col] = _percent(per[col])
    per, order, colours, markers = _methods(per, st["palette"])
    ticks = _stage_ticks(per)
    fig, axes = plt.subplots(2, 3, figsize=(11.5, 6.6), sharex=True, squeeze=False, layout="constrained")
    for ax, (col, ylabel, _) in zip(axes.flat, _ARTIFACTS):
        drawn = False
        for m in order:
            g = per[(per["_m"] == m) & per[col].notna()]
            if not g.empty:
                sns.lineplot(
                    data=g, x="stage", y=col, color=colours[m], marker=markers[m], errorbar=CI, ax=ax, legend=False
                )
                drawn = True
        if not drawn:
            _note(ax, f"no data: {col} is empty")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("Task learned")
        ax.set_xticks(list(ticks), list(ticks.values()))
        ax.tick_params(axis="x", labelbottom=True)
    leg_ax = axes.flat[-1]
    leg_ax.axis("off")
    leg_ax.legend(handles=_method_handles(order, colours, markers), loc="center", title="Method", fontsize="medium")
    fig.suptitle(title + " (mean over benchmarks)")
    return save(fig, out_stem, st)
