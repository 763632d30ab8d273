"""evaluate-checkpoint resumes per benchmark: a job killed after its first benchmark is rerun
without evaluating that benchmark again, and ends with the scores of an uninterrupted run; the
resume state is keyed by model, settings, task and data, and removed once scores.json exists."""

from __future__ import annotations

import json
import os
import subprocess

from workflow_utils import BIN

from sdpocl.evaluate import resume, run
from sdpocl.evaluate.tasks import write_task_yaml

BENCHMARKS = ["toy_a", "toy_b"]
SETTINGS = {
    "backend": "hf",
    "samples": 2,
    "max_gen_toks": 6,
    "temperature": 1.0,
    "batch_size": 4,
    "seed": 0,
    "n_prompts": None,
    "chat_template": False,
}


def _tasks(tmp_path, recs):
    for i, b in enumerate(BENCHMARKS):
        data = tmp_path / f"{b}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in recs[3 * i : 3 * i + 3]))
        write_task_yaml(
            tmp_path / "tasks" / f"{b}.yaml", b, data, repeats=2, temperature=1.0, top_p=1.0, max_gen_toks=6
        )
    return tmp_path / "tasks"


def _evaluate(model, tasks, out, state, monkeypatch):
    """evaluate_model in-process; returns the scores document and the benchmarks it evaluated."""
    evaluated = []
    inner = run._evaluate_benchmark

    def spy(lm, tm, benchmark, *a, **k):
        evaluated.append(benchmark)
        return inner(lm, tm, benchmark, *a, **k)

    monkeypatch.setattr(run, "_evaluate_benchmark", spy)
    doc = run.evaluate_model(model, tasks, BENCHMARKS, out, settings=SETTINGS, threads=1, state_dir=state)
    return doc, evaluated


def test_killed_evaluation_resumes_after_its_finished_benchmark(tiny_standin, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    model, recs = tiny_standin
    tasks = _tasks(tmp_path, recs)

    full, evaluated = _evaluate(model, tasks, tmp_path / "full", tmp_path / "state_full", monkeypatch)
    assert evaluated == BENCHMARKS and not (tmp_path / "state_full").exists()

    # the CLI, killed (os._exit) right after toy_a: its result is in the state, no scores.json
    out, state = tmp_path / "eval", tmp_path / "state" / "eval" / "run"
    cmd = [str(BIN / "sdpocl"), "evaluate", "--model", str(model), "--tasks", str(tasks), "--benchmarks"]
    cmd += [*BENCHMARKS, "--settings", json.dumps(SETTINGS), "--out", str(out), "--state", str(state)]
    env = {**os.environ, "SDPOCL_KILL_AFTER_BENCHMARK": "toy_a"}
    env.pop("SDPOCL_JOB_SERVER", None)
    proc = subprocess.run([*cmd, "--threads", "1"], capture_output=True, text=True, env=env)
    assert proc.returncode == 137, proc.stderr[-3000:]
    assert "benchmark 1/2 toy_a" in proc.stdout and "toy_b" not in proc.stdout.split("benchmark 1/2")[1]
    assert [p.name for p in state.iterdir()] == ["toy_a.json"] and not (out / "scores.json").exists()

    capsys.readouterr()
    resumed, evaluated = _evaluate(model, tasks, out, state, monkeypatch)
    log = capsys.readouterr().out
    assert evaluated == ["toy_b"]  # toy_a is not evaluated again
    assert "benchmark 1/2 toy_a: " in log and log.split("benchmark 1/2 toy_a: ")[1].splitlines()[0].endswith("resumed")
    assert "benchmark 2/2 toy_b: " in log
    assert json.dumps(resumed["benchmarks"]) == json.dumps(full["benchmarks"])
    written = json.loads((out / "scores.json").read_text())["benchmarks"]
    assert json.dumps(written) == json.dumps(json.loads((tmp_path / "full" / "scores.json").read_text())["benchmarks"])
    for b in BENCHMARKS:
        samples = (out / "samples" / f"{b}.jsonl").read_text()
        assert samples == (tmp_path / "full" / "samples" / f"{b}.jsonl").read_text()
    assert not state.exists()  # removed once the outputs are written


def test_resume_state_is_keyed_by_model_settings_task_and_data(tiny_standin, tmp_path):
    model, recs = tiny_standin
    tasks = _tasks(tmp_path, recs)
    model_id = resume.model_identity(str(model))
    base = resume.fingerprint(model_id, "hf", SETTINGS, "toy_a", resume.task_identity(tasks, "toy_a"))
    resume.save(tmp_path / "state", "toy_a", base, {"scores": {"acc": 1.0}, "records": []})
    assert resume.load(tmp_path / "state", "toy_a", base)["scores"] == {"acc": 1.0}
    assert resume.load(tmp_path / "state", "toy_b", base) is None  # never saved
    changed = [
        resume.fingerprint(model_id, "hf", {**SETTINGS, "seed": 1}, "toy_a", resume.task_identity(tasks, "toy_a")),
        resume.fingerprint(model_id, "vllm", SETTINGS, "toy_a", resume.task_identity(tasks, "toy_a")),
        resume.fingerprint(model_id, "hf", SETTINGS, "toy_b", resume.task_identity(tasks, "toy_a")),
        resume.fingerprint("other", "hf", SETTINGS, "toy_a", resume.task_identity(tasks, "toy_a")),
    ]
    (tmp_path / "toy_a.jsonl").write_text(json.dumps(recs[10]) + "\n")  # re-prepared data, same task YAML
    changed.append(resume.fingerprint(model_id, "hf", SETTINGS, "toy_a", resume.task_identity(tasks, "toy_a")))
    assert len({base, *changed}) == len(changed) + 1
    assert all(resume.load(tmp_path / "state", "toy_a", fp) is None for fp in changed)
    # a retrained model at the same path (a file rewritten) is new work
    copy = tmp_path / "model"
    copy.mkdir()
    for f in model.iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    before = resume.model_identity(str(copy))
    os.utime(copy / "config.json", ns=(1, 1))
    assert resume.model_identity(str(copy)) != before


def test_a_changed_ood_limit_keeps_the_domain_benchmarks_resume_state(tiny_standin, tmp_path):
    """evaluate.n_prompts {domains: N, ood: M}: each benchmark's fingerprint holds its own limit, so a
    changed M leaves a domain benchmark's saved result valid; one limit for all fingerprints as before."""
    model, recs = tiny_standin
    tasks = _tasks(tmp_path, recs)
    model_id = resume.model_identity(str(model))

    def fp(n_prompts, benchmark):
        settings = run._benchmark_settings({**SETTINGS, "n_prompts": n_prompts}, benchmark)
        return resume.fingerprint(model_id, "hf", settings, benchmark, resume.task_identity(tasks, "toy_a"))

    assert run._benchmark_settings(SETTINGS, "math") == SETTINGS  # one limit: the settings as they are
    before, after = {"domains": 100, "ood": 32}, {"domains": 100, "ood": 16}
    assert fp(before, "math") == fp(after, "math") == fp(100, "math")
    assert fp(before, "arith_words") != fp(after, "arith_words")
    assert fp(before, "arith_words") == fp(32, "arith_words") and fp(after, "arith_words") == fp(16, "arith_words")
