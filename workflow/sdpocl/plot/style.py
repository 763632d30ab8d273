"""Conventions shared by all figures: a method label keeps one colour and marker everywhere
(:func:`method_styles`) and is rendered with mathtext (:func:`pretty_label`); several seeds are
drawn as means with 95% bootstrap confidence intervals; accuracies, rates and shares stored as
fractions in [0, 1] are shown in percent (a column with a value above 1 is taken as already in
percent).
"""

from __future__ import annotations

import math
import re
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from sdpocl.plot.tables import (  # noqa: E402
    DOMAIN_MMD_COLUMNS,
    DRIFT_PARAM_COLUMNS,
    DRIFT_RESPONSE_COLUMNS,
    EVAL_COLUMNS,
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

DEFAULT_STYLE = {
    "formats": ["png", "pdf"],
    "dpi": 150,
    "context": "paper",
    "font_scale": 1.0,
    "style": "whitegrid",
    "palette": "colorblind",
}

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
_KNOWN_SLOTS = [5, 6, 8, 9]  # slot 7 (grey in colorblind/deep/muted) is left to the base model
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
    while len(mags) > 5:  # at most 11 ticks: keep every other magnitude, largest kept
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
    ax.text(
        0.5,
        0.5,
        message,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize="small",
        color="0.25",
        wrap=True,
        bbox={"boxstyle": "round,pad=0.6", "fc": "0.96", "ec": "0.6"},
    )
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


def acc_name(df: pd.DataFrame) -> str:
    """``Acc@k`` with the table's own samples per prompt (``n_samples``): the paper's Acc@8, or what a
    preset estimates the same mean accuracy with (the tiny preset: 3 samples on more prompts); ``Acc@k``
    where the table does not say or its rows differ."""
    k = pd.to_numeric(df["n_samples"], errors="coerce").dropna().unique() if "n_samples" in df else []
    return f"Acc@{int(k[0])}" if len(k) == 1 else "Acc@k"


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
    return [Line2D([], [], color=colours[m], marker=markers[m], linestyle="-" if lines else "", label=m) for m in order]


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


def legend_columns(n_entries: int, panel_columns: int, per_panel: float = 1.8) -> int:
    """Legend columns that fit above ``panel_columns`` panels: about ``per_panel`` entries of
    "science (in-domain)" width per 2.9-inch panel (a one-row legend over two panels is clipped)."""
    return max(1, min(n_entries, int(panel_columns * per_panel)))


def _remove_unused(axes, used: int) -> None:
    for ax in list(axes.flat)[used:]:
        ax.remove()
