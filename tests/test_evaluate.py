"""evaluate-checkpoint units: lm-eval tasks from local files, Acc@8 over all samples, artifact
metrics, the tidy table's RelPerf / gain / forgetting, Table 1, and clear errors."""

from __future__ import annotations

import json
import math
import subprocess

import pandas as pd
import pytest
from workflow_utils import BIN, ROOT

from sdpocl.data.benchmarks import BENCHMARKS, OOD_GENERATORS, generate_ood
from sdpocl.evaluate.aggregate import eval_table, paired_change, relative_performance, teacher_stability
from sdpocl.evaluate.artifacts import artifact_metrics, ngram_repeat_rate
from sdpocl.evaluate.run import check_model_dir, sample_records, summarize
from sdpocl.evaluate.tasks import process_results, task_name, write_task_yaml
from sdpocl.plot.tables import EVAL_COLUMNS
from sdpocl.rewards import reward_for

RIGHT, WRONG = " <think>2+3=5</think> \\boxed{5}", " <think>2+3=6</think> \\boxed{6}"


def _math_file(tmp_path, n=3):
    recs = [
        {
            "prompt": f"Compute {a}+3.\n\nPlease reason step by step, and put your final answer within \\boxed{{}}.",
            "answer": "5",
            "tests": [],
            "domain": "math",
            "dataset": "toy",
            "solution": "",
        }
        for a in range(2, 2 + n)
    ]
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _task(tmp_path, k=8):
    write_task_yaml(
        tmp_path / "tasks" / "toy.yaml",
        "toy",
        _math_file(tmp_path),
        repeats=k,
        temperature=0.6,
        top_p=0.95,
        max_gen_toks=16,
    )
    return tmp_path / "tasks"


def test_task_yaml_loads_from_local_files_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from lm_eval.tasks import TaskManager, get_task_dict

    tm = TaskManager(include_path=str(_task(tmp_path)), include_defaults=False)
    assert task_name("toy") in tm.all_tasks
    task = get_task_dict([task_name("toy")], tm)[task_name("toy")]
    docs = list(task.test_docs())
    assert len(docs) == 3 and docs[0]["answer"] == "5"
    assert task.config.repeats == 8
    assert task.config.generation_kwargs["temperature"] == 0.6 and task.config.generation_kwargs["top_p"] == 0.95


class _FirstRightLM:
    """A fake lm-eval model: the first sample of every prompt is right, the other seven wrong."""

    def __new__(cls):
        from lm_eval.api.model import LM

        class Fake(LM):
            def __init__(self):
                super().__init__()
                self.seen: dict[str, int] = {}

            def generate_until(self, requests, disable_tqdm=False):
                out = []
                for req in requests:
                    ctx = req.args[0]
                    out.append(RIGHT if self.seen.get(ctx, 0) == 0 else WRONG)
                    self.seen[ctx] = self.seen.get(ctx, 0) + 1
                return out

            def loglikelihood(self, requests, disable_tqdm=False):  # pragma: no cover - unused
                raise NotImplementedError

            def loglikelihood_rolling(self, requests, disable_tqdm=False):  # pragma: no cover - unused
                raise NotImplementedError

        return Fake()


def test_acc_at_8_scores_every_sample_not_just_the_first(tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(_task(tmp_path)), include_defaults=False)
    res = simple_evaluate(model=_FirstRightLM(), tasks=[task_name("toy")], task_manager=tm, log_samples=True)
    acc = res["results"][task_name("toy")]["acc,all_samples"]
    assert acc == pytest.approx(1 / 8)
    samples = res["samples"][task_name("toy")]
    assert all(len(s["filtered_resps"][0]) == 8 for s in samples)


