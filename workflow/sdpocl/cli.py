"""Command-line interface: one subcommand per workflow rule.

Rules call these; each also runs by hand, e.g.
``sdpocl train-stage --config config/config.yaml --run grpo_s0 --chain math/science``.

This is the front door (the ``sdpocl`` entry point, also ``python -m sdpocl.cli``): the commands, their
arguments and handlers are the table in :mod:`sdpocl.commands`. Here: a job of a local run whose
Snakefile started a job server (``$SDPOCL_JOB_SERVER``) hands its command line to the server
(:mod:`sdpocl.jobserver`), else the command runs in this process; and ``sdpocl job-server`` itself.
"""

from __future__ import annotations

import argparse
import os
import sys

from sdpocl.commands import build_parser as _table_parser
from sdpocl.commands import run
from sdpocl.jobserver import ENV as JOB_SERVER_ENV
from sdpocl.jobserver import serve, submit

__all__ = ["build_parser", "main"]


def cmd_job_server(a) -> None:
    serve(a.socket, watch_pid=a.watch_pid)


def build_parser() -> argparse.ArgumentParser:
    """The table's parser with every handler, ``job-server``'s included."""
    return _table_parser({"job-server": cmd_job_server})


def main(argv: list[str] | None = None) -> int:
    if argv is None and os.environ.get(JOB_SERVER_ENV) and sys.argv[1:2] != ["job-server"]:
        status = submit(os.environ[JOB_SERVER_ENV], sys.argv[1:])
        if status is not None:
            return status
    argv = sys.argv[1:] if argv is None else list(argv)
    return run(argv, build_parser())


if __name__ == "__main__":
    sys.exit(main())
