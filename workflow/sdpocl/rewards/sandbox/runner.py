"""The sandbox runner: the script that runs a batch of untrusted programs, one forked child per unit.

``run_batch`` (:mod:`sdpocl.rewards.sandbox.client`) starts ONE runner process per batch,
``python -I -S <this file> --sandbox-runner`` (isolated mode, no site-packages, minimal environment,
its own session), and sends it the programs and their tests (:mod:`sdpocl.rewards.sandbox.protocol`).
The runner imports :data:`~sdpocl.rewards.sandbox.policy.PRELOAD_MODULES`, then ``fork()``s one
child per unit (a bounded number run concurrently -- ``workers`` -- so a batch costs ~1 ms per
trivial unit instead of one interpreter start-up each; units start breadth first: every
program's first test, then every second one, ...) and reports ``ok``/``reason`` per program.
Each child, before touching the untrusted source:

1. ``setsid()`` (own process group, so the runner can ``killpg`` it); stdin, stdout
   and stderr become ``/dev/null``; all other descriptors except a private result
   pipe are closed; ``chdir`` into a fresh, private temporary directory; umask 077.
2. applies the policy's kernel-enforced layers (:func:`~sdpocl.rewards.sandbox.policy.confine`):
   network namespace, Landlock, privilege drop (root), rlimits, ``PR_SET_PDEATHSIG`` -- if the
   runner dies, the child dies;
3. sets a minimal ``os.environ`` (HOME/TMPDIR point at the temp dir), compiles every segment
   (so one cannot swallow the next), drops the runner's modules from ``sys.modules``
   (:func:`~sdpocl.rewards.sandbox.policy.modules_to_purge`) and installs the audit hook
   (:func:`~sdpocl.rewards.sandbox.policy.make_audit_hook`);
4. runs the segments in order in one fresh module namespace (``__name__ == "solution"``);
5. success handshake: after the last segment the child writes a random per-unit
   token (held only in a local variable; the frame/gc introspection needed to steal
   it is blocked by the audit hook) to the result pipe.  Exit status 0 alone is NOT success, so
   ``os._exit(0)``, ``sys.exit(0)``, ``exit()`` or monkey-patching ``exec`` in the
   program do not fake a pass (``exec``/``compile``/``os.write``/``os._exit`` are
   captured before the program runs; all segments are compiled up front).

The runner waits for each child with a wall-clock deadline (``timeout_s`` from the
fork), ``SIGKILL``s the child's process group on time-out (or when a sibling test of
the same program has failed), removes the temp dir and reports.

Stand-alone: run as a script, this file imports its two siblings (:mod:`.policy`, :mod:`.protocol`)
by file from its own folder -- never the ``sdpocl`` package, whose ``__init__`` modules import the
workflow's heavy dependencies -- and nothing else but the standard library.
"""

from __future__ import annotations

import builtins
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import types

if __name__ != "__main__":  # imported in the workflow's process: run_batch needs this file and rmtree_force
    from sdpocl.rewards.sandbox.policy import (
        NOBODY,
        PRELOAD_MODULES,
        confine,
        load_libc,
        make_audit_hook,
        modules_to_purge,
    )
    from sdpocl.rewards.sandbox.protocol import RUNNER_FLAG, read_request, write_response
else:  # the runner process (``python -I -S``): the siblings by file, under their bare names
    _dont_write_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # nothing left in the package's folder, as for the script itself
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from policy import NOBODY, PRELOAD_MODULES, confine, load_libc, make_audit_hook, modules_to_purge
        from protocol import RUNNER_FLAG, read_request, write_response
    finally:
        del sys.path[0]  # a program cannot import them again
        sys.dont_write_bytecode = _dont_write_bytecode

#: the names this runner's modules are loaded under, dropped from a child's ``sys.modules``
_OWN_MODULES = {__name__, confine.__module__, read_request.__module__}
PROGRAM_MODULE = "solution"  # __name__ of the namespace programs run in


def rmtree_force(path: str) -> None:
    """Remove a unit's (or the batch's) temp dir, whatever permissions the program left in it."""

    def onerror(func, p, exc_info):  # noqa: ARG001
        try:
            os.chmod(os.path.dirname(p) or ".", 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=onerror)