def test_a_benchmark_is_scored_in_one_reward_call_not_one_per_prompt(tmp_path, monkeypatch):
    """The task's filter scores every prompt's samples in one reward call (the code reward starts
    one sandbox runner per call); process_results and the sample log then reuse those scores."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import sdpocl.rewards as rewards
    from sdpocl.evaluate import tasks

    monkeypatch.setattr(tasks, "_SCORES", type(tasks._SCORES)())  # nothing memoised by other tests
    calls = []

    def counting(domain):
        reward = reward_for(domain)

        def count(completions, **kw):
            calls.append(len(completions))
            return reward(completions, **kw)

        return count

    monkeypatch.setattr(rewards, "reward_for", counting)
    tasks_dir = _task(tmp_path)
    recs = [json.loads(line) for line in (tmp_path / "toy.jsonl").read_text().splitlines()]
    for rec, answer in zip(recs, ["5", "6", "7"], strict=True):  # 1 of 8 right, 7 of 8, none
        rec["answer"] = answer
    (tmp_path / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    tm = TaskManager(include_path=str(tasks_dir), include_defaults=False)
    res = simple_evaluate(model=_FirstRightLM(), tasks=[task_name("toy")], task_manager=tm, log_samples=True)
    assert res["results"][task_name("toy")]["acc,all_samples"] == pytest.approx((1 / 8 + 7 / 8 + 0) / 3)
    assert calls == [3 * 8]
    s = min(res["samples"][task_name("toy")], key=lambda s: s["doc_id"])
    assert tasks.score_samples(s["doc"], s["filtered_resps"][0]) == [1.0] + [0.0] * 7
    assert calls == [3 * 8]


def test_process_results_is_the_mean_over_samples():
    doc = {"prompt": "p", "answer": "5", "tests": [], "domain": "math"}
    assert process_results(doc, [[RIGHT, WRONG, WRONG, RIGHT]]) == {"acc": 0.5}
    assert process_results(doc, [[WRONG] * 8]) == {"acc": 0.0}


def test_evaluation_scores_with_the_configured_reward_limits(tmp_path, monkeypatch):
    """evaluate_model sets the config's reward limits before lm-eval scores; lm-eval's
    process_results (and its memo) then use them -- a slow but correct solution that the default
    limits pass fails under a tight code_timeout_s, and the other way round."""
    from sdpocl import rewards
    from sdpocl.evaluate import run

    doc = {"domain": "code", "answer": "", "tests": ["import time\ntime.sleep(0.6)\nassert f(1) == 8"]}
    sample = " <think>t</think> ```python\ndef f(x):\n    return x + 7\n```"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")

    class Stop(Exception):
        pass

    def stop(*a, **k):
        raise Stop

    monkeypatch.setattr(run, "make_lm", stop)
    settings = {"backend": "hf", "samples": 1, "max_gen_toks": 8, "batch_size": 1, "seed": 0}
    try:
        for timeout_s, want in [(0.3, 0.0), (2.0, 1.0), (0.3, 0.0)]:
            with pytest.raises(Stop):
                run.evaluate_model(
                    model,
                    tmp_path,
                    ["x"],
                    tmp_path / "out",
                    settings={**settings, "rewards": {"code_timeout_s": timeout_s}},
                )
            assert rewards.current_limits()["code_timeout_s"] == timeout_s
            assert process_results(doc, [[sample]]) == {"acc": want}
    finally:
        rewards.configure()


def test_summarize_acc_and_stderr_over_prompts():
    recs = [
        {"responses": ["a"] * 4, "scores": s, "n_tokens": [3] * 4, "truncated": [False] * 4}
        for s in ([1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0])
    ]
    out = summarize(recs)
    assert out["acc"] == pytest.approx(0.5)
    assert out["stderr"] == pytest.approx(math.sqrt(((0.5**2) * 2 + 0) / 2 / 3))
    assert out["n_prompts"] == 3 and out["n_samples"] == 4


def test_summarize_per_category_acc_is_the_unweighted_category_mean():
    """BFCL: Acc@k = mean of the category Acc@k; the prompt mean (lm-eval's) is acc_micro."""

    def rec(category, scores):
        out = {"responses": ["a"] * 2, "scores": scores, "n_tokens": [3] * 2, "truncated": [False] * 2}
        return {**out, "category": category} if category else out

    recs = [rec("simple_python", s) for s in ([1, 1], [1, 1], [1, 0], [0, 0])] + [
        rec("irrelevance", s) for s in ([0, 0], [0, 1])
    ]
    out = summarize(recs)
    assert out["categories"]["simple_python"]["acc"] == pytest.approx(0.625)
    assert out["categories"]["irrelevance"]["acc"] == pytest.approx(0.25)
    assert {c: v["n_prompts"] for c, v in out["categories"].items()} == {"simple_python": 4, "irrelevance": 2}
    assert out["acc"] == pytest.approx((0.625 + 0.25) / 2)
    assert out["acc_micro"] == pytest.approx(3 / 6) and out["n_prompts"] == 6 and out["n_samples"] == 2
    se_simple = math.sqrt(((0.375**2) * 2 + 0.125**2 + 0.625**2) / 3 / 4)
    se_irr = math.sqrt((0.25**2 * 2) / 1 / 2)
    assert out["categories"]["simple_python"]["stderr"] == pytest.approx(se_simple)
    assert out["stderr"] == pytest.approx(math.sqrt(se_simple**2 + se_irr**2) / 2)
    assert out["stderr_micro"] == pytest.approx(summarize([{**r, "category": None} for r in recs])["stderr"])
    plain = summarize([{k: v for k, v in r.items() if k != "category"} for r in recs])
    assert plain["acc"] == pytest.approx(3 / 6) and "categories" not in plain and "acc_micro" not in plain


def test_sample_records_carry_the_category():
    docs = [
        {"prompt": "p", "answer": "5", "tests": [], "domain": "math", "category": "simple_python"},
        {"prompt": "q", "answer": "5", "tests": [], "domain": "math"},
    ]
    samples = [{"doc_id": i, "doc": d, "filtered_resps": [[RIGHT, WRONG]]} for i, d in enumerate(docs)]
    recs = sample_records("b", samples, count_tokens=len, max_gen_toks=1000)
    assert recs[0]["category"] == "simple_python" and "category" not in recs[1]
    assert recs[0]["scores"] == [1.0, 0.0]


def test_artifact_metrics_on_hand_written_responses():
    responses = ["\\boxed{1} \\boxed{1} \\boxed{1}", "\\boxed{2}", "no answer", "a b c d a b c d"]
    m = artifact_metrics(responses, n_tokens=[10, 4, 64, 8], truncated=[False, False, True, False])
    assert m["boxed_per_response"] == pytest.approx((3 + 1 + 0 + 0) / 4)
    assert m["multi_boxed_share"] == pytest.approx(1 / 4)
    assert m["truncation_rate"] == pytest.approx(1 / 4)
    assert m["mean_length"] == pytest.approx(86 / 4)
    assert ngram_repeat_rate("a b c d a b c d") == pytest.approx(1 - 4 / 5)
    assert ngram_repeat_rate("one two three four five") == 0.0
    assert m["ngram_repeat"] > 0


def _scores(tmp_path, name, meta, accs):
    path = tmp_path / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "meta": meta,
                "benchmarks": {
                    b: {
                        "acc": a,
                        "stderr": 0.01,
                        "n_prompts": 10,
                        "n_samples": 8,
                        "boxed_per_response": 1.0,
                        "multi_boxed_share": 0.0,
                        "ngram_repeat": 0.0,
                        "truncation_rate": 0.0,
                        "mean_length": 20.0,
                    }
                    for b, a in accs.items()
                },
            }
        )
    )
    return path


