"""Figures of the study, drawn from the tidy tables of :mod:`sdpocl.tables` only (never checkpoints).

One public function per figure, ``plot_<name>(tables, style, out_stem) -> list[Path]``: ``tables``
maps a table name (``eval``, ``drift_params``, ... = the CSV stem under ``results/tables/``) to a
DataFrame, ``style`` is the config's ``plots:`` block and ``out_stem.<fmt>`` is written for each of
``style["formats"]``. :data:`FIGURES` names every figure and the tables it reads, so a rule only
calls :func:`make_figure`. Missing data never crash a figure: it is still written, with a visible
"no data" note saying what is missing.

Conventions shared by all figures: a method label keeps one colour and marker everywhere
(:func:`method_styles`) and is rendered with mathtext (:func:`pretty_label`); several seeds are
drawn as means with 95% bootstrap confidence intervals; accuracies, rates and shares stored as
fractions in [0, 1] are shown in percent (a column with a value above 1 is taken as already in
percent).
"""

from __future__ import annotations

import math
import re
import sys
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from .tables import (  # noqa: E402
    DOMAIN_MMD_COLUMNS,
    DRIFT_PARAM_COLUMNS,
    DRIFT_RESPONSE_COLUMNS,
    EVAL_COLUMNS,
    ROLES,
    TEACHER_STABILITY_COLUMNS,
    TSNE_COLUMNS,
)

#: the CSV tables (stem under results/tables/) and their column contracts
TABLE_COLUMNS = {
    "eval": EVAL_COLUMNS,
    "teacher_stability": TEACHER_STABILITY_COLUMNS,
    "drift_params": DRIFT_PARAM_COLUMNS,
    "drift_responses": DRIFT_RESPONSE_COLUMNS,
    "domain_mmd": DOMAIN_MMD_COLUMNS,
    "tsne": TSNE_COLUMNS,
}

DEFAULT_STYLE = {"formats": ["png", "pdf"], "dpi": 150, "context": "paper", "font_scale": 1.0,
                 "style": "whitegrid", "palette": "colorblind"}

BOOT_SEED = 0
N_BOOT = 1000


