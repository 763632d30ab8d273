"""Dry runs: the grids resolve to the expected jobs, and config errors stop Snakemake early."""

import json
import re
from collections import Counter

import pytest
import yaml
from workflow_utils import ROOT, dry_run_jobs, scheduled_jobs, snakemake, stage_wildcards

from sdpocl.config import chains_for, expand_runs, load_config


def expected_stages(config_path):
    config = load_config(ROOT / config_path)
    return {run.name: len(chains_for(config, run)) for run in expand_runs(config)}


def test_paper_grid_job_counts(tmp_path):
    proc = snakemake("-n", results=tmp_path, configfile="config/paper.yaml")
    stages = stage_wildcards(proc.stdout)
    per_run = Counter(run for run, _ in stages)
    # 9 runs x 4 chain stages, plus single-domain runs (science, tooluse, code) for 3 of them
    assert per_run == {
        "grpo_s0": 7,
        "grpo-lr1e-6_s0": 4,
        "sdpo_a0_s0": 7,
        "sdpo_a0.01_s0": 4,
        "sdpo_a0.05_s0": 7,
        "sdpo_a0.1_s0": 4,
        "stable-sdpo_a0.05_s0": 4,
        "sdpo-cot_a0_s0": 4,
        "sdpo-mask0.5_a0_s0": 4,
    }
    assert per_run == expected_stages("config/paper.yaml")
    assert scheduled_jobs(proc.stdout)["train_stage"] == 45
    assert "build_base" not in scheduled_jobs(proc.stdout)  # the paper preset names its model


def test_smoke_grid_chains(tmp_path):
    proc = snakemake("-n", results=tmp_path)
    stages = set(stage_wildcards(proc.stdout))
    assert len(stages) == 26
    assert ("sdpo_a0_s0", "math/science/tooluse/code") in stages
    assert ("sdpo_a0_s0", "tooluse") in stages  # single-domain run
    assert ("grpo_s0", "tooluse") not in stages
    counts = scheduled_jobs(proc.stdout)
    assert counts["prepare_data"] == 8 and counts["build_base"] == 1


def test_teacher_check_is_on_demand_and_starts_where_the_stage_starts(tmp_path):
    """Not part of `all`; asked for, it needs the stage's parent model (stage 1's for stage 2), not the stage."""
    assert "teacher_check" not in scheduled_jobs(snakemake("-n", results=tmp_path).stdout)
    target = tmp_path / "runs" / "sdpo_a0_s0" / "math" / "science" / "teacher_check.json"
    proc = snakemake("-n", str(target), results=tmp_path)
    assert scheduled_jobs(proc.stdout)["teacher_check"] == 1
    assert set(stage_wildcards(proc.stdout)) == {("sdpo_a0_s0", "math")}
    block = proc.stdout[proc.stdout.index("rule teacher_check:") :]
    assert f"input: {tmp_path}/runs/sdpo_a0_s0/math/model, {tmp_path}/data/science/train.jsonl\n" in block


