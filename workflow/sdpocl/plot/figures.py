"""Figures of the study, drawn from the tidy tables of :mod:`sdpocl.plot.tables` only (never checkpoints).

One public function per figure, ``plot_<name>(tables, style, out_stem) -> list[Path]``: ``tables``
maps a table name (``eval``, ``drift_params``, ... = the CSV stem under ``results/tables/``) to a
DataFrame, ``style`` is the config's ``plots:`` block and ``out_stem.<fmt>`` is written for each of
``style["formats"]``. :data:`FIGURES` names every figure and the tables it reads, so a rule only
calls :func:`make_figure`. Missing data never crash a figure: it is still written, with a visible
"no data" note saying what is missing.

The figures live in one module per family (:mod:`.continual`, :mod:`.drift`, :mod:`.distance`,
:mod:`.collapse`, :mod:`.mitigations`); the conventions they share are in :mod:`.style`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from sdpocl.plot.collapse import plot_artifacts
from sdpocl.plot.continual import plot_cl_performance, plot_ood_bars, plot_teacher_stability
from sdpocl.plot.distance import plot_gain_forgetting_distance, plot_mmd_heatmap, plot_tsne
from sdpocl.plot.drift import plot_model_drift, plot_response_drift
from sdpocl.plot.mitigations import plot_mitigations
from sdpocl.plot.style import CANONICAL_METHODS, TABLE_COLUMNS, compress, expand, method_styles, pretty_label
from sdpocl.plot.tables import FIGURE_TABLES

__all__ = [
    "FIGURES",
    "TABLE_COLUMNS",
    "CANONICAL_METHODS",
    "make_figure",
    "read_table",
    "compress",
    "expand",
    "method_styles",
    "pretty_label",
]

_DRAW = {
    "cl_performance": plot_cl_performance,
    "ood_bars": plot_ood_bars,
    "model_drift": plot_model_drift,
    "response_drift": plot_response_drift,
    "gain_forgetting_distance": plot_gain_forgetting_distance,
    "mmd_heatmap": plot_mmd_heatmap,
    "tsne": plot_tsne,
    "teacher_stability": plot_teacher_stability,
    "artifacts": plot_artifacts,
    "mitigations": plot_mitigations,
}
#: figure name -> (plot function, table names it reads); the tables are the workflow's
#: :data:`sdpocl.plot.tables.FIGURE_TABLES`, so the rule's inputs and the drawing agree
FIGURES = {name: (_DRAW[name], FIGURE_TABLES[name]) for name in FIGURE_TABLES}


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
    """``python -m sdpocl.plot.figures TABLES_DIR OUT_DIR [FIGURE ...]`` with the default style."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m sdpocl.plot.figures TABLES_DIR OUT_DIR [FIGURE ...]")
    for name in argv[2:] or FIGURES:
        for path in make_figure(name, argv[0], None, argv[1]):
            print(path)


if __name__ == "__main__":
    main()
