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
Model code never runs in the caller's process.  ``run_batch`` starts ONE runner
process per batch (``python -I -S <this file> --sandbox-runner``: isolated mode,
no site-packages, minimal environment, its own session) and sends it the programs
and their tests as JSON on stdin.  The runner ``fork()``s one child per unit (a
bounded number run concurrently -- ``max_workers``, default the CPUs available, at
most 8 -- so a batch costs ~1 ms per trivial unit instead of one interpreter
start-up each; units start breadth first: every program's first test, then every
second one, ...) and reports ``ok``/``reason`` per program as JSON on stdout.  Each
child, before touching the untrusted source:

1. ``setsid()`` (own process group, so the runner can ``killpg`` it); stdin, stdout
   and stderr become ``/dev/null``; all other descriptors except a private result
   pipe are closed; ``chdir`` into a fresh, private temporary directory; umask 077;
   minimal ``os.environ`` (HOME/TMPDIR point at the temp dir).
2. network namespace: ``unshare(CLONE_NEWNET)`` when root (with CAP_SYS_ADMIN),
   otherwise -- after dropping privileges -- ``unshare(CLONE_NEWUSER|CLONE_NEWNET)``
   if unprivileged user namespaces are allowed.  The new namespace has no usable
   interface, not even loopback.  Failure is tolerated (see the audit hook / Landlock).
3. Landlock (Linux >= 5.13, if the LSM is enabled): every write-type file-system
   access (write, truncate, create, remove, rename/link, mknod, symlink) and
   ``execve`` is denied everywhere except below the temp dir (plus writes to
   ``/dev/null``); with ABI >= 4 TCP ``bind``/``connect`` are denied; with ABI >= 6
   signals to, and abstract-unix-socket connections with, processes outside the
   sandbox are denied.  Failure (old kernel, LSM off) is tolerated.
4. rlimits: ``RLIMIT_AS`` (``memory_mb``), ``RLIMIT_CPU`` (``ceil(timeout_s)``),
   ``RLIMIT_FSIZE`` (``max_file_bytes``), ``RLIMIT_NOFILE`` 32, ``RLIMIT_NPROC`` 0
   (no fork, no threads), ``RLIMIT_CORE`` 0, ``RLIMIT_MEMLOCK`` 0, ``RLIMIT_MSGQUEUE`` 0.
5. if running as root: ``setgroups([])``, ``setgid``/``setuid`` to nobody (65534);
   the temp dir is chowned to nobody first.  (Root ignores ``RLIMIT_NPROC`` and
   file permissions, so this step matters.)  If the drop fails the program is NOT
   run (fail closed).
6. ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: if the runner dies, the child dies.
7. a ``sys.addaudithook`` hook (see ``_make_audit_hook``) that blocks, with an
   exception: write-mode ``open``/``os.open`` outside the temp dir (and more than
   64 write-opens in total), reads below ``/proc``; ``os.remove``/``unlink``/
   ``rmdir``/``rename``/``replace``/``mkdir``/``chmod``/``chown``/``truncate``/
   ``utime`` outside the temp dir; ``shutil.rmtree``, ``os.symlink``/``link``/
   ``mkfifo``/``mknod``/``chdir``/``chroot``/xattr changes; ``os.system``,
   ``subprocess.Popen``, ``os.fork``/``forkpty``/``posix_spawn``/``exec*``/
   ``spawn*``, ``os.kill``/``killpg``, every ``socket.*`` event, every ``ctypes.*``
   event, importing ``ctypes``/``_ctypes``/``signal``/``_signal``/
   ``_posixsubprocess``/``_xxsubinterpreters``/``_testcapi``/``_testinternalcapi``,
   ``sys.addaudithook``, ``sys.settrace``/``setprofile``, ``sys._getframe``,
   ``sys._current_frames``, ``gc.get_objects``/``get_referrers``/``get_referents``
   and access to ``tb_frame``/``gi_frame``/``cr_frame``/``ag_frame``.