def ci95(values, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> tuple[float, float]:
    """95% percentile-bootstrap confidence interval of the mean: what seaborn's ``errorbar=("ci", 95)``
    computes, vectorised (seaborn resamples in a Python loop, seconds per figure). Passed to seaborn as
    ``errorbar=ci95``; seeded, so figures are reproducible."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if len(v) < 2:
        return (np.nan, np.nan)
    means = v[np.random.default_rng(seed).integers(0, len(v), (n_boot, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


CI = ci95

# ----------------------------------------------------------------------------------------------
# method colours, markers and labels


#: fixed order (and colour slots 0..4) of the paper's methods
CANONICAL_METHODS = ["GRPO", "SDPO_0", "SDPO_5%", "StableSDPO", "SDPO_0^CoT"]
#: other labels of the paper grid (config/paper.yaml), with fixed slots after the canonical ones
KNOWN_METHODS = ["SDPO_1%", "SDPO_10%", "SDPO_0+mask0.5", "GRPO (lr 1e-6)"]
_KNOWN_SLOTS = [5, 6, 8, 9]          # slot 7 (grey in colorblind/deep/muted) is left to the base model
_MARKERS = ["o", "s", "D", "^", "v", "P", "X", "p", "h"]
_OTHER_MARKERS = ["<", ">", "d", "H", "8", "*"]
BASE_LABEL = "Base"
BASE_COLOUR = (0.45, 0.45, 0.45)
N_SLOTS = 10


def method_order(labels) -> list[str]:
    """Labels in the canonical order: Base, the paper's methods, the grid's others, then the rest A-Z."""
    present = list(dict.fromkeys(str(x) for x in labels))
    fixed = [BASE_LABEL, *CANONICAL_METHODS, *KNOWN_METHODS]
    return [x for x in fixed if x in present] + sorted(x for x in present if x not in fixed)


def method_styles(labels, palette: str = "colorblind") -> dict[str, tuple[tuple[float, float, float], str]]:
    """``{label: (rgb colour, marker)}``; a label's style depends on the label only, never on the others
    present (canonical slots first, a hash of the label for unknown ones)."""
    colours = sns.color_palette(palette, N_SLOTS)
    out = {}
    for label in method_order(labels):
        if label == BASE_LABEL:
            out[label] = (BASE_COLOUR, "*")
        elif label in CANONICAL_METHODS:
            i = CANONICAL_METHODS.index(label)
            out[label] = (tuple(colours[i]), _MARKERS[i])
        elif label in KNOWN_METHODS:
            i = KNOWN_METHODS.index(label)
            out[label] = (tuple(colours[_KNOWN_SLOTS[i]]), _MARKERS[5 + i])
        else:
            h = zlib.crc32(label.encode())
            slot = [s for s in range(N_SLOTS) if s != 7][h % (N_SLOTS - 1)]
            out[label] = (tuple(colours[slot]), _OTHER_MARKERS[(h // N_SLOTS) % len(_OTHER_MARKERS)])
    return out


_LABEL_RX = re.compile(r"^(?P<head>[A-Za-z]+)_(?P<sub>[A-Za-z0-9.%]+)(?:\^(?P<sup>[A-Za-z0-9]+))?(?P<rest>.*)$")


def pretty_label(label: str) -> str:
    """Mathtext form of a run label: ``SDPO_0`` -> ``SDPO$_0$``, ``SDPO_5%`` -> ``SDPO$_{5\\%}$``,
    ``SDPO_0^CoT`` -> ``SDPO$_0^{CoT}$``; labels without ``_`` are returned as they are."""
    label = str(label)
    m = _LABEL_RX.match(label)
    if not m:
        return label.replace("$", r"\$")
    sub = m["sub"].replace("%", r"\%")
    sub = sub if len(m["sub"]) == 1 else "{" + sub + "}"
    sup = "^{" + m["sup"] + "}" if m["sup"] else ""
    return f"{m['head']}$_{sub}{sup}$" + m["rest"].replace("$", r"\$")


# ----------------------------------------------------------------------------------------------
# the symmetric compressive axis of the OOD bars


def compress(x):
    """Forward transform of the symmetric compressive axis: sign(x) * log(1 + |x|) (odd, monotone)."""
    x = np.asarray(x, dtype=float)
    return np.sign(x) * np.log1p(np.abs(x))


def expand(y):
    """Inverse of :func:`compress`: sign(y) * (exp(|y|) - 1)."""
    y = np.asarray(y, dtype=float)
    with np.errstate(over="ignore"):
        return np.sign(y) * np.expm1(np.abs(y))


def set_compressive_yaxis(ax, limit: float) -> None:
    """Symmetric compressive y axis on [-limit, limit] with ticks at 0, +-1, 3, 10, 30, ..."""
    limit = max(float(limit), 1.0)
    ax.set_yscale("function", functions=(compress, expand))
    ax.set_ylim(-limit, limit)
    mags = [m * 10**e for e in range(0, 7) for m in (1, 3)]
    mags = [m for m in mags if m <= limit]
    while len(mags) > 5:            # at most 11 ticks: keep every other magnitude, largest kept
        mags = mags[::-2][::-1]
    ticks = sorted({0.0, *mags, *(-m for m in mags)})
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:+g}" if v else "0"))


# ----------------------------------------------------------------------------------------------
# style, saving, notes


def apply_style(style: dict | None) -> dict:
    """Merge ``style`` over :data:`DEFAULT_STYLE` and set the seaborn theme; returns the merged style."""
    st = {**DEFAULT_STYLE, **{k: v for k, v in (style or {}).items() if v is not None}}
    sns.set_theme(context=st["context"], style=st["style"], font_scale=st["font_scale"], palette=st["palette"])
    plt.rcParams.update({"savefig.dpi": st["dpi"], "svg.hashsalt": "sdpocl", "legend.frameon": False})
    return st


_METADATA = {"pdf": {"CreationDate": None, "ModDate": None}, "svg": {"Date": None}, "png": {}}


def save(fig, out_stem: Path, style: dict) -> list[Path]:
    """Write ``out_stem.<fmt>`` for every format, close the figure, return the paths."""
    out_stem = Path(out_stem)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in style["formats"]:
        path = out_stem.with_name(f"{out_stem.name}.{fmt}")
        fig.savefig(path, format=fmt, dpi=style["dpi"], metadata=_METADATA.get(fmt, {}))  # constrained layout
        paths.append(path)
    plt.close(fig)
    return paths


def _note(ax, message: str) -> None:
    """A visible 'no data' note instead of an empty panel."""
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", fontsize="small",
            color="0.25", wrap=True, bbox={"boxstyle": "round,pad=0.6", "fc": "0.96", "ec": "0.6"})
    ax.set_xticks([])
    ax.set_yticks([])


def _note_figure(title: str, message: str, style: dict, out_stem: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
    ax.set_title(title)
    _note(ax, "no data: " + message)
    return save(fig, out_stem, style)


# ----------------------------------------------------------------------------------------------
# table preparation


def _table(tables, name: str) -> pd.DataFrame:
    """The named table with every contract column present (missing ones as NaN)."""
    df = tables.get(name) if isinstance(tables, dict) else tables
    df = pd.DataFrame(columns=TABLE_COLUMNS[name]) if df is None else df.copy()
    for col in TABLE_COLUMNS[name]:
        if col not in df.columns:
            df[col] = np.nan
    return df


def _flag(series: pd.Series) -> pd.Series:
    if series.dtype == bool:
        return series
    return series.astype(str).str.strip().str.lower().isin(["true", "1", "1.0", "yes", "t"])


def _numeric(df: pd.DataFrame, cols) -> pd.DataFrame:
    for col in cols:
        df[col] = pd.to_numeric(df[col], errors="coerce").replace([np.inf, -np.inf], np.nan)
    return df


def _runs(df: pd.DataFrame) -> pd.DataFrame:
    """Run-identity columns typed: flags as bool, stage as number, label as str; ``_base`` marks the base."""
    for col in ("continual", "single_domain"):
        df[col] = _flag(df[col])
    df = _numeric(df, ["stage", "alpha", "seed"])
    df["label"] = df["label"].astype(str)
    df["domain"] = df["domain"].astype(str)
    df["_base"] = (df["method"].astype(str) == "base") | (df["label"] == BASE_LABEL)
    return df


def _finals(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the final checkpoint of each stage (all rows when the table has no 'final' marks)."""
    final = df["checkpoint"].astype(str) == "final"
    return df[final] if final.any() else df


def _percent(series: pd.Series) -> pd.Series:
    """Fractions in [0, 1] -> percent; a column with a value above 1 is taken as already in percent."""
    return series if series.abs().max() > 1 else series * 100


def _methods(df: pd.DataFrame, palette: str):
    """Adds the mathtext label column ``_m``; returns (df, hue_order, colours, markers) keyed by ``_m``."""
    styles = method_styles(df["label"].unique(), palette)
    df = df.assign(_m=df["label"].map(pretty_label))
    order = [pretty_label(x) for x in styles]
    colours = {pretty_label(k): v[0] for k, v in styles.items()}
    markers = {pretty_label(k): v[1] for k, v in styles.items()}
    return df, order, colours, markers


def _method_handles(order, colours, markers, lines: bool = True):
    return [Line2D([], [], color=colours[m], marker=markers[m], linestyle="-" if lines else "", label=m)
            for m in order]


def _stage_ticks(df: pd.DataFrame) -> dict[int, str]:
    """{stage: 'stage\\ndomain'} from the rows' own stage/domain."""
    pairs = df[["stage", "domain"]].dropna().drop_duplicates("stage").sort_values("stage")
    return {int(s): (f"{int(s)}\n{d}" if int(s) else "0\nbase") for s, d in zip(pairs["stage"], pairs["domain"])}


_DOMAINS = ["math", "science", "tooluse", "code"]


def _domain_colours(domains) -> dict[str, tuple]:
    dark = sns.color_palette("Dark2", 8)
    out, extra = {}, 4
    for d in domains:
        if d in _DOMAINS:
            out[d] = tuple(dark[_DOMAINS.index(d)])
        else:
            out[d] = tuple(dark[extra % 8])
            extra += 1
    return out


def _ncols(n: int, max_cols: int = 5) -> tuple[int, int]:
    ncols = min(n, max_cols) if n <= max_cols else math.ceil(n / math.ceil(n / max_cols))
    return ncols, math.ceil(n / ncols)


def _remove_unused(axes, used: int) -> None:
    for ax in list(axes.flat)[used:]:
        ax.remove()


# ----------------------------------------------------------------------------------------------
# Figure 1: continual-learning performance


def _continual_eval(tables) -> pd.DataFrame:
    ev = _runs(_table(tables, "eval"))
    ev = _numeric(ev, ["relperf", "acc"])
    ev = ev[ev["continual"] & ~ev["_base"] & (ev["stage"] >= 1)]
    return _finals(ev)


def plot_cl_performance(tables, style: dict, out_stem: Path) -> list[Path]:
    """RelPerf (%) per benchmark domain vs task learned, one panel per method (paper Fig. 1, left)."""
    st = apply_style(style)
    title = "Continual learning: relative performance per domain"
    ev = _continual_eval(tables)
    ind = ev[(ev["kind"].astype(str) == "in-domain") & ev["relperf"].notna()]
    if ind.empty:
        return _note_figure(title, "eval.csv has no continual in-domain rows with a RelPerf", st, out_stem)
    keys = ["label", "seed", "stage"]
    # one value per (run, stage, domain): the mean over the domain's benchmarks; seeds give the CI
    per = ind.groupby([*keys, "bench_domain"], dropna=False)["relperf"].mean().reset_index()
    ood = ev[(ev["kind"].astype(str) == "ood") & ev["relperf"].notna()]
    ood = ood.groupby(keys, dropna=False)["relperf"].mean().reset_index()
    stage_ticks = _stage_ticks(ev)
    present = set(per["bench_domain"].astype(str))
    domains = [d for d in _DOMAINS if d in present] + sorted(present - set(_DOMAINS))
    dom_col = _domain_colours(domains)
    dom_mark = dict(zip(domains, ["o", "s", "^", "D", "v", "P", "X", "h"] * 4))
    labels = method_order(set(per["label"]) | set(ood["label"]))
    styles = method_styles(labels, st["palette"])
    ncols, nrows = _ncols(len(labels))
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.9 * ncols + 0.4, 2.7 * nrows + 0.7), sharex=True,
                             sharey=True, squeeze=False, layout="constrained")
    values = pd.concat([per["relperf"], ood["relperf"]])
    compressed = values.abs().max() > 150
    for ax, label in zip(axes.flat, labels):
        p, o = per[per["label"] == label], ood[ood["label"] == label]
        for d in domains:
            g = p[p["bench_domain"] == d]
            if not g.empty:
                sns.lineplot(data=g, x="stage", y="relperf", color=dom_col[d], marker=dom_mark[d], errorbar=CI,
                             ax=ax, legend=False)
        if not o.empty:
            sns.lineplot(data=o, x="stage", y="relperf", color="0.15", marker="X", linestyle="--", errorbar=CI,
                         ax=ax, legend=False)
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
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), title="Benchmark domain")
    return save(fig, out_stem, st)


