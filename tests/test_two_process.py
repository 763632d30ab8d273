"""Two processes on CPU: one GRPO and one SDPO stage of the rehearsal grid (config/rehearsal.yaml's
``grpo_s0`` and ``sdpo_a0.05_s0`` on math, its sizes, 3 rollout steps) under a two-process
``accelerate launch``, against the same stage on one process (the same command without a launcher).

The two ranks are DDP over gloo (what accelerate does with CPU ranks; FSDP is the GPU launch's,
:mod:`sdpocl.train.launch`), which still exercises what a multi-GPU job adds to a one-process
stage: the ``WORLD_SIZE`` batch plan (:mod:`sdpocl.train.plan`), TRL's divisibility checks, the
cross-rank gathers (rewards, advantages, SDPO's demonstrations, metrics), gradient averaging,
writes by rank 0 alone, save, kill and resume. accelerate 1.16's ``--cpu --num_processes 2``
starts *one* process (its simple launcher spawns several only through mpirun), so the launch is
``--multi_gpu`` with no GPU visible: torchrun starts two workers, and the trainers' ``use_cpu``
makes them a gloo group.

**Equal weights, not a tolerance for noise.** A plain two-process run cannot match the one-process
run: each rank samples its rollouts from its own random stream, and GRPO's mini-batches are drawn
by a shuffle of each rank's rows (and with the real reward the stand-in, which never solves a math
problem, scores 0 everywhere: nothing but weight decay moves, 3.5e-6 in norm, and the comparison
would be empty). tests/dist/seeded_stage.py (the real CLI plus test hooks) seeds each rollout by its
prompt and sample index (an exact sample of the same distribution, whatever the batch it is
generated in), scores completions by the parity of their length, and orders GRPO's rows so that
the one-process run puts into each optimizer step the rows that two ranks would. The two runs are
then the same computation up to float summation order. Measured on 2 cores (each update ~5e-3 in
norm): per-step log rows equal to 5 digits; final weights within 7.5e-9 (max abs); update vectors
(final - parent) within a relative 6.6e-6 (GRPO) and 1.7e-5 (SDPO). The same GRPO rollouts split
into mini-batches differently give 2.5e-5 and 0.53: ``WEIGHT_ATOL`` 1e-7 and ``UPDATE_RTOL`` 1e-3
sit between. A resumed two-process run equals the uninterrupted one exactly (0.0).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from workflow_utils import ROOT

from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.jobserver import ENV as JOB_SERVER_ENV
from sdpocl.train.plan import batch_plan

pytestmark = pytest.mark.slow

CONFIG = load_config(ROOT / "config" / "rehearsal.yaml")
RUNS = {"grpo": "grpo_s0", "sdpo": "sdpo_a0.05_s0"}  # sdpo_a0.05: an EMA teacher, saved and restored
STEPS = 3  # the rehearsal's 2, plus one: the first step's learning rate is 0 (1 warm-up step)
SCRIPT = ROOT / "tests" / "dist" / "seeded_stage.py"
TIMEOUT = 150  # s per run (8-13 s on 2 idle cores, ~25 s on busy ones); a rank stuck in a collective never ends
UPDATE_RTOL = 1e-3  # |(w2 - parent) - (w1 - parent)| / |w1 - parent|
WEIGHT_ATOL = 1e-7
LOG_RTOL, LOG_ATOL = 1e-3, 1e-7


def settings_of(kind: str) -> dict:
    return stage_settings(CONFIG, run_by_name(CONFIG, RUNS[kind]), ("math",)).replace(steps=STEPS)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The rehearsal's stand-in model (as ``sdpocl build-standin`` builds it from the paper fixtures)
    and math prompts read by the paper loaders from the rehearsal's sources: its training set's 3 and
    the math benchmarks' 9, so that the stage's 3 rollout steps of 2 prompts stay within one pass over
    the data, as a paper stage does (TRL's RepeatSampler draws each pass's order from one running
    generator that a resumed run restarts: a resume after a full pass replays the first pass's order,
    on one process as on two)."""
    from sdpocl.data.loaders import TRAINING_SETS, load_records
    from sdpocl.io import write_jsonl
    from sdpocl.train.paper_base import build_standin

    root = tmp_path_factory.mktemp("two_process")
    corpus = sorted((ROOT / "tests" / "fixtures" / "paper").glob("*.json*"))
    texts = [line for p in corpus for line in p.read_text(encoding="utf-8").splitlines() if line]
    model = build_standin(root / "standin", texts)
    data, sources = CONFIG["data"], CONFIG["data"]["sources"]
    records = []
    for name, split in ((TRAINING_SETS["math"], "train"), ("aime24", "test"), ("aime25", "test"), ("math500", "test")):
        records += load_records(name, split, seed=data["seed"], data_files=str(ROOT / sources[name]))
    assert len(records) // CONFIG["train"]["prompts_per_step"] >= STEPS  # rollout steps in one pass
    write_jsonl(root / "math.jsonl", [{**r, "domain": "math"} for r in records])
    return {"root": root, "model": model, "data": root / "math.jsonl"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], env: dict, timeout: int = TIMEOUT) -> dict:
    """The run's exit code, output and seconds; one past ``timeout`` is killed with every process under
    it (torchrun's workers run in sessions of their own) and marked ``hung``."""
    import psutil

    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    hung = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        for child in reversed(psutil.Process(proc.pid).children(recursive=True)):
            child.kill()
        proc.kill()
        out, _ = proc.communicate()
    return {"code": proc.returncode, "log": out, "seconds": time.time() - t0, "hung": hung}


