"""Live training curves: every stage's TensorBoard run, on the rollout-step axis, under one root.

Why: a paper-preset stage runs for hours; watching reward, length and the ``\\boxed`` count while it
runs shows a collapse before it burns a day of GPUs (``tensorboard --logdir results/tensorboard``).

The run of a stage is ``<root>/<run>/<chain with '+'>`` (flat like the resume state, so that
replacing one stage's curves never touches its child stages'). Its scalars are the columns of
``train_log.jsonl`` under the same names, at the same rollout steps, and TRL's own log keys beside
them under ``trl/``. The logs are not declared outputs: switching them on or off reruns nothing; a
fresh stage replaces its run's logs, and a resumed stage continues them from its resume step (the
event files say so with TensorBoard's purge step, so steps logged after the checkpoint by the killed
job are dropped by every reader).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

#: the TensorBoard root of a workflow's jobs: set by the Snakefile (``train.report_to``) and read by
#: ``sdpocl train-stage`` when ``--tensorboard`` is not given; empty = no curves
ROOT_ENV = "SDPOCL_TENSORBOARD"
REPORTERS = ("none", "tensorboard")


def tensorboard_installed() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def resolve_report_to(value: str | None) -> str:
    """``train.report_to``: ``none``, ``tensorboard``, or null = ``tensorboard`` where it is installed."""
    if value is None:
        return "tensorboard" if tensorboard_installed() else "none"
    if value not in REPORTERS:
        raise ValueError(f"train.report_to must be one of {', '.join(REPORTERS)} (or null), got {value!r}")
    if value == "tensorboard" and not tensorboard_installed():
        raise ValueError(
            "train.report_to is tensorboard but the tensorboard package is not installed "
            "(pip install tensorboard, or set train.report_to: none)"
        )
    return value


def tensorboard_root(results: str, report_to: str | None) -> str:
    """The root every stage's run goes under, or '' when curves are off."""
    return f"{results}/tensorboard" if resolve_report_to(report_to) == "tensorboard" else ""


def stage_curves_dir(root: str | Path, run: str, chain: list[str] | tuple[str, ...]) -> Path:
    return Path(root) / run / "+".join(chain)


def prepare(log_dir: Path, resume_step: int | None) -> int | None:
    """Before a stage trains: a fresh stage replaces its run's logs; a resumed one keeps them. Returns the
    purge step (the first step the resumed stage logs again) or None."""
    if resume_step is None:
        shutil.rmtree(log_dir, ignore_errors=True)
        return None
    return resume_step + 1


def curves_callback(log_dir: Path, rollout_step, resume_step: int | None = None):
    """A transformers ``TensorBoardCallback`` that writes our per-step columns (and TRL's keys under
    ``trl/``) at the rollout step ``rollout_step(global_step)`` of each per-step log entry.

    Only the main process touches the logs (the callback's own rule): when training begins it replaces
    a fresh stage's run, or continues a resumed one's from ``resume_step + 1``."""
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    from sdpocl.train.steplog import log_row

    class Curves(TensorBoardCallback):
        purge_step: int | None = None  # set when training begins (main process)

        def _init_summary_writer(self, args):
            self.tb_writer = SummaryWriter(log_dir=str(log_dir), purge_step=self.purge_step)

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.purge_step = prepare(log_dir, resume_step)
            self.logging_dir = str(log_dir)
            super().on_train_begin(args, state, control, **kwargs)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs or "loss" not in logs:
                return  # one entry per rollout step carries the loss; the run's summary entry does not
            if self.tb_writer is None:
                self._init_summary_writer(args)
            step = rollout_step(state.global_step)
            for name, value in log_row(logs).items():
                self.tb_writer.add_scalar(name, value, step)
            for key, value in logs.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.tb_writer.add_scalar(f"trl/{key}", value, step)
            self.tb_writer.flush()

    return Curves()


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a stage's run as ``{name: [(step, value), ...]}``, read with TensorBoard's own
    event reader (which drops what a purge step discards)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