def plot_ood_bars(tables, style: dict, out_stem: Path) -> list[Path]:
    """Per-OOD-benchmark RelPerf after the last stage, bars per method, compressive axis (Fig. 1, right)."""
    st = apply_style(style)
    title = "OOD relative performance after the last stage"
    ev = _continual_eval(tables)
    ood = ev[(ev["kind"].astype(str) == "ood") & ev["relperf"].notna()]
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
    sns.barplot(data=data, x="benchmark", y="relperf", hue="_m", order=benches, hue_order=order, palette=colours,
                errorbar=CI, saturation=1, capsize=0.15, err_kws={"linewidth": 0.9}, ax=ax, legend=False)
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
# Figure 2: model (parameter) drift

_DRIFT_METRICS = [("nss", "NSS (relative spectral shift)"), ("max_pa_deg", "Max PA (deg)"),
                  ("pm_overlap", "PM overlap (%)"), ("pm_update", "PM update (%)")]


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
                ax.text((s.lo + s.hi) / 2, 1.01, str(s.domain), ha="center", va="bottom", fontsize="small",
                        transform=blended_transform_factory(ax.transData, ax.transAxes))
        drawn = False
        for m in order:
            g = dp[(dp["_m"] == m) & dp[f"{metric}_mean"].notna()]
            if g.empty:
                continue
            band = g.groupby("point_index")[[f"{metric}_p10", f"{metric}_p90"]].mean()
            ax.fill_between(band.index, band.iloc[:, 0], band.iloc[:, 1], color=colours[m], alpha=0.15, lw=0)
            sns.lineplot(data=g, x="point_index", y=f"{metric}_mean", color=colours[m], marker=markers[m],
                         markersize=5, errorbar=CI, err_style="bars", ax=ax, legend=False)
            drawn = True
        if not drawn:
            _note(ax, f"no data: {metric} is empty")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("Checkpoint (domain@step)")
    for ax in axes.flat:
        ax.set_xticks(points["point_index"].tolist())
        ax.set_xlim(points["point_index"].min() - 0.6, points["point_index"].max() + 0.6)
    for ax in axes[-1]:
        ax.set_xticklabels(points["point"].astype(str).tolist(), rotation=55, ha="right", rotation_mode="anchor",
                           fontsize="small")
    handles = [*_method_handles(order, colours, markers),
               Patch(color="0.6", alpha=0.35, label="p10–p90 over matrices")]
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
    fig, axes = plt.subplots(1, len(panels), figsize=(1.0 + 1.6 * len(ticks) * len(panels), 4.0), sharey=True,
                             squeeze=False, layout="constrained")
    for ax, (kind, g) in zip(axes.flat, panels):
        sns.violinplot(data=g, x="_stage", y="similarity", hue="_m", order=list(ticks.values()), hue_order=order,
                       palette=colours, saturation=1, split=len(order) == 2, inner="quart", cut=0, density_norm="width",
                       linewidth=0.8, gap=0.06 if len(order) == 2 else 0, ax=ax, legend=False)
        ax.set_title({"ood": "OOD benchmarks", "in-domain": "in-domain benchmarks"}.get(kind, kind))
        ax.set_xlabel("Stage (domain learned)")
        ax.set_ylabel("Similarity to base response (cosine × 100)")
    handles = [Patch(color=colours[m], label=m) for m in order]
    fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), title="Method" + note)
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# Figure 4: gain / forgetting vs domain distance