def test_relperf_gain_forgetting_on_a_hand_made_table(tmp_path):
    base = _scores(
        tmp_path,
        "base",
        {"run": "base", "label": "Base", "method": "base", "chain": ""},
        {"math": 0.4, "science": 0.5, "logic_grid": 0.0},
    )
    run = {"run": "sdpo_a0_s0", "label": "SDPO_0", "method": "sdpo", "alpha": 0.0, "seed": 0}
    s1 = _scores(tmp_path, "s1", {**run, "chain": "math"}, {"math": 0.6, "science": 0.4, "logic_grid": 0.1})
    s2 = _scores(tmp_path, "s2", {**run, "chain": "math/science"}, {"math": 0.3, "science": 0.5, "logic_grid": 0.0})
    single = _scores(tmp_path, "s3", {**run, "chain": "science"}, {"math": 0.4, "science": 0.55, "logic_grid": 0.0})
    df = eval_table([base, s1, s2, single], domains=["math", "science", "tooluse", "code"])
    assert list(df.columns) == EVAL_COLUMNS and len(df) == 12
    row = df[(df.chain == "math") & (df.benchmark == "math")].iloc[0]
    assert row.relperf == pytest.approx(50.0) and row.gain == pytest.approx(50.0) and row.forgetting == 0
    assert row.stage == 1 and row.continual and row.single_domain and row.kind == "in-domain"
    row = df[(df.chain == "math/science") & (df.benchmark == "math")].iloc[0]
    assert row.relperf == pytest.approx(-25.0) and row.forgetting == pytest.approx(25.0) and row.gain == 0
    assert row.stage == 2 and row.continual and not row.single_domain and row.domain == "science"
    row = df[(df.chain == "science") & (df.benchmark == "science")].iloc[0]
    assert not row.continual and row.single_domain and row.relperf == pytest.approx(10.0)
    # a base accuracy of 0 leaves RelPerf undefined rather than infinite
    assert df[df.benchmark == "logic_grid"].relperf.isna().all()
    assert (df[df.benchmark == "logic_grid"].kind == "ood").all()
    assert df[df.method == "base"].relperf.fillna(0).eq(0).all()


