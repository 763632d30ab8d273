"""The goal table (sdpocl goals) on hand-made tables: the numbers it prints are the tables' own."""

import json
import math

import pandas as pd
import pytest

from sdpocl.chain import stage_dir
from sdpocl.evaluate.goals import (
    first_stage_drift_at_equal_updates,
    forgetting,
    goal_report,
    ood_after_chain,
    pooled_z,
    reward_rise,
    stage_learning,
    t_interval,
)
from sdpocl.train.steplog import summarize

DOMAINS = ["math", "science", "tooluse"]


def _row(run, label, seed, chain, bench, acc, change=math.nan, stderr=math.nan, method="grpo", n_samples=8):
    parts = chain.split("/") if chain else []
    return {
        "run": run,
        "label": label,
        "method": method,
        "alpha": None,
        "seed": seed,
        "chain": chain,
        "stage": len(parts),
        "domain": parts[-1] if parts else "base",
        "continual": parts == DOMAINS[: len(parts)],
        "single_domain": len(parts) == 1,
        "checkpoint": "final",
        "benchmark": bench,
        "kind": "in-domain" if bench in DOMAINS else "ood",
        "bench_domain": bench if bench in DOMAINS else "math",
        "acc": acc,
        "n_samples": n_samples,
        "change": change,
        "parent_acc": math.nan,
        "change_stderr": stderr,
    }


def _results(tmp_path, seeds=(0, 1)):
    """Two GRPO chains (MATH -> SCIENCE -> TOOLUSE) whose numbers differ by seed, a base per seed, and
    each stage's summary.json as the stage writes it from its per-step log."""
    rows = []
    for s in seeds:
        rows += [_row("base", "Base", s, "", b, 0.3, method="base") for b in [*DOMAINS, "logic_grid"]]
        run = f"grpo_s{s}"
        own = {"math": 0.5 + 0.1 * s, "science": 0.6, "tooluse": 0.4}
        for k, domain in enumerate(DOMAINS, start=1):
            chain = "/".join(DOMAINS[:k])
            for b in DOMAINS:
                # each later stage costs an earlier domain 0.05 per stage, s more on MATH in seed s
                acc = (
                    own[b] - (0.05 + 0.1 * s * (b == "math")) * (k - 1 - DOMAINS.index(b))
                    if DOMAINS.index(b) < k
                    else 0.3
                )
                change = 0.1 + 0.2 * s if b == domain else math.nan
                rows.append(_row(run, "GRPO", s, chain, b, acc, change, 0.05 if b == domain else math.nan))
            log = [{"step": i, "reward": 0.2 + 0.01 * i * (s + 1)} for i in range(10)]
            folder = tmp_path / stage_dir(".", run, chain)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "summary.json").write_text(json.dumps(summarize(log, 10, patience=5)))
    (tmp_path / "tables").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "tables" / "eval.csv", index=False)
    return tmp_path


def test_t_interval_and_reward_rise(tmp_path):
    mean, half = t_interval([0.1, 0.3])
    assert mean == pytest.approx(0.2) and half == pytest.approx(12.7062 * 0.1, rel=1e-4)  # t(0.975, 1) sd / sqrt 2
    assert math.isnan(t_interval([0.4])[1]) and math.isnan(t_interval([])[0])
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps(summarize([{"step": i, "reward": float(i)} for i in range(10)], 10, patience=5)))
    assert reward_rise(summary) == (0.5, 8.5)  # the first and the last fifth: steps 0-1 and 8-9
    assert all(math.isnan(x) for x in reward_rise(tmp_path / "missing.json"))
    # the seed mean over its stderr from the seeds' paired stderrs; a seed without a stderr is left out
    assert pooled_z([0.1, 0.3], [0.05, 0.05]) == pytest.approx(0.2 / (0.05 * 2**0.5 / 2))
    assert pooled_z([0.1, 0.3, 0.9], [0.1, 0.1, float("nan")]) == pytest.approx(0.2 / (0.1 * 2**0.5 / 2))
    assert math.isnan(pooled_z([0.1], [0.0]))


