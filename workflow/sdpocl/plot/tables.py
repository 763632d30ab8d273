"""Column contracts of the tidy tables under ``results/tables/`` (plots read only these).

Every table starts with the run-identity columns of :data:`RUN_COLUMNS`; the base model's rows
use ``run="base"``, ``label="Base"``, ``method="base"``, empty alpha, ``chain=""`` and
``stage=0``; in ``eval.csv`` there is one base evaluation per training seed, drawn with that
seed's sampling seed, and its rows carry that seed (empty seed elsewhere). ``chain`` is the domains
learned so far joined by ``/`` (``math/science``); ``continual`` is true when the chain is a prefix
of the configured sequence and ``single_domain`` when it has one domain (``math`` is both).

Sample logs (one per checkpoint and benchmark, ``<stage>/eval/samples/<benchmark>.jsonl``,
``<results>/base/eval/seed-<seed>/samples/<benchmark>.jsonl``) hold one JSON line per prompt with the keys of
:data:`SAMPLE_KEYS`: ``responses``/``scores``/``n_tokens``/``truncated`` are lists with one entry
per sample (8 by default).
"""

from __future__ import annotations

RUN_COLUMNS = ["run", "label", "method", "alpha", "seed", "chain", "stage", "domain", "continual", "single_domain"]

#: identity of the base model's evaluation
BASE_META = {"run": "base", "label": "Base", "method": "base", "alpha": None, "seed": None, "chain": ""}

SAMPLE_KEYS = ["benchmark", "doc_id", "prompt", "answer", "responses", "scores", "n_tokens", "truncated"]

ARTIFACT_COLUMNS = ["boxed_per_response", "multi_boxed_share", "ngram_repeat", "truncation_rate", "mean_length"]

#: results/tables/eval.csv — one row per (checkpoint, benchmark)
EVAL_COLUMNS = RUN_COLUMNS + [
    "checkpoint",  # "final" (or "step-N" when intermediate checkpoints are evaluated)
    "benchmark",
    "kind",  # kind: "in-domain" | "ood"
    "bench_domain",  # the training domain a benchmark belongs to (OOD: the nearest one)
    "acc",
    "stderr",
    "n_prompts",
    "n_samples",
    *ARTIFACT_COLUMNS,
    "base_acc",
    "relperf",
    "gain",
    "forgetting",
    "parent_acc",  # the stage's starting model (the previous stage's final model, or the base) on the same prompts
    "change",  # acc - parent_acc, the mean of the per-prompt changes
    "change_stderr",  # paired: the stderr of the per-prompt changes (the prompt-to-prompt spread cancels)
]

#: results/tables/teacher_stability.csv — paper Table 1
#: (``n_samples``: the k of Acc@k, which the figure names)
TEACHER_STABILITY_COLUMNS = ["teacher", "run", "method", "alpha", "seed", "benchmark", "acc", "stderr", "n_samples"]

#: results/tables/drift_params.csv — per-stage drift_params.csv rows plus identity and position
DRIFT_PARAM_COLUMNS = (
    RUN_COLUMNS
    + ["checkpoint", "point", "point_index", "matrix_type"]
    + [f"{m}_{s}" for s in ("mean", "median", "p10", "p90") for m in ("nss", "max_pa_deg", "pm_overlap", "pm_update")]
)

#: results/tables/drift_responses.csv — one row per (checkpoint, benchmark, prompt)
DRIFT_RESPONSE_COLUMNS = RUN_COLUMNS + ["benchmark", "kind", "doc_id", "similarity"]

#: results/tables/domain_mmd.csv — every ordered pair of datasets (diagonal included)
DOMAIN_MMD_COLUMNS = ["dataset_a", "role_a", "dataset_b", "role_b", "mmd", "bandwidth"]

#: results/tables/tsne.csv — one row per embedded prompt
TSNE_COLUMNS = ["dataset", "role", "index", "x", "y"]

#: dataset roles in domain_mmd / tsne
ROLES = ("train", "in-domain", "ood")

#: figure -> tables it reads (sdpocl.plot.figures.FIGURES draws them; kept here so the workflow can be
#: parsed without importing matplotlib)
FIGURE_TABLES = {
    "cl_performance": ["eval"],
    "ood_bars": ["eval"],
    "model_drift": ["drift_params"],
    "response_drift": ["drift_responses"],
    "gain_forgetting_distance": ["eval", "domain_mmd"],
    "mmd_heatmap": ["domain_mmd"],
    "tsne": ["tsne"],
    "teacher_stability": ["teacher_stability"],
    "artifacts": ["eval"],
    "mitigations": ["eval", "drift_params"],
}

#: report category of each figure
FIGURE_CATEGORIES = {
    "cl_performance": "Continual learning",
    "ood_bars": "Continual learning",
    "teacher_stability": "Continual learning",
    "model_drift": "Drift",
    "response_drift": "Drift",
    "gain_forgetting_distance": "Domain distance",
    "mmd_heatmap": "Domain distance",
    "tsne": "Domain distance",
    "artifacts": "Collapse",
    "mitigations": "Mitigations",
}

#: figures that also write the numbers behind them to ``figures/<name>.csv`` (a table a reader quotes)
FIGURE_DATA = ("mitigations",)
