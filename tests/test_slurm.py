"""The Slurm profile against a real single-node Slurm (tests/slurm/start.sh): the smoke grid
through `snakemake --profile slurm`, what Slurm itself recorded about the submitted jobs, and a
train_stage job interrupted mid-stage (scancel: Snakemake retries it; scontrol requeue: Slurm
runs it again) that resumes from its last complete checkpoint.

The grid is config/smoke.yaml cut to its first run and its last single-domain run (every rule of
the workflow, about 60% of the smoke grid's jobs): the local end-to-end tests run the whole smoke
grid already, and every Slurm job costs a second Snakemake start-up inside the job.
SDPOCL_SLURM_GRID=full runs the whole of config/smoke.yaml through Slurm instead.

The Slurm tests need root (munged, slurmctld and slurmd run as root) and install Slurm from the
Debian packages when it is missing; they are skipped only without root or without apt-get.
`pytest -m slurm` runs just these; `pytest -m "not slurm"` leaves them out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from workflow_utils import BIN, ROOT, scheduled_jobs

from sdpocl.config import expand_runs

SLURM_SCRIPTS = ROOT / "tests" / "slurm"
GPU_RULES = ("train_stage", "evaluate_checkpoint", "evaluate_base")
LOCAL_RULE_PREFIXES = ("aggregate_", "plot_")  # must never reach Slurm (localrules)
SMOKE_TIMEOUT_S = 1500


def _slurm_marks(fn):
    return pytest.mark.slurm(pytest.mark.slow(fn))


@dataclass
class Slurm:
    dir: Path
    env: dict  # os.environ + SLURM_CONF + the venv's bin on PATH

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, check=check, timeout=60)

    def jobs(self) -> list[dict[str, str]]:
        """Every job slurmctld remembers (MinJobAge=3600: finished ones too), `scontrol show job`."""
        out = self.run("scontrol", "show", "job", "--oneliner").stdout
        jobs = []
        for line in out.splitlines():
            if not line.startswith("JobId="):
                continue
            fields = dict(m.groups() for m in re.finditer(r"(\w[\w/:]*)=(\S*)", line))
            jobs.append(fields)
        return jobs


def _snakemake_cmd(*args: str) -> list[str]:
    return [str(BIN / "snakemake"), *args]


def _run(slurm_env: dict, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        _snakemake_cmd(*args), cwd=ROOT, capture_output=True, text=True, env=slurm_env, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


def _base_env() -> dict:
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}


def _rules() -> list[str]:
    proc = _run(_base_env(), "--list-rules", "--configfile", "config/smoke.yaml")
    return [line.split()[0] for line in proc.stdout.splitlines() if re.match(r"^\w+(\s|$)", line)]


def _rule_of(comment: str, rules: list[str]) -> str | None:
    """The plugin sets each job's comment to rule_<rule> or rule_<rule>_wildcards_<values>."""
    for rule in sorted(rules, key=len, reverse=True):
        if comment == f"rule_{rule}" or comment.startswith(f"rule_{rule}_wildcards_"):
            return rule
    return None


def _run_name(entry: dict) -> str:
    return expand_runs({"runs": [entry], "seeds": [0]})[0].name.rsplit("_s", 1)[0]


def _grid_config() -> dict:
    """config/smoke.yaml (SDPOCL_SLURM_GRID=full), or by default its first run plus its last
    single-domain run on its first two domains: every rule family still goes through Slurm, and
    the chain of jobs that wait on each other is half as long (the plugin's status checks back
    off by 10 s per check while no job finishes, so each job on that chain costs ~30 s here)."""
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    if os.environ.get("SDPOCL_SLURM_GRID") == "full":
        return config
    config["domains"] = config["domains"][:2]
    single = config.get("single_domain_runs", [])[-1:]
    config["runs"] = [config["runs"][0]] + [r for r in config["runs"][1:] if _run_name(r) in single]
    config["single_domain_runs"] = single
    return config


