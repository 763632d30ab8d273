"""End to end: config/smoke.yaml through every train-stage job (the session's smoke run), then resume after a kill."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from workflow_utils import BIN, ROOT, scheduled_jobs, snakemake

from sdpocl.config import chains_for, expand_runs, load_config, run_by_name, stage_settings
from sdpocl.train.curves import ROOT_ENV, read_scalars, stage_curves_dir
from sdpocl.train.weights import has_weights, parameter_count

pytestmark = pytest.mark.slow


def test_every_stage_written(smoke_results):
    config = load_config(ROOT / "config/smoke.yaml")
    n = 0
    for run in expand_runs(config):
        for chain in chains_for(config, run):
            stage = smoke_results / "runs" / run.name / "/".join(chain)
            summary = json.loads((stage / "summary.json").read_text())
            assert summary["steps_done"] == summary["steps_planned"] == config["train"]["steps"][chain[-1]]
            assert (stage / "model" / "config.json").exists() and has_weights(stage / "model")
            steps = sorted(int(p.name.split("-")[1]) for p in (stage / "checkpoints").glob("step-*"))
            save_every = config["train"]["save_every"]
            assert steps == list(range(save_every, summary["steps_planned"] + 1, save_every))
            log = [json.loads(line) for line in (stage / "train_log.jsonl").read_text().splitlines()]
            assert [row["step"] for row in log] == list(range(1, summary["steps_planned"] + 1))
            assert all("reward" in row and "completion_length" in row and "boxed_per_completion" in row for row in log)
            drift = pd.read_csv(stage / "drift_params.csv")
            overall = drift[drift.matrix_type == "all"]
            assert list(overall.checkpoint) == [str(s) for s in steps] + ["final"]
            assert set(drift.matrix_type) == {
                "all",
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            }
            assert (overall.pm_overlap_mean <= 100).all() and (overall.nss_mean >= 0).all()
            resolved = json.loads((stage / "resolved_config.json").read_text())
            expected_parent = (
                str(smoke_results / "base" / "model")
                if len(chain) == 1
                else str(smoke_results / "runs" / run.name / "/".join(chain[:-1]) / "model")
            )
            assert os.path.samefile(resolved["parent_model"], expected_parent)
            assert_curves_match_log(stage_curves_dir(smoke_results / "tensorboard", run.name, chain), log)
            n += 1
    assert n == 26
    leftovers = [p for p in (smoke_results / "state").rglob("*") if p.is_file()]
    assert not leftovers, "resume state is removed after success"


def test_resolved_config_records_the_method(smoke_results):
    def trainer_config(run, chain):
        path = smoke_results / "runs" / run / chain / "resolved_config.json"
        return json.loads(path.read_text())["trainer_config"]

    grpo = trainer_config("grpo_s0", "math")
    assert grpo["loss_type"] == "grpo" and grpo["scale_rewards"] == "none" and grpo["epsilon_high"] == 0.28
    assert grpo["optimizer_steps_per_rollout"] == 4 and grpo["max_steps"] == 4 * 4  # 4 rollout steps (smoke)
    frozen = trainer_config("sdpo_a0_s0", "math/science")
    assert frozen["teacher_model_kind"] == "base" and frozen["distillation_mode"] == "topk_logits"
    ema = trainer_config("sdpo_a0.05_s0", "math")
    assert ema["teacher_model_kind"] == "ema" and ema["teacher_update_rate"] == 0.05 and ema["teacher_sync_steps"] == 1
    stable = trainer_config("stable-sdpo_a0.05_s0", "math")
    assert stable["teacher_update_rate"] == 1.0 and stable["teacher_sync_steps"] == 20
    cot = trainer_config("sdpo-cot_a0_s0", "math")
    assert cot["remove_thinking_from_demonstration"] is False


def test_nothing_to_do_after_a_full_run(smoke_results):
    proc = snakemake("-n", results=smoke_results)
    assert scheduled_jobs(proc.stdout) == {}, proc.stdout[-2000:]


def assert_curves_match_log(curves_dir, log: list[dict]) -> None:
    """The stage's TensorBoard run, read back with TensorBoard's event reader, holds every column of
    ``train_log.jsonl`` at the same rollout steps, once each (float32 in the event files)."""
    scalars = read_scalars(curves_dir)
    columns = {key for row in log for key in row if key != "step"}
    assert columns and columns <= set(scalars), (sorted(columns - set(scalars)), sorted(scalars))
    for column in columns:
        expected = [(row["step"], row[column]) for row in log if column in row]
        got = scalars[column]
        assert [step for step, _ in got] == [step for step, _ in expected], column  # no gap, no duplicate
        assert [value for _, value in got] == pytest.approx([value for _, value in expected], rel=1e-6), column
    assert any(tag.startswith("trl/") for tag in scalars)  # TRL's own keys beside ours


def _train(settings, parent, data, out, state, env=None):
    cmd = [
        str(BIN / "sdpocl"),
        "train-stage",
        "--settings",
        settings.to_json(),
        "--parent",
        str(parent),
        "--data",
        str(data),
        "--out",
        str(out),
        "--state",
        str(state),
        "--threads",
        "1",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})


def assert_written_once(state: Path, step: int, n_params: int, ema_teacher: bool) -> None:
    """A save's bytes, each file counted once however many names it has: the trainer's model (4 B per
    parameter), AdamW's moments (8), the EMA teacher (4); ``weights/step-N`` links to the trainer's model."""
    ckpt, weights = state / f"resume-step-{step}", state / "weights" / f"step-{step}"
    files = [p for d in (ckpt, weights) for p in d.iterdir() if p.is_file()]
    assert os.stat(weights / "model.safetensors").st_ino == os.stat(ckpt / "model.safetensors").st_ino
    written = sum({os.stat(p).st_ino: p.stat().st_size for p in files}.values())
    expected = (16 if ema_teacher else 12) * n_params
    print(f"[save] {written / n_params:.2f} bytes per parameter ({written:,} B, {n_params:,} parameters)")
    assert expected <= written < expected + 0.5 * n_params + 200_000, (written, expected)


@pytest.mark.parametrize("run_name", ["sdpo_a0.05_s0", "grpo_s0"])
def test_resume_after_kill_matches_uninterrupted(smoke_results, tmp_path, run_name):
    config = load_config(ROOT / "config/smoke.yaml")
    settings = stage_settings(config, run_by_name(config, run_name), ("math",))
    settings = settings.replace(steps=6, save_every=2)
    parent, data = smoke_results / "base" / "model", smoke_results / "data" / "math" / "train.jsonl"

    full = _train(settings, parent, data, tmp_path / "full", tmp_path / "full_state")
    assert full.returncode == 0, full.stderr[-3000:]

    curves = {ROOT_ENV: str(tmp_path / "tensorboard")}  # the live curves of the killed and resumed stage
    killed = _train(
        settings,
        parent,
        data,
        tmp_path / "resumed",
        tmp_path / "resumed_state",
        env={"SDPOCL_KILL_AFTER_CHECKPOINT": "4", **curves},
    )
    assert killed.returncode != 0
    assert not (tmp_path / "resumed" / "summary.json").exists()
    assert (tmp_path / "resumed_state" / "resume-step-4" / "COMPLETE").exists()
    assert not (tmp_path / "resumed_state" / "resume-step-2").exists()  # only the latest resume state is kept
    assert_written_once(tmp_path / "resumed_state", 4, parameter_count(parent), ema_teacher=run_name.startswith("sdpo"))
    curves_dir = stage_curves_dir(tmp_path / "tensorboard", run_name, ["math"])
    assert [step for step, _ in read_scalars(curves_dir)["reward"]] == [1, 2, 3, 4]
    # a job killed later than its checkpoint has logged steps the resumed stage logs again
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(curves_dir)) as late:
        late.add_scalar("reward", -1.0, 5)

    resumed = _train(settings, parent, data, tmp_path / "resumed", tmp_path / "resumed_state", env=curves)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from resume-step-4" in resumed.stdout
    log = [json.loads(line) for line in (tmp_path / "resumed" / "train_log.jsonl").read_text().splitlines()]
    assert_curves_match_log(curves_dir, log)  # steps 1-6 once each: the killed job's step 5 is gone

    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    log_a = (tmp_path / "full" / "train_log.jsonl").read_text().splitlines()
    log_b = (tmp_path / "resumed" / "train_log.jsonl").read_text().splitlines()
    assert [json.loads(x)["reward"] for x in log_a] == [json.loads(x)["reward"] for x in log_b]
    assert json.loads((tmp_path / "resumed" / "summary.json").read_text())["resumed_from"] == "step-4"
    steps = sorted(p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir())
    assert steps == ["step-2", "step-4", "step-6"]  # the saves before the kill survive it


def test_stale_resume_state_is_discarded(smoke_results, tmp_path):
    config = load_config(ROOT / "config/smoke.yaml")
    settings = stage_settings(config, run_by_name(config, "grpo_s0"), ("math",))
    parent, data = smoke_results / "base" / "model", smoke_results / "data" / "math" / "train.jsonl"
    killed = _train(
        settings, parent, data, tmp_path / "out", tmp_path / "state", env={"SDPOCL_KILL_AFTER_CHECKPOINT": "2"}
    )
    assert killed.returncode != 0
    settings = settings.replace(lr=settings.lr * 2)  # a changed setting must not resume from the old state
    again = _train(settings, parent, data, tmp_path / "out", tmp_path / "state")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "discarding stale resume state" in again.stdout
    assert "resuming" not in again.stdout


def test_diverged_stage_is_recorded_as_collapsed_and_the_chain_goes_on(smoke_results, tmp_path):
    config = load_config(ROOT / "config/smoke.yaml")
    settings = stage_settings(config, run_by_name(config, "grpo_s0"), ("math",))
    # decoupled weight decay of lr * wd = 1e4 per step blows the weights up within a few steps
    settings = settings.replace(steps=12, save_every=2, lr=1.0e4, weight_decay=1.0, warmup_steps=0)
    parent, data = smoke_results / "base" / "model", smoke_results / "data"
    bad = _train(settings, parent, data / "math" / "train.jsonl", tmp_path / "math", tmp_path / "s1")
    assert bad.returncode == 0, bad.stderr[-3000:]
    summary = json.loads((tmp_path / "math" / "summary.json").read_text())
    assert summary["collapsed"] is True and summary["finite_weights"] is False
    assert summary["steps_done"] < summary["steps_planned"]
    handed_on = load_file(str(tmp_path / "math" / "model" / "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in handed_on.values())

    child = stage_settings(config, run_by_name(config, "grpo_s0"), ("math", "science"))
    nxt = _train(
        child, tmp_path / "math" / "model", data / "science" / "train.jsonl", tmp_path / "sci", tmp_path / "s2"
    )
    assert nxt.returncode == 0, nxt.stderr[-3000:]
    assert json.loads((tmp_path / "sci" / "summary.json").read_text())["steps_done"] == child.steps


def test_teacher_check_rule_on_the_smoke_grid(smoke_results):
    """The on-demand rule runs on a stage start of a finished grid and writes the report."""
    target = smoke_results / "runs" / "sdpo_a0_s0" / "math" / "science" / "teacher_check.json"
    snakemake("--profile", "profiles/local", str(target), results=smoke_results)
    report = json.loads(target.read_text())
    assert report["model"] == str(smoke_results / "runs" / "sdpo_a0_s0" / "math" / "model")
    group = load_config(ROOT / "config/smoke.yaml")["train"]["num_generations"]
    assert report["domains"] == ["science"] and report["samples"] == group
    assert 0.0 <= report["student_acc"] <= 1.0


def _bench_report(script: str, *args: str, opening: str = "{\n"):
    """Run ``bench/<script>`` with ``args`` and return the JSON report it prints last (from ``opening`` on)."""
    out = subprocess.run(
        [str(BIN / "python"), f"bench/{script}", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout[out.stdout.index(opening) :])


def test_step_phases_bench_splits_a_step(smoke_results):
    """bench/step_phases.py on the smoke run: every phase it names is timed, and together they fit in the step;
    ``--prefixes both`` runs each stage with full rows and with shared prompts (generate's prefill, SDPO's forwards)."""
    report = _bench_report(
        "step_phases.py",
        *["--config", "config/smoke.yaml", "--results", str(smoke_results), "--runs", "grpo_s0,sdpo_a0_s0"],
        *["--domains", "math", "--steps", "2", "--prefixes", "both"],
        opening="[\n",
    )
    assert [(row["run"], row["prefixes"]) for row in report] == [
        ("grpo_s0", "full"),
        ("grpo_s0", "shared"),
        ("sdpo_a0_s0", "full"),
        ("sdpo_a0_s0", "shared"),
    ]
    for row in report:
        phases = row["phases"]
        timed = ["generation", "forward (outside generation)", "backward", "optimizer step"]
        assert all(phases[name] > 0 for name in timed), phases
        assert phases["other"] >= -0.01, phases  # the phases are inside the step, never more than it


def test_prefill_speed_bench_times_both_prefills(smoke_results):
    """bench/prefill_speed.py on the smoke run: a rollout batch's generation both ways (it exits non-zero when
    the two sample different tokens) and one whole evaluation of the base three ways (non-zero when they score
    differently), with the settings the smoke run's base evaluation ran with."""
    scores = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())
    report = _bench_report(
        "prefill_speed.py",
        *["--config", "config/smoke.yaml", "--results", str(smoke_results), "--domains", "math", "--repeats", "1"],
        *["--eval-settings", json.dumps(scores["meta"]["settings"])],
    )
    generation = report["generation"]["math"]
    assert set(generation["cpu_seconds"]) == {"plain", "shared"} and generation["ratio_shared_over_plain"] > 0
    modes = {"neither", "env report once", "env report once, shared prefill"}
    assert set(report["evaluation"]["wall_seconds"]) == modes