8. success handshake: after the last segment the child writes a random per-unit
   token (held only in a local variable; the frame/gc introspection needed to steal
   it is blocked above) to the result pipe.  Exit status 0 alone is NOT success, so
   ``os._exit(0)``, ``sys.exit(0)``, ``exit()`` or monkey-patching ``exec`` in the
   program do not fake a pass (``exec``/``compile``/``os.write``/``os._exit`` are
   captured before the program runs; all segments are compiled up front).

The runner waits for each child with a wall-clock deadline (``timeout_s`` from the
fork), ``SIGKILL``s the child's process group on time-out (or when a sibling test of
the same program has failed), removes the temp dir and reports.  ``run_batch`` has
an overall time-out (sum of the per-unit limits plus slack); if the runner exceeds
it, hangs or crashes, its process group is killed
(children die via PDEATHSIG) and every unfinished program is reported as a failure
-- ``run_batch`` never raises because of what a program does.

What is and is not guaranteed
-----------------------------
This is defence in depth, not a VM or container.  The *kernel-enforced* layers
are the separate process, rlimits, the privilege drop (root only), Landlock (if
the kernel has it) and the network namespace (if permitted); the audit hook is an
in-interpreter speed bump that CPython documents as not a security boundary.  Run
as root on a current kernel (the development machine: Linux 6.x, Landlock ABI 7,
CAP_SYS_ADMIN), writes outside the temp dir are stopped by two independent kernel
mechanisms (uid nobody + Landlock), TCP by two (network namespace + Landlock),
process/thread creation by ``RLIMIT_NPROC`` and ``execve`` by Landlock -- and all
of them by the audit hook too; ``tests/test_sandbox.py`` checks each layer on its
own.  Not root: the user's own files are protected by Landlock and the audit hook
only; with neither Landlock nor the hook (escaped) a program can write wherever
the user can, and Landlock does not cover metadata (``chmod``/``chown``/``utime``
on the user's own files are stopped by the hook alone).

Other limits: programs may *read* any file readable by the effective user
(nothing can be sent anywhere; one bit -- pass/fail -- comes back); disk use in
the temp dir is bounded only by 64 write-opens x ``max_file_bytes`` per unit (and
memory by ``max_workers`` x ``memory_mb`` at once); only the
standard library is importable (``-S``), and when the interpreter's files are
not readable by nobody (e.g. a Python under ``/root``), only the modules the
runner pre-imports (``_PRELOAD_MODULES``: math, re, collections, itertools,
functools, heapq, bisect, fractions, decimal, statistics, random, json, typing,
dataclasses, datetime, string, pickle, hashlib, copy, ...; enough for all 164 HumanEval
problems, checked by ``tests/test_humaneval.py``) are available; threads cannot be
started (``RLIMIT_NPROC`` = 0); formatting tracebacks, ``sys._getframe`` (raises
``ValueError``), ``shutil.rmtree`` (so ``tempfile.TemporaryDirectory`` cleanup)
and ``signal`` are unavailable.  Reward *integrity* is best effort: a program can
still fake tests with, e.g., an object whose ``__eq__`` always returns True, or
by a sufficiently clever escape from the audit hook (which would still leave it
inside the kernel-enforced layers).  Linux only.
"""

from __future__ import annotations

import builtins
import ctypes
import json
import logging
import math
import os
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Union

__all__ = [
    "SandboxResult",
    "run_batch",
    "run_program",
    "sandbox_layers",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_MEMORY_MB",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_MEMORY_MB = 256
DEFAULT_MAX_FILE_BYTES = 1 << 20
NOBODY = 65534
_RUNNER_FLAG = "--sandbox-runner"
_OVERALL_SLACK_S = 10.0
_ALL_LAYERS = ("netns", "landlock", "privdrop", "audit")

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


# --------------------------------------------------------------------------- #
# Caller side
# --------------------------------------------------------------------------- #
def _default_workers() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def _normalise_programs(programs: Sequence[Program]) -> list[list[str]]:
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


def _rmtree_force(path: str) -> None:
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


def _normalise_tests(tests: Sequence[Sequence[str]] | None, n: int) -> list[list[str]]:
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
    progs = _normalise_programs(programs)
    n = len(progs)
    test_lists = _normalise_tests(tests, n)
    if n == 0:
        return []
    if not timeout_s > 0:
        raise ValueError("timeout_s must be positive")
    bad = set(_disable_layers) - set(_ALL_LAYERS)
    if bad:
        raise ValueError(f"unknown sandbox layers {sorted(bad)}; known: {list(_ALL_LAYERS)}")
    workers = max(1, int(max_workers or _default_workers()))

    root = tempfile.mkdtemp(prefix="sdpocl-sandbox-")
    t0 = time.monotonic()
    try:
        os.chmod(root, 0o711)  # nobody may traverse into its own sub-dir, not list
        cfg = {
            "programs": progs,
            "tests": test_lists,
            "timeout_s": float(timeout_s),
            "memory_mb": int(memory_mb),
            "max_file_bytes": int(max_file_bytes),
            "workers": workers,
            "root": os.path.realpath(root),
            "disable": list(_disable_layers),
        }
        payload = json.dumps(cfg).encode("utf-8")
        units = sum(max(1, len(t)) for t in test_lists)
        overall = units * float(timeout_s) + _OVERALL_SLACK_S
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        if os.environ.get("LD_LIBRARY_PATH"):  # e.g. Pythons from HPC environment modules
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), _RUNNER_FLAG],
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
            try:
                proc.communicate(timeout=5)
            except Exception:  # noqa: BLE001
                pass
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
            rows = json.loads(out.decode("utf-8"))
            if not isinstance(rows, list) or len(rows) != n:
                raise ValueError(f"expected {n} results")
            return [
                SandboxResult(bool(r["ok"]), str(r["reason"]), float(r["wall_s"]), tuple(r["layers"]), int(r["passed"]))
                for r in rows
            ]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("sandbox: malformed runner output (%s)", exc)
            return [SandboxResult(False, "runner-bad-output")] * n
    finally:
        _rmtree_force(root)


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
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# --------------------------------------------------------------------------- #
# Runner side (executed as ``python -I -S sandbox.py --sandbox-runner``)
# --------------------------------------------------------------------------- #
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_SYS_LANDLOCK_CREATE_RULESET = 444  # same number on every Linux architecture
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LL_EXECUTE = 1 << 0
_LL_WRITE_FILE = 1 << 1
_LL_REMOVE_DIR = 1 << 4
_LL_REMOVE_FILE = 1 << 5
_LL_MAKE_CHAR = 1 << 6
_LL_MAKE_DIR = 1 << 7
_LL_MAKE_REG = 1 << 8
_LL_MAKE_SOCK = 1 << 9
_LL_MAKE_FIFO = 1 << 10
_LL_MAKE_BLOCK = 1 << 11
_LL_MAKE_SYM = 1 << 12
_LL_REFER = 1 << 13  # ABI 2
_LL_TRUNCATE = 1 << 14  # ABI 3
_LL_NET_BIND_TCP = 1 << 0  # ABI 4
_LL_NET_CONNECT_TCP = 1 << 1
_LL_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_LL_SCOPE_SIGNAL = 1 << 1

_BLOCKED_IMPORTS = frozenset(
    {
        "ctypes",
        "_ctypes",
        "signal",
        "_signal",
        "_posixsubprocess",
        "_xxsubinterpreters",
        "_testcapi",
        "_testinternalcapi",
        "_testmultiphase",
        "faulthandler",
    }
)
_BLOCKED_EVENTS = frozenset(
    {
        "shutil.rmtree",
        "os.symlink",
        "os.link",
        "os.mkfifo",
        "os.mknod",
        "os.chdir",
        "os.chroot",
        "os.chflags",
        "os.lchflags",
        "os.setxattr",
        "os.removexattr",
        "os.system",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.exec",
        "os.spawn",
        "os.startfile",
        "os.kill",
        "os.killpg",
        "pty.spawn",
        "subprocess.Popen",
        "sys.addaudithook",
        "sys.settrace",
        "sys.setprofile",
        "sys._current_frames",
        "sys.remote_exec",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "mmap.__new__",
        "resource.setrlimit",
        "resource.prlimit",
        "cpython.run_command",
        "cpython.run_file",
        "cpython.run_module",
        "cpython.run_startup",
        "cpython.run_interactivehook",
        "cpython._PySys_ClearAuditHooks",
        "code.__new__",
        "function.__new__",
    }
)
# event -> (indices of path arguments, indices of dir_fd arguments)
_PATH_EVENTS = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
}
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
_MAX_WRITE_OPENS = 64
_PROGRAM_MODULE = "solution"  # __name__ of the namespace programs run in
# Imported by the runner before forking: children inherit them (fast -- no
# per-unit import cost -- and available even when the interpreter's stdlib is
# not readable by the unprivileged user the children run as, e.g. under /root).
_PRELOAD_MODULES = (
    "abc",
    "array",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "codecs",
    "collections",
    "collections.abc",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "inspect",
    "io",
    "itertools",
    "json",
    "keyword",
    "locale",
    "math",
    "numbers",
    "operator",
    "pprint",
    "queue",
    "random",
    "re",
    "reprlib",
    "socket",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "time",
    "typing",
    "unicodedata",
    "uuid",
    "zlib",
    "_strptime",
    "encodings.idna",
    "pathlib",
    "pickle",
)


class SandboxViolation(PermissionError):
    """Raised inside a sandboxed program when it attempts a forbidden operation."""


def _make_audit_hook(tmpdir: str):
    """Build the audit hook for a child whose private directory is ``tmpdir``.

    Uses only str methods and functions captured here, so a program that
    monkey-patches ``os``/``os.path`` cannot change its decisions.
    """
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    fspath = os.fspath
    violation = SandboxViolation
    import_error = ImportError
    value_error = ValueError
    str_t, bytes_t, int_t, tuple_t = str, bytes, int, tuple
    blocked_events = _BLOCKED_EVENTS
    blocked_imports = _BLOCKED_IMPORTS
    path_events = _PATH_EVENTS
    frame_attrs = _FRAME_ATTRS
    prefix = tmpdir.rstrip("/") + "/"
    state = [0]  # number of write-opens so far

    def as_str(p):
        if type(p) is str_t:
            return p
        if type(p) is bytes_t:
            return p.decode("utf-8", "surrogateescape")
        return None  # PathLike / other: its __fspath__ might lie on a second call

    def norm(p):
        if not p.startswith("/"):
            p = prefix + p
        parts = []
        for comp in p.split("/"):
            if comp == "" or comp == ".":
                continue
            if comp == "..":
                if parts:
                    parts.pop()
                continue
            parts.append(comp)
        return "/" + "/".join(parts)

    def inside(p):
        s = as_str(p)
        if s is None or "\x00" in s:
            return False
        n = norm(s)
        return n + "/" == prefix or n.startswith(prefix)

    def deny(event, detail=""):
        raise violation(f"sandbox: {event} blocked{detail}")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            if type(path) is int_t:
                return
            writing = bool((flags or 0) & write_flags) or (
                type(mode) is str_t and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)
            )
            if writing:
                s = as_str(path)
                # os.open (mode None) may carry a dir_fd we cannot see: absolute only.
                if s is None or (mode is None and not s.startswith("/")) or not inside(s):
                    deny(event, f" (write outside sandbox dir: {path!r})")
                state[0] += 1
                if state[0] > _MAX_WRITE_OPENS:
                    deny(event, " (too many files written)")
                return
            s = as_str(path)
            if s is None:
                try:
                    s = fspath(path)
                    s = as_str(s)
                except Exception:  # noqa: BLE001
                    s = None
                if s is None:
                    return
            n = norm(s)
            if n == "/proc" or n.startswith("/proc/"):
                deny(event, f" (read of {n})")
            return
        if event in blocked_events:
            deny(event)
        if event == "import":
            name = args[0]
            if type(name) is str_t and name.split(".")[0] in blocked_imports:
                raise import_error(f"sandbox: import of {name} blocked")
            return
        if event.startswith("socket.") or event.startswith("ctypes."):
            deny(event)
        if event == "sys._getframe":
            # ValueError: stdlib callers (namedtuple, warnings, logging) fall back.
            raise value_error("sandbox: sys._getframe blocked")
        if event == "object.__getattr__":
            if type(args) is tuple_t and len(args) > 1 and args[1] in frame_attrs:
                deny(event, f" ({args[1]})")
            return
        spec = path_events.get(event)
        if spec is not None:
            path_idxs, fd_idxs = spec
            for i in fd_idxs:
                dfd = args[i] if len(args) > i else None
                if dfd is not None and dfd != -1:
                    deny(event, " (dir_fd)")
            for i in path_idxs:
                p = args[i]
                if type(p) is int_t and event == "os.truncate":
                    continue  # ftruncate needs a descriptor open for writing
                if not inside(p):
                    deny(event, f" (outside sandbox dir: {p!r})")
            if event == "os.mkdir":
                state[0] += 1
                if state[0] > _MAX_WRITE_OPENS:
                    deny(event, " (too many files written)")

    return hook


def _landlock(libc, tmpdir: str) -> bool:
    """Restrict writes/exec to ``tmpdir`` (and /dev/null) with Landlock."""
    sysc = libc.syscall
    sysc.restype = ctypes.c_long
    L = ctypes.c_long
    abi = sysc(L(_SYS_LANDLOCK_CREATE_RULESET), None, L(0), L(1))  # ..._VERSION
    if abi < 1:
        return False
    fs = (
        _LL_EXECUTE
        | _LL_WRITE_FILE
        | _LL_REMOVE_DIR
        | _LL_REMOVE_FILE
        | _LL_MAKE_CHAR
        | _LL_MAKE_DIR
        | _LL_MAKE_REG
        | _LL_MAKE_SOCK
        | _LL_MAKE_FIFO
        | _LL_MAKE_BLOCK
        | _LL_MAKE_SYM
    )
    if abi >= 2:
        fs |= _LL_REFER
    if abi >= 3:
        fs |= _LL_TRUNCATE
    net = (_LL_NET_BIND_TCP | _LL_NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_LL_SCOPE_ABSTRACT_UNIX | _LL_SCOPE_SIGNAL) if abi >= 6 else 0
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", fs, net, scoped)[:size], size)
    rfd = sysc(L(_SYS_LANDLOCK_CREATE_RULESET), attr, L(size), L(0))
    if rfd < 0:
        return False
    try:
        rules = [
            (tmpdir, fs & ~_LL_EXECUTE),
            ("/dev/null", _LL_WRITE_FILE | (_LL_TRUNCATE if abi >= 3 else 0)),
        ]
        for path, allowed in rules:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, pfd), 12)
                if sysc(L(_SYS_LANDLOCK_ADD_RULE), L(rfd), L(1), rule, L(0)) != 0:
                    return False
            finally:
                os.close(pfd)
        U = ctypes.c_ulong
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, U(1), U(0), U(0), U(0)) != 0:
            return False
        return sysc(L(_SYS_LANDLOCK_RESTRICT_SELF), L(rfd), L(0)) == 0
    finally:
        os.close(rfd)


def _modules_to_purge() -> list[str]:
    """Names of loaded modules a program must not reach through ``sys.modules``:
    the blocked ones, the runner's ``__main__``, and (transitively) every module
    holding a reference to one of them or to an object defined in one of them."""
    mods = {name: m for name, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)}
    purged = {name for name in mods if name.split(".")[0] in _BLOCKED_IMPORTS or name == "__main__"}
    purged |= {"subprocess", "sdpocl", "sdpocl.rewards.sandbox"} & set(mods)
    changed = True
    while changed:
        changed = False
        bad_ids = {id(mods[n]) for n in purged}
        for name, mod in mods.items():
            if name in purged or name in ("sys", "builtins"):
                continue
            for value in list(vars(mod).values()):
                owner = value.__name__ if isinstance(value, types.ModuleType) else None
                if owner is None:
                    owner = getattr(value, "__module__", None) if callable(value) else None
                if id(value) in bad_ids or (type(owner) is str and owner in purged):
                    purged.add(name)
                    changed = True
                    break
    return sorted(purged)


def _child(segments, tmpdir, wfd, token, cfg, runner_pid, libc, purge):  # pragma: no cover - runs in fork
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
        layers = []
        is_root = os.geteuid() == 0
        if "netns" not in disable and is_root and libc.unshare(_CLONE_NEWNET) == 0:
            layers.append("netns")
        if "landlock" not in disable and _landlock(libc, tmpdir):
            layers.append("landlock")
        if is_root and "privdrop" not in disable:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            if os.getuid() != NOBODY or os.geteuid() != NOBODY or os.getegid() != NOBODY:
                raise OSError("privilege drop did not take effect")
            layers.append("privdrop")
        if "netns" not in disable and "netns" not in layers:
            if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
                layers.append("netns")
        cpu = max(1, math.ceil(cfg["timeout_s"]))
        mem = int(cfg["memory_mb"]) * 1024 * 1024
        limits = [
            (resource.RLIMIT_CPU, cpu, cpu + 1),
            (resource.RLIMIT_AS, mem, mem),
            (resource.RLIMIT_FSIZE, int(cfg["max_file_bytes"]), int(cfg["max_file_bytes"])),
            (resource.RLIMIT_NOFILE, 32, 32),
            (resource.RLIMIT_NPROC, 0, 0),
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_MEMLOCK, 0, 0),
        ]
        if hasattr(resource, "RLIMIT_MSGQUEUE"):
            limits.append((resource.RLIMIT_MSGQUEUE, 0, 0))
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))
        # After every credential change (which clears it):
        U = ctypes.c_ulong
        if libc.prctl(_PR_SET_PDEATHSIG, U(signal.SIGKILL), U(0), U(0), U(0)) != 0:
            raise OSError("prctl(PR_SET_PDEATHSIG) failed")
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
        main = types.ModuleType(_PROGRAM_MODULE)
        main.__dict__["__builtins__"] = builtins
        sys.modules[_PROGRAM_MODULE] = main
        sys.modules["__main__"] = main  # ``import __main__`` must not reach the runner
        namespace = main.__dict__
        if "audit" not in disable:
            sys.addaudithook(_make_audit_hook(tmpdir))
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


def _unit_order(counts: list[int]) -> list[tuple[int, int]]:
    """(program, test) pairs, breadth first: every program's first test, then every second one,
    ... -- a failing program is found early and few programs still fill the workers."""
    order = []
    for j in range(max(counts, default=0)):
        order.extend((i, j) for i, c in enumerate(counts) if j < c)
    return order


def _runner_main() -> None:  # pragma: no cover - runs in the runner process
    cfg = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    programs = cfg["programs"]
    tests = cfg["tests"]
    timeout_s = float(cfg["timeout_s"])
    workers = int(cfg["workers"])
    root = cfg["root"]
    is_root = os.geteuid() == 0
    chown = is_root and "privdrop" not in cfg["disable"]
    libc = ctypes.CDLL(None, use_errno=True)
    for name in _PRELOAD_MODULES:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - optional
            pass
    purge = _modules_to_purge()
    my_pid = os.getpid()
    n = len(programs)
    counts = [max(1, len(t)) for t in tests]
    results: list = [None] * n
    passed = [0] * n
    walls = [0.0] * n
    layers_of: list = [[] for _ in range(n)]
    pending = _unit_order(counts)
    pending.reverse()
    active: dict[int, _Job] = {}

    def close(job: _Job) -> None:
        os.close(job.rfd)
        _rmtree_force(job.tmpdir)

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
                _rmtree_force(tmpdir)
                verdict = {"ok": False, "reason": f"fork failed: {exc}", "wall_s": 0.0, "layers": []}
                record(i, j, verdict)
                continue
            if pid == 0:
                try:
                    _child(segments, tmpdir, wfd, token, cfg, my_pid, libc, purge)
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
    out = json.dumps(results).encode("utf-8")
    view = memoryview(out)
    while view:
        try:
            written = os.write(1, view)
        except InterruptedError:
            continue
        view = view[written:]


if __name__ == "__main__" and sys.argv[1:] == [_RUNNER_FLAG]:  # pragma: no cover
    _runner_main()
