"""``--sdm conda``: every rule has an env that installs the project, and the rules that run a model on a GPU
(training, evaluation, the teacher check) install its gpu extra in the paper preset -- the paper preset generates
only with vLLM there, so an env without it stops every train and evaluation job. Read from the rule files (conda
itself is not installed here)."""

from __future__ import annotations

import re

import yaml
from workflow_utils import ROOT

RULES = ROOT / "workflow" / "rules"
MODEL_RULES = {"train_stage", "teacher_check", "evaluate_checkpoint", "evaluate_base"}


def rule_envs() -> dict[str, str]:
    """rule name -> the expression of its ``conda:`` directive (rules with a ``run:`` block, which runs in
    Snakemake's own process and takes no env, left out)."""
    out = {}
    for smk in RULES.glob("*.smk"):
        for block in re.split(r"^(?=rule \w+:)", smk.read_text(), flags=re.M):
            name = re.match(r"rule (\w+):", block)
            env = re.search(r"^    conda:\n\s+(\S+)", block, re.M)
            if name and not re.search(r"^    run:", block, re.M):
                out[name.group(1)] = env.group(1) if env else None
    return out


def pip_lines(env_file: str) -> list[str]:
    spec = yaml.safe_load((RULES / env_file.strip('"')).read_text())
    return next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))


def test_every_rule_has_an_env_that_installs_the_project():
    envs = rule_envs()
    assert envs.keys() >= MODEL_RULES and all(envs.values()), envs
    for rule, env in envs.items():
        if rule not in MODEL_RULES:
            assert pip_lines(env) == ["-e ../"], rule


def test_the_paper_presets_model_rules_install_the_gpu_extra():
    envs = rule_envs()
    assert {envs[r] for r in MODEL_RULES} == {"MODEL_ENV"}
    common = (RULES / "common.smk").read_text()
    chosen = re.search(r'^MODEL_ENV = "([^"]+)" if config\["preset"\] == "paper" else "([^"]+)"$', common, re.M)
    assert chosen, "MODEL_ENV: the gpu env for the paper preset, the plain one otherwise"
    assert pip_lines(chosen.group(1)) == ["-e ../[gpu]"]
    assert pip_lines(chosen.group(2)) == ["-e ../"]