def test_several_seeds_multiply_runs(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    cfg["seeds"] = [0, 1]
    path = tmp_path / "two_seeds.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "-p", results=tmp_path / "r", configfile=str(path))
    counts = scheduled_jobs(proc.stdout)
    assert counts["train_stage"] == 52
    # each seed evaluates the base with its own sampling seed, and its checkpoints with the same one
    assert counts["evaluate_base"] == 2

    def sampling_seeds(rule, **wildcards):
        seeds = []
        for block in re.split(r"\n(?=rule |localrule )", proc.stdout):
            if block.startswith(f"rule {rule}:") and all(f"{k}={v}" in block for k, v in wildcards.items()):
                seeds.append(json.loads(re.search(r"--settings '([^']+)'", block).group(1))["seed"])
        return seeds

    assert sampling_seeds("evaluate_base", seed=0) == [0] and sampling_seeds("evaluate_base", seed=1) == [1]
    assert set(sampling_seeds("evaluate_checkpoint", run="grpo_s0")) == {0}
    assert set(sampling_seeds("evaluate_checkpoint", run="grpo_s1")) == {1}
    aggregate = proc.stdout[proc.stdout.index("rule aggregate_eval:") :]
    assert "base/eval/seed-0/scores.json" in aggregate and "base/eval/seed-1/scores.json" in aggregate


def test_list_overrides_on_the_command_line(tmp_path):
    """`--config 'seeds=[0,1,2]'` reaches the grid as integers (Snakemake passes list items as strings)."""
    proc = snakemake("-n", "--config", f"results={tmp_path}", "seeds=[0,1,2]", 'train={"lr": 1e-5}')
    assert scheduled_jobs(proc.stdout)["train_stage"] == 78
    assert {run for run, _ in stage_wildcards(proc.stdout)} >= {"grpo_s0", "grpo_s1", "grpo_s2"}


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c["runs"].append({"method": "ppo"}), "runs[5].method"),
        (lambda c: c["runs"][1].update(alpha=2.0), "runs[1].alpha"),
        (lambda c: c["train"].update(lr="1e-5"), "train.lr"),
        (lambda c: c.update(domains=["math", "chemistry"]), "domains[1]"),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, edit, key):
    cfg = yaml.safe_load((ROOT / "config/smoke.yaml").read_text())
    edit(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", results=tmp_path / "r", configfile=str(path), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert f"config error at '{key}'" in out
    assert not (tmp_path / "r").exists()


def test_lint_passes():
    proc = snakemake("--lint", check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "good condition" in proc.stdout + proc.stderr


def test_cli_lists_one_subcommand_per_rule():
    import subprocess

    from workflow_utils import BIN

    out = subprocess.run([str(BIN / "sdpocl"), "--help"], capture_output=True, text=True, check=True).stdout
    for sub in ("prepare-data", "build-base", "train-stage"):
        assert sub in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--run", "nope_s0", "--chain", "math"], "no run named 'nope_s0'"),
        (["--run", "grpo_s0", "--chain", "math/biology"], "unknown domain 'biology'"),
        (["--run", "grpo_s0", "--chain", "math"], "has no config.json"),
    ],
)
def test_train_stage_by_hand_reports_bad_input(tmp_path, args, message):
    import subprocess

    from workflow_utils import BIN

    cmd = [
        str(BIN / "sdpocl"),
        "train-stage",
        "--config",
        str(ROOT / "config/smoke.yaml"),
        *args,
        "--parent",
        str(tmp_path / "no_model"),
        "--data",
        str(tmp_path / "d.jsonl"),
        "--out",
        str(tmp_path / "out"),
        "--state",
        str(tmp_path / "state"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_priorities_start_the_base_then_the_longest_chains(tmp_path):
    """build_base first, the data jobs next, train stages by the stages left in their run, leaves last."""
    jobs = dry_run_jobs(snakemake("-n", results=tmp_path).stdout)
    by_rule: dict[str, list[float]] = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job["priority"])
    data = by_rule["prepare_data"] + by_rule["prepare_benchmark"] + by_rule["write_eval_task"]
    stages = {
        (j["wildcards"]["run"], j["wildcards"]["chain"]): j["priority"] for j in jobs if j["rule"] == "train_stage"
    }
    assert by_rule["build_base"] == [max(j["priority"] for j in jobs)]
    assert min(data) > max(stages.values())
    depth = ["math", "math/science", "math/science/tooluse", "math/science/tooluse/code"]
    chain = [stages[("sdpo_a0_s0", c)] for c in depth]
    assert all(a > b for a, b in zip(chain, chain[1:])), chain
    assert stages[("sdpo_a0_s0", "tooluse")] == stages[("sdpo_a0_s0", "math/science/tooluse/code")]
    leaf_rules = ("evaluate_checkpoint", "evaluate_base", "compute_drift", "response_drift")
    leaves = [p for r in leaf_rules for p in by_rule[r]]
    assert max(leaves) < min(stages.values())
