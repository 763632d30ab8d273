"""The ``sdpocl`` commands: one module per stage of the workflow (:mod:`.data`, :mod:`.train`, :mod:`.evaluate`,
:mod:`.drift`, :mod:`.plot`, :mod:`.grid`), each holding its commands' arguments and handlers side by side (as
lm-eval's ``_cli``); this package collects them into one table, builds the parser and runs a command line
(:func:`run`). A new command is one entry and one handler in its stage's module.

Two callers run commands from here: the front door (:mod:`sdpocl.cli`, the ``sdpocl`` entry point) and the job
server's children (:mod:`sdpocl.jobserver`). This package imports neither of them; handlers import the library
inside their bodies, so ``sdpocl --help`` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from sdpocl.commands import data, drift, evaluate, grid, plot, train
from sdpocl.commands.base import Command, arg

#: the parser's description (``sdpocl --help``)
DESCRIPTION = "Command-line interface: one subcommand per workflow rule."

#: ``job-server`` has no handler here: the job server runs this table's commands in its children, so the table
#: does not import it; the front door (:mod:`sdpocl.cli`) gives its handler to :func:`build_parser`
JOB_SERVER = Command(
    "job-server",
    "serve local jobs from one process that imported torch, TRL and lm-eval once (started by the Snakefile)",
    None,
    [
        arg("--socket", required=True, help="Unix socket path; jobs find it in $SDPOCL_JOB_SERVER"),
        arg("--watch-pid", type=int, help="exit when this process (Snakemake) is gone"),
    ],
)

#: every command, in the order ``sdpocl --help`` lists them (the rules' order through the DAG)
COMMANDS: list[Command] = [
    *data.COMMANDS,
    *evaluate.COMMANDS[:2],  # write-eval-task, evaluate
    evaluate.COMMANDS[2],  # aggregate-eval
    train.COMMANDS[0],  # train-stage
    *drift.COMMANDS,
    *plot.COMMANDS,
    JOB_SERVER,
    train.COMMANDS[1],  # teacher-check
    evaluate.COMMANDS[3],  # goals
    *grid.COMMANDS,
]


def build_parser(handlers: dict[str, Callable] | None = None) -> argparse.ArgumentParser:
    """The ``sdpocl`` parser: a subparser per command of :data:`COMMANDS`, its handler as ``func``
    (``handlers`` gives the ones the table leaves out, or replaces some)."""
    handlers = handlers or {}
    p = argparse.ArgumentParser(prog="sdpocl", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text, func, arguments in COMMANDS:
        s = sub.add_parser(name, help=help_text)
        for flags, kwargs in arguments:
            s.add_argument(*flags, **kwargs)
        s.set_defaults(func=handlers.get(name, func))
    return p


def run(argv: list[str], parser: argparse.ArgumentParser | None = None) -> int:
    """Parse ``sdpocl argv`` and run its handler; the exit status (2 for a ValueError or a missing file,
    argparse's usage errors exit through SystemExit as usual)."""
    parser = parser or build_parser()
    argv = list(argv)
    args = parser.parse_args(argv)
    args.argv = argv
    if args.func is None:
        parser.error(f"{args.command} runs from the sdpocl command itself (sdpocl.cli), not from a job server")
    try:
        args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"sdpocl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0