def _distance_rows(tables) -> tuple[pd.DataFrame, str]:
    """Single-domain eval rows with ``mmd100`` = 100 x MMD(<domain>_train, benchmark); (rows, why empty)."""
    ev = _runs(_table(tables, "eval"))
    ev = _numeric(ev, ["gain", "forgetting", "relperf"])
    ev = _finals(ev[ev["single_domain"] & ~ev["_base"] & (ev["stage"] >= 1)])
    if ev.empty:
        return ev, "eval.csv has no single-domain rows (config single_domain_runs)"
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
                y=(col, "mean"), x=("mmd100", "first"), lo=(col, lambda v: ci95(v)[0]), hi=(col, lambda v: ci95(v)[1]))
            yerr = np.vstack([pts["y"] - pts["lo"], pts["hi"] - pts["y"]])
            ax.errorbar(pts["x"], pts["y"], yerr=np.where(np.isnan(yerr), 0, yerr), fmt=markers[m], color=colours[m],
                        ms=5, alpha=0.85, elinewidth=0.9, capsize=0, zorder=3)
            if g["mmd100"].nunique() >= 2:   # the fit uses every seed's point; its band is a 95% bootstrap CI
                sns.regplot(data=g, x="mmd100", y=col, scatter=False, color=colours[m], ci=95, n_boot=300,
                            seed=BOOT_SEED, truncate=True, line_kws={"lw": 1.6}, ax=ax)
            drawn = True
        if not drawn:
            _note(ax, f"no data: {col} is empty")
        ax.set_xlabel("MMD (RBF) to the training domain (× 100)")
        ax.set_ylabel(ylabel)
        ax.set_title(ylabel.split(" ")[0])
    fig.legend(handles=_method_handles(order, colours, markers), loc="outside upper center", ncol=len(order),
               title="Method (linear fit, 95% CI)")
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
    grid = mmd.astype({"dataset_a": str, "dataset_b": str}).pivot_table(
        index="dataset_a", columns="dataset_b", values="mmd", aggfunc="mean").reindex(index=order, columns=order) * 100
    n = len(order)
    side = 0.5 * n + 2.6
    fig, ax = plt.subplots(figsize=(side + 1.2, side), layout="constrained")
    sns.heatmap(grid, annot=True, fmt=".2f", cmap="rocket_r", square=True, linewidths=0.4, linecolor="white",
                annot_kws={"fontsize": max(5.0, min(9.0, 110 / n))}, cbar_kws={"label": "MMD × 100", "shrink": 0.75},
                ax=ax)
    bounds = [i for i in range(1, n) if roles[order[i]] != roles[order[i - 1]]]
    for b in bounds:
        ax.axhline(b, color="0.1", lw=1.2)
        ax.axvline(b, color="0.1", lw=1.2)
    ax.set_xticks(np.arange(n) + 0.5, [f"{d} ({roles[d]})" for d in order], rotation=45, ha="right",
                  rotation_mode="anchor")
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
    sns.scatterplot(data=ts, x="x", y="y", hue="dataset", hue_order=order, style="role", style_order=role_order,
                    markers=markers, palette=dict(zip(order, palette)), s=16, alpha=0.75, linewidth=0, ax=ax)
    sns.move_legend(ax, "upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", markerscale=1.4)
    ax.set_xlabel("t-SNE 1 (a.u.)")
    ax.set_ylabel("t-SNE 2 (a.u.)")
    ax.set_title(title)
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
    """Acc@8 on MATH after the MATH stage per teacher (paper Table 1), stderr or 95% CI bars."""
    st = apply_style(style)
    title = "Teacher stability: Acc@8 after the MATH stage"
    ts = _numeric(_table(tables, "teacher_stability"), ["acc", "stderr", "alpha", "seed"]).dropna(subset=["acc"])
    if ts.empty:
        return _note_figure(title, "teacher_stability.csv is empty", st, out_stem)
    ts["teacher"] = ts["teacher"].astype(str)
    ts["benchmark"] = ts["benchmark"].astype(str)
    scale = 1 if ts["acc"].abs().max() > 1 else 100
    ts["acc100"], ts["se100"] = ts["acc"] * scale, ts["stderr"] * scale
    teachers = [t for t in TEACHER_ORDER if t in set(ts["teacher"])] + list(
        dict.fromkeys(t for t in ts["teacher"] if t not in TEACHER_ORDER))
    run_of = {t: _teacher_label(g["method"].iloc[0], g["alpha"].iloc[0]) for t, g in ts.groupby("teacher")}
    styles = method_styles(run_of.values(), st["palette"])
    colours = {t: styles[run_of[t]][0] for t in teachers}
    benches = list(dict.fromkeys(ts["benchmark"]))
    several_seeds = ts.groupby(["teacher", "benchmark"]).size().max() > 1
    fig, axes = plt.subplots(1, len(benches), figsize=(0.9 + 1.1 * len(teachers) * len(benches), 4.0), sharey=True,
                             squeeze=False, layout="constrained")
    for ax, bench in zip(axes.flat, benches):
        g = ts[ts["benchmark"] == bench]
        present = [t for t in teachers if t in set(g["teacher"])]
        if several_seeds:
            sns.barplot(data=g, x="teacher", y="acc100", hue="teacher", order=present, hue_order=present,
                        palette=colours, errorbar=CI, saturation=1, capsize=0.2, err_kws={"linewidth": 1},
                        legend=False, ax=ax)
            means = g.groupby("teacher")["acc100"].mean()
            top = g.groupby("teacher")["acc100"].max().to_dict()   # a bootstrap CI of the mean stays below
        else:
            agg = g.groupby("teacher")[["acc100", "se100"]].mean().reindex(present)
            ax.bar(range(len(present)), agg["acc100"], yerr=agg["se100"].fillna(0), capsize=5,
                   color=[colours[t] for t in present], error_kw={"lw": 1})
            ax.set_xticks(range(len(present)), present)
            means = agg["acc100"]
            top = {t: means[t] + (0 if pd.isna(agg["se100"][t]) else agg["se100"][t]) for t in present}
        ymax = max([*(top[t] for t in present), 1.0])
        for i, t in enumerate(present):
            ax.text(i, top[t] + 0.02 * ymax, f"{means[t]:.1f}", ha="center", va="bottom", fontsize="small")
        ax.set_ylim(0, ymax * 1.15 + 1e-9)
        ax.set_title(bench)
        ax.set_xlabel("Teacher")
        ax.set_ylabel("Acc@8 (%)")
        ax.tick_params(axis="x", labelrotation=20)
    fig.suptitle(title + (" (mean, 95% CI over seeds)" if several_seeds else " (± stderr)"))
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# Beyond the paper: formatting artifacts along the chain (collapse as it happens)

