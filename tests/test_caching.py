"""Caching guarantees of the workflow, checked against the session's finished smoke grid.

Change one run's lr or alpha -> only that run's train/eval/drift jobs rerun (plus the aggregations
and the figures downstream of them); add an alpha -> only the new run's chains run; reorder or
comment the config -> nothing runs; delete the figures (and even every checkpoint) -> only plot
jobs run; change a figure style key -> only plot jobs run.

Most checks are dry runs (``snakemake -n``) with a modified config written to ``tmp_path`` and
``--config results=<smoke_results>``, so the shared fixture is never touched. The tests that delete
files move them aside and put back whatever the workflow did not re-create, so the fixture is left
as it was found (``test_fixture_left_up_to_date`` checks that at the end).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_utils import ROOT, describe_jobs, job_wildcards, scheduled_jobs, snakemake

from sdpocl.config import chains_for, expand_runs, run_by_name, validate_config
from sdpocl.plot.tables import FIGURE_TABLES

pytestmark = pytest.mark.slow

SMOKE = ROOT / "config" / "smoke.yaml"

#: rules of one run's branch: per stage, per run, and the aggregations that read every run
STAGE_RULES = ("train_stage", "evaluate_checkpoint", "compute_drift")
BRANCH_RULES = {*STAGE_RULES, "response_drift", "aggregate_eval", "aggregate_drift"}
#: tables written by the aggregations of a run's branch (domain_mmd and tsne do not depend on runs)
RUN_TABLES = {"eval", "teacher_stability", "drift_params", "drift_responses"}
PLOT_RULES = {f"plot_{fig}" for fig in FIGURE_TABLES}
BRANCH_PLOTS = {f"plot_{fig}" for fig, tables in FIGURE_TABLES.items() if RUN_TABLES & set(tables)}
#: the default target's own (output-less) job, listed whenever anything runs
ALL = "all"


def smoke_config() -> dict:
    return yaml.safe_load(SMOKE.read_text())


def write_config(tmp_path: Path, cfg: dict | str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def dry_run(results: Path, *targets: str, configfile: str | Path = SMOKE) -> str:
    return snakemake("-n", *targets, results=results, configfile=str(configfile)).stdout


def figure_files(results: Path, cfg: dict | None = None) -> list[Path]:
    formats = validate_config(copy.deepcopy(cfg or smoke_config()))["plots"]["formats"]
    return [results / "figures" / f"{fig}.{fmt}" for fig in FIGURE_TABLES for fmt in formats]


def stage_dirs(results: Path, cfg: dict | None = None) -> list[Path]:
    cfg = validate_config(copy.deepcopy(cfg or smoke_config()))
    return [results / "runs" / run.name / "/".join(chain) for run in expand_runs(cfg) for chain in chains_for(cfg, run)]


def eval_checkpoints(cfg: dict, chain: tuple[str, ...]) -> list[str]:
    """Same as common.smk's eval_checkpoints."""
    if not cfg["evaluate"]["intermediate"]:
        return ["final"]
    steps, every = cfg["train"]["steps"][chain[-1]], cfg["train"]["save_every"]
    return [f"step-{s}" for s in range(every, steps, every)] + ["final"]


def assert_only_branch(out: str, cfg: dict, run_name: str) -> None:
    """Exactly the branch of ``run_name`` (every chain of it, nothing of any other run) plus the
    aggregations and the plots downstream; no data, base, base-eval or domain-distance job."""
    cfg = validate_config(copy.deepcopy(cfg))
    chains = chains_for(cfg, run_by_name(cfg, run_name))
    counts = scheduled_jobs(out)
    why = describe_jobs(out)
    assert set(counts) == BRANCH_RULES | BRANCH_PLOTS | {ALL}, why
    expected = {
        "train_stage": sorted((run_name, "/".join(c)) for c in chains),
        "compute_drift": sorted((run_name, "/".join(c)) for c in chains),
        "evaluate_checkpoint": sorted((run_name, "/".join(c), k) for c in chains for k in eval_checkpoints(cfg, c)),
    }
    for rule, jobs in expected.items():
        got = sorted(tuple(wc.values()) for wc in job_wildcards(out, rule))
        assert got == jobs, f"{rule}: scheduled {got}, expected {jobs}\n{why}"
        assert counts[rule] == len(jobs), why
    assert job_wildcards(out, "response_drift") == [{"run": run_name}], why
    assert all(counts[r] == 1 for r in {"aggregate_eval", "aggregate_drift", *BRANCH_PLOTS}), why


