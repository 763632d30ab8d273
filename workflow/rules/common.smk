"""Config validation, the grid, path helpers and wildcard constraints."""

import functools
import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from snakemake.exceptions import WorkflowError

from sdpocl.chain import CHAIN_REGEX, chain_str, parent_chain, parse_chain, stage_dir, state_dir
from sdpocl.config import (
    ConfigError,
    chains_for,
    coerce_overrides,
    expand_runs,
    recorded_run,
    replay_settings,
    stable_json,
    stage_settings,
    train_size_for,
    validate_config,
)
from sdpocl.data.benchmarks import OOD_GENERATORS, benchmarks_for
from sdpocl.data.loaders import OOD_BENCHMARKS as PAPER_OOD
from sdpocl.data.domains import DOMAINS, Difficulty
from sdpocl.evaluate.limits import canonical_n_prompts
from sdpocl.evaluate.tasks import DEFAULT_TOP_K
from sdpocl.priorities import BASE_PRIORITY, DATA_PRIORITY, stage_priority
from sdpocl.prompts import resolve_prompt_format
from sdpocl.resources import job_resources  # the GPU-capable rules' resources (GPUs, CPUs, memory)
from sdpocl.train.paper_base import BaseModelError, check_base_available
from sdpocl.train.curves import ROOT_ENV as CURVES_ENV, tensorboard_root
from sdpocl.plot.tables import BASE_META, FIGURE_CATEGORIES, FIGURE_DATA, FIGURE_TABLES

try:
    coerce_overrides(config, dict(workflow.config_settings.config))  # --config seeds=[0,1,2] gives strings
    validate_config(config)
except ConfigError as exc:
    raise WorkflowError(str(exc)) from None

RESULTS = config["results"]
try:  # live curves (train.report_to): the jobs' `sdpocl train-stage` reads the root from the environment,
    # so that switching them reruns nothing (not a param, not a shell change); cluster jobs re-parse this file
    os.environ[CURVES_ENV] = tensorboard_root(RESULTS, config["train"]["report_to"])
except ValueError as exc:
    raise WorkflowError(str(exc)) from None
RUNS = {run.name: run for run in expand_runs(config)}
TINY = config["preset"] == "tiny"
#: the base model every stage 1, evaluate-base and compute-drift read: built (tiny preset) or
#: resolved from a hub id / local copy (paper preset, rule fetch_base_model) into one local directory
BASE_MODEL = f"{RESULTS}/base/model"
if not TINY and not os.path.isdir(BASE_MODEL):
    try:
        check_base_available(config["base"]["model"], config["base"]["source"])
    except BaseModelError as exc:
        raise WorkflowError(str(exc)) from None
THREADS = config["train"]["threads"]
#: the conda env (--sdm conda) of the rules that run a model: the paper preset's generate with vLLM on a GPU, so
#: theirs installs the gpu extra; the tiny preset's run transformers on a CPU (relative to workflow/rules/)
MODEL_ENV = "../../envs/sdpocl-gpu.yaml" if config["preset"] == "paper" else "../../envs/sdpocl.yaml"
BENCHMARK_NAMES = benchmarks_for(config)
VARIANT_RUNS = [name for name, run in RUNS.items() if run.is_variant]
#: paper preset: local mirrors of the hub sources, if configured
DATA_SOURCES = (
    "" if not config["data"]["sources"] else f"--sources {shlex.quote(stable_json(config['data']['sources']))}"
)
#: the tiny preset's task sizes that differ from the defaults (sdpocl.data.domains.Difficulty): empty at the
#: defaults, so data, base and runs made before the knob existed stay valid; the paper preset downloads its data
DATA_DIFFICULTY = {k: v for k, v in config["data"]["difficulty"].items() if TINY and v != getattr(Difficulty(), k)}


def difficulty_flag(domain):
    """``--difficulty`` with the keys of ``domain`` (``math_*`` for math) that are not at their default,
    or nothing: a harder MATH regenerates the MATH data only."""
    own = {k: v for k, v in DATA_DIFFICULTY.items() if k.startswith(f"{domain}_")}
    return f" --difficulty {shlex.quote(stable_json(own))}" if own else ""


