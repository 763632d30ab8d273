"""The job server (sdpocl.jobserver): this invocation's local jobs fork from one process with torch and the
stack imported, instead of each starting its own Python. Started when the workflow starts, stopped when it ends;
a job's `sdpocl` finds it through $SDPOCL_JOB_SERVER and runs its command there (its `benchmark:` file times the
client, which waits for the whole command: the wall time is the job's, the CPU and memory columns are not)."""

import os
import sys
from pathlib import Path

from sdpocl.jobserver import ENV as JOB_SERVER_ENV

_JOB_SERVER = {}


def start_job_server():
    """Start `sdpocl job-server` for this invocation's local jobs and point them to it
    ($SDPOCL_JOB_SERVER); not for cluster execution or a software deployment method (conda,
    apptainer: their jobs run another Python), nor with `job_server: false`."""
    import shutil
    import subprocess
    import tempfile
    import time

    exe = shutil.which("sdpocl")
    if not config.get("job_server", True) or not workflow.local_exec or exe is None:
        return
    if workflow.deployment_settings.deployment_method:
        return
    sockdir = tempfile.mkdtemp(prefix="sdpocl-")
    path = os.path.join(sockdir, "jobs.sock")
    logfile = Path(RESULTS) / "logs" / "job_server.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "w") as log:
        proc = subprocess.Popen(
            [exe, "job-server", "--socket", path, "--watch-pid", str(os.getpid())],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.time() + 30
    while not os.path.exists(path) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    if not os.path.exists(path):
        proc.kill()
        print(f"sdpocl: the job server did not start (see {logfile}); jobs start their own Python", file=sys.stderr)
        return
    os.environ[JOB_SERVER_ENV] = path  # set, not read: the jobs' `sdpocl` finds the server here
    _JOB_SERVER.update(proc=proc, dir=sockdir)


def stop_job_server():
    import shutil

    os.environ.pop(JOB_SERVER_ENV, None)
    proc = _JOB_SERVER.pop("proc", None)
    if proc is not None:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(_JOB_SERVER.pop("dir"), ignore_errors=True)


onstart:
    start_job_server()


onsuccess:
    stop_job_server()


onerror:
    stop_job_server()
