"""The grid's cost in GPU-hours before it runs: the tokens each rule family processes times the FLOPs per token,
at a stated share of a GPU's peak (model FLOPs utilisation). An estimate, with every assumption named in
:class:`CostAssumptions` and printed beside the numbers; where the GPU check (bench/gpu_check.py) has measured an
update, its time per token replaces the update's FLOPs estimate.

FLOPs per token of one forward: 2 x the matrix parameters (every parameter but the embedding lookup, plus the LM
head's vocabulary x hidden, tied or not) + attention, 4 x layers x (heads x head dim) x the mean context. A
training forward and backward with gradient checkpointing is 4 forwards (forward, backward = 2, recomputation).

Per train stage (``steps`` rollout steps of ``prompts_per_step x num_generations`` sequences):

* rollouts (vLLM): the prompts' prefill (compute-bound) and the responses' decoding, token by token (bound by
  memory bandwidth: a lower utilisation);
* GRPO: the old log-probs' forward (TRL computes it for vLLM's importance sampling and the mini-batches) and the
  update; a KL reference's forward where the run anchors;
* SDPO: the update and the teacher's forward over the re-prompt (prompt + demonstration) and the response, for
  every row (an upper bound: rows without a demonstration skip it);

and per evaluation job (each stage's final model, the base once per seed): every benchmark's prompts x samples,
prefill and decoding. Parameter drift's SVDs and the CPU rules are left out (minutes, not GPU-hours).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

#: benchmark prompts where the prepared data (``results/data/<benchmark>/test.jsonl``) is not there yet: the public
#: datasets' sizes as the loaders filter them (approximate; the paper preset's ``n_prompts: null`` takes all)
ASSUMED_PROMPTS = {
    "math": 60,  # AIME 2024 + 2025
    "science": 200,  # SciKnowEval Chemistry L3 multiple choice, the 10% held out
    "tooluse": 100,  # ToolAlpaca's simulated evaluation set
    "code": 500,  # Dolci code rows, the 10% held out
    "math500": 500,
    "gpqa_diamond": 198,
    "bfcl_v4": 1500,  # the non-live AST categories and irrelevance
    "livecodebench_v6": 175,
    "zebralogic": 1000,
    "mmlu_redux": 5000,  # capped by evaluate.ood_size
}


@dataclass(frozen=True)
class CostAssumptions:
    """What the estimate assumes (printed with it); change them here or by keyword."""

    gpu: str = "H100 SXM"
    peak_tflops: float = 989.0  # dense bf16
    compute_mfu: float = 0.35  # long forwards and backwards: updates, teacher / reference forwards, prefill
    decode_mfu: float = 0.10  # vLLM's decoding: one token per sequence per step, memory-bound
    prompt_tokens: int = 300  # mean prompt (the limit is train.max_prompt_length)
    response_fill: float = 0.5  # mean response / the response limit (training and evaluation)
    demonstration_fill: float = 0.5  # SDPO's demonstration / its budget in the re-prompt

    def line(self) -> str:
        return (
            f"{self.gpu}, {self.peak_tflops:g} TFLOPS bf16 at {self.compute_mfu:.0%} (forwards and backwards) and "
            f"{self.decode_mfu:.0%} (decoding) of peak; mean prompt {self.prompt_tokens} tokens, responses and "
            f"demonstrations {self.response_fill:.0%} / {self.demonstration_fill:.0%} of their limits (assumed)"
        )


def forward_flops(shape: dict, context: float) -> float:
    """FLOPs of one forward per token at a mean ``context`` (module docstring)."""
    matrix = shape["n_params"] - shape["embed"] + shape["vocab"] * shape["hidden"]
    return 2.0 * matrix + 4.0 * shape["layers"] * shape["attn_width"] * context


def benchmark_prompts(config: dict, results: str | Path) -> dict[str, tuple[int, bool]]:
    """Prompts evaluated per benchmark: (count, assumed?) from the prepared data, else :data:`ASSUMED_PROMPTS`
    (the tiny preset's: its configured sizes), within ``evaluate.n_prompts``."""
    from sdpocl.data.benchmarks import benchmarks_for
    from sdpocl.evaluate.limits import n_prompts_for

    out = {}
    for bench in benchmarks_for(config):
        data = Path(results) / "data" / bench / "test.jsonl"
        if data.exists():
            n, assumed = sum(1 for line in data.open() if line.strip()), False
        elif config.get("preset") == "tiny":
            n = config["data"]["test_size"] if bench in config["domains"] else config["evaluate"]["ood_size"]
            assumed = True
        else:
            n, assumed = min(ASSUMED_PROMPTS.get(bench, 500), config["evaluate"]["ood_size"]), True
        limit = n_prompts_for(config["evaluate"]["n_prompts"], bench, config["domains"])
        out[bench] = (min(n, limit) if limit else n, assumed)
    return out


def measured_update(gpu_check: str | Path | None) -> dict[str, float]:
    """Seconds per token of one update (forward and backward, and SDPO's teacher), by method, from the GPU check's
    report (bench/gpu_check.py; one GPU, the sequence at full length); {} without one."""
    if gpu_check is None:
        return {}
    report = json.loads(Path(gpu_check).read_text())
    from_shape = {"qwen3-4b": 2048 + 8192}.get(report.get("shape"))
    out = {}
    for run in report.get("runs", []):
        if from_shape and "forward_backward_s" in run:
            out[run["method"]] = run["forward_backward_s"] / from_shape
    return out


def grid_cost(
    config: dict,
    shape: dict,
    results: str | Path,
    assumptions: CostAssumptions = CostAssumptions(),  # noqa: B008 - frozen
    measured: dict[str, float] | None = None,
) -> dict:
    """GPU-hours per rule family and in total for the grid's stages still to train and every evaluation (module
    docstring); ``measured``: :func:`measured_update`."""
    from sdpocl.config.methods import get_method
    from sdpocl.preflight.disk import grid_stages

    a = assumptions
    train = config["train"]
    compute = a.peak_tflops * 1e12 * a.compute_mfu
    decode = a.peak_tflops * 1e12 * a.decode_mfu
    measured = measured or {}
    seconds = {"rollout": 0.0, "update_grpo": 0.0, "update_sdpo": 0.0, "teacher_and_reference": 0.0}
    tokens = {"generated": 0.0, "trained": 0.0}
    stages = 0
    for run, chain in grid_stages(config):
        domain = chain[-1]
        family = get_method(run.method).family
        rows = train["steps"][domain] * train["prompts_per_step"] * train["num_generations"]
        p = min(a.prompt_tokens, train["max_prompt_length"])
        r = a.response_fill * train["max_completion_length"][domain]
        stages += 1
        tokens["generated"] += rows * r
        tokens["trained"] += rows * (p + r)
        seconds["rollout"] += rows * p * forward_flops(shape, p / 2) / compute
        seconds["rollout"] += rows * r * forward_flops(shape, p + r / 2) / decode
        sequence = forward_flops(shape, (p + r) / 2)
        # the GPU check's time per token where it measured one (SDPO's teacher forward in it), else 4 forwards
        per_token = measured.get(family) or 4 * sequence / compute
        seconds[f"update_{family}"] += rows * (p + r) * per_token
        extra = 0.0
        if family == "grpo":
            extra += rows * (p + r) * sequence / compute  # the old log-probs
        elif not measured.get(family):
            reprompt = train.get("max_reprompt_length") or (train["max_prompt_length"] + r)
            demo = a.demonstration_fill * max(reprompt - train["max_prompt_length"], 0)
            teacher_len = p + demo + r
            extra += rows * teacher_len * forward_flops(shape, teacher_len / 2) / compute
        if run.kl_beta > 0:
            extra += rows * (p + r) * sequence / compute
        seconds["teacher_and_reference"] += extra
    evaluation = 0.0
    jobs = stages + len({run.seed for run, _ in grid_stages(config)} or {0})
    prompts = benchmark_prompts(config, results)
    ev = config["evaluate"]
    per_job = 0.0
    for _bench, (n, _) in prompts.items():
        p, r = a.prompt_tokens, a.response_fill * ev["max_gen_toks"]
        samples = n * ev["samples"]
        per_job += samples * p * forward_flops(shape, p / 2) / compute
        per_job += samples * r * forward_flops(shape, p + r / 2) / decode
    evaluation = jobs * per_job
    hours = {k: v / 3600 for k, v in seconds.items()}
    train_hours = sum(hours.values())
    out = {
        "assumptions": asdict(a),
        "stages": stages,
        "evaluation_jobs": jobs,
        "prompts": {b: n for b, (n, _) in prompts.items()},
        "prompts_assumed": sorted(b for b, (_, assumed) in prompts.items() if assumed),
        "tokens": tokens,
        "gpu_hours": {
            **hours,
            "train_stage": train_hours,
            "evaluate": evaluation / 3600,
            "total": train_hours + evaluation / 3600,
        },
        "measured_update": sorted(measured),
    }
    return out


def cost_lines(cost: dict, assumptions: CostAssumptions = CostAssumptions()) -> tuple[str, ...]:  # noqa: B008
    h = cost["gpu_hours"]
    measured = cost["measured_update"]
    lines = [
        f"assumptions: {assumptions.line()}",
        f"train_stage ({cost['stages']} stages): {h['train_stage']:,.1f} GPU-h = rollouts {h['rollout']:,.1f} "
        f"+ GRPO updates {h['update_grpo']:,.1f} + SDPO updates {h['update_sdpo']:,.1f} + teacher / reference / "
        f"old log-prob forwards {h['teacher_and_reference']:,.1f}"
        + (f" (updates of {', '.join(measured)}: the GPU check's measured time)" if measured else ""),
        f"evaluate ({cost['evaluation_jobs']} jobs, {sum(cost['prompts'].values()):,} prompts each): "
        f"{h['evaluate']:,.1f} GPU-h",
        f"total: {h['total']:,.1f} GPU-h (tokens: {cost['tokens']['generated'] / 1e9:.2f} B generated, "
        f"{cost['tokens']['trained'] / 1e9:.2f} B trained on)",
    ]
    if cost["prompts_assumed"]:
        lines.append(f"benchmark sizes assumed (no prepared data yet): {', '.join(cost['prompts_assumed'])}")
    return tuple(lines)
