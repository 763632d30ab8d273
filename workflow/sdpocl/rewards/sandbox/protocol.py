"""The batch protocol between the workflow's process and the sandbox runner.

The workflow's side (:mod:`sdpocl.rewards.sandbox.client`) starts ``python -I -S runner.py
--sandbox-runner`` (:data:`RUNNER_FLAG`) and writes ONE request, a JSON object, to its stdin
(:func:`encode_request`): the programs (each a list of source segments), one list of test sources
per program, the limits (``timeout_s``, ``memory_mb``, ``max_file_bytes``), the number of units
run at once (``workers``), the batch's temp dir (``root``) and the layers switched off
(``disable``).  The runner reads it (:func:`read_request`) and answers with ONE JSON list on stdout
(:func:`write_response`), one row per program in order: ``ok``, ``reason``, ``wall_s``,
``layers``, ``passed``; the workflow turns the rows into :class:`SandboxResult` objects
(:func:`decode_response`).

Stand-alone: the runner process (``python -I -S``, no site-packages) imports this module by file,
so it imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Union

RUNNER_FLAG = "--sandbox-runner"

Program = Union[str, Sequence[str]]


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one program (all its tests).  Truthy iff ``ok``.

    ``reason``: why it failed (``"test 3/5: AssertionError: ..."`` with tests), ``wall_s``: the
    wall-clock seconds of its runs added up, ``tests_passed``: how many of its tests passed."""

    ok: bool
    reason: str = ""
    wall_s: float = 0.0
    layers: tuple[str, ...] = field(default=())
    tests_passed: int = 0

    def __bool__(self) -> bool:  # pragma: no cover - trivial
        return self.ok


def normalise_programs(programs: Sequence[Program]) -> list[list[str]]:
    out: list[list[str]] = []
    for p in programs:
        if isinstance(p, str):
            out.append([p])
        else:
            segs = list(p)
            if not all(isinstance(s, str) for s in segs):
                raise TypeError("a program must be a str or a sequence of str")
            out.append(segs)
    return out


def normalise_tests(tests: Sequence[Sequence[str]] | None, n: int) -> list[list[str]]:
    if tests is None:
        return [[] for _ in range(n)]
    if isinstance(tests, str) or len(tests) != n:
        raise ValueError("tests must hold one list of test strings per program")
    out = []
    for t in tests:
        if isinstance(t, str):
            raise TypeError("the tests of a program must be a sequence of str, not one str")
        t = list(t)
        if not all(isinstance(x, str) for x in t):
            raise TypeError("a test must be a str")
        out.append(t)
    return out


def encode_request(
    programs: list[list[str]],
    tests: list[list[str]],
    *,
    timeout_s: float,
    memory_mb: int,
    max_file_bytes: int,
    workers: int,
    root: str,
    disable: Sequence[str],
) -> bytes:
    """The request the runner reads on stdin (programs and tests already normalised)."""
    cfg = {
        "programs": programs,
        "tests": tests,
        "timeout_s": float(timeout_s),
        "memory_mb": int(memory_mb),
        "max_file_bytes": int(max_file_bytes),
        "workers": workers,
        "root": root,
        "disable": list(disable),
    }
    return json.dumps(cfg).encode("utf-8")


def read_request() -> dict:
    """The runner's side: the request, from stdin."""
    return json.loads(sys.stdin.buffer.read().decode("utf-8"))


def write_response(results: list[dict]) -> None:
    """The runner's side: one row per program, as JSON on stdout (all of it, across short writes)."""
    out = json.dumps(results).encode("utf-8")
    view = memoryview(out)
    while view:
        try:
            written = os.write(1, view)
        except InterruptedError:
            continue
        view = view[written:]


def decode_response(out: bytes, n: int) -> list[SandboxResult]:
    """The runner's answer as ``n`` results; ``ValueError``/``KeyError``/``TypeError`` when it is
    malformed."""
    rows = json.loads(out.decode("utf-8"))
    if not isinstance(rows, list) or len(rows) != n:
        raise ValueError(f"expected {n} results")
    return [
        SandboxResult(bool(r["ok"]), str(r["reason"]), float(r["wall_s"]), tuple(r["layers"]), int(r["passed"]))
        for r in rows
    ]