def test_the_labels_name_the_runs_they_hold_and_the_rest_keep_their_score_files_label(tmp_path):
    """aggregate_eval passes the config's labels by run name (a new label reruns no evaluation)."""
    base = _scores(tmp_path, "base", {"run": "base", "label": "Base", "method": "base", "chain": ""}, {"math": 0.4})
    grpo = {"run": "grpo_s0", "label": "GRPO", "method": "grpo", "seed": 0, "chain": "math"}
    sdpo = {"run": "sdpo_a0_s0", "label": "SDPO_0", "method": "sdpo", "alpha": 0.0, "seed": 0, "chain": "math"}
    files = [base, _scores(tmp_path, "g", grpo, {"math": 0.5}), _scores(tmp_path, "s", sdpo, {"math": 0.6})]
    df = eval_table(files, domains=["math"], labels={"grpo_s0": "GRPO (lr 1e-4)", "gone_s0": "absent"})
    assert dict(zip(df.run, df.label)) == {"base": "Base", "grpo_s0": "GRPO (lr 1e-4)", "sdpo_a0_s0": "SDPO_0"}
    assert df.set_index("run").acc.to_dict() == eval_table(files, domains=["math"]).set_index("run").acc.to_dict()


def test_relative_performance_formula():
    out = relative_performance(pd.Series([0.2, 0.5, 0.1]), pd.Series([0.4, 0.5, 0.0]))
    assert out.iloc[0] == pytest.approx(-50.0) and out.iloc[1] == 0 and math.isnan(out.iloc[2])


def test_missing_base_score_is_a_clear_error(tmp_path):
    s1 = _scores(tmp_path, "s1", {"run": "grpo_s0", "label": "GRPO", "method": "grpo", "chain": "math"}, {"math": 0.5})
    base = _scores(tmp_path, "base", {"run": "base", "label": "Base", "method": "base", "chain": ""}, {"science": 0.5})
    with pytest.raises(ValueError, match="no base-model score for benchmark.*math"):
        eval_table([base, s1], domains=["math"])


def test_teacher_stability_table(tmp_path):
    base = _scores(tmp_path, "base", {"run": "base", "label": "Base", "method": "base", "chain": ""}, {"math": 0.3})
    files = [base]
    for name, method, alpha, acc in [
        ("sdpo_a0_s0", "sdpo", 0.0, 0.6),
        ("sdpo_a0.05_s0", "sdpo", 0.05, 0.35),
        ("stable-sdpo_a0.05_s0", "stable_sdpo", 0.05, 0.55),
        ("grpo_s0", "grpo", None, 0.4),
        ("sdpo-cot_a0_s0", "sdpo", 0.0, 0.5),
    ]:
        for chain in ("math", "math/science"):
            files.append(
                _scores(
                    tmp_path,
                    f"{name}_{chain.replace('/', '_')}",
                    {"run": name, "label": name, "method": method, "alpha": alpha, "seed": 0, "chain": chain},
                    {"math": acc if chain == "math" else 0.0},
                )
            )
    table = eval_table(files, domains=["math", "science"])
    t1 = teacher_stability(table, first_domain="math", variant_runs={"sdpo-cot_a0_s0"})
    assert list(t1.teacher) == ["Base", "Frozen", "EMA 5%", "StableSDPO"]
    assert list(t1.acc) == pytest.approx([0.3, 0.6, 0.35, 0.55])
    assert set(t1.n_samples) == {8}  # the k of Acc@k, which the figure names


def test_benchmarks_cover_six_ood_sets_with_training_rewards():
    ood = [b for b in BENCHMARKS.values() if b.kind == "ood"]
    assert len(ood) >= 6
    assert {b.distance for b in ood} == {"near", "intermediate", "far"}
    for name in OOD_GENERATORS:
        a, b = generate_ood(name, 20, 0), generate_ood(name, 20, 0)
        assert a == b and len({r["prompt"] for r in a}) == 20
        assert generate_ood(name, 20, 1) != a
        assert all(r["dataset"] == name and r["domain"] == BENCHMARKS[name].reward for r in a)
        reward_for(a[0]["domain"])  # scored by a training reward