def ended(run: dict, ok: bool = True) -> None:
    """The run ended by itself (with exit code 0 when ``ok``)."""
    tail = run["log"][-6000:]
    assert not run["hung"], f"no exit after {TIMEOUT} s: a rank waits in a collective the other never joins?\n{tail}"
    assert (run["code"] == 0) == ok, tail


def stage_command(settings: dict, inputs: dict, out: Path, state: Path, processes: int) -> list[str]:
    args = [
        "train-stage", "--settings", settings.to_json(), "--parent", str(inputs["model"]),
        "--data", str(inputs["data"]), "--out", str(out), "--state", str(state), "--threads", "1",
    ]  # fmt: skip
    if processes == 1:
        return [sys.executable, str(SCRIPT), *args]
    launch = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
    ]  # fmt: skip
    return [*launch, str(SCRIPT), *args]


def stage_env(settings: dict, processes: int, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (JOB_SERVER_ENV, "RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **extra)
    if processes == 1:  # order GRPO's rows as two ranks would split them (tests/dist/seeded_stage.py)
        env["SDPOCL_TEST_EMULATE"] = f"2,{batch_plan(settings, 2).micro_batch}"
    else:
        # accelerate 1.16 names a CPU rank's device torch.device("cpu", 0), which transformers 5.17 passes
        # as map_location when several ranks load the optimizer state at resume, and torch 2.13 cannot
        # restore to "cpu:0" (RuntimeError: don't know how to restore data location ... cpu:0). CPU-only:
        # GPU ranks are "cuda:N". accelerate takes the device from this variable instead.
        env["ACCELERATE_TORCH_DEVICE"] = "cpu"
    return env


@pytest.fixture(scope="module")
def stage(inputs):
    """``stage(kind, processes)``: the stage trained once per module; a dict of its run."""
    done = {}

    def get(kind: str, processes: int) -> dict:
        if (kind, processes) not in done:
            settings = settings_of(kind)
            out, state = inputs["root"] / f"{kind}{processes}", inputs["root"] / f"{kind}{processes}_state"
            result = run(stage_command(settings, inputs, out, state, processes), stage_env(settings, processes))
            print(
                f"[two-process] {kind} on {processes} process(es): exit {result['code']} in {result['seconds']:.1f} s"
            )
            done[kind, processes] = {**result, "out": out, "state": state}
        return done[kind, processes]

    return get


def tensors(model_dir: Path) -> dict:
    from sdpocl.train.weights import load_tensors

    return load_tensors(model_dir)


def compare_weights(parent: dict, a: dict, b: dict) -> dict:
    assert a.keys() == b.keys() == parent.keys()
    da = torch.cat([(a[k] - parent[k]).flatten() for k in parent])
    db = torch.cat([(b[k] - parent[k]).flatten() for k in parent])
    return {
        "moved": float(da.norm()),
        "moved_other": float(db.norm()),
        "max_abs": max(float((a[k] - b[k]).abs().max()) for k in a),
        "update_rel": float((da - db).norm() / da.norm().clamp(min=1e-30)),
    }


def read_log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def assert_same_rows(one: list[dict], two: list[dict]) -> None:
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, STEPS + 1))
    for a, b in zip(one, two):
        assert a.keys() == b.keys(), (a["step"], sorted(a.keys() ^ b.keys()))
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=LOG_RTOL, abs=LOG_ATOL), (a["step"], key, a[key], b[key])


