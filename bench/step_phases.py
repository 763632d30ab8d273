"""Bench: where a rollout step's time goes, per method and domain (generation, forwards, backward, optimizer).

Runs the real train-stage path (TRL trainers) for a few steps with timers around transformers'
``generate``, the model's forward passes outside generation (old log-probs, teacher and student),
autograd's backward and the optimizer's step, and prints each phase's seconds per rollout step. The
time target of the tiny preset is arithmetic (docs/measurements.md); this says which arithmetic.

    python bench/step_phases.py --results results --runs grpo_s0,sdpo_a0_s0 --domains math,tooluse --steps 6

``--prefixes both`` runs each stage with full rows and with each distinct prompt computed once (in
``generate``'s prefill, :mod:`sdpocl.generation.prefill`, and in SDPO's forwards, :mod:`sdpocl.generation.prefix`), one
after the other, for the ratio on one machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from sdpocl.config import load_config, run_by_name, stage_settings
from sdpocl.train.stage import train_stage


class PhaseTimer:
    """Wall seconds per phase; a phase entered inside another one counts only for the outer one."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self._active: str | None = None

    def wrap(self, owner: type, attr: str, phase: str) -> None:
        """Time ``owner.attr`` as ``phase`` until :meth:`installed` exits."""
        original = getattr(owner, attr)

        @functools.wraps(original)  # the trainers read the model's forward signature (``logits_to_keep``)
        def timed(*args, **kwargs):
            if self._active is not None:
                return original(*args, **kwargs)
            self._active, t0 = phase, time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - t0
                self._active = None

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, original))

    @contextlib.contextmanager
    def installed(self, model_classes: list[type]):
        """The timers around generation, the forward of ``model_classes``, backward and the optimizer step."""
        import torch
        from accelerate.optimizer import AcceleratedOptimizer
        from transformers.generation.utils import GenerationMixin

        import sdpocl.generation.prefill

        self._undo: list = []
        self.wrap(GenerationMixin, "generate", "generation")
        self.wrap(sdpocl.generation.prefill, "_prefilled_generate", "generation")  # its shared prefill included
        for cls in model_classes:  # TRL's GRPO calls the decoder itself and applies the LM head in chunks
            self.wrap(cls, "forward", "forward (outside generation)")
        self.wrap(torch.Tensor, "backward", "backward")
        self.wrap(AcceleratedOptimizer, "step", "optimizer step")  # the Trainer's optimizer, whatever its class
        try:
            yield self
        finally:
            for owner, attr, original in reversed(self._undo):
                setattr(owner, attr, original)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="config/config.yaml")
    p.add_argument("--results", default=None, help="results folder holding base/model and data/ (default: config's)")
    p.add_argument("--runs", default="grpo_s0,sdpo_a0_s0")
    p.add_argument("--domains", default="math")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--prefixes",
        choices=["shared", "full", "both"],
        default="shared",
        help="each distinct prompt once in generate's prefill and SDPO's forwards (the default), the full rows, "
        "or both, one after the other",
    )
    a = p.parse_args()
    modes = {"shared": [True], "full": [False], "both": [False, True]}[a.prefixes]

    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_MAPPING

    from sdpocl.train.grpo import SchedGRPOTrainer
    from sdpocl.train.sdpo import MaskedSDPOTrainer

    config = load_config(a.config)
    results = Path(a.results or config["results"])
    model_dir = results / "base" / "model"
    config_class = type(AutoConfig.from_pretrained(model_dir))
    model_classes = [MODEL_FOR_CAUSAL_LM_MAPPING[config_class], MODEL_MAPPING[config_class]]
    report = []
    for domain in a.domains.split(","):
        for name in a.runs.split(","):
            for shared in modes:
                MaskedSDPOTrainer.share_prefixes = SchedGRPOTrainer.share_prefixes = shared
                report.append(bench_stage(a, config, results, model_dir, model_classes, name, domain, shared))
    print(json.dumps(report, indent=2))


def bench_stage(a, config, results, model_dir, model_classes, name, domain, shared) -> dict:
    settings = stage_settings(config, run_by_name(config, name), (domain,))
    settings = settings.replace(steps=a.steps, save_every=10 * a.steps)
    with tempfile.TemporaryDirectory() as tmp, PhaseTimer().installed(model_classes) as timer:
        summary = train_stage(
            settings,
            model_dir,
            results / "data" / domain / "train.jsonl",
            Path(tmp) / "out",
            Path(tmp) / "state",
            threads=a.threads,
        )
    step = summary["seconds_per_step"]
    # the phases cover every step, the first included (summary's seconds_per_step too)
    phases = {k: v / a.steps for k, v in timer.seconds.items()}  # unrounded: a fast phase is not 0
    phases["other"] = step - sum(phases.values())
    prefixes = "shared" if shared else "full"
    row = {"run": name, "domain": domain, "prefixes": prefixes, "seconds_per_step": step, "phases": phases}
    print(
        f"[bench] {name} {domain} ({prefixes} prefixes): {step:.2f} s/step "
        + ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
    )
    return row


if __name__ == "__main__":
    main()
