"""The paper preset's CPU rehearsal end to end (config/rehearsal.yaml): every rule of the paper
preset runs on its real code path -- a local, sharded base model resolved by fetch_base_model, the
chat template, every source read by the loaders from files in its own schema -- with a stand-in
model and a trimmed grid. A change that breaks the paper path fails here."""

from __future__ import annotations

import json
import subprocess
import time

import pandas as pd
import pytest
from workflow_utils import BIN, NOLOCK, ROOT, scheduled_jobs

from sdpocl.config import chains_for, expand_runs, load_config
from sdpocl.data.benchmarks import benchmarks_for
from sdpocl.plot.tables import FIGURE_TABLES
from sdpocl.train.weights import INDEX, has_weights, weight_files

pytestmark = pytest.mark.slow

CONFIG = load_config(ROOT / "config" / "rehearsal.yaml")
RULES = {
    "fetch_base_model",
    "prepare_data",
    "prepare_benchmark",
    "write_eval_task",
    "train_stage",
    "evaluate_base",
    "evaluate_checkpoint",
    "aggregate_eval",
    "compute_drift",
    "response_drift",
    "domain_distance",
    "aggregate_drift",
    *(f"plot_{fig}" for fig in FIGURE_TABLES),
}


@pytest.fixture(scope="session")
def rehearsal(tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal")
    corpus = sorted(str(p) for p in (ROOT / "tests" / "fixtures" / "paper").glob("*.json*"))
    standin = root / "standin"
    subprocess.run(
        [str(BIN / "sdpocl"), "build-standin", "--out", str(standin), "--corpus", *corpus],
        check=True,
        capture_output=True,
    )
    results = root / "results"
    args = [
        "--profile",
        "profiles/local",
        "--cores",
        "2",
        "--configfile",
        "config/rehearsal.yaml",
        "--config",
        f"results={results}",
        f'base={{"model": "{standin}"}}',
    ]
    dry = subprocess.run([str(BIN / "snakemake"), "-n", *args], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    t0 = time.time()
    run = subprocess.run([str(BIN / "snakemake"), *args, *NOLOCK], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    print(f"[rehearsal] {sum(scheduled_jobs(dry.stdout).values())} jobs in {time.time() - t0:.0f} s")
    return {"results": results, "standin": standin, "jobs": scheduled_jobs(dry.stdout)}


def test_every_rule_of_the_paper_preset_ran(rehearsal):
    assert set(rehearsal["jobs"]) >= RULES, RULES - set(rehearsal["jobs"])
    assert "build_base" not in rehearsal["jobs"]  # the paper preset names its model


def test_base_model_is_the_sharded_standin_resolved_once(rehearsal):
    base = rehearsal["results"] / "base" / "model"
    assert (base / INDEX).exists() and len(weight_files(base)) >= 2
    assert all(p.resolve().parent == rehearsal["standin"].resolve() for p in base.iterdir() if p.is_symlink())


def test_every_stage_trained_every_rollout_step(rehearsal):
    results = rehearsal["results"]
    n = 0
    for run in expand_runs(CONFIG):
        for chain in chains_for(CONFIG, run):
            stage = results / "runs" / run.name / "/".join(chain)
            summary = json.loads((stage / "summary.json").read_text())
            assert summary["steps_done"] == summary["steps_planned"] == CONFIG["train"]["steps"][chain[-1]], stage
            steps = sorted(p.name for p in (stage / "checkpoints").glob("step-*"))
            assert steps == [f"step-{i}" for i in range(1, summary["steps_planned"] + 1)], stage
            assert all(has_weights(stage / "checkpoints" / s) for s in steps) and has_weights(stage / "model")
            resolved = json.loads((stage / "resolved_config.json").read_text())
            assert resolved["stage_settings"]["prompt_format"] == {
                "chat_template": True,
                "template_kwargs": {"enable_thinking": False},
            }
            structure = resolved["update_structure"]
            assert structure["optimizer_steps_per_rollout_step"] == (2 if run.method == "grpo" else 1)
            assert structure["micro_batch_per_process"] == 1 and structure["gradient_accumulation"] > 1
            assert resolved["trainer_config"]["gradient_checkpointing"] is True
            n += 1
    assert n == 27


def test_tables_and_figures(rehearsal):
    tables = rehearsal["results"] / "tables"
    ev = pd.read_csv(tables / "eval.csv")
    benches = benchmarks_for(CONFIG)
    assert set(ev.benchmark) == set(benches)
    assert len(ev) == (27 + 1) * len(benches)  # every stage and the base, every benchmark
    drift = pd.read_csv(tables / "drift_params.csv")
    assert drift[drift.matrix_type == "all"].groupby(["run", "chain"]).size().shape[0] == 27
    assert not pd.read_csv(tables / "drift_responses.csv").empty
    for fig in FIGURE_TABLES:
        assert (rehearsal["results"] / "figures" / f"{fig}.png").stat().st_size > 0, fig