#: what a changed value of must re-evaluate: sampling, limits, the prompt format and the scoring limits
#: (not `evaluate.gpus_per_job`: a resource, which changes no score and must rerun nothing); a
#: `{domains: N, ood: M}` n_prompts whose limits agree is that one limit (sdpocl.evaluate.limits); a top_k
#: at its default, which the HF backend applied before the tasks stated it, keeps the evaluations made before
_EVAL = {
    **{
        k: v for k, v in config["evaluate"].items() if k != "gpus_per_job" and not (k == "top_k" and v == DEFAULT_TOP_K)
    },
    "n_prompts": canonical_n_prompts(config["evaluate"]["n_prompts"], config["evaluate"]["ood"]),
    **resolve_prompt_format(config),
    "rewards": config["rewards"],
}
EVAL_SETTINGS = stable_json(_EVAL)
#: the grid's training seeds; each has its own evaluation of the base (rule evaluate_base)
SEEDS = sorted({run.seed for run in RUNS.values()}) or sorted(config["seeds"])


@functools.cache
def eval_settings(seed):
    """EVAL_SETTINGS with the sampling seed of training seed ``seed``: ``evaluate.seed + seed``.

    Each seed's stage-1 changes are measured against that seed's own base evaluation, and different
    seeds draw independently, so the seed CI sees the base's sampling error (one shared base draw
    offset every seed's stage-1 change alike; docs/tiny-preset.md). Seed 0 keeps ``evaluate.seed``:
    its jobs and caches are unchanged."""
    return stable_json({**_EVAL, "seed": _EVAL["seed"] + seed})


def base_eval_path(seed, leaf="scores.json"):
    """The base model's evaluation drawn with training seed ``seed``'s sampling seed."""
    return f"{RESULTS}/base/eval/seed-{seed}/{leaf}"


def eval_state_dir(*parts):
    """Resume state of one evaluation job (sdpocl.evaluate.resume): outside its declared outputs,
    which Snakemake deletes before a retry; flat per job (``math+science``), like state_dir."""
    return os.path.join(f"{RESULTS}/state/eval", *(str(p).replace(os.sep, "+") for p in parts))


wildcard_constraints:
    run="|".join(re.escape(name) for name in RUNS) or "NO_RUNS",
    chain=CHAIN_REGEX,
    domain="|".join(DOMAINS),
    split="train|test",
    bench="|".join([*OOD_GENERATORS, *PAPER_OOD]),
    benchmark="|".join(re.escape(b) for b in BENCHMARK_NAMES),
    ckpt=r"final|step-\d+",
    seed=r"\d+",


@functools.cache
def all_stages():
    """(run, chain) for every train-stage job of the grid (computed once: the input functions ask for it per job)."""
    return tuple((name, chain) for name, run in RUNS.items() for chain in chains_for(config, run))


def stage_path(run, chain, leaf):
    return f"{stage_dir(RESULTS, run, chain)}/{leaf}"


def all_train_outputs():
    return [stage_path(run, chain, "summary.json") for run, chain in all_stages()]


def all_drift_outputs():
    return [stage_path(run, chain, "drift_params.csv") for run, chain in all_stages()]


def eval_checkpoints(run, chain):
    """Checkpoints evaluated per stage: the final model, plus every intermediate one if configured."""
    if not config["evaluate"]["intermediate"]:
        return ["final"]
    steps, every = config["train"]["steps"][parse_chain(chain)[-1]], config["train"]["save_every"]
    return [f"step-{s}" for s in range(every, steps, every)] + ["final"]


def all_eval_outputs():
    return [
        stage_path(run, chain, f"eval/{ckpt}/scores.json")
        for run, chain in all_stages()
        for ckpt in eval_checkpoints(run, chain)
    ]


def eval_task_files():
    return [f"{RESULTS}/eval_tasks/{b}.yaml" for b in BENCHMARK_NAMES]


def eval_model_input(wildcards):
    leaf = "model" if wildcards.ckpt == "final" else "checkpoints"
    return stage_path(wildcards.run, wildcards.chain, leaf)


def eval_model_path(wildcards):
    if wildcards.ckpt == "final":
        return stage_path(wildcards.run, wildcards.chain, "model")
    return stage_path(wildcards.run, wildcards.chain, f"checkpoints/{wildcards.ckpt}")


@functools.cache
def run_identity(name):
    """A run as its evaluations and response drift record it, with the label its settings give it
    (recorded_run): the aggregations apply the config's label (RUN_LABELS), so a new one reruns neither."""
    run = recorded_run(RUNS[name])
    return {"run": name, **{k: run[k] for k in ("label", "method", "alpha", "seed")}}