_ARTIFACTS = [("boxed_per_response", r"\boxed{} per response (count)", False),
              ("multi_boxed_share", r"Responses with ≥ 2 \boxed{} (%)", True),
              ("ngram_repeat", "n-gram repetition (%)", True),
              ("truncation_rate", "Truncated responses (%)", True),
              ("mean_length", "Mean response length (tokens)", False)]


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
    if not base.empty:     # the base model is everyone's stage 0
        b = base[cols].mean()
        per = pd.concat([per, pd.DataFrame([{**b.to_dict(), "label": lab, "seed": np.nan, "stage": 0, "domain": "base"}
                                            for lab in per["label"].unique()])], ignore_index=True)
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
                sns.lineplot(data=g, x="stage", y=col, color=colours[m], marker=markers[m], errorbar=CI,
                             ax=ax, legend=False)
                drawn = True
        if not drawn:
            _note(ax, f"no data: {col} is empty")
        ax.set_ylabel(ylabel)
        ax.set_xlabel("Task learned")
        ax.set_xticks(list(ticks), list(ticks.values()))
        ax.tick_params(axis="x", labelbottom=True)
    leg_ax = axes.flat[-1]
    leg_ax.axis("off")
    leg_ax.legend(handles=_method_handles(order, colours, markers), loc="center", title="Method",
                  fontsize="medium")
    fig.suptitle(title + " (mean over benchmarks)")
    return save(fig, out_stem, st)