def child(segments, tmpdir, wfd, token, cfg, runner_pid, libc, purge):  # pragma: no cover - runs in fork
    """Body of a forked child.  Never returns."""
    _exit = os._exit
    _write = os.write
    _exec = builtins.exec
    _compile = builtins.compile
    fd = 3
    try:
        os.setsid()
        devnull = os.open("/dev/null", os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(devnull, target)
        if wfd != fd:
            os.dup2(wfd, fd)
        os.closerange(fd + 1, 1 << 20)
        os.set_inheritable(fd, False)
        os.chdir(tmpdir)
        os.umask(0o077)
        disable = set(cfg["disable"])
        layers = confine(libc, tmpdir, cfg)
        if os.getppid() != runner_pid:
            _exit(3)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": tmpdir, "TMPDIR": tmpdir, "LANG": "C.UTF-8"})
        tempfile.tempdir = None
        sys.argv = [""]
        if "audit" not in disable:
            layers.append("audit")
        _write(fd, ("L:" + ",".join(layers) + "\n").encode())
        try:
            codes = [
                _compile(src, f"<segment {i}>", "exec", dont_inherit=True, optimize=0) for i, src in enumerate(segments)
            ]
        except BaseException as exc:  # noqa: BLE001
            _write(fd, f"E:{type(exc).__name__}: {exc}"[:400].encode("utf-8", "replace"))
            _exit(1)
        for name in purge:
            sys.modules.pop(name, None)
        # Named like an imported module (not "__main__"), as HumanEval/MBPP-style
        # harnesses do, so an ``if __name__ == "__main__":`` demo that reads stdin
        # does not fail an otherwise correct solution.
        main = types.ModuleType(PROGRAM_MODULE)
        main.__dict__["__builtins__"] = builtins
        sys.modules[PROGRAM_MODULE] = main
        sys.modules["__main__"] = main  # ``import __main__`` must not reach the runner
        namespace = main.__dict__
        if "audit" not in disable:
            sys.addaudithook(make_audit_hook(tmpdir))
        del cfg, libc, segments
    except BaseException as exc:  # noqa: BLE001 - setup failure: do not run the program
        try:
            _write(fd, f"E:sandbox-setup: {type(exc).__name__}: {exc}"[:400].encode("utf-8", "replace"))
        finally:
            _exit(2)
    try:
        for code in codes:
            _exec(code, namespace)
    except BaseException as exc:  # noqa: BLE001
        try:
            msg = f"E:{type(exc).__name__}: {exc}"[:400]
        except BaseException:  # noqa: BLE001 - hostile __str__
            msg = "E:exception"
        try:
            _write(fd, msg.encode("utf-8", "replace"))
        finally:
            _exit(1)
    try:
        _write(fd, token)
    finally:
        _exit(0)  # without the token in the pipe, exit status 0 is not a pass


class _Job:
    __slots__ = ("index", "test", "pid", "rfd", "tmpdir", "start", "deadline", "buf", "eof", "token")

    def __init__(self, index, test, pid, rfd, tmpdir, start, deadline, token):
        self.index, self.test, self.pid, self.rfd, self.tmpdir = index, test, pid, rfd, tmpdir
        self.start, self.deadline, self.token = start, deadline, token
        self.buf = bytearray()
        self.eof = False


def _drain(job: _Job, limit: int = 8192) -> None:
    while not job.eof and len(job.buf) < limit:
        try:
            chunk = os.read(job.rfd, 4096)
        except BlockingIOError:
            return
        except OSError:
            job.eof = True
            return
        if not chunk:
            job.eof = True
            return
        job.buf += chunk


def _verdict(job: _Job, status: int | None, timed_out: bool) -> dict:
    data = bytes(job.buf)
    layers: list[str] = []
    if data.startswith(b"L:"):
        line, _, data = data.partition(b"\n")
        layers = [x for x in line[2:].decode("ascii", "replace").split(",") if x]
    ok = False
    if timed_out:
        reason = "timeout"
    elif status is None:
        reason = "lost"
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        reason = f"killed by {name}"
    elif data.startswith(b"E:"):
        reason = data[2:].decode("utf-8", "replace")
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and data == job.token:
        ok, reason = True, ""
    elif os.WIFEXITED(status):
        reason = f"exit status {os.WEXITSTATUS(status)} without success handshake"
    else:
        reason = "unknown"
    return {
        "ok": ok,
        "reason": reason,
        "wall_s": round(time.monotonic() - job.start, 4),
        "layers": layers,
    }


def unit_order(counts: list[int]) -> list[tuple[int, int]]:
    """(program, test) pairs, breadth first: every program's first test, then every second one,
    ... -- a failing program is found early and few programs still fill the workers."""
    order = []
    for j in range(max(counts, default=0)):
        order.extend((i, j) for i, c in enumerate(counts) if j < c)
    return order


def main() -> None:  # pragma: no cover - runs in the runner process
    cfg = read_request()
    programs = cfg["programs"]
    tests = cfg["tests"]
    timeout_s = float(cfg["timeout_s"])
    workers = int(cfg["workers"])
    root = cfg["root"]
    is_root = os.geteuid() == 0
    chown = is_root and "privdrop" not in cfg["disable"]
    libc = load_libc()
    for name in PRELOAD_MODULES:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - optional
            pass
    purge = modules_to_purge(_OWN_MODULES)
    my_pid = os.getpid()
    n = len(programs)
    counts = [max(1, len(t)) for t in tests]
    results: list = [None] * n
    passed = [0] * n
    walls = [0.0] * n
    layers_of: list = [[] for _ in range(n)]
    pending = unit_order(counts)
    pending.reverse()
    active: dict[int, _Job] = {}

    def close(job: _Job) -> None:
        os.close(job.rfd)
        rmtree_force(job.tmpdir)

    def kill(job: _Job):
        for kill_fn in (os.killpg, os.kill):
            try:
                kill_fn(job.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            return os.waitpid(job.pid, 0)[1]
        except ChildProcessError:
            return None

    def record(i: int, j: int, verdict: dict) -> None:
        if results[i] is not None:
            return
        layers_of[i] = layers_of[i] or verdict["layers"]
        walls[i] += verdict["wall_s"]
        if verdict["ok"]:
            passed[i] += 1
            if passed[i] == counts[i]:
                results[i] = {"ok": True, "reason": "", "wall_s": round(walls[i], 4), "layers": layers_of[i]}
        else:
            reason = verdict["reason"]
            if tests[i]:
                reason = f"test {j + 1}/{counts[i]}: {reason}"
            results[i] = {"ok": False, "reason": reason, "wall_s": round(walls[i], 4), "layers": layers_of[i]}
            # stop at the first failure: the program's other running tests are killed unscored
            for pid, other in list(active.items()):
                if other.index == i:
                    kill(other)
                    del active[pid]
                    close(other)

    def finish(job: _Job, status, timed_out: bool) -> None:
        _drain(job)
        verdict = _verdict(job, status, timed_out)
        close(job)
        record(job.index, job.test, verdict)

    while pending or active:
        while pending and len(active) < workers:
            i, j = pending.pop()
            if results[i] is not None:
                continue  # an earlier test of this program failed
            segments = programs[i] + tests[i][j : j + 1]
            tmpdir = os.path.join(root, f"p{i}t{j}")
            os.mkdir(tmpdir, 0o700)
            if chown:
                os.chown(tmpdir, NOBODY, NOBODY)
            token = os.urandom(24).hex().encode("ascii")
            rfd, wfd = os.pipe2(os.O_CLOEXEC)
            start = time.monotonic()
            try:
                pid = os.fork()
            except OSError as exc:
                os.close(rfd)
                os.close(wfd)
                rmtree_force(tmpdir)
                verdict = {"ok": False, "reason": f"fork failed: {exc}", "wall_s": 0.0, "layers": []}
                record(i, j, verdict)
                continue
            if pid == 0:
                try:
                    child(segments, tmpdir, wfd, token, cfg, my_pid, libc, purge)
                finally:
                    os._exit(4)  # never fall back into the runner loop
            os.close(wfd)
            os.set_blocking(rfd, False)
            active[pid] = _Job(i, j, pid, rfd, tmpdir, start, start + timeout_s, token)
            del token
        if not active:
            continue
        now = time.monotonic()
        wait = max(0.0, min(min(j.deadline for j in active.values()) - now, 0.05))
        fds = [j.rfd for j in active.values() if not j.eof]
        if fds:
            try:
                ready, _, _ = select.select(fds, [], [], wait)
            except InterruptedError:
                ready = []
            if ready:
                by_fd = {j.rfd: j for j in active.values()}
                for rfd in ready:
                    _drain(by_fd[rfd])
        else:
            time.sleep(min(wait, 0.002))
        # reap finished children
        while active:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            job = active.pop(pid, None)
            if job is not None:
                finish(job, status, False)
        # kill overdue children
        now = time.monotonic()
        for pid, job in list(active.items()):
            if pid in active and now >= job.deadline:
                del active[pid]
                status = kill(job)
                # A child that finished just at the deadline still counts.
                finish(job, status, not (status is not None and os.WIFEXITED(status)))

    for i in range(n):
        results[i]["passed"] = passed[i]
    write_response(results)


if __name__ == "__main__" and sys.argv[1:] == [RUNNER_FLAG]:  # pragma: no cover
    main()