def assert_only_plots(out: str, plots: set[str] = PLOT_RULES, target_rule: str | None = ALL) -> None:
    counts = scheduled_jobs(out)
    expected = plots | ({target_rule} if target_rule else set())
    assert set(counts) == expected, describe_jobs(out)
    assert all(n == 1 for n in counts.values()), counts


# 1. nothing changed


def test_nothing_changed_schedules_nothing(smoke_results):
    out = dry_run(smoke_results)
    assert scheduled_jobs(out) == {}, describe_jobs(out)
    assert "Nothing to be done" in out
    assert scheduled_jobs(dry_run(smoke_results, "figures")) == {}


@pytest.mark.parametrize("report_to", ["none", "tensorboard"])
def test_live_curves_setting_reruns_nothing(smoke_results, tmp_path, report_to):
    """train.report_to switches the TensorBoard logs, which are not outputs: no stage reruns."""
    cfg = smoke_config()
    cfg["train"]["report_to"] = report_to
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert scheduled_jobs(out) == {}, describe_jobs(out)


def test_difficulty_at_its_defaults_reruns_nothing_and_a_harder_domain_rebuilds_its_data(smoke_results, tmp_path):
    """``data.difficulty`` written out at its defaults changes no param or command (results made
    before the knob existed stay valid); a harder MATH regenerates the MATH data, so the base and
    everything after it, and leaves the other domains' data alone."""
    cfg = smoke_config()
    cfg["data"]["difficulty"] = {"math_addend_max": 9, "math_terms": 2, "science_options": 4, "code_addend_max": 9}
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "explicit.yaml"))
    assert scheduled_jobs(out) == {}, describe_jobs(out)
    cfg["data"]["difficulty"]["math_addend_max"] = 99
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "hard_math.yaml"))
    data_jobs = job_wildcards(out, "prepare_data")
    assert sorted((j["domain"], j["split"]) for j in data_jobs) == [("math", "test"), ("math", "train")]
    assert scheduled_jobs(out)["build_base"] == 1


# 2. a changed lr or alpha reruns only that run's branch


def test_changed_lr_reruns_only_that_run(smoke_results, tmp_path):
    cfg = smoke_config()
    entry = next(r for r in cfg["runs"] if r == {"method": "sdpo", "alpha": 0.05})
    entry["lr"] = 2.0e-4
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert_only_branch(out, cfg, "sdpo_a0.05_s0")
    assert len(job_wildcards(out, "train_stage")) == 7  # 4 chain stages + 3 single-domain runs


def test_changed_alpha_of_a_named_run_reruns_only_that_run(smoke_results, tmp_path):
    # The fixture's runs all have default names; naming one explicitly with the name it already
    # has (sdpo_a0.05) keeps the fixture's outputs valid ...
    cfg = smoke_config()
    entry = next(r for r in cfg["runs"] if r == {"method": "sdpo", "alpha": 0.05})
    entry["name"] = "sdpo_a0.05"
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "named.yaml"))
    assert scheduled_jobs(out) == {}, describe_jobs(out)
    # ... and then its alpha changes while the name (so every output path) stays.
    entry["alpha"] = 0.1
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "named_alpha.yaml"))
    assert_only_branch(out, cfg, "sdpo_a0.05_s0")


# 3. a new alpha runs only the new chains


def test_new_alpha_runs_only_new_chains(smoke_results, tmp_path):
    cfg = smoke_config()
    cfg["runs"].append({"method": "sdpo", "alpha": 0.1})
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert_only_branch(out, cfg, "sdpo_a0.1_s0")
    assert len(job_wildcards(out, "train_stage")) == len(cfg["domains"])  # not a single-domain run


