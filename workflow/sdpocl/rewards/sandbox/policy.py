"""The sandbox's policy: what model-written code may do in the child that runs it.

A forked child (:func:`sdpocl.rewards.sandbox.runner.child`) applies these layers before it
touches the untrusted source (:data:`LAYERS` names them; ``run_batch(_disable_layers=...)``
switches some off in tests):

* ``netns`` -- network namespace: ``unshare(CLONE_NEWNET)`` when root (with CAP_SYS_ADMIN),
  otherwise -- after dropping privileges -- ``unshare(CLONE_NEWUSER|CLONE_NEWNET)`` if
  unprivileged user namespaces are allowed.  The new namespace has no usable interface, not even
  loopback.  Failure is tolerated (see the audit hook / Landlock).
* ``landlock`` -- Landlock (Linux >= 5.13, if the LSM is enabled): every write-type file-system
  access (write, truncate, create, remove, rename/link, mknod, symlink) and ``execve`` is denied
  everywhere except below the temp dir (plus writes to ``/dev/null``); with ABI >= 4 TCP
  ``bind``/``connect`` are denied; with ABI >= 6 signals to, and abstract-unix-socket connections
  with, processes outside the sandbox are denied.  Failure (old kernel, LSM off) is tolerated.
* rlimits (always): ``RLIMIT_AS`` (``memory_mb``), ``RLIMIT_CPU`` (``ceil(timeout_s)``),
  ``RLIMIT_FSIZE`` (``max_file_bytes``), ``RLIMIT_NOFILE`` 32, ``RLIMIT_NPROC`` 0 (no fork, no
  threads), ``RLIMIT_CORE`` 0, ``RLIMIT_MEMLOCK`` 0, ``RLIMIT_MSGQUEUE`` 0.
* ``privdrop`` -- if running as root: ``setgroups([])``, ``setgid``/``setuid`` to nobody (65534);
  the runner chowns the temp dir to nobody first.  (Root ignores ``RLIMIT_NPROC`` and file
  permissions, so this step matters.)  If the drop fails the program is NOT run (fail closed).
* ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (always): if the runner dies, the child dies.
* ``audit`` -- a ``sys.addaudithook`` hook (:func:`make_audit_hook`) that blocks, with an
  exception: write-mode ``open``/``os.open`` outside the temp dir (and more than 64 write-opens in
  total), reads below ``/proc``; ``os.remove``/``unlink``/``rmdir``/``rename``/``replace``/
  ``mkdir``/``chmod``/``chown``/``truncate``/``utime`` outside the temp dir; ``shutil.rmtree``,
  ``os.symlink``/``link``/``mkfifo``/``mknod``/``chdir``/``chroot``/xattr changes; ``os.system``,
  ``subprocess.Popen``, ``os.fork``/``forkpty``/``posix_spawn``/``exec*``/``spawn*``,
  ``os.kill``/``killpg``, every ``socket.*`` event, every ``ctypes.*`` event, importing
  ``ctypes``/``_ctypes``/``signal``/``_signal``/``_posixsubprocess``/``_xxsubinterpreters``/
  ``_testcapi``/``_testinternalcapi``, ``sys.addaudithook``, ``sys.settrace``/``setprofile``,
  ``sys._getframe``, ``sys._current_frames``, ``gc.get_objects``/``get_referrers``/
  ``get_referents`` and access to ``tb_frame``/``gi_frame``/``cr_frame``/``ag_frame``.

What the program can reach of the runner is policy too: the runner imports
:data:`PRELOAD_MODULES` before forking, and each child drops :func:`modules_to_purge`'s modules
from ``sys.modules`` before the program runs.

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
runner pre-imports (:data:`PRELOAD_MODULES`: math, re, collections, itertools,
functools, heapq, bisect, fractions, decimal, statistics, random, json, typing,
dataclasses, datetime, string, pickle, hashlib, copy, ...; enough for all 164 HumanEval
problems, checked by ``tests/test_humaneval.py``) are available; threads cannot be
started (``RLIMIT_NPROC`` = 0); formatting tracebacks, ``sys._getframe`` (raises
``ValueError``), ``shutil.rmtree`` (so ``tempfile.TemporaryDirectory`` cleanup)
and ``signal`` are unavailable.  Reward *integrity* is best effort: a program can
still fake tests with, e.g., an object whose ``__eq__`` always returns True, or
by a sufficiently clever escape from the audit hook (which would still leave it
inside the kernel-enforced layers).  Linux only.

Stand-alone: the runner process (``python -I -S``, no site-packages) imports this module by file,
so it imports nothing but the standard library.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import struct
import sys
import types

DEFAULT_TIMEOUT_S = 2.0
DEFAULT_MEMORY_MB = 256
DEFAULT_MAX_FILE_BYTES = 1 << 20
NOBODY = 65534
#: the layers a child reports when they engage (the rlimits and PR_SET_PDEATHSIG always do)
LAYERS = ("netns", "landlock", "privdrop", "audit")

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
# Imported by the runner before forking: children inherit them (fast -- no
# per-unit import cost -- and available even when the interpreter's stdlib is
# not readable by the unprivileged user the children run as, e.g. under /root).
PRELOAD_MODULES = (
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
    # what the runner loaded for itself when it was one file with run_batch (logging, and fcntl
    # through subprocess): children keep reaching them
    "logging",
    "traceback",
    "atexit",
    "fcntl",
)


class SandboxViolation(PermissionError):
    """Raised inside a sandboxed program when it attempts a forbidden operation."""


def make_audit_hook(tmpdir: str):
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


def load_libc():
    """The C library, for the system calls Python has no wrapper for (``unshare``, ``prctl``,
    Landlock).  The runner loads it once, before forking."""
    return ctypes.CDLL(None, use_errno=True)


def confine(libc, tmpdir: str, cfg: dict) -> list[str]:
    """Apply the kernel-enforced layers to the calling (forked) process, in order: the network
    namespace (root), Landlock, the privilege drop (root), the network namespace (user namespace,
    not root), the rlimits, ``PR_SET_PDEATHSIG``.  ``cfg``: the batch request (``disable``,
    ``timeout_s``, ``memory_mb``, ``max_file_bytes``).  Returns the layers that engaged; raises
    when a layer that must not fail does (the privilege drop, an rlimit, the death signal)."""
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
    if "netns" not in disable and "netns" not in layers and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0:
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
    return layers


def modules_to_purge(own: set[str]) -> list[str]:
    """Names of loaded modules a program must not reach through ``sys.modules``:
    the blocked ones, the runner's ``__main__``, and (transitively) every module
    holding a reference to one of them or to an object defined in one of them.  ``own``: the
    names the sandbox's own modules were loaded under (the runner's ``__main__`` is purged anyway)."""
    mods = {name: m for name, m in list(sys.modules.items()) if isinstance(m, types.ModuleType)}
    purged = {name for name in mods if name.split(".")[0] in _BLOCKED_IMPORTS or name == "__main__"}
    purged |= {"subprocess", "sdpocl", *own} & set(mods)
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
