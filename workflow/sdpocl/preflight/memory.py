"""The memory estimate of one train job per GPU (docs/paper-preset.md's memory table as a formula): no GPU,
no weights, just the base model's shape and the config's lengths."""

from __future__ import annotations

GIB = 2**30

#: CUDA context and NCCL buffers per GPU (an allowance, not a measurement)
OVERHEAD_GIB = 1.0

#: the colocated vLLM engine asleep while the trainer steps (TRL's sleep mode level 2: weights and KV cache
#: freed; docs/paper-preset.md's memory table, an estimate)
VLLM_ASLEEP_GIB = 1.5


def train_memory_estimate(
    n_params: float,
    gpus: int,
    *,
    hidden: int,
    layers: int,
    vocab: int,
    prompt_tokens: int,
    response_tokens: int,
    teacher: bool = True,
    reference: bool = False,
    embedding_params: float | None = None,
    micro_batch: int = 1,
    gathered_layers: int = 2,
    vllm_fraction: float = 0.3,
    vllm_asleep_gib: float = VLLM_ASLEEP_GIB,
    gpu_memory_gib: float | None = None,
    overhead_gib: float = OVERHEAD_GIB,
) -> dict[str, float]:
    """GiB per GPU of one train job on ``gpus`` GPUs (FSDP2 full shard, one rank per GPU; 0 or 1 = one
    process holding everything): docs/paper-preset.md's memory table as a formula. Items (bytes; ``P`` = ``n_params``,
    ``N`` = ``gpus``):

    * ``weights``: fp32 master weights, ``4 P / N``;
    * ``grads``: fp32 gradients (reduced in fp32, after every micro-batch), ``4 P / N``;
    * ``adam``: AdamW's two fp32 moments, ``8 P / N``;
    * ``teacher``: SDPO's teacher, a frozen / EMA fp32 copy sharded per decoder layer like the student, ``4 P / N``;
    * ``reference``: a KL reference model (runs with ``kl_beta > 0``), the same, ``4 P / N``;
    * ``gathered``: decoder layers all-gathered in bf16 for compute: ``gathered_layers`` of the student (one in
      use, one prefetched) + one of the teacher, ``2 x layer params x (gathered_layers + teacher)``, layer
      params = (P - embeddings) / layers;
    * ``activations``: gradient checkpointing keeps each layer's input, ``micro_batch x (prompt + response
      tokens) x hidden x layers x 2`` (bf16);
    * ``logits``: full-vocabulary logits over the response tokens, bf16 (2 B) plus their fp32 log-softmax
      (4 B), the student's and (SDPO) the teacher's: ``micro_batch x response x vocab x 6 x (2 or 1)``;
    * ``overhead``: CUDA context, NCCL buffers (an allowance, in GiB);
    * ``vllm``: the colocated vLLM engine while it generates, ``vllm_fraction`` of the GPU (the train job sizes it:
      :func:`sdpocl.train.rollouts.rollout_memory`; ``SDPOCL_VLLM_MEMORY`` sets it); asleep while the trainer
      steps (TRL's sleep mode), ``vllm_asleep_gib``.

    The peak is the larger of two phases: ``rollout`` = states (weights, grads, adam, teacher, reference) +
    overhead + vllm, and ``update`` = states + gathered + activations + logits + overhead + vLLM asleep.
    Returns every item, ``states``, ``update``, ``min_gpu_gib`` (the smallest GPU that holds both phases:
    ``max(update, (states + overhead) / (1 - vllm_fraction))``) and, with ``gpu_memory_gib``, ``vllm``,
    ``rollout`` and ``total`` (the peak).
    """
    n = max(int(gpus), 1)
    p = float(n_params)
    embed = float(vocab * hidden if embedding_params is None else embedding_params)
    layer_params = max(p - embed, 0.0) / max(layers, 1)
    tokens = prompt_tokens + response_tokens
    out = {
        "weights": 4 * p / n,
        "grads": 4 * p / n,
        "adam": 8 * p / n,
        "teacher": 4 * p / n if teacher else 0.0,
        "reference": 4 * p / n if reference else 0.0,
        "gathered": 2 * layer_params * (gathered_layers + (1 if teacher else 0)),
        "activations": float(micro_batch * tokens * hidden * layers * 2),
        "logits": float(micro_batch * response_tokens * vocab * 6 * (2 if teacher else 1)),
    }
    out = {k: v / GIB for k, v in out.items()}
    out["overhead"] = float(overhead_gib)
    out["states"] = sum(out[k] for k in ("weights", "grads", "adam", "teacher", "reference"))
    work = out["gathered"] + out["activations"] + out["logits"]
    out["update"] = out["states"] + work + out["overhead"] + vllm_asleep_gib
    out["min_gpu_gib"] = max(out["update"], (out["states"] + out["overhead"]) / (1 - vllm_fraction))
    if gpu_memory_gib is not None:
        out["vllm"] = vllm_fraction * gpu_memory_gib
        out["rollout"] = out["states"] + out["overhead"] + out["vllm"]
        out["total"] = max(out["rollout"], out["update"])
    return out