# ----------------------------------------------------------------------------------------------
# registry


#: figure name -> (plot function, table names it reads)
FIGURES = {
    "cl_performance": (plot_cl_performance, ["eval"]),
    "ood_bars": (plot_ood_bars, ["eval"]),
    "model_drift": (plot_model_drift, ["drift_params"]),
    "response_drift": (plot_response_drift, ["drift_responses"]),
    "gain_forgetting_distance": (plot_gain_forgetting_distance, ["eval", "domain_mmd"]),
    "mmd_heatmap": (plot_mmd_heatmap, ["domain_mmd"]),
    "tsne": (plot_tsne, ["tsne"]),
    "teacher_stability": (plot_teacher_stability, ["teacher_stability"]),
    "artifacts": (plot_artifacts, ["eval"]),
}


def read_table(tables_dir, name: str) -> pd.DataFrame:
    """``<tables_dir>/<name>.csv``; a missing or empty file gives an empty table with the contract columns."""
    path = Path(tables_dir) / f"{name}.csv"
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=TABLE_COLUMNS[name])
    return pd.read_csv(path)


def make_figure(name: str, tables_dir, style: dict | None, out_dir) -> list[Path]:
    """Draw figure ``name`` from the CSV tables in ``tables_dir`` to ``<out_dir>/<name>.<fmt>``."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    func, needs = FIGURES[name]
    tables = {t: read_table(tables_dir, t) for t in needs}
    return func(tables, style or {}, Path(out_dir) / name)


def main(argv=None) -> None:
    """``python -m sdpocl.plots TABLES_DIR OUT_DIR [FIGURE ...]`` with the default style."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m sdpocl.plots TABLES_DIR OUT_DIR [FIGURE ...]")
    for name in argv[2:] or FIGURES:
        for path in make_figure(name, argv[0], None, argv[1]):
            print(path)


if __name__ == "__main__":
    main()