def test_kv_cache_speed_bench_times_both_caches(smoke_results):
    """bench/kv_cache_speed.py on the smoke run: a rollout batch's generation, a GRPO and an SDPO_0 stage, and one
    whole evaluation of the base, each on transformers' cache, on the growing one, on that without the rows
    that have ended; it exits non-zero when the modes sample, train or score
    differently."""
    scores = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())
    report = _bench_report(
        "kv_cache_speed.py",
        *["--config", "config/smoke.yaml", "--results", str(smoke_results), "--domains", "math", "--repeats", "1"],
        *["--steps", "1", "--eval-settings", json.dumps(scores["meta"]["settings"])],
        *["--modes", "dynamic,growing,dropping"],
    )
    modes = {"dynamic", "growing", "dropping"}
    assert set(report["generation"]["math"]["cpu_seconds"]) == modes
    assert set(report["train_step"]) == {"grpo_s0 math", "sdpo_a0_s0 math"}
    assert all(set(r["seconds_per_step"]) == modes for r in report["train_step"].values())
    assert set(report["evaluation"]["wall_seconds"]) == modes
    assert all(report["evaluation"][f"ratio_{m}_over_dynamic"] > 0 for m in ("growing", "dropping"))


def test_eval_speed_bench_times_each_batch_size_and_sampler(smoke_results):
    """bench/eval_speed.py on the smoke run: one whole evaluation of the base per batch size and sampler
    (transformers' and the evaluation's own), each with its time, its ratio and its scores; with a trained
    model, each way's share of responses identical to the base's and the paired stderr of its change."""
    scores = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())
    report = _bench_report(
        "eval_speed.py",
        *["--results", str(smoke_results), "--batch-sizes", "4,16", "--repeats", "1"],
        *["--eval-settings", json.dumps(scores["meta"]["settings"])],
        *["--paired-model", str(smoke_results / "runs" / "grpo_s0" / "math" / "model"), "--paired-benchmarks", "math"],
    )
    ways = {f"batch {b}, {s}" for b in (4, 16) for s in ("hf", "top_k")}
    assert report["first"] == "batch 4, hf" and set(report["evaluation"]) == ways
    for row in report["evaluation"].values():
        assert row["wall_seconds"] > 0 and set(row["acc"]) == set(scores["benchmarks"])
        assert all(0.0 <= a <= 1.0 for a in row["acc"].values())
    assert set(report["paired"]) == ways
    for row in report["paired"].values():
        assert 0.0 <= row["math"]["identical_responses"] <= 1.0 and row["math"]["paired_stderr"] >= 0


