"""The Slurm profile against a real single-node Slurm (tests/slurm/start.sh): the smoke grid
through `snakemake --profile slurm`, what Slurm itself recorded about the submitted jobs, and a
train_stage job interrupted mid-stage (scancel: Snakemake retries it; scontrol requeue: Slurm
runs it again) that resumes from its last complete checkpoint.

The grid is config/smoke.yaml cut to its first run and its last single-domain run (every rule of
the workflow, about 60% of the smoke grid's jobs): the local end-to-end tests run the whole smoke
grid already, and every Slurm job costs a second Snakemake start-up inside the job.
SDPOCL_SLURM_GRID=full runs the whole of config/smoke.yaml through Slurm instead. The grid asks for
GPUs like the paper preset (train.gpus_per_job 2, evaluate.gpus_per_job 1; the tiny preset's own jobs
are CPU jobs) on a node with 4 fake GPUs; shims of sbatch, srun and sdpocl on the PATH record what
the plugin submitted, what its jobstep ran and what each job saw.

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
from types import SimpleNamespace

import pytest
import yaml
from workflow_utils import BIN, ROOT, scheduled_jobs

from sdpocl.config import expand_runs

SLURM_SCRIPTS = ROOT / "tests" / "slurm"
GPU_RULES = ("train_stage", "evaluate_checkpoint", "evaluate_base", "compute_drift")
CPU_RULES = ("prepare_data", "build_base", "response_drift", "domain_distance")
#: GPUs per job in the real-Slurm grid (the test node has 4): several per train job, as in the paper preset
GRID_GPUS = {"train": 2, "evaluate": 1}
#: each rule's GPUs in that grid (teacher_check and compute_drift: one when train jobs have GPUs)
RULE_GPUS = {"train_stage": 2, "evaluate_checkpoint": 1, "evaluate_base": 1, "compute_drift": 1}
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
    off by 10 s per check while no job finishes, so each job on that chain costs ~30 s here).
    Either way with GPUs per job (GRID_GPUS), as a GPU grid asks for them."""
    config = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    for section, gpus in GRID_GPUS.items():
        config.setdefault(section, {})["gpus_per_job"] = gpus
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


def _jobs_resources(dry_run: str, rule: str) -> list[dict]:
    """Resources (ints where they are) and threads of every `rule` job in a dry run's output."""
    jobs = []
    for block in re.split(r"\n(?=rule |localrule )", dry_run):
        if not block.startswith(f"rule {rule}:"):
            continue
        fields = dict(item.split("=", 1) for item in re.search(r"resources: (.+)", block).group(1).split(", "))
        resources = {k: int(v) if re.fullmatch(r"-?\d+", v) else v for k, v in fields.items()}
        resources["threads"] = int(re.search(r"threads: (\d+)", block).group(1)) if "threads:" in block else 1
        jobs.append(resources)
    return jobs


def _one(dry_run: str, rule: str) -> dict:
    """The resources all of `rule`'s jobs share."""
    jobs = _jobs_resources(dry_run, rule)
    assert jobs and all(j == jobs[0] for j in jobs), (rule, jobs[:3])
    return jobs[0]


