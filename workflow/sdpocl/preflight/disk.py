"""The disk estimate of the grid: the bytes its train stages still have to write under the results folder
(checkpoints and final models kept, resume state while a stage runs)."""

from __future__ import annotations

from pathlib import Path

#: saved weights: the trainer holds fp32 master weights (``model_init_kwargs={"dtype": "float32"}``,
#: sdpocl.train.plan) and every checkpoint and final model is saved from them
SAVED_BYTES_PER_PARAM = 4

#: a stage's resume state (``resume-step-N``, only the latest kept) besides the model it saves, whose files are the
#: checkpoint that is kept (linked, not copied: sdpocl.train.resume): AdamW's two fp32 moments (+ the fp32 EMA
#: teacher of SDPO runs)
RESUME_BYTES_PER_PARAM = {"grpo": 8, "sdpo": 8 + 4}
#: under FSDP (a train job on several GPUs) the trainer's resume also writes its own fp32 copy of the model
#: (accelerate's ``pytorch_model_fsdp.bin``, read back when it resumes)
FSDP_RESUME_MODEL_BYTES_PER_PARAM = 4
#: during a save the previous resume state goes only once the new one is complete: the two side by side
RESUME_STATES_DURING_SAVE = 2


def grid_stages(config: dict) -> list[tuple[object, tuple[str, ...]]]:
    """(run, chain) of every train stage of the grid (as workflow/rules/common.smk's all_stages)."""
    from sdpocl.config import chains_for, expand_runs

    return [(run, chain) for run in expand_runs(config) for chain in chains_for(config, run)]


def grid_disk_estimate(
    config: dict, n_params: int, results: str | Path, *, jobs: int | None = None, base_bytes: int = 0
) -> dict:
    """Bytes the grid's train stages will still write under ``results`` (stages with a summary.json are done):

    * ``kept``: per stage, ``steps // save_every`` checkpoints + the final model, each ``4 x n_params``
      (fp32, as saved);
    * ``transient``: per stage while it runs, its resume state besides the checkpoints (AdamW moments (+ teacher),
      ``RESUME_BYTES_PER_PARAM``, + the FSDP trainer's model copy on several GPUs), twice during a save (the old
      and the new side by side), for as many stages at once as can run (one per chain that starts from the
      base, at most ``jobs``); the checkpoints in the state folder are the kept ones, linked;
    * ``base``: ``base_bytes``, a base model still to be downloaded into the results folder.
    """
    from sdpocl.chain import stage_dir
    from sdpocl.config.methods import get_method

    model = SAVED_BYTES_PER_PARAM * n_params
    every = config["train"]["save_every"]
    fsdp = int(config["train"].get("gpus_per_job") or 0) > 1
    kept, stages, done, peaks = 0, 0, 0, []
    for run, chain in grid_stages(config):
        if (Path(stage_dir(str(results), run.name, chain)) / "summary.json").exists():
            done += 1
            continue
        ckpts = config["train"]["steps"][chain[-1]] // every
        stages += 1
        kept += (ckpts + 1) * model
        family = get_method(run.method).family
        state = RESUME_BYTES_PER_PARAM[family] + (FSDP_RESUME_MODEL_BYTES_PER_PARAM if fsdp else 0)
        peaks.append(RESUME_STATES_DURING_SAVE * state * n_params)
    roots = sum(1 for _, chain in grid_stages(config) if len(chain) == 1)
    at_once = min(roots, jobs) if jobs else roots
    transient = sum(sorted(peaks, reverse=True)[:at_once])
    return {
        "stages": stages,
        "done": done,
        "kept": kept,
        "transient": transient,
        "at_once": at_once,
        "base": base_bytes,
        "total": kept + transient + base_bytes,
        "model_bytes": model,
    }
