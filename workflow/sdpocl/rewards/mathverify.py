"""HF math-verify (LaTeX equivalence) in a worker process that can be killed.

``verify_pairs([(gold, pred), ...], timeout_s=5.0) -> list[bool]`` decides, for each pair,
``math_verify.verify(parse(gold), parse(pred))`` with both sides wrapped in ``\\boxed{}`` first
(math-verify extracts LaTeX only inside math delimiters: a bare ``\\dfrac{14}{3}`` or ``\\{1,2\\}``
does not parse).  The math reward calls it after string equality fails (docs/paper.md, "Rewards").

Why a worker process
--------------------
math-verify's own timeouts use ``signal.alarm`` and work only in a main thread; TRL and lm-eval
may call a reward from another thread, and sympy can spend minutes (or, inside a C call that a
signal cannot interrupt, forever) on a hostile expression such as ``9^{9^{9^{9}}}``.  So the
workflow's process never runs math-verify itself: one worker per process (started on first use
with ``python -P <this file> --math-verify-worker``; its own session, ``PR_SET_PDEATHSIG``, a
2 GB address-space limit) receives a batch of pairs as one JSON line on stdin and answers one line
per pair.  In the worker's main thread each pair runs under a ``setitimer`` alarm of
``timeout_s`` (math-verify's own alarms are switched off, so the limit covers parse + verify).

Limits, all enforced by the caller with ``select`` deadlines (nothing here can block):

* **per answer** ``timeout_s`` + 1 s from the previous answer: if no verdict comes back (the
  worker is stuck where the alarm cannot reach, or crashed), the worker is killed (its process
  group), that answer scores False, and a fresh worker takes the rest of the batch;
* **per batch** ``timeout_s + BATCH_S_PER_ANSWER`` (1 s) x the distinct pairs (or ``budget_s``):
  when it runs out the worker is killed and every answer without a verdict scores False;
* **start** ``START_TIMEOUT_S`` for the first start of a worker (importing sympy); a restart
  within a batch counts against the batch budget.

Every False that comes from a limit (not from math-verify) is logged as a warning.  A process
that forks gets its own worker (the parent's is never touched); the worker is stopped at exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

__all__ = ["verify_pairs", "wrap_latex", "MATH_TIMEOUT_S", "BATCH_S_PER_ANSWER", "START_TIMEOUT_S"]

log = logging.getLogger(__name__)

MATH_TIMEOUT_S = 5.0  # per answer: upstream's `with timeout(seconds=5)` around parse + verify
# batch budget = timeout_s + this per distinct answer; math-verify takes 3-300 ms per answer
# (bench/math_verify_cost.py: ~50 ms on average, tuples with pi ~300 ms)
BATCH_S_PER_ANSWER = 1.0
START_TIMEOUT_S = 120.0  # importing sympy + math-verify (~1 s; generous for a loaded node)
WORKER_MEMORY_MB = 2048  # address space of the worker (~60 MB after its imports)
_GRACE_S = 1.0
_WORKER_FLAG = "--math-verify-worker"


def wrap_latex(text: object) -> str:
    """``text`` stripped of surrounding whitespace and ``$`` pairs, inside ``\\boxed{...}``."""
    t = str(text).strip()
    while len(t) >= 2 and t[0] == "$" and t[-1] == "$":
        t = t[1:-1].strip()
    return "\\boxed{" + t + "}"


class _WorkerDied(Exception):
    pass


class _Worker:
    """One math-verify worker process and its line protocol."""

    def __init__(self, deadline: float):
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), _WORKER_FLAG],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.out = self.proc.stdout.fileno()
        self.inp = self.proc.stdin.fileno()
        os.set_blocking(self.out, False)
        os.set_blocking(self.inp, False)
        self.buf = bytearray()
        line = self.readline(deadline)
        if line != b"ready":
            detail = "no answer in time" if line is None else line.decode("utf-8", "replace")[:300]
            self.kill()
            raise _WorkerDied(f"math-verify worker did not start: {detail}")

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def readline(self, deadline: float) -> bytes | None:
        """The next line, None at ``deadline``; ``_WorkerDied`` at end of file."""
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                return line
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                ready, _, _ = select.select([self.out], [], [], left)
            except InterruptedError:
                continue
            if not ready:
                return None
            try:
                chunk = os.read(self.out, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise _WorkerDied("math-verify worker exited")
            self.buf += chunk

    def send(self, data: bytes, deadline: float) -> bool:
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                _, ready, _ = select.select([], [self.inp], [], left)
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                n = os.write(self.inp, view)
            except BlockingIOError:
                continue
            except OSError as exc:  # BrokenPipeError: it died
                raise _WorkerDied(f"math-verify worker gone ({exc})") from None
            view = view[n:]
        return True

    def kill(self) -> None:
        if self.owner != os.getpid():
            return  # inherited through fork: the parent's worker, not ours to stop
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            with contextlib.suppress(OSError):
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILLed: does not time out
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                f.close()


_lock = threading.Lock()
_worker: _Worker | None = None


def _get_worker(deadline: float) -> _Worker:
    global _worker
    if _worker is not None and not _worker.alive():
        if _worker.owner == os.getpid():
            _worker.kill()
        _worker = None
    if _worker is None:
        _worker = _Worker(deadline)
    return _worker


def _drop_worker() -> None:
    global _worker
    if _worker is not None:
        _worker.kill()
        _worker = None


@atexit.register
def _stop_at_exit() -> None:  # pragma: no cover - interpreter shutdown
    w = _worker
    if w is not None and w.owner == os.getpid():
        w.kill()


def _check_installed() -> None:
    import importlib.util

    if importlib.util.find_spec("math_verify") is None:
        raise ImportError("the math reward needs math-verify (pip install math-verify==0.9.0; see pyproject.toml)")


def verify_pairs(
    pairs: Sequence[tuple[object, object]],
    *,
    timeout_s: float = MATH_TIMEOUT_S,
    budget_s: float | None = None,
) -> list[bool]:
    """``math_verify.verify(parse(gold), parse(pred))`` for each ``(gold, pred)``, both wrapped
    in ``\\boxed{}``; False where math-verify says no, fails, or a limit runs out (module docstring).
    Equal pairs are sent once.  Thread-safe; never blocks past the batch budget (plus the first
    start of a worker)."""
    n = len(pairs)
    results = [False] * n
    if n == 0:
        return results
    if not timeout_s > 0:
        raise ValueError("timeout_s must be positive")
    _check_installed()
    unique: dict[tuple[str, str], list[int]] = {}
    for i, (gold, pred) in enumerate(pairs):
        unique.setdefault((wrap_latex(gold), wrap_latex(pred)), []).append(i)
    keys = list(unique)
    verdict: list[bool | None] = [None] * len(keys)
    budget = timeout_s + BATCH_S_PER_ANSWER * len(keys) if budget_s is None else float(budget_s)
    lost: list[str] = []
    with _lock:
        todo = list(range(len(keys)))
        deadline: float | None = None
        while todo:
            now = time.monotonic()
            try:
                worker = _get_worker(now + START_TIMEOUT_S if deadline is None else deadline)
            except (_WorkerDied, OSError) as exc:
                _drop_worker()
                log.warning("math-verify: %s; %d answer(s) score 0", exc, len(todo))
                break
            if deadline is None:  # the first start does not count against the batch
                deadline = time.monotonic() + budget
            request = json.dumps({"t": float(timeout_s), "pairs": [keys[k] for k in todo]}) + "\n"
            try:
                if not worker.send(request.encode("utf-8"), deadline):
                    raise TimeoutError
                done = 0
                last = time.monotonic()
                while done < len(todo):
                    line = worker.readline(min(deadline, last + timeout_s + _GRACE_S))
                    if line is None:
                        raise TimeoutError
                    idx, _, ok = line.decode("ascii", "replace").partition(" ")
                    if idx != str(done):
                        raise _WorkerDied(f"math-verify worker out of step ({line[:80]!r})")
                    verdict[todo[done]] = ok.strip() == "1"
                    done += 1
                    last = time.monotonic()
                todo = []
            except (TimeoutError, _WorkerDied) as exc:
                _drop_worker()
                pending = [k for k in todo if verdict[k] is None]
                if time.monotonic() >= deadline or not pending:
                    lost.append(f"batch budget {budget:.1f} s ran out with {len(pending)} answer(s) left")
                    break
                # stuck or crashed on the first pending answer: it scores 0, the rest go on
                reason = "crashed" if isinstance(exc, _WorkerDied) else f"no verdict within {timeout_s + _GRACE_S} s"
                lost.append(f"worker {reason} on {keys[pending[0]][1][:80]!r}")
                verdict[pending[0]] = False
                todo = pending[1:]
            except BaseException:  # KeyboardInterrupt, ...: never reuse a worker mid-batch
                _drop_worker()
                raise
    if lost:
        log.warning("math-verify: %s (scored 0; worker restarted)", "; ".join(lost))
    for k, key in enumerate(keys):
        if verdict[k]:
            for i in unique[key]:
                results[i] = True
    return results


# --------------------------------------------------------------------------- #
# Worker side (``python -P mathverify.py --math-verify-worker``)
# --------------------------------------------------------------------------- #
class _AnswerTimeout(BaseException):  # BaseException: math-verify's ``except Exception`` lets it by
    pass


def _on_alarm(signum, frame):  # noqa: ARG001
    raise _AnswerTimeout


def _worker_main() -> None:  # pragma: no cover - runs in the worker
    out = sys.stdout.buffer
    try:
        import ctypes
        import resource

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            return
        logging.disable(logging.CRITICAL)
        from math_verify import parse, verify

        limit = WORKER_MEMORY_MB << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.signal(signal.SIGALRM, _on_alarm)
    except BaseException as exc:  # noqa: BLE001
        out.write(f"error {type(exc).__name__}: {exc}\n".encode("utf-8", "replace"))
        out.flush()
        return
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        req = json.loads(line)
        t = float(req["t"])
        for k, (gold, pred) in enumerate(req["pairs"]):
            ok = False
            try:
                signal.setitimer(signal.ITIMER_REAL, t)
                try:
                    g = parse(gold, parsing_timeout=None)
                    p = parse(pred, parsing_timeout=None)
                    ok = bool(verify(g, p, timeout_seconds=None))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except BaseException:  # noqa: BLE001 - the alarm, MemoryError, RecursionError, ...
                ok = False
            out.write(f"{k} {int(ok)}\n".encode("ascii"))
            out.flush()


if __name__ == "__main__" and sys.argv[1:] == [_WORKER_FLAG]:  # pragma: no cover
    _worker_main()
