"""``sdpocl`` commands of the figures: each command's arguments and its handler, side by side."""

from __future__ import annotations

import json

from sdpocl.commands.base import Command, arg


def cmd_plot_figure(a) -> None:
    from sdpocl.plot.figures import make_figure

    for path in make_figure(a.figure, a.tables, json.loads(a.style), a.out):
        print(f"[plot-figure] {path}")


COMMANDS: list[Command] = [
    Command(
        "plot-figure",
        "draw one paper figure from the tables",
        cmd_plot_figure,
        [
            arg("--figure", required=True),
            arg("--tables", required=True, help="directory of the tidy CSV tables"),
            arg("--style", default="{}", help="plots settings JSON (formats, dpi, context, ...)"),
            arg("--out", required=True, help="figures directory"),
        ],
    ),
]