def test_a_label_reruns_only_the_aggregations_and_figures(smoke_results, tmp_path):
    """A label names a run in tables and figures: the stages and evaluations record the label the
    run's settings give it (sdpocl.config.recorded_run), so relabelling retrains nothing, and a label
    written out as that default changes nothing at all."""
    cfg = smoke_config()
    entry = next(r for r in cfg["runs"] if r == {"method": "grpo"})
    entry["label"] = "GRPO"
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "default_label.yaml"))
    assert scheduled_jobs(out) == {}, describe_jobs(out)
    entry["label"] = "GRPO (renamed)"
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg, "renamed.yaml"))
    assert set(scheduled_jobs(out)) == {"aggregate_eval", "aggregate_drift", *BRANCH_PLOTS, ALL}, describe_jobs(out)


def test_the_aggregations_show_the_configs_label_over_the_recorded_one(smoke_results, tmp_path):
    """The fixture's scores and response drift record the default labels; both tables take a new label
    from the command line, as the two rules pass it (RUN_LABELS, DRIFT_GRID)."""
    cfg = validate_config(smoke_config())
    runs = {r.name: {"label": r.label, "method": r.method, "alpha": r.alpha, "seed": r.seed} for r in expand_runs(cfg)}
    runs["grpo_s0"]["label"] = "GRPO (renamed)"
    scores = sorted(str(p) for p in smoke_results.glob("base/eval/seed-*/scores.json"))
    scores += sorted(str(p) for p in (smoke_results / "runs").glob("**/eval/*/scores.json"))
    params = sorted(str(p) for p in (smoke_results / "runs").glob("**/drift_params.csv"))
    responses = sorted(str(p) for p in (smoke_results / "runs").glob("*/response_drift.csv"))
    train = cfg["train"]
    grid = {"runs": runs, "domains": cfg["domains"], "steps": train["steps"], "save_every": train["save_every"]}
    labels = json.dumps({name: r["label"] for name, r in runs.items()})
    cli = [sys.executable, "-m", "sdpocl.cli"]
    subprocess.run(
        [*cli, "aggregate-eval", "--scores", *scores, "--domains", *cfg["domains"], "--labels", labels]
        + ["--out", str(tmp_path / "eval.csv"), "--out-teacher", str(tmp_path / "teacher.csv")],
        check=True,
    )
    subprocess.run(
        [*cli, "aggregate-drift", "--params", *params, "--responses", *responses, "--results", str(smoke_results)]
        + ["--grid", json.dumps(grid), "--out-params", str(tmp_path / "p.csv")]
        + ["--out-responses", str(tmp_path / "r.csv")],
        check=True,
    )
    for table in ("eval.csv", "p.csv", "r.csv"):
        df = pd.read_csv(tmp_path / table)
        shown = df.drop_duplicates("run").set_index("run").label
        assert shown["grpo_s0"] == "GRPO (renamed)", (table, shown.to_dict())
        assert shown["sdpo_a0_s0"] == "SDPO_0", (table, shown.to_dict())
    recorded = json.loads(Path(next(s for s in scores if "/grpo_s0/" in s)).read_text())["meta"]["label"]
    assert recorded == "GRPO"


# 4. key order, comments and layout of the config do not matter


def _reversed_keys(obj):
    if isinstance(obj, dict):
        return {k: _reversed_keys(obj[k]) for k in reversed(list(obj))}
    if isinstance(obj, list):
        return [_reversed_keys(x) for x in obj]
    return obj


def test_reordered_and_commented_config_reruns_nothing(smoke_results, tmp_path):
    cfg = smoke_config()
    body = yaml.safe_dump(_reversed_keys(cfg), sort_keys=False, default_flow_style=False)
    lines = ["# edited copy of smoke.yaml: keys in reverse order, block style, comments everywhere", ""]
    for i, line in enumerate(body.splitlines()):
        if not line.startswith(" "):
            lines.append(f"# section {i}")
        lines.append(f"{line}  # note {i}")
    text = "\n".join(lines) + "\n"
    assert yaml.safe_load(text) == cfg  # the same config ...
    reordered = yaml.safe_load(text)
    assert list(reordered) != list(cfg) and list(reordered["train"]) != list(cfg["train"])  # ... in another order
    assert list(reordered["runs"][1]) != list(cfg["runs"][1])
    out = dry_run(smoke_results, configfile=write_config(tmp_path, text, "reordered.yaml"))
    assert scheduled_jobs(out) == {}, describe_jobs(out)


# 5. deleted figures -> only plot jobs