def assert_stage_written(run: dict, settings: dict, processes: int, first_step: int = 1) -> None:
    """Every declared output, written once (by rank 0 alone), and the resume state gone; the
    progress lines from ``first_step`` on, each once."""
    from sdpocl.train.weights import has_weights

    out, log = run["out"], run["log"]
    ended(run)
    assert (out / "model" / "config.json").exists() and has_weights(out / "model")
    assert (out / "model" / "tokenizer_config.json").exists()
    steps = sorted(int(p.name.split("-")[1]) for p in (out / "checkpoints").glob("step-*"))
    assert steps == list(range(1, STEPS + 1))
    assert all(has_weights(out / "checkpoints" / f"step-{s}") for s in steps)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps_done"] == summary["steps_planned"] == STEPS and summary["finite_weights"]
    structure = json.loads((out / "resolved_config.json").read_text())["update_structure"]
    plan = batch_plan(settings, processes)
    assert structure["processes"] == processes
    assert structure["micro_batch_per_process"] == plan.micro_batch
    assert structure["gradient_accumulation"] == plan.grad_accum
    tag = f"[{settings.run['name']} math]"
    assert log.count(f"{tag} done in") == 1  # the writing part ran on one rank
    for step in range(first_step, STEPS + 1):
        assert log.count(f"{tag} step {step}/{STEPS} ") == 1, step
    assert not run["state"].exists(), "resume state is removed after success"


@pytest.mark.parametrize("kind", ["grpo", "sdpo"])
def test_two_processes_train_the_one_process_weights(stage, inputs, kind):
    settings = settings_of(kind)
    one, two = stage(kind, 1), stage(kind, 2)
    assert_stage_written(one, settings, 1)
    assert_stage_written(two, settings, 2)
    assert "x 2 process(es)" in two["log"]
    assert_same_rows(read_log(one["out"]), read_log(two["out"]))
    diff = compare_weights(tensors(inputs["model"]), tensors(one["out"] / "model"), tensors(two["out"] / "model"))
    print(f"[two-process] {kind}: {diff}; {one['seconds']:.1f} s / {two['seconds']:.1f} s")
    assert diff["moved"] > 1e-3 and diff["moved_other"] > 1e-3  # both trained: there is something to compare
    assert diff["max_abs"] <= WEIGHT_ATOL, diff
    assert diff["update_rel"] <= UPDATE_RTOL, diff


@pytest.mark.parametrize("kind", ["grpo", "sdpo"])
def test_two_processes_resume_after_a_kill(stage, inputs, tmp_path, kind):
    """Rank 0 dies right after the step-1 checkpoint (``SDPOCL_KILL_AFTER_CHECKPOINT``); torchrun
    takes rank 1 down. The rerun resumes from that checkpoint (optimizer, RNG of both ranks, SDPO's
    EMA teacher) and ends where the uninterrupted two-process run ends."""
    settings = settings_of(kind)
    out, state = tmp_path / "out", tmp_path / "state"
    cmd = stage_command(settings, inputs, out, state, 2)
    killed = run(cmd, stage_env(settings, 2, SDPOCL_KILL_AFTER_CHECKPOINT="1", SDPOCL_TEST_RANK1_SAVE_DELAY="2"))
    ended(killed, ok=False)
    assert not (out / "summary.json").exists()
    ckpt = state / "resume-step-1"
    assert (ckpt / "COMPLETE").exists(), sorted(p.name for p in state.iterdir()) if state.exists() else None
    assert (ckpt / "teacher.safetensors").exists() == (kind == "sdpo")
    # each rank's RNG state went into the checkpoint before rank 0 moved it (rank 1 is 2 s late here)
    assert {p.name for p in ckpt.glob("rng_state_*.pth")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert not list(state.glob("checkpoint-*")), "a rank wrote into a checkpoint after rank 0 had moved it"

    resumed = {**run(cmd, stage_env(settings, 2)), "out": out, "state": state}
    ended(resumed)
    assert "resuming from resume-step-1" in resumed["log"]
    assert "discarding stale resume state" not in resumed["log"]
    assert_stage_written(resumed, settings, 2, first_step=2)
    assert json.loads((out / "summary.json").read_text())["resumed_from"] == "step-1"

    full = stage(kind, 2)
    ended(full)
    assert_same_rows(read_log(full["out"]), read_log(out))
    diff = compare_weights(tensors(inputs["model"]), tensors(full["out"] / "model"), tensors(out / "model"))
    print(f"[two-process] resumed vs uninterrupted: {diff}")
    assert diff["max_abs"] <= WEIGHT_ATOL and diff["update_rel"] <= UPDATE_RTOL, diff