def _write_config(config: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _mb(size: str) -> int:
    """scontrol's memory sizes (64000M, 62.50G) in MB."""
    return round(float(size[:-1]) * {"M": 1, "G": 1024, "T": 1024**2}[size[-1]])


def _slurm_args(logdir: Path) -> list[str]:
    """What the tests add to the profile: quicker first status checks (the profile's plugin
    default is 40 s) and the plugin's job logs in the test's tmp dir instead of .snakemake/."""
    return [
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--slurm-logdir",
        str(logdir),
        "--slurm-keep-successful-logs",
    ]


# --- runs everywhere: the profile answers to its name and sets the resources ------------------


def test_profile_by_name_sets_gpu_and_attempt_scaled_resources(tmp_path):
    by_name = _run(
        _base_env(), "--profile", "slurm", "-n", "--configfile", "config/smoke.yaml", "--config", f"results={tmp_path}"
    )
    assert "Using profile slurm " in by_name.stdout + by_name.stderr
    by_path = _run(
        _base_env(),
        "--profile",
        "profiles/slurm",
        "-n",
        "--configfile",
        "config/smoke.yaml",
        "--config",
        f"results={tmp_path}",
    )
    assert scheduled_jobs(by_name.stdout) == scheduled_jobs(by_path.stdout) != {}
    blocks = re.split(r"\n(?=rule |localrule )", by_name.stdout)
    train = next(b for b in blocks if b.startswith("rule train_stage:"))
    resources = re.search(r"resources: (.+)", train).group(1)
    assert "gpu=1" in resources and "runtime=240" in resources and "mem_mb=64000" in resources, resources
    # (a dry run does not say which jobs are local: test_slurm_saw_gpu_jobs_and_no_aggregation_or_plots)


# --- a real Slurm -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root: tests/slurm/start.sh runs munged, slurmctld and slurmd as root")
    installed = all(shutil.which(t) for t in ("slurmctld", "slurmd", "sbatch", "munged"))
    if not installed and shutil.which("apt-get") is None:
        pytest.skip("Slurm is not installed and apt-get is unavailable to install it")
    state = tmp_path_factory.mktemp("slurm")
    start = subprocess.run([str(SLURM_SCRIPTS / "start.sh"), str(state)], capture_output=True, text=True, timeout=900)
    if start.returncode != 0:
        pytest.fail(f"tests/slurm/start.sh failed:\n{start.stdout[-3000:]}\n{start.stderr[-6000:]}")
    env = {**_base_env(), "SLURM_CONF": str(state / "slurm.conf")}
    try:
        yield Slurm(state, env)
    finally:
        subprocess.run([str(SLURM_SCRIPTS / "stop.sh"), str(state), "--keep"], timeout=120)


@pytest.fixture(scope="module")
def slurm_smoke(slurm, tmp_path_factory):
    """The smoke grid through `snakemake --profile slurm` (the profile as users type it)."""
    work = tmp_path_factory.mktemp("slurm_smoke")
    results = work / "results"
    grid = _write_config(_grid_config(), work / "grid.yaml")
    config = ["--configfile", str(grid), "--config", f"results={results}"]
    planned = scheduled_jobs(_run(slurm.env, "-n", "-q", "rules", *config).stdout)
    t0 = time.time()
    proc = _run(
        slurm.env,
        "--profile",
        "slurm",
        *config,
        *_slurm_args(work / "slurm_logs"),
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )
    seconds = time.time() - t0
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    print(f"smoke grid through Slurm: {sum(planned.values())} jobs in {seconds:.0f} s")
    return results, grid, planned, slurm.jobs()


@_slurm_marks
def test_smoke_grid_completes_through_slurm(slurm, slurm_smoke):
    results, grid, planned, _ = slurm_smoke
    assert planned.get("train_stage", 0) > 0, planned
    again = _run(slurm.env, "-n", "-q", "rules", "--configfile", str(grid), "--config", f"results={results}")
    assert scheduled_jobs(again.stdout) == {}, again.stdout[-3000:]


@_slurm_marks
def test_slurm_saw_gpu_jobs_and_no_aggregation_or_plots(slurm_smoke):
    _, _, planned, jobs = slurm_smoke
    rules = _rules()
    per_rule: dict[str, list[dict]] = {}
    for job in jobs:
        rule = _rule_of(job.get("Comment", ""), rules)
        assert rule is not None, f"a Slurm job that is no rule's: {job}"
        per_rule.setdefault(rule, []).append(job)
    assert all(job["JobState"] == "COMPLETED" for js in per_rule.values() for job in js), {
        r: [j["JobState"] for j in js] for r, js in per_rule.items()
    }

    def gpus(job):
        return " ".join(job.get(k, "") for k in ("TresPerJob", "TresPerNode", "TresPerTask"))

    for rule in GPU_RULES:
        if rule not in rules:
            continue  # evaluate_* once the workflow has them
        assert len(per_rule.get(rule, [])) == planned.get(rule, 0), (rule, planned, sorted(per_rule))
        for job in per_rule.get(rule, []):
            assert "gpu" in gpus(job), f"{rule} submitted without a GPU: {job}"
    train = per_rule["train_stage"]
    assert {job["TimeLimit"] for job in train} == {"04:00:00"}  # runtime 240 * attempt, attempt 1
    assert {_mb(job["MinMemoryNode"]) for job in train} == {64000}

    local = [r for r in rules if r.startswith(LOCAL_RULE_PREFIXES)]
    for rule in local:
        assert rule not in per_rule, f"{rule} was submitted to Slurm: {per_rule[rule][:2]}"
    for rule in ("prepare_data", "build_base", "response_drift", "domain_distance"):  # CPU jobs
        for job in per_rule.get(rule, []):
            assert "gpu" not in gpus(job), job


def _interrupt_after_checkpoint(
    slurm: Slurm, proc: subprocess.Popen, state: Path, how: str, timeout: float = 600
) -> tuple[str, int]:
    """Wait for the train_stage job's first complete intermediate checkpoint, then interrupt it:
    `scancel` (Snakemake sees CANCELLED and retries) or `scontrol requeue` (preemption with
    requeue: Slurm runs the same job again; Snakemake only sees it pending, then running)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "snakemake ended before a checkpoint could be interrupted"
        done = sorted(int(p.parent.name.rsplit("-", 1)[1]) for p in state.glob("resume-step-*/COMPLETE"))
        if done:
            queue = slurm.run("squeue", "--noheader", "--format=%i %T %k").stdout.splitlines()
            running = [line.split()[0] for line in queue if "rule_train_stage" in line]
            assert len(running) == 1, queue
            if how == "scancel":
                slurm.run("scancel", running[0])
            else:
                slurm.run("scontrol", "requeue", running[0])
                # Slurm holds a requeued job for 2 minutes (BeginTime); a test need not wait
                for _ in range(50):
                    if "PENDING" in slurm.run("squeue", "-h", "-t", "all", "-j", running[0], "-o", "%T").stdout:
                        break
                    time.sleep(0.2)
                slurm.run("scontrol", "update", f"JobId={running[0]}", "StartTime=now")
            return running[0], done[-1]
        time.sleep(0.2)
    raise AssertionError("no intermediate checkpoint appeared")


@_slurm_marks
@pytest.mark.parametrize("how", ["scancel", "requeue"])
def test_interrupted_train_job_resumes_from_its_checkpoint(slurm, slurm_smoke, tmp_path, how):
    """scancel: Snakemake's retry (attempt 2, twice the time limit) resumes the stage.
    requeue (what preemption does with `slurm-requeue: true`): Slurm reruns the same job, which
    resumes the stage; Snakemake sees no failure."""
    smoke_results, grid, _, _ = slurm_smoke
    # a longer first stage than the smoke grid's, so that there is time to interrupt it mid-way;
    # data and base model copied from the smoke run with their times (nothing upstream reruns)
    config = yaml.safe_load(grid.read_text())
    results = tmp_path / "results"
    config["results"] = str(results)
    first_domain = config["domains"][0]
    config["train"]["steps"][first_domain], config["train"]["save_every"] = 120, 10
    long = _write_config(config, tmp_path / "long.yaml")
    for sub in ("data", "base"):
        shutil.copytree(smoke_results / sub, results / sub, copy_function=shutil.copy2)
    run = expand_runs(config)[0].name
    stage = results / "runs" / run / first_domain
    state = results / "state" / run / first_domain
    args = [str(stage / "summary.json"), "--configfile", str(long)]
    planned = scheduled_jobs(_run(slurm.env, *args, "-n", "-q", "rules").stdout)
    assert planned == {"train_stage": 1}, planned

    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen(
            _snakemake_cmd(*args, "--profile", "slurm", *_slurm_args(tmp_path / "slurm_logs")),
            cwd=ROOT,
            env=slurm.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            first, seen = _interrupt_after_checkpoint(slurm, proc, state, how)
            rc = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=60)
    output = (tmp_path / "snakemake.log").read_text()
    assert rc == 0, output[-6000:]

    summary = json.loads((stage / "summary.json").read_text())
    assert summary["steps_done"] == summary["steps_planned"] == 120
    resumed = summary["resumed_from"]
    assert resumed and resumed.startswith("step-"), summary  # resume state resume-step-N
    assert seen <= int(resumed.split("-")[1]) < 120, (seen, resumed)
    assert f"resuming from resume-{resumed}" in (results / "logs" / "train" / run / f"{first_domain}.log").read_text()
    assert not state.exists(), "resume state is removed after success"

    comment = f"rule_train_stage_wildcards_{run}_{first_domain}"
    jobs = sorted(
        (j for j in slurm.jobs() if j.get("Comment") == comment and int(j["JobId"]) >= int(first)),
        key=lambda j: int(j["JobId"]),
    )
    states = [(j["JobState"], j["Restarts"], j["TimeLimit"]) for j in jobs]
    if how == "scancel":
        # a new submission, attempt 2: runtime "240 * attempt" doubles the time limit
        assert states == [("CANCELLED", "0", "04:00:00"), ("COMPLETED", "0", "08:00:00")], states
    else:
        # the same job, run twice; Snakemake's attempt stays 1
        assert states == [("COMPLETED", "1", "04:00:00")], states
