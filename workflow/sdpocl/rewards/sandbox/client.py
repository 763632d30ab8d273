"""The workflow's side of the sandbox: :func:`run_batch` starts a runner, sends it a batch, reads the results.

ONE runner process per batch (``python -I -S runner.py --sandbox-runner``: isolated mode, no
site-packages, a minimal environment, its own session, its own temp dir) receives the batch as
JSON on stdin and answers as JSON on stdout (:mod:`sdpocl.rewards.sandbox.protocol`).
``run_batch`` has an overall time-out (sum of the per-unit limits plus slack); if the runner
exceeds it, hangs or crashes, its process group is killed (children die via PDEATHSIG) and every
unfinished program is reported as a failure -- ``run_batch`` never raises because of what a
program does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import sdpocl.rewards.sandbox.runner as runner
from sdpocl.rewards.sandbox.policy import DEFAULT_MAX_FILE_BYTES, DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, LAYERS
from sdpocl.rewards.sandbox.protocol import (
    RUNNER_FLAG,
    Program,
    SandboxResult,
    decode_response,
    encode_request,
    normalise_programs,
    normalise_tests,
)

log = logging.getLogger(__name__)

_OVERALL_SLACK_S = 10.0


def _default_workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def run_batch(
    programs: Sequence[Program],
    *,
    tests: Sequence[Sequence[str]] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_workers: int | None = None,
    _disable_layers: Sequence[str] = (),
) -> list[SandboxResult]:
    """Run each program in the sandbox; return one ``SandboxResult`` per program.

    ``tests`` (optional) holds one list of test sources per program: each test runs in its own
    child (the program's segments, then the test), with its own limits, and the program passes
    iff every test passes; its tests start in order and none starts after one has failed.  A
    program without tests (``tests`` None or an empty list) runs once, as its only unit.
    ``timeout_s`` is the wall-clock limit per unit (CPU limit ``ceil(timeout_s)``),
    ``memory_mb`` the address-space limit of each child process, ``max_file_bytes``
    the largest file a unit may write inside its temp dir, ``max_workers`` the
    number of units run concurrently (default: CPUs available, at most 8).
    ``_disable_layers`` (testing only) switches off some of
    ``("netns", "landlock", "privdrop", "audit")``.
    Never raises because of a program's behaviour; infrastructure failures are
    logged and reported as failed results.
    """
    progs = normalise_programs(programs)
    n = len(progs)
    test_lists = normalise_tests(tests, n)
    if n == 0:
        return []
    if not timeout_s > 0:
        raise ValueError("timeout_s must be positive")
    bad = set(_disable_layers) - set(LAYERS)
    if bad:
        raise ValueError(f"unknown sandbox layers {sorted(bad)}; known: {list(LAYERS)}")
    workers = max(1, int(max_workers or _default_workers()))

    root = tempfile.mkdtemp(prefix="sdpocl-sandbox-")
    t0 = time.monotonic()
    try:
        os.chmod(root, 0o711)  # nobody may traverse into its own sub-dir, not list
        payload = encode_request(
            progs,
            test_lists,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_file_bytes=max_file_bytes,
            workers=workers,
            root=os.path.realpath(root),
            disable=_disable_layers,
        )
        units = sum(max(1, len(t)) for t in test_lists)
        overall = units * float(timeout_s) + _OVERALL_SLACK_S
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        if os.environ.get("LD_LIBRARY_PATH"):  # e.g. Pythons from HPC environment modules
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(runner.__file__), RUNNER_FLAG],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=root,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            log.warning("sandbox: cannot start runner: %s", exc)
            return [SandboxResult(False, f"runner-start-failed: {exc}")] * n
        try:
            out, err = proc.communicate(payload, timeout=overall)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
            log.warning("sandbox: runner exceeded overall timeout %.1fs; killed", overall)
            return [SandboxResult(False, "overall-timeout", time.monotonic() - t0)] * n
        finally:
            if proc.poll() is None:  # pragma: no cover - defensive
                _kill_group(proc.pid)
                proc.wait()
        if proc.returncode != 0:
            log.warning(
                "sandbox: runner failed (rc=%s): %s",
                proc.returncode,
                err.decode("utf-8", "replace")[-2000:],
            )
            return [SandboxResult(False, f"runner-failed rc={proc.returncode}")] * n
        try:
            return decode_response(out, n)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("sandbox: malformed runner output (%s)", exc)
            return [SandboxResult(False, "runner-bad-output")] * n
    finally:
        runner.rmtree_force(root)


def run_program(program: Program, **kwargs) -> SandboxResult:
    """Run a single program (see ``run_batch`` for keyword arguments)."""
    return run_batch([program], **kwargs)[0]


def sandbox_layers() -> tuple[str, ...]:
    """Isolation layers that engage on this machine, e.g. ``('netns', 'landlock',
    'privdrop', 'audit')``.  Runs one no-op program."""
    return run_program("pass").layers


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
