"""``sdpocl`` commands of one train stage, and the teacher check: each command's arguments and its handler, side by
side."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sdpocl.commands.base import Command, arg, threads
from sdpocl.io import write_json


def _stage_settings_from_config(a):
    from sdpocl.chain import parse_chain
    from sdpocl.config import load_config, run_by_name, stage_settings

    config = load_config(a.config)
    return stage_settings(config, run_by_name(config, a.run), parse_chain(a.chain))


def _relaunch_on_gpus(argv: list[str]) -> int | None:
    """A job that sees several GPUs (Slurm exports its allocation) re-runs itself under
    ``accelerate launch`` with one FSDP process per GPU (:mod:`sdpocl.train.launch`); returns its
    exit code, or None for 1 GPU / CPU."""
    import subprocess
    import tempfile

    if "LOCAL_RANK" in os.environ:
        return None
    import torch

    n = torch.cuda.device_count()
    if n <= 1:
        return None
    from sdpocl.train.launch import launch_command, write_launch_config

    config = write_launch_config(Path(tempfile.mkdtemp(prefix="sdpocl-fsdp-")) / "accelerate_fsdp.yaml")
    cmd = launch_command(n, argv, config)
    print(f"[train-stage] {n} GPUs visible: {' '.join(cmd)}", flush=True)
    return subprocess.call(cmd)


def cmd_train_stage(a) -> None:
    from sdpocl.train import curves
    from sdpocl.train.stage import train_stage

    code = _relaunch_on_gpus(a.argv)
    if code is not None:
        if code:
            raise SystemExit(code)
        return

    from sdpocl.config.stage import StageSettings

    if a.settings:
        settings = StageSettings.from_json(a.settings)
    elif a.config and a.run and a.chain:
        settings = _stage_settings_from_config(a)
    else:
        raise SystemExit("train-stage needs --settings JSON, or --config, --run and --chain")
    root = a.tensorboard if a.tensorboard is not None else os.environ.get(curves.ROOT_ENV, "")
    train_stage(
        settings,
        a.parent,
        a.data,
        a.out,
        a.state,
        threads=a.threads,
        reference=a.reference,
        replay_data=a.replay_data or [],
        curves_dir=curves.stage_curves_dir(root, settings.run["name"], list(settings.chain)) if root else None,
    )


def cmd_teacher_check(a) -> None:
    import random

    from sdpocl.io import read_jsonl
    from sdpocl.prompts import DEFAULT_TEMPLATE_KWARGS
    from sdpocl.train.teacher_check import check_teacher, options_from_settings

    options = dict(
        samples=a.samples,
        max_new_tokens=a.max_new_tokens,
        temperature=a.temperature,
        keep_thinking=a.keep_thinking,
        chat_template=a.chat_template,
        template_kwargs=DEFAULT_TEMPLATE_KWARGS if a.chat_template else None,
    )
    if a.settings:  # a stage's settings (the rule passes them): its group size, lengths and format
        from sdpocl.config.stage import StageSettings

        options = options_from_settings(StageSettings.from_json(a.settings))
    records = read_jsonl(a.data)
    if a.n_prompts < len(records):
        records = random.Random(a.seed).sample(records, a.n_prompts)
    report = check_teacher(a.model, records, seed=a.seed, threads=a.threads, teacher_dir=a.teacher, **options)
    report["data"] = str(a.data)
    print(json.dumps(report, indent=2))
    if a.out:
        write_json(a.out, report, indent=2)


COMMANDS: list[Command] = [
    Command(
        "train-stage",
        "train one stage of one run from its parent checkpoint",
        cmd_train_stage,
        [
            arg("--settings", help="stage settings JSON (as the workflow passes them)"),
            arg("--config", help="config YAML (by hand, with --run and --chain)"),
            arg("--run"),
            arg("--chain"),
            arg("--parent", required=True, help="model directory the stage starts from"),
            arg("--data", required=True, help="training JSONL"),
            arg("--reference", help="base model directory, for runs anchored to the base (kl_reference: base)"),
            arg(
                "--replay-data",
                nargs="+",
                help="training JSONL of each earlier domain of the chain, in chain order (runs with replay_frac)",
            ),
            arg("--out", required=True, help="stage directory"),
            arg("--state", required=True, help="resume-state directory (outside the declared outputs)"),
            arg(
                "--tensorboard",
                help="TensorBoard root for the stage's live curves (the run goes under <root>/<run>/<chain>); "
                "default: $SDPOCL_TENSORBOARD, set by the workflow from train.report_to; empty: none",
            ),
            threads(),
        ],
    ),
    Command(
        "teacher-check",
        "before an SDPO stage: is the re-prompted teacher better than the student on this data?",
        cmd_teacher_check,
        [
            arg("--model", required=True, help="the student: the stage's starting model, or a checkpoint"),
            arg("--teacher", help="the teacher's weights when not the student's (SDPO_0: the stage's start)"),
            arg("--data", required=True, help="the stage's train JSONL"),
            arg("--n-prompts", type=int, default=40, help="prompts, a seeded sample (default 40)"),
            arg("--samples", type=int, default=8, help="samples per prompt, the group size (default 8)"),
            arg("--max-new-tokens", type=int, default=64),
            arg("--temperature", type=float, default=1.0, help="rollout temperature (default 1.0)"),
            arg("--keep-thinking", action="store_true", help="keep <think> in the demonstration (SDPO^CoT)"),
            arg("--chat-template", action="store_true", help="render with the model's chat template (paper preset)"),
            arg("--settings", help="a stage's settings JSON; its values replace the four options above"),
            arg("--seed", type=int, default=0),
            arg("--out", help="also write the report here (JSON)"),
            threads(1),
        ],
    ),
]
