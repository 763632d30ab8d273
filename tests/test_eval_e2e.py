"""End to end on the session's smoke run: eval, drift and distance tables, sample logs, figures."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest
from workflow_utils import BIN, ROOT

from sdpocl.config import chains_for, expand_runs, load_config
from sdpocl.data.benchmarks import benchmarks_for
from sdpocl.evaluate.goals import first_stage_drift_at_equal_updates, optimizer_steps_per_rollout
from sdpocl.plot.tables import (
    DOMAIN_MMD_COLUMNS,
    DRIFT_PARAM_COLUMNS,
    DRIFT_RESPONSE_COLUMNS,
    EVAL_COLUMNS,
    FIGURE_TABLES,
    SAMPLE_KEYS,
    TEACHER_STABILITY_COLUMNS,
    TSNE_COLUMNS,
)

pytestmark = pytest.mark.slow
CONFIG = load_config(ROOT / "config/smoke.yaml")
BENCH = benchmarks_for(CONFIG)
STAGES = [(run.name, "/".join(chain)) for run in expand_runs(CONFIG) for chain in chains_for(CONFIG, run)]


def test_eval_table_has_a_row_per_checkpoint_and_benchmark(smoke_results):
    df = pd.read_csv(smoke_results / "tables" / "eval.csv", keep_default_na=False, na_values=[""])
    assert list(df.columns) == EVAL_COLUMNS
    got = {(r.run, r.chain if isinstance(r.chain, str) else "", r.benchmark) for r in df.itertuples()}
    want = {(run, chain, b) for run, chain in STAGES for b in BENCH} | {("base", "", b) for b in BENCH}
    assert got == want and len(df) == len(want) == (26 + 1) * 10
    assert set(df.kind) == {"in-domain", "ood"}
    assert ((df.acc >= 0) & (df.acc <= 1)).all()
    assert (df.n_samples == 8).all() and (df.n_prompts == CONFIG["evaluate"]["n_prompts"]).all()
    ts = pd.read_csv(smoke_results / "tables" / "teacher_stability.csv")
    assert list(ts.columns) == TEACHER_STABILITY_COLUMNS
    assert list(ts.teacher) == ["Base", "Frozen", "EMA 5%", "StableSDPO"]


def test_sample_logs_keep_all_eight_scored_samples(smoke_results):
    df = pd.read_csv(smoke_results / "tables" / "eval.csv", keep_default_na=False, na_values=[""])
    run, chain = STAGES[3]
    for b in BENCH:
        lines = (smoke_results / "runs" / run / chain / "eval" / "final" / "samples" / f"{b}.jsonl").read_text()
        recs = [json.loads(x) for x in lines.splitlines()]
        assert len(recs) == CONFIG["evaluate"]["n_prompts"]
        for r in recs:
            assert set(SAMPLE_KEYS) <= set(r)
            assert len(r["responses"]) == len(r["scores"]) == len(r["n_tokens"]) == len(r["truncated"]) == 8
            assert set(r["scores"]) <= {0.0, 1.0}
        acc = sum(sum(r["scores"]) / 8 for r in recs) / len(recs)
        row = df[(df.run == run) & (df.chain == chain) & (df.benchmark == b)].iloc[0]
        assert row.acc == pytest.approx(acc)


def test_drift_and_distance_tables(smoke_results):
    t = smoke_results / "tables"
    params = pd.read_csv(t / "drift_params.csv")
    assert list(params.columns) == DRIFT_PARAM_COLUMNS
    grpo = params[(params.run == "grpo_s0") & (params.matrix_type == "all") & params.continual]
    # checkpoints every 2 steps of 4/4/4/2-step stages: 2+2+2+1 points along the chain
    assert list(grpo.sort_values("point_index").point_index) == list(range(1, 8))
    assert list(grpo.sort_values("point_index").point)[:2] == ["math@2", "math@4"]
    responses = pd.read_csv(t / "drift_responses.csv")
    assert list(responses.columns) == DRIFT_RESPONSE_COLUMNS
    assert len(responses) == len(STAGES) * len(BENCH) * CONFIG["evaluate"]["n_prompts"]
    assert responses.similarity.between(-100, 100.0001).all()
    mmd = pd.read_csv(t / "domain_mmd.csv")
    assert list(mmd.columns) == DOMAIN_MMD_COLUMNS
    names = {f"{d}_train" for d in CONFIG["domains"]} | set(BENCH)
    assert set(mmd.dataset_a) == names and len(mmd) == len(names) ** 2
    assert (mmd[mmd.dataset_a == mmd.dataset_b].mmd == 0).all()
    assert (mmd[mmd.dataset_a != mmd.dataset_b].mmd > 0).all()
    tsne = pd.read_csv(t / "tsne.csv")
    assert list(tsne.columns) == TSNE_COLUMNS and set(tsne.dataset) == names


def test_every_figure_is_drawn(smoke_results):
    for fig in FIGURE_TABLES:
        for fmt in CONFIG["plots"]["formats"]:
            path = smoke_results / "figures" / f"{fig}.{fmt}"
            assert path.stat().st_size > 1000, path


def test_evaluation_is_deterministic(smoke_results, tmp_path):
    settings = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())["meta"]["settings"]
    proc = subprocess.run(
        [
            str(BIN / "sdpocl"),
            "evaluate",
            "--model",
            str(smoke_results / "base" / "model"),
            "--tasks",
            str(smoke_results / "eval_tasks"),
            "--benchmarks",
            *BENCH,
            "--settings",
            json.dumps(settings),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads((tmp_path / "scores.json").read_text())["benchmarks"]
    first = json.loads((smoke_results / "base" / "eval" / "seed-0" / "scores.json").read_text())["benchmarks"]
    for b in BENCH:
        assert (tmp_path / "samples" / f"{b}.jsonl").read_text() == (
            smoke_results / "base" / "eval" / "seed-0" / "samples" / f"{b}.jsonl"
        ).read_text()
        assert again[b] == first[b]


def test_report_holds_every_figure_with_its_caption(smoke_results, tmp_path):
    from workflow_utils import snakemake

    report = tmp_path / "report.html"
    snakemake("--report", str(report), results=smoke_results)
    html = report.read_text(errors="replace")
    for fig in FIGURE_TABLES:
        assert f"{fig}.png" in html, fig
    assert "Domain distance" in html and "Continual learning" in html  # report categories


def test_goal_table_from_the_smoke_grid(smoke_results, tmp_path):
    """`sdpocl goals` reads the workflow's own tables and logs: a line per method and stage, the
    forgetting, Table 1, drift and OOD sections, and the stage's change as eval.csv has it."""
    out = tmp_path / "goals.md"
    proc = subprocess.run(
        [str(BIN / "sdpocl"), "goals", str(smoke_results), "--out", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.read_text() == proc.stdout
    for section in ("## Learning", "## Forgetting", "## Table 1", "## Drift after the chain", "## OOD base Acc@8"):
        assert section in proc.stdout
    ev = pd.read_csv(smoke_results / "tables" / "eval.csv")
    first = ev[(ev.run == "grpo_s0") & (ev.chain == "math") & (ev.benchmark == "math")].iloc[0]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("| GRPO | 1 math |"))
    assert f"{first.change:+.3f}" in line
    assert sum(x.startswith("| SDPO_0 | ") for x in proc.stdout.splitlines()) >= 4  # four stages, then forgetting
    # drift at equal optimizer steps reads each first stage's own resolved config: GRPO 4 updates a rollout step,
    # SDPO 1; the smoke stages save every 2 rollout steps (GRPO at 8 and 16 updates, SDPO at 2 and 4), none shared
    assert optimizer_steps_per_rollout(smoke_results, "grpo_s0", "math") == 4
    assert optimizer_steps_per_rollout(smoke_results, "sdpo_a0_s0", "math") == 1
    params = pd.read_csv(smoke_results / "tables" / "drift_params.csv")
    assert first_stage_drift_at_equal_updates(params, smoke_results).empty
    assert "at equal optimizer steps" not in proc.stdout