def test_compile_speed_bench_times_both(smoke_results):
    """bench/compile_speed.py on the smoke run's base: a forward and backward, and a generation on a key/value
    cache, eager and under torch.compile, each timed in its own process and computing the same numbers."""
    for shape in ("train", "decode"):
        report = _bench_report(
            "compile_speed.py",
            *["--model", str(smoke_results / "base" / "model"), "--shape", shape, "--batch", "4", "--tokens", "8"],
            *["--new", "3", "--warmup", "0", "--calls", "1"],
        )
        assert report["shape"] == shape and set(report["modes"]) == {"eager", "compiled"}
        assert all(m["s_per_call"] > 0 and m["first_call_s"] > 0 for m in report["modes"].values())
        assert report["check_gap"] < 1e-4 and report["ratio_compiled_over_eager"] > 0


def test_eval_design_bench_runs_on_a_results_folder(smoke_results):
    """bench/eval_design.py on the smoke run: one variance split per own-domain change that eval.csv reports
    (the split itself: tests/test_eval_design.py), and with the evaluation settings one timed evaluation of
    the base per design, each on task files written for its samples per prompt."""
    scores = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())
    report = _bench_report(
        "eval_design.py",
        *["--results", str(smoke_results), "--designs", "4x8,8x2", "--repeats", "1"],
        *["--eval-settings", json.dumps(scores["meta"]["settings"])],
    )
    ev = pd.read_csv(smoke_results / "tables" / "eval.csv")
    own = ev[ev.continual & (ev.checkpoint == "final") & (ev.benchmark == ev.domain)]
    assert sorted((r["run"], r["domain"]) for r in report["changes"]) == sorted(zip(own.run, own.domain))
    assert all(r["samples"] == scores["meta"]["settings"]["samples"] for r in report["changes"])
    assert set(report["wall_seconds"]) == {"4x8", "8x2"} and all(s > 0 for s in report["wall_seconds"].values())


def test_core_use_bench_reads_the_smoke_runs_log(smoke_results):
    """bench/core_use.py on Snakemake's log of the smoke run: every finished job counted under its rule, the
    base started first (its priority: sdpocl.priorities), and no more busy core-seconds than the run had."""
    log = smoke_results.parent / "snakemake.log"
    report = _bench_report("core_use.py", "--log", str(log), "--cores", "2")
    finished = log.read_text().count("Finished jobid:")
    assert finished > 26 and report["first_started"] == ["build_base"]
    assert {"build_base", "train_stage", "evaluate_checkpoint", "aggregate_eval"} <= set(report["job_seconds"])
    assert 0 < report["busy_core_s"] <= 2 * report["wall_s"]
    assert 0 <= report["seconds_all_idle"] <= report["seconds_with_an_idle_core"] <= report["wall_s"]
