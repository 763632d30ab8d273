"""The job server (sdpocl.jobserver): a command run through it gives the output, exit status,
working directory and environment of the same command run directly; without a server (or from
another Python environment) the client runs the command itself."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SDPOCL = str(Path(sys.executable).parent / "sdpocl")
MARK = "[sdpocl job server] pid"


def _start_server(sock: Path, modules=("sdpocl.config",), env=None):
    code = (
        "import sys; from sdpocl.jobserver import serve; "
        f"serve({str(sock)!r}, watch_pid={os.getpid()}, modules={tuple(modules)!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while not sock.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert sock.exists(), proc.stderr.read() if proc.poll() is not None else "no socket after 30 s"
    return proc


@pytest.fixture
def server(tmp_path):
    """A job server that preloads nothing heavy (the mechanism, not the imports, is under test)."""
    sock = tmp_path / "s.sock"
    proc = _start_server(sock)
    yield sock
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def test_each_job_gets_the_threads_snakemake_gave_it(tmp_path):
    """Snakemake sets OMP_NUM_THREADS to a job's threads; a child forked from a server that imported torch
    must use that many, not the server's pool (all cores: jobs without their own --threads oversubscribed
    the CPU beside the training jobs)."""
    sock = tmp_path / "t.sock"
    proc = _start_server(sock, modules=("torch", "sdpocl.config"), env={**os.environ, "OMP_NUM_THREADS": "5"})
    try:
        for n in ("1", "3"):
            out = _sdpocl("show-grid", "--config", "config/smoke.yaml", server=sock, env={"OMP_NUM_THREADS": n})
            assert out.returncode == 0 and MARK in out.stderr
            assert f"threads {n}, exit status 0" in out.stderr, out.stderr[-300:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def _sdpocl(*args, server=None, cwd=ROOT, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "SDPOCL_JOB_SERVER"}
    full_env.update(env or {})
    if server is not None:
        full_env["SDPOCL_JOB_SERVER"] = str(server)
    return subprocess.run([SDPOCL, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)


def test_a_command_through_the_server_prints_what_it_prints_directly(server):
    direct = _sdpocl("show-grid", "--config", "config/smoke.yaml")
    served = _sdpocl("show-grid", "--config", "config/smoke.yaml", server=server)
    assert direct.returncode == served.returncode == 0
    assert served.stdout == direct.stdout and "grpo_s0" in direct.stdout
    assert MARK not in direct.stderr
    assert f"{MARK}" in served.stderr and "exit status 0" in served.stderr


def test_exit_status_cwd_and_environment_reach_the_child(server, tmp_path):
    (tmp_path / "cfg.yaml").write_text((ROOT / "config" / "smoke.yaml").read_text().replace("seeds: [0]", "seeds: [7]"))
    served = _sdpocl("show-grid", "--config", "cfg.yaml", server=server, cwd=tmp_path)  # a relative path
    assert served.returncode == 0 and "grpo_s7" in served.stdout
    missing = _sdpocl("show-grid", "--config", "nope.yaml", server=server, cwd=tmp_path)
    direct = _sdpocl("show-grid", "--config", "nope.yaml", cwd=tmp_path)
    assert missing.returncode == direct.returncode != 0
    assert "nope.yaml" in missing.stderr
    usage = _sdpocl("show-grid", server=server)  # argparse exits 2 on a missing argument
    assert usage.returncode == 2 and "--config" in usage.stderr


def test_without_a_server_the_client_runs_the_command_itself(tmp_path):
    out = _sdpocl("show-grid", "--config", "config/smoke.yaml", server=tmp_path / "absent.sock")
    assert out.returncode == 0 and "grpo_s0" in out.stdout and MARK not in out.stderr


def test_a_client_from_another_environment_is_refused(server):
    from sdpocl.jobserver import submit

    env_prefix = sys.prefix
    try:
        sys.prefix = "/elsewhere"  # what a conda job's client would send
        assert submit(str(server), ["show-grid", "--config", "config/smoke.yaml"]) is None
    finally:
        sys.prefix = env_prefix


def test_the_child_dies_with_its_client(server, tmp_path):
    """Snakemake cancels a job by killing its process: the forked child must not run on. The
    job reads its input from the client's stdin, a pipe nobody closes, so it blocks until killed."""
    reader, writer = os.pipe()
    client = subprocess.Popen(
        [
            SDPOCL,
            "aggregate-eval",
            "--scores",
            "/dev/stdin",
            "--domains",
            "math",
            "--out",
            str(tmp_path / "e.csv"),
            "--out-teacher",
            str(tmp_path / "t.csv"),
        ],
        stdin=reader,
        env={**os.environ, "SDPOCL_JOB_SERVER": str(server)},
        cwd=ROOT,
    )
    deadline = time.time() + 30
    while not (children := _children_of_server(server)) and time.time() < deadline:
        time.sleep(0.1)
    assert children, "the server forked no child for the client"
    time.sleep(1)
    assert client.poll() is None and all(_alive(pid) for pid in children)  # blocked, as intended
    client.kill()
    client.wait()
    deadline = time.time() + 10
    while any(_alive(pid) for pid in children) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children)
    os.close(reader)
    os.close(writer)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def _children_of_server(sock: Path) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = stat.read_bytes()
        except OSError:
            continue
        if b"jobserver import serve" in cmd and str(sock).encode() in cmd:
            server_pid = int(stat.parent.name)
            for child in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = child.read_text().split()
                except OSError:
                    continue
                if int(fields[3]) == server_pid:
                    out.append(int(child.parent.name))
    return out


@pytest.mark.parametrize("enabled", [True, False])
def test_local_runs_use_the_server_unless_turned_off(tmp_path, enabled):
    """The Snakefile starts the server for a local run (`job_server: false` turns it off) and
    stops it when the run ends."""
    from workflow_utils import snakemake

    results = tmp_path / "results"
    target = str(results / "data" / "math" / "test.jsonl")
    snakemake(target, "--config", f"results={results}", f"job_server={str(enabled).lower()}")
    log = (results / "logs" / "prepare_data" / "math_test.log").read_text()
    assert (MARK in log) is enabled, log
    assert (results / "logs" / "job_server.log").exists() is enabled
    if enabled:
        server_log = (results / "logs" / "job_server.log").read_text()
        sock = server_log.split("[sdpocl job server] ", 1)[1].split(":", 1)[0]
        assert "preloaded" in server_log and sock.endswith(".sock")
        assert not Path(sock).exists()  # stopped and cleaned up with the run
        assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if sock.encode() in _cmdline(p)]


def _cmdline(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