def test_ood_references_score_one_with_the_training_rewards():
    for name, answer_format in [
        ("arith_words", "\\boxed{{{}}}"),
        ("science_reworded", "<answer>{}</answer>"),
        ("logic_grid", "<answer>{}</answer>"),
        ("knowledge_mc", "<answer>{}</answer>"),
    ]:
        recs = generate_ood(name, 5, 0)
        scores = reward_for(recs[0]["domain"])(
            [answer_format.format(r["answer"]) for r in recs], answer=[r["answer"] for r in recs]
        )
        assert scores == [1.0] * 5, name
    recs = generate_ood("tool_schema2", 5, 0)
    calls = []
    for r in recs:
        ref = json.loads(r["answer"])
        calls.append(f"Action: {ref['actions'][0]}\nAction Input: {json.dumps(ref['input'])}")
    assert reward_for("tooluse")(calls, answer=[r["answer"] for r in recs]) == [1.0] * 5


def test_bad_checkpoint_path_is_a_clear_error_and_keeps_earlier_results(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        check_model_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        check_model_dir(tmp_path / "empty")
    out = tmp_path / "eval"
    out.mkdir()
    (out / "scores.json").write_text("earlier")
    proc = subprocess.run(
        [
            str(BIN / "sdpocl"),
            "evaluate",
            "--model",
            str(tmp_path / "nope"),
            "--tasks",
            str(tmp_path),
            "--benchmarks",
            "math",
            "--settings",
            "{}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "checkpoint not found" in proc.stderr and str(tmp_path / "nope") in proc.stderr
    assert (out / "scores.json").read_text() == "earlier"


def test_evaluate_reports_bfcl_category_mean_and_checks_lm_eval_against_the_prompt_mean(tmp_path, monkeypatch):
    """Through lm-eval with a fake model on the BFCL fixture: scores.json's acc is the mean of the
    category Acc@k, while lm-eval's own acc (a mean over prompts) is checked against acc_micro."""
    from pathlib import Path

    from lm_eval.api.model import LM

    from sdpocl.data.loaders import load_records
    from sdpocl.evaluate import run

    fixture = Path(__file__).resolve().parent / "fixtures" / "paper" / "bfcl_v4.jsonl"
    recs = load_records("bfcl_v4", "test", data_files=str(fixture))
    data = tmp_path / "bfcl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    write_task_yaml(
        tmp_path / "tasks" / "bfcl_v4.yaml", "bfcl_v4", data, repeats=4, temperature=0.6, top_p=0.95, max_gen_toks=8
    )

    class Fake(LM):  # the reference first, then an answer without a call
        def __init__(self):
            super().__init__()
            self.seen: dict[str, int] = {}

        def generate_until(self, requests, disable_tqdm=False):
            out = []
            for req in requests:
                ctx = req.args[0]
                rec = next(r for r in recs if r["prompt"] in ctx)
                out.append(rec["solution"] if self.seen.get(ctx, 0) == 0 else "I cannot help.")
                self.seen[ctx] = self.seen.get(ctx, 0) + 1
            return out

        def loglikelihood(self, requests, disable_tqdm=False):  # pragma: no cover - unused
            raise NotImplementedError

        def loglikelihood_rolling(self, requests, disable_tqdm=False):  # pragma: no cover - unused
            raise NotImplementedError

    monkeypatch.setattr(run, "make_lm", lambda *a, **k: Fake())
    monkeypatch.setattr(run, "_token_counter", lambda model: len)
    settings = dict(backend="hf", samples=4, max_gen_toks=8, batch_size=1, seed=0, n_prompts=None)
    doc = run.evaluate_model(
        "fake", tmp_path / "tasks", ["bfcl_v4"], tmp_path / "eval", settings=settings, hub_model=True
    )
    s = doc["benchmarks"]["bfcl_v4"]
    # per prompt: 1/4 where the reference scores (0 on the row BFCL rejects every answer of), 1 on irrelevance
    assert s["categories"] == {
        "irrelevance": {"acc": 1.0, "stderr": pytest.approx(float("nan"), nan_ok=True), "n_prompts": 1},
        "live_multiple": {"acc": 0.25, "stderr": 0.0, "n_prompts": 2},
        "live_simple": {"acc": 0.0, "stderr": pytest.approx(float("nan"), nan_ok=True), "n_prompts": 1},
        "parallel": {"acc": 0.25, "stderr": 0.0, "n_prompts": 2},
        "simple_python": {"acc": 0.25, "stderr": 0.0, "n_prompts": 3},
    }
    assert s["acc"] == pytest.approx((1 + 0.25 * 3) / 5) and s["acc_micro"] == pytest.approx((1 + 0.25 * 7) / 9)
    assert json.loads((tmp_path / "eval" / "scores.json").read_text())["benchmarks"]["bfcl_v4"]["acc"] == s["acc"]
    logged = [json.loads(line) for line in (tmp_path / "eval" / "samples" / "bfcl_v4.jsonl").read_text().splitlines()]
    assert sorted(r["category"] for r in logged) == sorted(r["category"] for r in recs)


def test_ood_reference_solutions_score_one_and_warmup_never_sees_a_benchmark_problem():
    """The general-skills warm-up of the tiny base (train split of the OOD task types) shares no
    prompt with any benchmark (test split), and every reference solution it trains on is right."""
    from sdpocl.data.benchmarks import general_examples

    for name in OOD_GENERATORS:
        test = generate_ood(name, 32, 0)
        train = generate_ood(name, 32, 0, split="train")
        assert not {r["prompt"] for r in test} & {r["prompt"] for r in train}, name
        for recs in (test, train):
            kw = {"tests": [r["tests"] for r in recs]} if recs[0]["domain"] == "code" else {}
            scores = reward_for(recs[0]["domain"])(
                [r["solution"] for r in recs], answer=[r["answer"] for r in recs], **kw
            )
            assert scores == [1.0] * len(recs), name
    warm = general_examples(60, 0)
    assert len(warm) == 60 and {r["dataset"] for r in warm} == set(OOD_GENERATORS)
    test_prompts = {r["prompt"] for name in OOD_GENERATORS for r in generate_ood(name, 100, 0, strict=False)}
    assert not {r["prompt"] for r in warm} & test_prompts
    with pytest.raises(ValueError, match="unknown split"):
        generate_ood("logic_grid", 2, 0, split="dev")


def _scored_checkpoint(root, name, meta, per_prompt: dict[str, list[list[float]]] | None):
    """scores.json in its own folder, with samples/<bench>.jsonl (one row per prompt: its sample
    scores) unless ``per_prompt`` is None."""
    folder = root / name
    folder.mkdir()
    accs = {b: sum(sum(s) / len(s) for s in rows) / len(rows) for b, rows in (per_prompt or {"math": [[0.0]]}).items()}
    path = _scores(folder, "scores", meta, accs)
    if per_prompt is not None:
        (folder / "samples").mkdir()
        for bench, rows in per_prompt.items():
            lines = [json.dumps({"doc_id": i, "scores": scores}) for i, scores in enumerate(rows)]
            (folder / "samples" / f"{bench}.jsonl").write_text("\n".join(lines) + "\n")
    return path


def test_change_against_the_stages_parent_with_a_paired_stderr(tmp_path):
    base_meta = {"run": "base", "label": "Base", "method": "base", "chain": ""}
    run = {"run": "grpo_s0", "label": "GRPO", "method": "grpo", "seed": 0}
    # four prompts of very different difficulty; the stage adds 1/4 on each of them
    base = _scored_checkpoint(
        tmp_path, "base", base_meta, {"math": [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]]}
    )
    s1 = _scored_checkpoint(
        tmp_path, "s1", {**run, "chain": "math"}, {"math": [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]}
    )
    # the second stage starts from s1, not from the base: it loses 1/4 on two prompts
    s2 = _scored_checkpoint(
        tmp_path,
        "s2",
        {**run, "chain": "math/science"},
        {"math": [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]},
    )
    nosamples = _scored_checkpoint(tmp_path, "s3", {**run, "seed": 1, "run": "grpo_s1", "chain": "math"}, None)
    df = eval_table([base, s1, s2, nosamples], domains=["math", "science"]).set_index("chain")
    first, second = df.loc["math"], df.loc["math/science"]
    first = first[first.run == "grpo_s0"].iloc[0]
    assert first.parent_acc == pytest.approx(0.4375) and first.change == pytest.approx(0.25)
    assert first.change_stderr == pytest.approx(0.0)  # the same change on every prompt: no spread
    diffs = pd.Series([-0.25, -0.25, 0.0, 0.0])
    assert second.parent_acc == pytest.approx(0.6875) and second.change == pytest.approx(-0.125)
    assert second.change_stderr == pytest.approx(diffs.std(ddof=1) / 2)
    assert df[df.run == "grpo_s1"].change.isna().all() and df[df.method == "base"].change.isna().all()


def test_each_seed_is_compared_with_its_own_base_evaluation(tmp_path):
    """Seeded base evaluations (one per training seed): RelPerf and the stage-1 change of a seed's run
    use that seed's base draw, not another seed's."""
    base = {"run": "base", "label": "Base", "method": "base", "chain": ""}
    b0 = _scored_checkpoint(tmp_path, "b0", {**base, "seed": 0}, {"math": [[0, 0], [1, 0]]})  # 0.25
    b1 = _scored_checkpoint(tmp_path, "b1", {**base, "seed": 1}, {"math": [[1, 0], [1, 1]]})  # 0.75
    run = {"label": "GRPO", "method": "grpo", "chain": "math"}
    s0 = _scored_checkpoint(tmp_path, "s0", {**run, "run": "grpo_s0", "seed": 0}, {"math": [[1, 0], [1, 0]]})
    s1 = _scored_checkpoint(tmp_path, "s1", {**run, "run": "grpo_s1", "seed": 1}, {"math": [[1, 0], [1, 0]]})
    df = eval_table([b1, s0, b0, s1], domains=["math"]).set_index("run")
    assert df.loc["grpo_s0", "base_acc"] == pytest.approx(0.25) and df.loc["grpo_s0", "relperf"] == pytest.approx(100)
    assert df.loc["grpo_s1", "base_acc"] == pytest.approx(0.75) and df.loc["grpo_s1", "relperf"] == pytest.approx(
        -100 / 3
    )
    assert df.loc["grpo_s0", "parent_acc"] == pytest.approx(0.25) and df.loc["grpo_s0", "change"] == pytest.approx(0.25)
    assert df.loc["grpo_s1", "parent_acc"] == pytest.approx(0.75) and df.loc["grpo_s1", "change"] == pytest.approx(
        -0.25
    )
    assert sorted(df.loc["base", "seed"]) == [0, 1] and (df.loc["base", "relperf"] == 0).all()
    # a seed without its base evaluation, and two base evaluations of one seed, are named
    with pytest.raises(ValueError, match=r"no base-model score for benchmark\(s\) math \(seed 1\)"):
        eval_table([b0, s0, s1], domains=["math"])
    b0_again = _scored_checkpoint(tmp_path, "b0_again", {**base, "seed": 0}, {"math": [[0, 0], [1, 0]]})
    with pytest.raises(ValueError, match="more than one base-model score file for the same seed.*seed 0"):
        eval_table([b0, b0_again, s0], domains=["math"])


def test_paired_change_uses_only_prompts_scored_by_both():
    before, after = pd.Series({0: 0.5, 1: 0.25, 2: 1.0}), pd.Series({1: 0.5, 2: 1.0, 3: 0.0})
    assert paired_change(after, before)[:2] == pytest.approx((0.625, 0.125))
    assert all(math.isnan(x) for x in paired_change(after, None))


# evaluate.n_prompts: one limit for every benchmark, or {domains: N, ood: M} (sdpocl.evaluate.limits)


@pytest.mark.parametrize("preset", ["smoke.yaml", "paper.yaml"])
def test_n_prompts_per_kind_gives_the_domain_benchmarks_n_and_the_ood_sets_m(preset):
    from sdpocl.config import load_config
    from sdpocl.data.benchmarks import benchmarks_for
    from sdpocl.evaluate.limits import n_prompts_for

    config = load_config(ROOT / "config" / preset)
    value = {"domains": 100, "ood": 32}
    limits = {b: n_prompts_for(value, b) for b in benchmarks_for(config)}
    assert limits == {**{d: 100 for d in config["domains"]}, **{b: 32 for b in config["evaluate"]["ood"]}}
    assert len(config["evaluate"]["ood"]) == 6 and list(limits)[:4] == ["math", "science", "tooluse", "code"]
    # the evaluation settings hold the value; null = every prompt; an explicit domain list wins
    settings = {"samples": 8, "n_prompts": {"domains": None, "ood": 4}}
    value_in_settings = settings["n_prompts"]
    assert n_prompts_for(value_in_settings, "math") is None and n_prompts_for(value_in_settings, "logic_grid") == 4
    assert n_prompts_for(value, "toy", domains=["toy"]) == 100 and n_prompts_for(value, "math", domains=[]) == 32


@pytest.mark.parametrize("value", [None, 1, 32])
def test_one_n_prompts_keeps_meaning_every_benchmark(value):
    from sdpocl.evaluate.limits import canonical_n_prompts, describe_n_prompts, n_prompts_for

    for b in ["math", "code", "arith_words", "math500", "toy"]:
        assert n_prompts_for(value, b) == value
    assert canonical_n_prompts(value, ["arith_words"]) == value
    assert describe_n_prompts(value, ["math", "arith_words"]) == f"2 benchmarks x {value or 'all'} prompts"


def test_n_prompts_per_kind_with_equal_limits_is_that_limit():
    """The tracked settings of the evaluation jobs (common.smk) hold the one limit a mapping comes to, so
    writing {domains: 32, ood: 32} for 32 (or changing the OOD limit with no OOD set) reruns nothing."""
    from sdpocl.evaluate.limits import canonical_n_prompts, describe_n_prompts, n_prompts_for

    assert canonical_n_prompts({"domains": 32, "ood": 32}, ["arith_words"]) == 32
    assert canonical_n_prompts({"domains": None, "ood": None}, ["arith_words"]) is None
    assert canonical_n_prompts({"domains": 100, "ood": 32}, []) == 100
    assert canonical_n_prompts({"domains": 100, "ood": 32}, ["arith_words"]) == {"domains": 100, "ood": 32}
    assert describe_n_prompts({"domains": 100, "ood": None}, ["math", "code", "arith_words"]) == (
        "2 domain benchmarks x 100 prompts + 1 OOD x all prompts"
    )
    with pytest.raises(ValueError, match="domains, ood"):
        n_prompts_for({"domains": 100, "odd": 32}, "math")


def test_evaluation_judges_domain_benchmarks_on_more_prompts_than_ood_sets(tiny_standin, tmp_path, monkeypatch, capsys):
    """A real evaluation of the tiny stand-in: {domains: 3, ood: 2} gives `math` 3 prompts and the
    OOD set `logic_grid` 2, in scores.json and in the sample logs; the settings keep the mapping."""
    from sdpocl.evaluate import run

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model, recs = tiny_standin
    for i, b in enumerate(["math", "logic_grid"]):
        data = tmp_path / f"{b}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in recs[5 * i : 5 * i + 5]))
        kw = dict(repeats=2, temperature=1.0, top_p=1.0, max_gen_toks=4)
        write_task_yaml(tmp_path / "tasks" / f"{b}.yaml", b, data, **kw)
    settings = dict(backend="hf", samples=2, max_gen_toks=4, batch_size=4, seed=0, n_prompts={"domains": 3, "ood": 2})
    out = tmp_path / "eval"
    run.evaluate_model(model, tmp_path / "tasks", ["math", "logic_grid"], out, settings=settings, threads=1)
    doc = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert {b: s["n_prompts"] for b, s in doc["benchmarks"].items()} == {"math": 3, "logic_grid": 2}
    assert doc["meta"]["settings"]["n_prompts"] == {"domains": 3, "ood": 2}
    for b, n in [("math", 3), ("logic_grid", 2)]:
        assert len((tmp_path / "eval" / "samples" / f"{b}.jsonl").read_text().splitlines()) == n
    assert "1 domain benchmark x 3 prompts + 1 OOD x 2 prompts x 2 samples" in capsys.readouterr().out


def test_lm_eval_collects_its_environment_report_once_per_process(monkeypatch):
    """Every benchmark is its own simple_evaluate, which adds torch's collect_env report (subprocesses):
    once per process, the same report in every result."""
    from lm_eval import evaluator

    from sdpocl.evaluate.run import env_info_once

    calls = []

    def collect(storage):
        calls.append(1)
        storage.update(pretty_env_info=f"report {len(calls)}", lm_eval_version="x")

    monkeypatch.setattr(evaluator, "add_env_info", collect)
    env_info_once()
    env_info_once()  # idempotent: not wrapped twice
    first, second = {}, {}
    evaluator.add_env_info(first)
    evaluator.add_env_info(second)
    assert calls == [1]
    assert first == second == {"pretty_env_info": "report 1", "lm_eval_version": "x"}
