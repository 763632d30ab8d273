"""The paper preset's rules with vLLM as their engine, through Snakemake as a user runs them: the rehearsal's config
(config/rehearsal.yaml) with the chat model as its base, ``SDPOCL_ROLLOUTS=vllm`` and ``evaluate.backend: vllm``;
the target is one SDPO stage's evaluation, so Snakemake runs everything it needs (base, data, tasks, the stage with
vLLM rollouts, the evaluation with lm-eval's ``VLLM``) and nothing else."""

from __future__ import annotations

import json

import pytest
from workflow_utils import scheduled_jobs, snakemake

pytestmark = pytest.mark.vllm

RUN = "sdpo_a0_s0"


#: what TRL's colocated engines of the other tests set in this process's environment (their rendezvous, whose port
#: they still hold): the workflow's jobs start from a clean one, as on a user's machine
ENGINE_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")


def test_a_stage_and_its_evaluation_run_on_vllm_through_snakemake(chat_model, tmp_path, monkeypatch):
    for key in ENGINE_RENDEZVOUS:
        monkeypatch.delenv(key, raising=False)
    results = tmp_path / "results"
    target = results / "runs" / RUN / "math" / "eval" / "final" / "scores.json"
    args = (
        str(target),
        "--profile",
        "profiles/local",
        "--config",
        f"results={results}",
        f'base={{"model": "{chat_model[0]}"}}',
        'evaluate={"backend": "vllm"}',
    )
    env = {"SDPOCL_ROLLOUTS": "vllm"}
    jobs = scheduled_jobs(snakemake("-n", *args, configfile="config/rehearsal.yaml", env=env).stdout)
    assert jobs["train_stage"] == 1 and jobs["evaluate_checkpoint"] == 1 and "evaluate_base" not in jobs, jobs
    snakemake(*args, configfile="config/rehearsal.yaml", env=env)

    stage = results / "runs" / RUN / "math"
    resolved = json.loads((stage / "resolved_config.json").read_text())
    assert resolved["trainer_config"]["use_vllm"] and resolved["trainer_config"]["vllm_mode"] == "colocate"
    assert resolved["rollout_importance_sampling"].startswith("token-level")
    log = [json.loads(line) for line in (stage / "train_log.jsonl").read_text().splitlines()]
    assert log and all("rollout_logp_abs_diff" in row and "rollout_is_weight_mean" in row for row in log)

    scores = json.loads(target.read_text())
    assert scores["meta"]["backend"] == "vllm"
    benchmarks = scores["benchmarks"]
    assert {"math", "science", "tooluse", "code"} <= benchmarks.keys()
    assert all(b["n_samples"] == 2 and b["n_prompts"] >= 1 for b in benchmarks.values())