class _Resources(dict):
    """job.resources as the Slurm plugins read it: .get() and attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _slurm_commands(resources: dict) -> tuple[str, str]:
    """What the installed Slurm plugin submits for a job with these resources (its sbatch flags) and
    what its jobstep runs inside the job (the srun flags before the job's command)."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting, get_node_setting

    job = SimpleNamespace(resources=_Resources(resources), threads=resources["threads"])
    params = dict(run_uuid="u", slurm_logfile="log", comment_str="c", account="", partition="", workdir="")
    sbatch = get_submit_command(job, params) + set_gres_string(job)  # as the plugin's run_job builds it
    gpu_job = bool(resources.get("gpu"))
    srun = f"srun -n1 {get_cpu_setting(job, gpu_job)} {get_gpu_setting(job)} {get_node_setting(job)}"
    return " ".join(sbatch.split()), " ".join(srun.split())


def test_profile_by_name_sets_attempt_scaled_resources_and_one_node(tmp_path):
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
    train = _one(by_name.stdout, "train_stage")
    assert train["runtime"] == 240 and train["nodes"] == 1 and train["tasks_per_gpu"] == 0, train
    # the tiny preset's jobs are CPU jobs (train.gpus_per_job null -> 0): no GPU, the rule's own memory
    assert "gpu" not in train and train["mem_mb"] == 2000, train
    for rule in GPU_RULES:
        assert "gpu" not in _one(by_name.stdout, rule), rule
    # (a dry run does not say which jobs are local: test_slurm_saw_gpu_jobs_and_no_aggregation_or_plots)


def _paper_config(tmp_path: Path, **gpus: int) -> Path:
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    for section, n in gpus.items():
        config[section]["gpus_per_job"] = n
    return _write_config(config, tmp_path / "paper.yaml")


def _paper_dry_run(config: Path, results: Path) -> str:
    return _run(
        _base_env(), "--profile", "slurm", "-n", "-p", "--configfile", str(config), "--config", f"results={results}"
    ).stdout


def test_paper_preset_asks_for_its_gpus_on_one_node(tmp_path):
    """config/paper.yaml through profiles/slurm: a train job asks for train.gpus_per_job = 4 GPUs on one
    node with 8 CPUs and 48 GB per GPU, and the installed plugin submits that as one task
    (`--gpus=4 --nodes=1 --cpus-per-task=32 --mem 192000`, no --ntasks-per-gpu) whose jobstep runs the
    job under `srun --gpus=4 --nodes=1`; evaluation and drift jobs one GPU; 8 GPUs per train job scale
    CPUs and memory; and no GPU count changes a job's command (params), so none reruns a job."""
    results = tmp_path / "results"
    paper = _paper_dry_run(ROOT / "config" / "paper.yaml", results)
    train = _one(paper, "train_stage")
    assert (train["gpu"], train["nodes"], train["threads"]) == (4, 1, 8), train
    assert (train["cpus_per_task"], train["mem_mb"], train["runtime"]) == (32, 192000, 240), train
    sbatch, srun = _slurm_commands(train)
    for flag in ("--gpus=4", "--nodes=1", "--cpus-per-task=32", "--mem 192000", "-t 240"):
        assert f" {flag}" in sbatch, (flag, sbatch)
    assert "--ntasks" not in sbatch, sbatch  # one task: not --ntasks-per-gpu=1 (4 tasks x 32 CPUs)
    assert srun == "srun -n1 --cpus-per-task=32 --gpus=4 --nodes=1", srun
    for rule in ("evaluate_checkpoint", "evaluate_base", "compute_drift"):
        job = _one(paper, rule)
        assert (job["gpu"], job["nodes"], job["cpus_per_task"], job["mem_mb"]) == (1, 1, 8, 48000), (rule, job)
        sbatch, srun = _slurm_commands(job)
        assert " --gpus=1" in sbatch and " --nodes=1" in sbatch and "--ntasks" not in sbatch, (rule, sbatch)
        assert srun.endswith(" --gpus=1 --nodes=1"), (rule, srun)
    for rule in ("response_drift", "domain_distance", "prepare_data"):  # CPU jobs stay CPU jobs
        job = _jobs_resources(paper, rule)[0]
        sbatch, srun = _slurm_commands(job)
        assert "gpu" not in job and "--gpus" not in sbatch and " --ntasks=1" in sbatch and " --nodes=1" in sbatch
        assert "--gpus" not in srun and srun.endswith(" --nodes=1"), (rule, srun)

    eight = _paper_dry_run(_paper_config(tmp_path, train=8, evaluate=2), results)
    train8 = _one(eight, "train_stage")
    assert (train8["gpu"], train8["cpus_per_task"], train8["mem_mb"]) == (8, 64, 384000), train8
    assert _one(eight, "evaluate_base")["gpu"] == 2
    assert _one(eight, "compute_drift")["gpu"] == 1

    def commands(dry_run):  # every job's shell command, made of its params (which Snakemake tracks for reruns)
        return sorted(line for line in dry_run.splitlines() if line.startswith("Shell command:"))

    assert len(commands(paper)) > 100 and commands(eight) == commands(paper)


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


#: a shim on the PATH: records its arguments (NUL-separated) and its environment, one file per call
#: under $SDPOCL_TEST_CALLS, then runs the real command
_SHIM = """#!/bin/sh
if [ -n "$SDPOCL_TEST_CALLS" ]; then
    f=$(mktemp "$SDPOCL_TEST_CALLS/{name}.XXXXXX")
    {{ printf '%s\\0' "$@"; printf '\\n--env--\\n'; env; }} > "$f"
fi
exec {real} "$@"
"""


def _with_shims(env: dict, work: Path) -> tuple[dict, Path]:
    """`env` with sbatch (what the plugin submits), srun (what its jobstep runs inside each job; it
    keeps $PATH and every variable but SLURM_*, SRUN_* and SBATCH_*) and sdpocl (the rule's command
    inside the job step) shimmed on the PATH."""
    shims, calls = work / "shims", work / "calls"
    shims.mkdir()
    calls.mkdir()
    for name in ("sbatch", "srun", "sdpocl"):
        real = shutil.which(name, path=env["PATH"])
        assert real, f"{name} not on the PATH"
        (shims / name).write_text(_SHIM.format(name=name, real=real))
        (shims / name).chmod(0o755)
    return {**env, "PATH": f"{shims}:{env['PATH']}", "SDPOCL_TEST_CALLS": str(calls)}, calls


@dataclass
class Call:
    args: list[str]
    env: dict[str, str]


def _calls(calls: Path, name: str) -> list[Call]:
    out = []
    for path in sorted(calls.glob(f"{name}.*")):
        args, _, env = path.read_text().partition("\n--env--\n")
        pairs = (line.split("=", 1) for line in env.splitlines() if re.match(r"^\w+=", line))
        out.append(Call(args.split("\0")[:-1], dict(pairs)))
    return out


@dataclass
class SmokeRun:
    results: Path
    grid: Path
    planned: dict[str, int]
    jobs: list[dict[str, str]]  # scontrol show job, after the run
    calls: Path  # the shims' records


@pytest.fixture(scope="module")
def slurm_smoke(slurm, tmp_path_factory):
    """The smoke grid through `snakemake --profile slurm` (the profile as users type it)."""
    work = tmp_path_factory.mktemp("slurm_smoke")
    results = work / "results"
    grid = _write_config(_grid_config(), work / "grid.yaml")
    config = ["--configfile", str(grid), "--config", f"results={results}"]
    planned = scheduled_jobs(_run(slurm.env, "-n", "-q", "rules", *config).stdout)
    env, calls = _with_shims(slurm.env, work)
    t0 = time.time()
    proc = _run(
        env,
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
    return SmokeRun(results, grid, planned, slurm.jobs(), calls)


def _jobs_per_rule(jobs: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    rules = _rules()
    per_rule: dict[str, list[dict]] = {}
    for job in jobs:
        rule = _rule_of(job.get("Comment", ""), rules)
        assert rule is not None, f"a Slurm job that is no rule's: {job}"
        per_rule.setdefault(rule, []).append(job)
    return per_rule


@_slurm_marks
def test_smoke_grid_completes_through_slurm(slurm, slurm_smoke):
    assert slurm_smoke.planned.get("train_stage", 0) > 0, slurm_smoke.planned
    config = ["--configfile", str(slurm_smoke.grid), "--config", f"results={slurm_smoke.results}"]
    again = _run(slurm.env, "-n", "-q", "rules", *config)
    assert scheduled_jobs(again.stdout) == {}, again.stdout[-3000:]


@_slurm_marks
def test_slurm_saw_gpu_jobs_and_no_aggregation_or_plots(slurm_smoke):
    planned, rules = slurm_smoke.planned, _rules()
    per_rule = _jobs_per_rule(slurm_smoke.jobs)
    assert all(job["JobState"] == "COMPLETED" for js in per_rule.values() for job in js), {
        r: [j["JobState"] for j in js] for r, js in per_rule.items()
    }

    def gpus(job):  # what it asked for: TresPerJob=gres:gpu:2 (sbatch --gpus=2)
        tres = " ".join(job.get(k, "") for k in ("TresPerJob", "TresPerNode", "TresPerTask"))
        found = re.search(r"gpu:(\d+)", tres)
        return int(found.group(1)) if found else 0

    for rule in GPU_RULES:
        assert len(per_rule.get(rule, [])) == planned.get(rule, 0), (rule, planned, sorted(per_rule))
        for job in per_rule.get(rule, []):
            assert gpus(job) == RULE_GPUS[rule] and job["NumNodes"] == "1", f"{rule}: {job}"
    train = per_rule["train_stage"]
    assert {job["TimeLimit"] for job in train} == {"04:00:00"}  # runtime 240 * attempt, attempt 1
    # 8 CPUs and 48 GB per GPU (sdpocl.resources: CPUS_PER_GPU, MEM_MB_PER_GPU), in one task
    assert {(job["NumCPUs"], job["NumTasks"]) for job in train} == {(str(8 * GRID_GPUS["train"]), "1")}
    assert {_mb(job["MinMemoryNode"]) for job in train} == {48000 * GRID_GPUS["train"]}

    local = [r for r in rules if r.startswith(LOCAL_RULE_PREFIXES)]
    for rule in local:
        assert rule not in per_rule, f"{rule} was submitted to Slurm: {per_rule[rule][:2]}"
    for rule in CPU_RULES:
        for job in per_rule.get(rule, []):
            assert gpus(job) == 0, job


@_slurm_marks
def test_gpu_jobs_get_their_gpus_on_one_node(slurm_smoke):
    """--gpus=N and --nodes=1 reach sbatch (the shim's record of the plugin's calls) and the srun that
    runs the job inside its allocation (the jobstep's calls), and the job's command sees N devices."""
    per_rule = _jobs_per_rule(slurm_smoke.jobs)
    rule_of_job = {job["JobId"]: rule for rule, jobs in per_rule.items() for job in jobs}
    rules = _rules()

    def flags(call):
        return " ".join(call.args)

    submitted: dict[str, int] = {}
    for call in _calls(slurm_smoke.calls, "sbatch"):
        rule = _rule_of(call.args[call.args.index("--comment") + 1], rules)
        submitted[rule] = submitted.get(rule, 0) + 1
        n = RULE_GPUS.get(rule, 0)
        assert "--nodes=1" in call.args, flags(call)
        assert not any(a.startswith("--ntasks-per-gpu") for a in call.args), flags(call)
        if n:
            assert f"--gpus={n}" in call.args and f"--cpus-per-task={8 * n}" in call.args, (rule, flags(call))
        else:
            assert not any(a.startswith(("--gpus", "--gres")) for a in call.args), (rule, flags(call))
    assert submitted == {r: len(js) for r, js in per_rule.items()}, submitted

    stepped: dict[str, int] = {}
    for call in _calls(slurm_smoke.calls, "srun"):
        rule = rule_of_job[call.env["SLURM_JOB_ID"]]
        stepped[rule] = stepped.get(rule, 0) + 1
        n = RULE_GPUS.get(rule, 0)
        assert "--nodes=1" in call.args, (rule, flags(call))
        if n:
            assert f"--gpus={n}" in call.args and f"--cpus-per-task={8 * n}" in call.args, (rule, flags(call))
        else:
            assert not any(a.startswith("--gpus") for a in call.args), (rule, flags(call))
    assert stepped == submitted, stepped

    seen: dict[str, int] = {}
    for call in _calls(slurm_smoke.calls, "sdpocl"):
        if "SLURM_JOB_ID" not in call.env:
            continue  # a local rule's command, on the submit node
        rule = rule_of_job[call.env["SLURM_JOB_ID"]]
        seen[rule] = seen.get(rule, 0) + 1
        n, env = RULE_GPUS.get(rule, 0), call.env
        assert env.get("SLURM_STEP_NUM_NODES") == "1", (rule, env)
        if n:  # what torch.cuda.device_count() counts on a GPU node: the step's CUDA_VISIBLE_DEVICES
            devices = env.get("CUDA_VISIBLE_DEVICES", "").split(",")
            assert len(set(devices)) == n and env.get("SLURM_STEP_GPUS", "").split(",") == devices, (rule, env)
            assert env.get("SLURM_GPUS_ON_NODE") == str(n), (rule, env)
        else:
            assert not env.get("CUDA_VISIBLE_DEVICES") and not env.get("SLURM_STEP_GPUS"), (rule, env)
    assert set(seen) == set(submitted) and all(seen[r] >= submitted[r] for r in seen), (seen, submitted)


def _wait_until_gone(slurm: Slurm, job: str, marker: str, timeout: float = 60) -> None:
    """Until job ``job`` has no step left and no process whose command line names ``marker`` (the results
    folder: the job's Snakemake and its train-stage process) is running, or ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        steps = slurm.run("squeue", "-h", "-s", "-j", job, "-o", "%i").stdout.strip()
        alive = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline and ("--target-jobs" in cmdline or "train-stage" in cmdline):
                alive.append(proc.name)
        if not steps and not alive:
            return
        time.sleep(0.2)


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
                # Slurm holds a requeued job for 2 minutes (BeginTime); a test need not wait that long, but it
                # must wait until the first run has ended: a second run started while the first one's Snakemake
                # still cleaned up after its killed job failed once in CI (the job FAILED, Snakemake retried it)
                for _ in range(50):
                    if "PENDING" in slurm.run("squeue", "-h", "-t", "all", "-j", running[0], "-o", "%T").stdout:
                        break
                    time.sleep(0.2)
                _wait_until_gone(slurm, running[0], marker=str(state.parents[2]))
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
    smoke_results, grid = slurm_smoke.results, slurm_smoke.grid
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
