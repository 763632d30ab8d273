"""Config validation, the grid, path helpers and wildcard constraints."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from snakemake.exceptions import WorkflowError

from sdpocl.chain import CHAIN_REGEX, chain_str, parent_chain, parse_chain, stage_dir, state_dir
from sdpocl.config import (
    ConfigError,
    chains_for,
    expand_runs,
    stable_json,
    stage_settings,
    validate_config,
)
from sdpocl.domains import DOMAINS

try:
    validate_config(config)
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

RESULTS = config["results"]
RUNS = {run.name: run for run in expand_runs(config)}
TINY = config["preset"] == "tiny"
BASE_MODEL = f"{RESULTS}/base/model" if TINY else config["base"]["model"]
THREADS = config["train"]["threads"]


wildcard_constraints:
    run="|".join(re.escape(name) for name in RUNS) or "NO_RUNS",
    chain=CHAIN_REGEX,
    domain="|".join(DOMAINS),
    split="train|test",


def all_stages():
    """(run, chain) for every train-stage job of the grid."""
    return [(name, chain) for name, run in RUNS.items() for chain in chains_for(config, run)]


def stage_path(run, chain, leaf):
    return f"{stage_dir(RESULTS, run, chain)}/{leaf}"


def all_train_outputs():
    return [stage_path(run, chain, "summary.json") for run, chain in all_stages()]


def all_drift_outputs():
    return [stage_path(run, chain, "drift_params.csv") for run, chain in all_stages()]


def parent_model(wildcards):
    """Stage k starts from stage k-1's final model (PyPSA-Eur style chaining), stage 1 from the base."""
    parent = parent_chain(parse_chain(wildcards.chain))
    if parent is None:
        return [BASE_MODEL] if TINY else []
    return [stage_path(wildcards.run, chain_str(parent), "model")]


def parent_path(wildcards):
    parent = parent_chain(parse_chain(wildcards.chain))
    return BASE_MODEL if parent is None else stage_path(wildcards.run, chain_str(parent), "model")


def train_settings(wildcards):
    """Only wildcards in, so Snakemake tracks it: a changed alpha or lr reruns just this branch."""
    return stable_json(stage_settings(config, RUNS[wildcards.run], parse_chain(wildcards.chain)))


def train_data(wildcards):
    return f"{RESULTS}/data/{parse_chain(wildcards.chain)[-1]}/train.jsonl"