def test_stage_learning_and_forgetting_from_the_tables(tmp_path):
    results = _results(tmp_path)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    learn = stage_learning(ev, results)
    assert list(learn.domain[learn.seed == 0]) == DOMAINS
    row = learn[(learn.seed == 1) & (learn.domain == "science")].iloc[0]
    assert row.change == pytest.approx(0.3) and row.z == pytest.approx(6.0)
    assert (row.reward_first, row.reward_last) == pytest.approx((0.2 + 0.02 * 0.5, 0.2 + 0.02 * 8.5))
    fg = forgetting(ev).set_index("seed")
    # seed 0: MATH lost 0.05 x 2 stages, SCIENCE 0.05 x 1; seed 1: MATH (0.05 + 0.1) x 2
    assert fg.loc[0, "math"] == pytest.approx(0.10) and fg.loc[0, "science"] == pytest.approx(0.05)
    assert fg.loc[1, "math"] == pytest.approx(0.30) and fg.loc[1, "mean"] == pytest.approx(0.175)
    assert "tooluse" not in fg.columns or fg.tooluse.isna().all()  # the last stage's domain is not forgotten yet


def test_goal_report_prints_seeds_and_their_interval(tmp_path):
    report = goal_report(_results(tmp_path))
    line = next(x for x in report.splitlines() if x.startswith("| GRPO | 1 math |"))
    assert "+0.100 (2.0) / +0.300 (6.0)" in line and "+0.200 ± 1.271" in line and "| 2 of 2 |" in line
    assert "| 5.7 |" in line  # pooled: 0.2 / (sqrt(2 x 0.05^2) / 2)
    forgot = next(x for x in report.splitlines() if x.startswith("| GRPO | +0.075 / +0.175 |"))
    assert "+0.125 ± 0.635" in forgot
    assert "OOD base Acc@8" in report and "logic_grid 0.300" in report and "1 of 1" in report


def test_ood_after_the_chain_is_the_last_stage_minus_the_same_seeds_base_against_grpo(tmp_path):
    results = _results(tmp_path)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    ood = []
    for s, (grpo_last, sdpo_last) in enumerate([(0.2, 0.25), (0.1, 0.2)]):
        base = 0.3 + 0.1 * s  # aggregate_eval's base_acc: the run's own seed's base
        for run, label, method, last in [
            (f"grpo_s{s}", "GRPO", "grpo", grpo_last),
            (f"sdpo_a0_s{s}", "SDPO_0", "sdpo", sdpo_last),
        ]:
            ood += [
                _row(run, label, s, "math", "logic_grid", 0.9, method=method),  # an earlier stage: not read
                _row(run, label, s, "/".join(DOMAINS), "logic_grid", last + 0.1 * s, method=method),
            ]
            for row in ood[-2:]:
                row["base_acc"] = base
    pd.concat([ev, pd.DataFrame(ood)]).to_csv(results / "tables" / "eval.csv", index=False)
    table = ood_after_chain(pd.read_csv(results / "tables" / "eval.csv")).set_index(["label", "seed"])
    assert list(table.change.loc["GRPO"]) == pytest.approx([-0.1, -0.2])  # 0.2 - 0.3, 0.2 - 0.4
    assert list(table.change.loc["SDPO_0"]) == pytest.approx([-0.05, -0.1])
    lines = goal_report(results).splitlines()
    assert any(x.startswith("## OOD after the chain (Acc@8 after the last stage minus") for x in lines)
    assert (
        next(x for x in lines if x.startswith("| GRPO | logic_grid |"))
        == "| GRPO | logic_grid | -0.100 / -0.200 | -0.150 ± 0.635 |  |"
    )
    # SDPO_0 - GRPO seed by seed: +0.05 and +0.1, t(0.975, 1) x sd / sqrt 2
    sdpo = next(x for x in lines if x.startswith("| SDPO_0 | logic_grid |"))
    assert sdpo.endswith("| +0.075 ± 0.318 |")


