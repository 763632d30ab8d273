"""A fork server for the workflow's local jobs.

Why: every `sdpocl` job is a fresh Python process that imports torch, transformers, TRL and
lm-eval before it does anything: ~7 s of CPU on this 2-core machine, more than a smoke-sized
training or evaluation job computes. The server imports them once per Snakemake invocation;
each job's `sdpocl` command then only connects, and the server forks a child that runs the
command with the job's arguments, working directory, environment and standard streams (its log).
The child runs it from the command table (:mod:`sdpocl.commands`); the front door that connects
(:mod:`sdpocl.cli`) imports this module, not the other way round.

Snakemake still starts, times and kills the jobs as usual (the client process is the job): the
client's exit status is the child's, and if the client dies (Snakemake cancelling a job) the
child kills itself. Started by the Snakefile's `onstart` only for local execution without a
software deployment method (`job_server: false` turns it off); cluster jobs never use it.
Benchmark files then time the job's wall clock but measure the client's CPU and memory, so
the child writes its own CPU time and peak memory as the last line of the job's log.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import resource
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from pathlib import Path

from sdpocl.commands import run as run_command

ENV = "SDPOCL_JOB_SERVER"  # the server's socket path; set for the jobs of a local run
_MAX_FDS = 3

# Heavy modules the subcommands import; importing them here is the whole point. Modules that
# initialise an accelerator or start threads at import (vLLM) stay out: the children import them.
PRELOAD = (
    "torch",
    "transformers",
    "trl",
    "lm_eval.evaluator",
    "lm_eval.models.huggingface",
    "accelerate",
    "jsonschema",
    "pandas",
    "sdpocl.train.stage",
    "sdpocl.train.trainers",
    "sdpocl.rewards.routing",
    "sdpocl.train.base",
    "sdpocl.evaluate.run",
    "sdpocl.evaluate.aggregate",
    "sdpocl.drift.params",
    "sdpocl.drift.tables",
    "sdpocl.data.benchmarks",
    "sdpocl.plot.figures",
)


def _send(conn: socket.socket, obj, fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        sent = socket.send_fds(conn, [payload], fds)
        conn.sendall(payload[sent:])
    else:
        conn.sendall(payload)


def _recv_exact(conn: socket.socket, n: int, buf: bytes = b"") -> bytes:
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("job server connection closed")
        buf += chunk
    return buf


def _recv(conn: socket.socket, with_fds: bool = False):
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(conn, 1 << 16, _MAX_FDS)
        if not head:
            raise ConnectionError("job server connection closed")
    else:
        head = b""
    head = _recv_exact(conn, 4, head)
    (size,) = struct.unpack("!I", head[:4])
    body = _recv_exact(conn, 4 + size, head)[4:]
    return json.loads(body), fds


# --- client ---------------------------------------------------------------------------------


def submit(path: str, argv: list[str]) -> int | None:
    """Run ``sdpocl argv`` in a child of the server at ``path``; its exit status, or None when
    there is no usable server (then the caller runs the command itself)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    with conn:
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "prefix": sys.prefix}
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _send(conn, request, fds=[0, 1, 2])
        try:
            reply, _ = _recv(conn)
        except ConnectionError:
            print("sdpocl: the job server's child ended without an exit status", file=sys.stderr)
            return 1
    if reply.get("refused"):
        return None
    return int(reply["status"])


# --- server ---------------------------------------------------------------------------------


def preload(modules=PRELOAD) -> list[str]:
    """Import ``modules``; the names that failed (optional extras not installed)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that does not import is the child's problem
            failed.append(name)
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(path: str, watch_pid: int | None = None, modules=PRELOAD) -> None:
    """Listen on ``path`` (bound before the imports, so early jobs queue instead of missing
    the server), fork a child per connection; return when ``watch_pid`` (Snakemake) is gone."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    t0 = time.time()
    failed = preload(modules)
    print(
        f"[sdpocl job server] {path}: preloaded in {time.time() - t0:.1f}s"
        + (f" (not importable: {', '.join(failed)})" if failed else ""),
        file=sys.stderr,
        flush=True,
    )
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener.settimeout(1.0)
    try:
        while watch_pid is None or _alive(watch_pid):
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.setblocking(True)
            sys.stdout.flush()
            sys.stderr.flush()
            if os.fork() == 0:
                status = 1
                try:
                    listener.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess.wait needs it back
                    status = _child(conn)
                finally:
                    os._exit(status)
            conn.close()
    finally:
        listener.close()
        Path(path).unlink(missing_ok=True)


def _watch_client(conn: socket.socket) -> None:
    """Kill this child when the client goes away (Snakemake cancelled the job)."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def apply_thread_count(env: dict) -> None:
    """Give the job the thread count Snakemake gave it (``OMP_NUM_THREADS`` = the rule's threads).

    A fresh process's OpenMP reads that variable when it loads; a child forked from the server keeps the
    server's pool size instead (all cores), so a job that sets no threads itself (drift, distance,
    plots) spun on every core beside the training jobs: under two busy jobs on two cores one
    ``compute-drift`` took 68 s of CPU instead of 2.4 s (docs/measurements.md)."""
    torch = sys.modules.get("torch")
    n = env.get("OMP_NUM_THREADS", "")
    if torch is not None and n.isdigit() and int(n) > 0:
        torch.set_num_threads(int(n))


def _torch_threads() -> str:
    torch = sys.modules.get("torch")
    return str(torch.get_num_threads()) if torch is not None else "-"


def _child(conn: socket.socket) -> int:
    try:
        request, fds = _recv(conn, with_fds=True)
    except Exception:  # noqa: BLE001
        return 1
    if request.get("prefix") != sys.prefix:  # another Python environment: the client runs it
        _send(conn, {"refused": "environment"})
        return 0
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    apply_thread_count(request["env"])
    sys.argv = ["sdpocl", *request["argv"]]
    threading.Thread(target=_watch_client, args=(conn,), daemon=True).start()

    try:
        status = run_command(request["argv"])
    except SystemExit as exc:  # argparse errors, explicit exits
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like an uncaught exception would
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    print(
        f"[sdpocl job server] pid {os.getpid()}: cpu {cpu:.1f}s, "
        f"max rss {max(own.ru_maxrss, kids.ru_maxrss) / 1024:.0f} MB, threads {_torch_threads()}, exit status {status}",
        file=sys.stderr,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):  # the client is gone: nobody to tell
        _send(conn, {"status": status})
    return status