def _stash(paths: list[Path], results: Path, stash: Path) -> list[tuple[Path, Path]]:
    """Move ``paths`` (under ``results``) to ``stash``, keeping their mtimes; returns (original, stashed)."""
    moved = []
    for path in paths:
        dest = stash / path.relative_to(results)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(dest))
        moved.append((path, dest))
    return moved


def _restore(moved: list[tuple[Path, Path]]) -> None:
    """Put back whatever the workflow did not re-create."""
    for original, stashed in moved:
        if not os.path.lexists(original) and os.path.lexists(stashed):
            original.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(stashed), str(original))


def test_deleted_figures_rerun_only_plot_jobs(smoke_results, tmp_path):
    figures = figure_files(smoke_results)
    assert all(f.exists() for f in figures)
    moved = _stash([smoke_results / "figures"], smoke_results, tmp_path / "stash")
    try:
        assert_only_plots(dry_run(smoke_results, "figures"), target_rule="figures")
        assert_only_plots(dry_run(smoke_results))  # `all`
        proc = snakemake("figures", results=smoke_results)
        assert set(scheduled_jobs(proc.stdout + proc.stderr)) <= PLOT_RULES | {"figures"}
        assert all(f.exists() and f.stat().st_size > 0 for f in figures)
    finally:
        _restore(moved)


# 6. checkpoints deleted, tables kept -> figures need no train/eval job


def test_deleted_checkpoints_and_figures_rerun_only_plot_jobs(smoke_results, tmp_path):
    """What a user does to save disk: delete every stage's model/ and checkpoints/ (and the
    figures), keep the tables; the figures are then regenerated from the tables alone."""
    stages = stage_dirs(smoke_results)
    weights = [stage / leaf for stage in stages for leaf in ("model", "checkpoints")]
    assert all(w.is_dir() for w in weights)
    summaries = {s: (s / "summary.json").stat().st_mtime_ns for s in stages}
    moved = _stash(weights + [smoke_results / "figures"], smoke_results, tmp_path / "stash")
    try:
        assert_only_plots(dry_run(smoke_results, "figures"), target_rule="figures")
        proc = snakemake("figures", results=smoke_results)
        ran = scheduled_jobs(proc.stdout + proc.stderr)
        assert ran and set(ran) <= PLOT_RULES | {"figures"}, ran
        assert all(f.exists() and f.stat().st_size > 0 for f in figure_files(smoke_results))
        assert not any(w.exists() for w in weights), "a train job re-created a model"
        assert {s: (s / "summary.json").stat().st_mtime_ns for s in stages} == summaries
    finally:
        _restore(moved)


def test_copied_results_with_mtimes_kept_need_only_plot_jobs(smoke_results, tmp_path):
    """Results copied elsewhere with their mtimes (``cp -a``; the copy has no Snakemake metadata
    under .snakemake/, which alone never triggers a rerun) are up to date; with the figures and
    every checkpoint deleted from the copy, only the plot jobs run, and they write the figures."""
    copy_dir = tmp_path / "results"
    shutil.copytree(smoke_results, copy_dir, symlinks=True, copy_function=shutil.copy2)
    out = dry_run(copy_dir)
    assert scheduled_jobs(out) == {}, describe_jobs(out)

    shutil.rmtree(copy_dir / "figures")
    weights = [stage / leaf for stage in stage_dirs(copy_dir) for leaf in ("model", "checkpoints")]
    for w in weights:
        shutil.rmtree(w)
    assert_only_plots(dry_run(copy_dir, "figures"), target_rule="figures")
    proc = snakemake("figures", results=copy_dir)
    ran = scheduled_jobs(proc.stdout + proc.stderr)
    assert ran and set(ran) <= PLOT_RULES | {"figures"}, ran
    pngs = [f for f in figure_files(copy_dir) if f.suffix == ".png"]
    assert pngs and all(f.exists() and f.stat().st_size > 0 for f in pngs)
    assert not any(w.exists() for w in weights)


# 7. a figure style key -> only plot jobs


def test_changed_figure_style_reruns_only_plot_jobs(smoke_results, tmp_path):
    cfg = smoke_config()
    cfg["plots"] = {"dpi": 120}
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert_only_plots(out)


