"""The teacher check (`sdpocl teacher-check`): who gets a demonstration, what is compared, and
that it renders the teacher's re-prompt the way the SDPO stage does."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from sdpocl.cli import main
from sdpocl.data.domains import teacher_prompt
from sdpocl.io import write_jsonl
from sdpocl.train.teacher_check import _render, check_teacher


def _by_length(parity: int):
    """A reward that depends on the sample: 1 when the completion's length has this parity."""
    return lambda completions, **kw: [float(len(c) % 2 == parity) for c in completions]


def _check(tiny_standin, reward, n=3, samples=4, **kw):
    model, recs = tiny_standin
    return check_teacher(
        model, recs[:n], samples=samples, max_new_tokens=12, rewards={"math": reward}, progress=False, **kw
    )


def test_no_success_means_no_demonstration(tiny_standin):
    report = _check(tiny_standin, lambda completions, **kw: [0.0] * len(completions))
    assert report["student_acc"] == 0.0
    assert report["prompts_with_demonstration"] == 0
    assert report["teacher_acc"] is None and report["logp_gap"] is None
    assert report["successful_samples_compared"] == 0


def test_every_other_success_is_compared_with_the_first_as_demonstration(tiny_standin):
    report = _check(tiny_standin, lambda completions, **kw: [1.0] * len(completions), n=3, samples=4)
    assert report["student_acc"] == report["teacher_acc"] == 1.0
    assert report["prompts_with_demonstration"] == 3
    assert report["successful_samples_compared"] == 3 * (4 - 1)  # the demonstration itself is not compared
    assert report["logp_gap"] < 0 or report["logp_gap"] > 0  # a finite, nonzero gap: the contexts differ
    assert report["logp_gap_stderr"] > 0
    assert report["logp_gap_failures"] is None and report["failed_samples_compared"] == 0


def test_sample_dependent_reward_and_same_seed_same_report(tiny_standin):
    a = _check(tiny_standin, _by_length(0), n=4, samples=6, seed=3)
    b = _check(tiny_standin, _by_length(0), n=4, samples=6, seed=3)
    assert a == b
    assert 0.0 < a["student_acc"] < 1.0  # the random stand-in's samples vary in length
    assert a["prompts_with_demonstration"] <= 4
    assert a["successful_samples_compared"] == round(a["student_acc"] * 4 * 6) - a["prompts_with_demonstration"]
    # every sample of a group with a demonstration is compared, except the demonstration itself
    compared = a["successful_samples_compared"] + a["failed_samples_compared"]
    assert compared == a["prompts_with_demonstration"] * (6 - 1)
    assert a["failed_samples_compared"] > 0 and a["logp_gap_failures"] is not None


def test_a_separate_teacher_is_the_one_scored(tiny_standin, tmp_path):
    """Mid-stage SDPO_0: the student is a checkpoint, the teacher the stage's start."""
    import torch
    from transformers import AutoModelForCausalLM

    model, _ = tiny_standin
    other = AutoModelForCausalLM.from_pretrained(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    other.save_pretrained(tmp_path / "teacher")
    AutoTokenizer.from_pretrained(model).save_pretrained(tmp_path / "teacher")
    same = _check(tiny_standin, _by_length(0), n=3, samples=4)
    itself = _check(tiny_standin, _by_length(0), n=3, samples=4, teacher_dir=model)
    moved = _check(tiny_standin, _by_length(0), n=3, samples=4, teacher_dir=tmp_path / "teacher")
    assert {k: v for k, v in itself.items() if k != "teacher"} == {k: v for k, v in same.items() if k != "teacher"}
    assert moved["logp_gap"] != same["logp_gap"] and moved["teacher"] == str(tmp_path / "teacher")


def test_bad_arguments_are_named(tiny_standin):
    model, recs = tiny_standin
    with pytest.raises(ValueError, match="samples must be >= 2"):
        check_teacher(model, recs[:1], samples=1)
    with pytest.raises(ValueError, match="no records"):
        check_teacher(model, [], samples=2)


def test_chat_template_keeps_the_system_message_and_rewrites_the_user_turn(tiny_standin):
    model, recs = tiny_standin
    tok = AutoTokenizer.from_pretrained(model)
    rec = {**recs[0], "system": "You are a careful solver."}
    user = teacher_prompt(rec["prompt"], " <think>1+1=2</think> \\boxed{2}")
    text = _render(tok, rec, user, True, {"enable_thinking": False})
    assert text == tok.apply_chat_template(
        [{"role": "system", "content": rec["system"]}, {"role": "user", "content": user}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert "<think>1+1=2</think>" not in text and "\\boxed{2}" in text  # the demonstration's thinking is stripped
    plain = _render(tok, rec, user, False, {})
    assert plain == f"{rec['system']}\n\n{user}"


def test_chat_template_path_end_to_end(tiny_standin):
    """The paper preset's format: the stand-in's Qwen3 chat template, thinking off."""
    report = _check(
        tiny_standin,
        lambda completions, **kw: [1.0] * len(completions),
        n=2,
        samples=2,
        chat_template=True,
        template_kwargs={"enable_thinking": False},
    )
    assert report["prompts_with_demonstration"] == 2 and report["successful_samples_compared"] == 2
    assert report["logp_gap"] is not None


def test_cli_writes_the_report(tiny_standin, tmp_path, capsys):
    model, recs = tiny_standin
    data = write_jsonl(tmp_path / "train.jsonl", recs[:6])
    out = tmp_path / "report.json"
    args = ["teacher-check", "--model", str(model), "--data", str(data), "--n-prompts", "2", "--samples", "2"]
    assert main([*args, "--max-new-tokens", "8", "--out", str(out)]) in (0, None)
    report = json.loads(out.read_text())
    assert report["prompts"] == 2 and report["samples"] == 2 and report["domains"] == ["math"]
    assert report["data"] == str(data)
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("{") :]) == {k: v for k, v in report.items()}


def test_teacher_by_group_bench_runs_on_a_model(tiny_standin):
    """bench/teacher_by_group.py (the per-tool teacher and the random-string copy of
    docs/experiments/2026-12-06-row-53-copying-probe.md) runs end to end on a model folder and reports accuracies
    in [0, 1]."""
    import subprocess
    import sys
    from pathlib import Path

    model, _ = tiny_standin
    bench = Path(__file__).parents[1] / "bench" / "teacher_by_group.py"
    args = ["--model", str(model), "--domain", "math", "--prompts", "3", "--samples", "2", "--max-new-tokens", "6"]
    out = subprocess.run([sys.executable, str(bench), *args, "--copy", "3"], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(report["groups"]) == {"math", "all"} and report["groups"]["all"]["prompts"] == 3
    for group in report["groups"].values():
        assert 0.0 <= group["student"] <= 1.0 and 0.0 <= group["teacher"] <= 1.0
    assert 0.0 <= report["copy_exact"] <= 1.0