def test_goal_report_names_the_metric_with_the_tables_samples_per_prompt(tmp_path):
    results = _results(tmp_path)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    ev.assign(n_samples=3).to_csv(results / "tables" / "eval.csv", index=False)
    report = goal_report(results)
    assert "OOD base Acc@3" in report and "own-stage Acc@3 minus" in report and "Acc@8" not in report
    ev.assign(n_samples=[3, 8] * (len(ev) // 2) + [3] * (len(ev) % 2)).to_csv(results / "tables" / "eval.csv")
    assert "OOD base Acc@k" in goal_report(results)  # rows that disagree name no k


def test_goal_report_names_a_missing_table(tmp_path):
    with pytest.raises(FileNotFoundError, match="eval.csv is missing"):
        goal_report(tmp_path)


def test_goal_report_reads_methods_against_grpo_and_the_ema_teacher_seed_by_seed(tmp_path):
    results = _results(tmp_path)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    # an SDPO chain equal to GRPO's except that the last stage costs every earlier domain 0.1 more
    sdpo = ev[ev.method == "grpo"].assign(
        run=lambda d: d.run.str.replace("grpo", "sdpo_a0"), label="SDPO_0", method="sdpo"
    )
    sdpo.loc[sdpo.stage == 3, "acc"] -= 0.1
    pd.concat([ev, sdpo]).to_csv(results / "tables" / "eval.csv", index=False)
    teachers = [("Base", 0.3, 0.3), ("Frozen", 0.5, 0.6), ("EMA 5%", 0.4, 0.3), ("StableSDPO", 0.45, 0.45)]
    pd.DataFrame(
        [
            {"teacher": t, "seed": s, "benchmark": "math", "acc": acc}
            for t, *accs in teachers
            for s, acc in enumerate(accs)
        ]
    ).to_csv(results / "tables" / "teacher_stability.csv", index=False)
    lines = goal_report(results).splitlines()
    sdpo_line = next(x for x in lines if x.startswith("| SDPO_0 | +0.175 / +0.275 |"))
    assert sdpo_line.endswith("| +0.100 ± 0.000 |")  # paired by seed: the same +0.1 in both
    assert next(x for x in lines if x.startswith("| GRPO | +0.075")).endswith("|  |")
    assert "minus EMA 5%, seed by seed" in goal_report(results)
    assert next(x for x in lines if x.startswith("| Frozen |")).endswith("| +0.200 ± 1.271 |")  # +0.1, +0.3
    stable = next(x for x in lines if x.startswith("| StableSDPO | 0.450 / 0.450 |"))
    assert stable.endswith("| +0.100 ± 0.635 |")  # +0.05 and +0.15: t(0.975, 1) x 0.05
    assert next(x for x in lines if x.startswith("| EMA 5% |")).endswith("|  |")


def test_goal_report_reads_drift_against_grpo_seed_by_seed(tmp_path):
    results = _results(tmp_path)
    params, responses = [], []
    for s in (0, 1):
        for label, run, nss in (("GRPO", f"grpo_s{s}", 3.0 + s), ("SDPO_0", f"sdpo_a0_s{s}", 2.0 + 2 * s)):
            for point, scale in ((0, 0.5), (1, 1.0)):  # the chain's last checkpoint is the one read
                params.append(
                    {"label": label, "run": run, "seed": s, "matrix_type": "all", "continual": True}
                    | {"stage": 2, "chain": "math/science", "checkpoint": 10 * (point + 1)}
                    | {"point_index": point, "nss_mean": nss * scale, "pm_update_mean": 4.0}
                )
            for stage, sim in ((1, 95.0), (2, 90.0 - 2 * (label != "GRPO"))):
                responses.append(
                    {"label": label, "run": run, "seed": s, "continual": True, "stage": stage, "similarity": sim}
                )
    pd.DataFrame(params).to_csv(results / "tables" / "drift_params.csv", index=False)
    pd.DataFrame(responses).to_csv(results / "tables" / "drift_responses.csv", index=False)
    lines = goal_report(results).splitlines()
    nss = next(x for x in lines if x.startswith("| SDPO_0 | nss |"))
    assert "| 2 / 4 | 3 ± 12.71 |" in nss and nss.endswith("| -0.5 ± 6.353 |")  # -1 and 0 against GRPO's 3, 4
    sim = next(x for x in lines if x.startswith("| SDPO_0 | similarity_last |"))
    assert sim.endswith("| -2 ± 0 |")
    assert next(x for x in lines if x.startswith("| GRPO | nss |")).endswith("|  |")


def _first_stage_params(results, per_rollout):
    """drift_params rows of each run's first stage (MATH), a checkpoint every 10 rollout steps up to 40,
    NSS = the optimizer steps taken (so the row read names its own step), and each stage's
    resolved_config.json with its optimizer steps per rollout step."""
    rows = []
    for run, (label, k) in per_rollout.items():
        folder = results / stage_dir(".", run, "math")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "resolved_config.json").write_text(json.dumps({"stage_settings": {"optimizer_steps_per_rollout": k}}))
        for checkpoint in (10, 20, 30, 40):
            rows.append(
                {"label": label, "run": run, "seed": int(run[-1]), "matrix_type": "all", "continual": True}
                | {"stage": 1, "chain": "math", "checkpoint": checkpoint, "point_index": checkpoint // 10}
                | {"nss_mean": checkpoint * k, "pm_update_mean": checkpoint * k / 10}
            )
    return pd.DataFrame(rows)


def test_first_stage_drift_is_read_at_equal_optimizer_steps(tmp_path):
    # GRPO: 4 optimizer steps per rollout step (checkpoints at 40, 80, 120, 160 updates); SDPO: 1 (10 .. 40)
    runs = {"grpo_s0": ("GRPO", 4), "sdpo_a0_s0": ("SDPO_0", 1), "grpo_s1": ("GRPO", 4), "sdpo_a0_s1": ("SDPO_0", 1)}
    params = _first_stage_params(tmp_path, runs)
    later = params.assign(stage=2, chain="math/science", nss_mean=99.0)  # a later stage is not read
    out = first_stage_drift_at_equal_updates(pd.concat([params, later]), tmp_path)
    assert set(out.optimizer_step) == {40}  # GRPO's rollout step 10 and SDPO's rollout step 40
    assert sorted(out.run) == sorted(runs) and set(out.nss) == {40} and set(out.pm_update) == {4.0}
    # a run whose stage folder lacks its resolved config is named, not guessed
    (tmp_path / stage_dir(".", "sdpo_a0_s1", "math") / "resolved_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="sdpo_a0_s1"):
        first_stage_drift_at_equal_updates(params, tmp_path)


def test_goal_report_compares_first_stage_drift_at_equal_optimizer_steps(tmp_path):
    results = _results(tmp_path)
    params = _first_stage_params(results, {"grpo_s0": ("GRPO", 4), "sdpo_a0_s0": ("SDPO_0", 2)})
    params.to_csv(results / "tables" / "drift_params.csv", index=False)
    lines = goal_report(results).splitlines()
    heading = next(i for i, x in enumerate(lines) if "at equal optimizer steps" in x)
    assert lines[heading].startswith("## Drift in the first stage at equal optimizer steps (80;")
    section = lines[heading:]
    # both at 80 updates: GRPO's rollout step 20, SDPO's 40; equal drift, so SDPO minus GRPO is 0
    assert next(x for x in section if x.startswith("| SDPO_0 | nss |")) == "| SDPO_0 | nss | 80 | 80 | +0 |"
    assert next(x for x in section if x.startswith("| GRPO | pm_update |")) == "| GRPO | pm_update | 8 | 8 |  |"


def test_pooled_z_of_a_domain_with_two_benchmarks(tmp_path):
    results = _results(tmp_path)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    # a second in-domain MATH benchmark (as the paper preset's MATH-500 and AIME): change +0.3 ± 0.05
    aime = ev[(ev.benchmark == "math") & (ev.stage == 1)].assign(benchmark="aime", change=0.3, change_stderr=0.05)
    pd.concat([ev, aime]).to_csv(results / "tables" / "eval.csv", index=False)
    line = next(x for x in goal_report(results).splitlines() if x.startswith("| GRPO | 1 math |"))
    # per seed the two benchmarks' mean (0.2, 0.3), stderr sqrt(2 x 0.05^2) / 2; pooled: 0.25 / 0.025
    assert "+0.200 (" in line and "+0.300 (" in line and "| 10.0 |" in line


def test_goal_report_shows_each_stages_artifacts_on_its_own_domain_with_the_bases(tmp_path):
    """Goal 2's collapse symptoms: truncation per seed, repeated n-grams and \\boxed on the stage's own
    domain, the base's beside them; a table without artifact columns leaves the section out."""
    results = _results(tmp_path)
    assert "## Artifacts" not in goal_report(results)
    ev = pd.read_csv(results / "tables" / "eval.csv")
    collapsed = (ev.chain.astype(str).str.endswith("tooluse")) & (ev.benchmark == "tooluse")
    ev["truncation_rate"] = [0.5 + 0.25 * s if c else 0.0 for s, c in zip(ev.seed, collapsed)]
    ev["ngram_repeat"] = [0.4 if c else 0.01 for c in collapsed]
    ev["boxed_per_response"] = [1.0 if b == "math" else 0.0 for b in ev.benchmark]
    ev.to_csv(results / "tables" / "eval.csv", index=False)
    section = goal_report(results).split("## Artifacts", 1)[1].split("\n## ", 1)[0].splitlines()
    line = next(x for x in section if x.startswith("| GRPO | 3 tooluse |"))
    assert "| 50.0 / 75.0 |" in line and "62.5 ± " in line and "(0.0)" in line and "| 40.0 (1.0) |" in line
    math_line = next(x for x in section if x.startswith("| GRPO | 1 math |"))
    assert "| 0.0 / 0.0 |" in math_line and "| 1.00 (1.00) |" in math_line
