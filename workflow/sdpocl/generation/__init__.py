"""The generation room: every speed-up of transformers' generation and forwards that the workflow adds, in one
place, applied to a model explicitly by one call (:func:`speed_up`) under one setting (``SDPOCL_GENERATION``).

They make the tiny preset fast on a CPU and change no number: each gives the same tokens, logits and scores as
transformers' own path (their tests compare them), and each measured gain is the default preset's on a 2-core
CPU (the dated log, docs/experiments/, has the runs). What each replaces:

========================  ==========================================================  ===============================
module                    what it replaces (scope)                                    measured gain
========================  ==========================================================  ===============================
:mod:`.prefill`           ``model.generate`` (one model instance): each distinct      a rollout batch 0.73-0.82x the
                          prompt prefilled once                                       CPU; a whole evaluation 0.63x
:mod:`.kv_cache`          nothing: a ``DynamicCache`` subclass (transformers'          a rollout batch 0.84-0.95x; an
                          extension point) that writes new tokens in place            evaluation 0.93x
:mod:`.finished_rows`     the instance's ``forward`` and ``_prepare_special_tokens``  a TOOLUSE rollout step
                          (a private transformers method) while one ``generate``      0.91-0.93x; an evaluation
                          runs: rows that have ended leave the batch                  0.945x
:mod:`.sampling`          ``model.generate`` (the evaluation's model): temperature,   an evaluation ~0.8x at batch
                          top-k, top-p drawn over the top-k by a logits processor     512
:mod:`.prefix`            nothing: a function the trainers' forwards call (each       an SDPO step 0.6x (MATH 1.69
                          distinct prompt forwarded once)                             -> 1.07 s)
:mod:`.attention`         nothing: an attention implementation of its own name        generation 0.72-0.77x per
                          (``AttentionInterface``), chosen per model at load          token; an SDPO step 0.90x
========================  ==========================================================  ===============================

Removed: a process-wide replacement of ``torch.multinomial`` (the same tokens, vectorised) earned 1.5-3% of a
rollout step (0.985x GRPO, 0.971x SDPO_0) and nothing in evaluation, too little for patching a torch function in
every thread of the process; transformers' own ``torch.multinomial`` draws the same tokens.

Where they apply: models that run on a CPU (the tiny preset, the CPU rehearsal); a sharded (FSDP) model or one on a
GPU keeps transformers' paths, and the paper preset's GPU path generates with vLLM, so the room is off there.
``SDPOCL_GENERATION=stock`` turns it off everywhere (benches, comparisons).
"""

from __future__ import annotations

import os

from torch import nn

#: the setting: ``fast`` (the default) applies the room's speed-ups, ``stock`` leaves transformers' paths
ENV = "SDPOCL_GENERATION"
MODES = ("fast", "stock")


def enabled() -> bool:
    mode = os.environ.get(ENV, "fast")
    if mode not in MODES:
        raise ValueError(f"{ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode == "fast"


def model_kwargs(on_cpu: bool) -> dict:
    """``from_pretrained`` arguments of a model the workflow runs: the CPU attention (:mod:`.attention`) where
    the room is on and the model runs on a CPU, else nothing (transformers' default)."""
    if not (on_cpu and enabled()):
        return {}
    from sdpocl.generation.attention import register

    return {"attn_implementation": register()}


def speed_up(model: nn.Module, *, top_k_sampler: bool = False) -> tuple[str, ...]:
    """Apply the room's generation speed-ups to ``model`` (this instance only): the shared prefill with its growing
    cache and finished rows (:mod:`.prefill`), and with ``top_k_sampler`` the evaluation's sampler
    (:mod:`.sampling`). Returns what was applied: nothing on a GPU, on a sharded model, with dropout or with
    ``SDPOCL_GENERATION=stock``."""
    from sdpocl.generation.prefill import share_generation_prefill
    from sdpocl.generation.sampling import sample_over_top_k

    device = next(model.parameters()).device
    if not enabled() or device.type != "cpu":
        return ()
    applied = ("prefill",) if share_generation_prefill(model) else ()
    if top_k_sampler:
        sample_over_top_k(model)
        applied += ("top_k_sampler",)
    return applied
