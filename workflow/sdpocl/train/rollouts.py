"""Where a stage's rollouts come from: TRL's colocated vLLM engine on a GPU, transformers' generate on a CPU.

On a GPU without vLLM, generate would be the silent slow path (8,192-token rollouts time out), so the
stage stops and names the extra, unless the user asks for it (``SDPOCL_ROLLOUTS=hf``).
"""

from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager

#: seeds of the colocated engines: run seed x this + the engine's rank (TRL seeds by rank alone)
SEED_STRIDE = 10_007


class MissingVLLMError(RuntimeError):
    pass


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def rollout_kwargs(use_cpu: bool, settings: dict) -> dict:
    """TRL config fields of the rollout engine. vLLM's context is the prompt + response limit (its default, the
    model's 40,960, reserves KV cache for lengths no rollout reaches); its weights sleep between rollouts
    (TRL's sleep mode) so the optimizer step has the memory."""
    if use_cpu or os.environ.get("SDPOCL_ROLLOUTS", "auto") == "hf":
        return {}
    if not vllm_installed():
        raise MissingVLLMError(
            "a GPU is visible but vLLM is not installed, so rollouts would fall back to transformers' generate "
            "(far too slow for the paper's 8,192-token responses): pip install -e '.[gpu]', "
            "or set SDPOCL_ROLLOUTS=hf to use generate anyway"
        )
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": float(os.environ.get("SDPOCL_VLLM_MEMORY", "0.3")),
        "vllm_max_model_length": int(settings["max_prompt_length"]) + int(settings["max_completion_length"]),
        "vllm_enable_sleep_mode": True,
    }


def engine_seed(run_seed: int, trl_seed: int) -> int:
    """The colocated engine's seed: TRL passes the process index (the same for every run of the grid); the run's
    seed is folded in so that seeds 0, 1, 2 sample different rollouts."""
    return int(run_seed) * SEED_STRIDE + int(trl_seed)


@contextmanager
def seeded_vllm(run_seed: int):
    """While a trainer is built, TRL's colocated ``LLM(...)`` gets :func:`engine_seed` instead of the bare rank."""
    from trl.generation import vllm_generation

    original = getattr(vllm_generation, "LLM", None)
    if original is None:  # vLLM not installed: nothing to seed
        yield
        return

    def llm(*args, **kwargs):
        kwargs["seed"] = engine_seed(run_seed, kwargs.get("seed", 0))
        return original(*args, **kwargs)

    vllm_generation.LLM = llm
    try:
        yield
    finally:
        vllm_generation.LLM = original