#: the share of a GPU an estimate may fill and still count as fitting: it is an estimate (fragmentation,
#: NCCL and vLLM overheads beyond the allowances, one recomputed layer are not in it), so 25% stays free
HEADROOM = 0.75


def fits(est: dict, gpu_memory_gib: float) -> bool:
    """The update phase within :data:`HEADROOM` of the GPU, and the rollout phase within the share the engine is
    sized to fill (:data:`sdpocl.train.rollouts.ROLLOUT_FILL`: the engine's own share is an allocation, not an
    estimate) with room in the KV cache for one full-length sequence."""
    from sdpocl.train.rollouts import ROLLOUT_FILL

    memory = est.get("rollout_memory")
    kv_ok = memory is None or memory.sequences >= 1
    rollout_ok = est["rollout"] <= ROLLOUT_FILL * gpu_memory_gib + 1e-6
    return est["update"] <= HEADROOM * gpu_memory_gib and rollout_ok and kv_ok


def min_gpus(estimate_for, gpu_memory_gib: float, choices=(1, 2, 4, 8), one_wave: bool = False) -> int | None:
    """The fewest GPUs (of ``choices``) whose estimate (``estimate_for(n)`` with ``gpu_memory_gib``) :func:`fits`;
    with ``one_wave`` also holding every sequence a rank samples in a step at full length. None if none does."""
    for n in choices:
        est = estimate_for(n)
        memory = est.get("rollout_memory")
        if fits(est, gpu_memory_gib) and (not one_wave or memory is None or memory.in_one_wave):
            return n
    return None


def grid_shape(config: dict) -> dict:
    """What the grid's largest train job holds: a teacher (any SDPO-family run), a KL reference (any run
    with kl_beta > 0), the longest prompt + response."""
    from sdpocl.config import expand_runs
    from sdpocl.config.methods import get_method

    runs = expand_runs(config)
    train = config["train"]
    return {
        "teacher": any(get_method(r.method).family == "sdpo" for r in runs),
        "reference": any(r.kl_beta > 0 for r in runs),
        "prompt_tokens": int(train.get("max_prompt_length") or 0),
        "response_tokens": int(max(train["max_completion_length"].values())),
        "micro_batch": int(train.get("micro_batch_size") or 1),
    }


def vllm_fraction() -> float | None:
    """``SDPOCL_VLLM_MEMORY`` when set; None: the train job sizes the engine's share (sdpocl.train.rollouts)."""
    from sdpocl.train.rollouts import env_fraction

    return env_fraction()


def estimate_for(config: dict, shape: dict, gpu_memory_gib: float | None):
    """``gpus -> train_memory_estimate(...)`` for this config and base; with a GPU size, the engine's share as
    the train job sizes it (or ``SDPOCL_VLLM_MEMORY``) and what its KV cache holds (``rollout_memory``)."""
    from sdpocl.train.rollouts import FALLBACK_FRACTION, rollout_memory

    grid = grid_shape(config)
    train = config["train"]

    def estimate(gpus: int) -> dict:
        memory = None
        fraction = vllm_fraction()
        if gpu_memory_gib is not None and shape.get("kv_per_token"):
            memory = rollout_memory(
                shape["n_params"],
                shape["kv_per_token"],
                gpu_memory_gib,
                gpus,
                teacher=grid["teacher"],
                reference=grid["reference"],
                sequence_tokens=grid["prompt_tokens"] + grid["response_tokens"],
                rank_sequences=int(train["prompts_per_step"]) * int(train["num_generations"]) // max(gpus, 1),
                fraction=fraction,
            )
            fraction = memory.fraction
        est = train_memory_estimate(
            shape["n_params"],
            gpus,
            hidden=shape["hidden"],
            layers=shape["layers"],
            vocab=shape["vocab"],
            embedding_params=shape["embed"],
            prompt_tokens=grid["prompt_tokens"],
            response_tokens=grid["response_tokens"],
            teacher=grid["teacher"],
            reference=grid["reference"],
            micro_batch=grid["micro_batch"],
            vllm_fraction=FALLBACK_FRACTION if fraction is None else fraction,
            gpu_memory_gib=gpu_memory_gib,
        )
        if memory is not None:
            est["rollout_memory"] = memory
        return est

    return estimate