def eval_meta(wildcards):
    """Identity of an evaluated checkpoint (wildcards only, so Snakemake tracks it)."""
    return stable_json({**run_identity(wildcards.run), "chain": wildcards.chain, "checkpoint": wildcards.ckpt})


def run_eval_settings(wildcards):
    return eval_settings(RUNS[wildcards.run].seed)


def run_base_samples(wildcards):
    """The samples of the base's evaluation with the run's own seed (response drift's reference)."""
    return base_eval_path(RUNS[wildcards.run].seed, "samples")


def run_meta(wildcards):
    return stable_json(run_identity(wildcards.run))


#: run name -> the label its tables and figures show: read by the aggregations only, so a new label
#: reruns them and the figures, nothing that trains, evaluates or embeds
RUN_LABELS = stable_json({name: run.label for name, run in RUNS.items()})


def run_eval_samples(wildcards):
    """The final model's eval samples of every stage of a run (same order as its chains)."""
    return [stage_path(run, chain, "eval/final/samples") for run, chain in all_stages() if run == wildcards.run]


#: prompt sets compared by domain distance: training sets (role train) and every benchmark
DATASET_ROLES = {
    **{f"{d}_train": "train" for d in config["domains"]},
    **{b: ("in-domain" if b in config["domains"] else "ood") for b in BENCHMARK_NAMES},
}


def distance_datasets(wildcards):
    files = {f"{d}_train": f"{RESULTS}/data/{d}/train.jsonl" for d in config["domains"]}
    files.update({b: f"{RESULTS}/data/{b}/test.jsonl" for b in BENCHMARK_NAMES})
    return files


DRIFT_GRID = stable_json(
    {
        "runs": {
            name: {"label": r.label, "method": r.method, "alpha": r.alpha, "seed": r.seed} for name, r in RUNS.items()
        },
        "domains": config["domains"],
        "steps": config["train"]["steps"],
        "save_every": config["train"]["save_every"],
    }
)


def all_figure_outputs():
    figures = [f"{RESULTS}/figures/{fig}.{fmt}" for fig in FIGURE_TABLES for fmt in config["plots"]["formats"]]
    return figures + [f"{RESULTS}/figures/{fig}.csv" for fig in FIGURE_DATA]


def parent_model(wildcards):
    """Stage k starts from stage k-1's final model (PyPSA-Eur style chaining), stage 1 from the base."""
    parent = parent_chain(parse_chain(wildcards.chain))
    if parent is None:
        return [BASE_MODEL]
    return [stage_path(wildcards.run, chain_str(parent), "model")]


def parent_path(wildcards):
    parent = parent_chain(parse_chain(wildcards.chain))
    return BASE_MODEL if parent is None else stage_path(wildcards.run, chain_str(parent), "model")


def train_priority(wildcards):
    """The stages still to train in this run from here: the longest chain of work starts first."""
    return stage_priority(chains_for(config, RUNS[wildcards.run]), parse_chain(wildcards.chain))


def train_settings(wildcards):
    """Only wildcards in, so Snakemake tracks it: a changed alpha or lr reruns just this branch."""
    return stage_settings(config, RUNS[wildcards.run], parse_chain(wildcards.chain)).to_json()


def train_data(wildcards):
    return f"{RESULTS}/data/{parse_chain(wildcards.chain)[-1]}/train.jsonl"


def replay_data(wildcards):
    """The earlier domains' training sets, for runs with replay only (other runs: no extra input)."""
    replay = replay_settings(RUNS[wildcards.run], parse_chain(wildcards.chain))
    return [] if replay is None else [f"{RESULTS}/data/{d}/train.jsonl" for d in replay["domains"]]


def reference_model(wildcards):
    """The base model, for runs anchored to it (kl_reference: base) only."""
    return [BASE_MODEL] if RUNS[wildcards.run].needs_base_reference else []


def mitigation_args(wildcards, input):
    """CLI arguments naming the mitigation inputs. A params function of ``input``, so Snakemake does
    not track it: paths (which change with the results folder) never rerun a stage."""
    reference, replay = list(input.reference), list(input.replay)
    args = [f"--reference {shlex.quote(str(f))}" for f in reference]
    if replay:
        args.append("--replay-data " + " ".join(shlex.quote(str(f)) for f in replay))
    return " ".join(args)
