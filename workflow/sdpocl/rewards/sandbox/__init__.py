"""Run untrusted, model-written Python code in a throw-away, resource-limited process.

Public API
----------
``run_batch(programs, *, tests=None, timeout_s=2.0, memory_mb=256, ...) -> list[SandboxResult]``
    Run many programs, each against its unit tests; one result (``ok``, ``reason``,
    ``wall_s``, ``layers``, ``tests_passed``) per program, in order.  ``SandboxResult``
    is truthy iff ``ok``.
``run_program(program, **kw) -> SandboxResult``
    Convenience wrapper for a single program.
``sandbox_layers() -> tuple[str, ...]``
    Which isolation layers actually engage on this machine (runs a no-op program).

A *program* is either one source string or a sequence of source strings
("segments", e.g. ``[solution_code, helper]``); ``tests`` optionally gives each
program a list of test sources (e.g. ``["assert f(1) == 8", ...]``).  A *unit* is one
test together with its program -- or, for a program without tests, the program
alone -- and runs in its own process with its own limits (as upstream's code
reward: one process per test, the test's time limit + 1 s, 1 GB).  The segments of
a unit (the program's, then the test) are compiled separately (so one cannot
swallow the next) and executed in order in one fresh module namespace
(``__name__ == "solution"``, so ``if __name__ == "__main__":`` blocks are skipped,
as in HumanEval/MBPP-style harnesses).  A unit succeeds iff every segment runs to
the end without raising (``SystemExit`` included) within the limits; a program
succeeds iff all its units do.  A program's tests start in order; none starts after
one of them has failed, and its tests still running then are killed unscored.

Design
------
Model code never runs in the caller's process.  One module per concern:

* :mod:`.client` -- the workflow's side: ``run_batch`` starts ONE runner process per batch and
  kills it (and so every child) when the batch overruns its time-out;
* :mod:`.protocol` -- the batch request (programs, tests, limits) on the runner's stdin and the
  response (one row per program) on its stdout;
* :mod:`.runner` -- the runner script (``python -I -S runner.py --sandbox-runner``): one forked
  child per unit, its set-up, the success handshake, the deadlines, the verdicts;
* :mod:`.policy` -- what the untrusted code may do: the rlimits, the network namespace, Landlock,
  the privilege drop, the audit hook, the modules it can reach; and what is and is not guaranteed.
"""

from __future__ import annotations

from sdpocl.rewards.sandbox.client import run_batch, run_program, sandbox_layers
from sdpocl.rewards.sandbox.policy import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S
from sdpocl.rewards.sandbox.protocol import SandboxResult

__all__ = [
    "SandboxResult",
    "run_batch",
    "run_program",
    "sandbox_layers",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_MEMORY_MB",
]