# more single-key edits: each reruns the rules that read the key and what is downstream of them

DRIFT_PLOTS = {
    f"plot_{fig}" for fig, tables in FIGURE_TABLES.items() if {"drift_params", "drift_responses"} & set(tables)
}
EVAL_RULES = {
    "write_eval_task",
    "evaluate_base",
    "evaluate_checkpoint",
    "aggregate_eval",
    "response_drift",
    "aggregate_drift",
}


@pytest.mark.parametrize(
    "edit, expected",
    [
        pytest.param(lambda c: c["evaluate"].update(n_prompts=3), EVAL_RULES | BRANCH_PLOTS, id="evaluate.n_prompts"),
        pytest.param(
            lambda c: c["evaluate"].update(n_prompts={"domains": 6, "ood": 4}),
            EVAL_RULES | BRANCH_PLOTS,
            id="evaluate.n_prompts.domains",
        ),
        pytest.param(
            lambda c: c["drift"].update(top_k=8), {"compute_drift", "aggregate_drift"} | DRIFT_PLOTS, id="drift.top_k"
        ),
        pytest.param(
            lambda c: c["drift"].update(response_samples=2),
            {"response_drift", "aggregate_drift"} | DRIFT_PLOTS,
            id="drift.response_samples",
        ),
        pytest.param(
            lambda c: c["drift"].update(response_prompts=2),
            {"response_drift", "aggregate_drift"} | DRIFT_PLOTS,
            id="drift.response_prompts",
        ),
        pytest.param(
            lambda c: c["train"]["steps"].update(code=4),
            {
                "train_stage",
                "evaluate_checkpoint",
                "compute_drift",
                "aggregate_eval",
                "response_drift",
                "aggregate_drift",
            }
            | BRANCH_PLOTS,
            id="train.steps.code",
        ),
        pytest.param(  # one block for training and evaluation: code stages and every evaluation
            lambda c: c["rewards"].update(code_timeout_s=1.5),
            {"train_stage", "compute_drift"} | EVAL_RULES | BRANCH_PLOTS,
            id="rewards.code_timeout_s",
        ),
        pytest.param(lambda c: c["evaluate"].update(top_k=0), EVAL_RULES | BRANCH_PLOTS, id="evaluate.top_k"),
        pytest.param(
            lambda c: c["data"].update(test_size=20),
            {"prepare_data", "domain_distance"} | EVAL_RULES | PLOT_RULES,
            id="data.test_size",
        ),
    ],
)
def test_single_key_edit_reruns_only_its_readers(smoke_results, tmp_path, edit, expected):
    cfg = smoke_config()
    edit(cfg)
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert set(scheduled_jobs(out)) == expected | {ALL}, describe_jobs(out)
    train = job_wildcards(out, "train_stage")
    if "train_stage" in expected:  # train.steps.code, rewards.code_*: only the stages that end in code
        assert train and all(wc["chain"].split("/")[-1] == "code" for wc in train), train


def test_n_prompts_per_kind_with_the_same_limits_reruns_nothing(smoke_results, tmp_path):
    """evaluate.n_prompts {domains: N, ood: N} is N (sdpocl.evaluate.limits.canonical_n_prompts)."""
    cfg = smoke_config()
    n = cfg["evaluate"]["n_prompts"]
    cfg["evaluate"]["n_prompts"] = {"domains": n, "ood": n}
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert scheduled_jobs(out) == {}, describe_jobs(out)


def test_top_k_at_its_default_reruns_nothing(smoke_results, tmp_path):
    """evaluate.top_k: 50, written out, is the default the evaluations were drawn with before the tasks stated it."""
    cfg = smoke_config()
    cfg["evaluate"]["top_k"] = 50
    out = dry_run(smoke_results, configfile=write_config(tmp_path, cfg))
    assert scheduled_jobs(out) == {}, describe_jobs(out)


def test_fixture_left_up_to_date(smoke_results):
    """Runs last in this file: the tests above left the shared results as they found them."""
    out = dry_run(smoke_results)
    assert scheduled_jobs(out) == {}, describe_jobs(out)
    assert all(f.exists() for f in figure_files(smoke_results))
    assert all((s / "model").is_dir() and (s / "checkpoints").is_dir() for s in stage_dirs(smoke_results))
