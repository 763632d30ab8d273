"""``sdpocl preflight``: before the grid, on the machine a job will run on (a GPU node), check what
the grid's jobs will need and say what to fix.

Every check is a plain function returning a :class:`Check` (name, status ``ok`` / ``warn`` / ``fail``
/ ``skip``, a message, the fix, detail lines); :func:`run_preflight` runs them all and
:func:`format_report` prints them. Nothing here touches the network (the base model is looked up as
with ``HF_HUB_OFFLINE=1``) or loads weights (safetensors headers only). ``sdpocl preflight`` exits
non-zero when a check fails; warnings do not fail.

1. GPUs visible (``torch.cuda.device_count``) against the GPUs a train job and an evaluation job ask
   for (``train.gpus_per_job``, ``evaluate.gpus_per_job``; null = the preset's, from
   :mod:`sdpocl.resources`, as the rules ask for them).
2. vLLM importable (``importlib.util.find_spec``, without importing it) and its version.
3. The base model: the directory the jobs will read (``results/base/model``, else ``base.source``, a
   local ``base.model`` or the hub cache's snapshot of the hub id) with a config, loadable
   safetensors headers for every shard, and tokenizer files.
4. GPU memory per train job (:func:`train_memory_estimate`) against the visible GPU's memory.
5. Free disk under the results folder against the checkpoints the grid still has to write
   (:func:`grid_disk_estimate`).
6. The Slurm profile's requests per rule family (``default-resources``, the rules' own resources,
   ``set-resources``), and a train job asking for fewer GPUs than the memory estimate needs.
7. The grid's cost: GPU-hours per rule family and in total (:func:`grid_cost`: tokens x FLOPs per token at a
   stated utilisation; the GPU check's measured update time where given), informational.

The modules, by concern (each imports only those before it):

* :mod:`.report`: :class:`Check` and the report's text and verdict;
* :mod:`.memory`: the memory estimate per GPU (arithmetic on the model's shape and the config);
* :mod:`.disk`: the disk estimate of the grid's checkpoints;
* :mod:`.cost`: the grid's GPU-hours;
* :mod:`.probes`: what the machine has (GPUs, vLLM, the base model's files);
* :mod:`.slurm`: what the jobs ask for (GPUs per job, the Slurm profile's requests per rule family);
* :mod:`.checks`: the seven checks (probes against estimates and requests, with their fixes);
* :mod:`.run`: every check in order, for ``sdpocl preflight`` and the rule ``preflight``.

This package's namespace re-exports their public names (``sdpocl.preflight.preflight_rule``, as the
rule imports it).
"""

from __future__ import annotations

from sdpocl.preflight.checks import (
    REFERENCE_GPU_GIB,
    GpuNeed,
    check_base,
    check_cost,
    check_disk,
    check_gpus,
    check_memory,
    check_slurm,
    check_vllm,
)
from sdpocl.preflight.cost import CostAssumptions, grid_cost
from sdpocl.preflight.disk import RESUME_BYTES_PER_PARAM, SAVED_BYTES_PER_PARAM, grid_disk_estimate, grid_stages
from sdpocl.preflight.memory import (
    GIB,
    HEADROOM,
    OVERHEAD_GIB,
    VLLM_ASLEEP_GIB,
    estimate_for,
    grid_shape,
    min_gpus,
    train_memory_estimate,
    vllm_fraction,
)
from sdpocl.preflight.probes import (
    TOKENIZER_FILES,
    ModelInfo,
    inspect_model,
    model_shape,
    params_from_config,
    resolve_base,
    tiny_base_config,
    visible_gpus,
    vllm_version,
)
from sdpocl.preflight.report import STATUSES, Check, failed, format_report, header
from sdpocl.preflight.run import preflight_rule, run_preflight
from sdpocl.preflight.slurm import (
    DEFAULT_PROFILE,
    PRESET_RULES,
    RULES_DIR,
    read_profile,
    requested_gpus,
    rule_resources,
    slurm_requests,
)

__all__ = [
    "DEFAULT_PROFILE",
    "GIB",
    "HEADROOM",
    "OVERHEAD_GIB",
    "PRESET_RULES",
    "REFERENCE_GPU_GIB",
    "RESUME_BYTES_PER_PARAM",
    "RULES_DIR",
    "SAVED_BYTES_PER_PARAM",
    "STATUSES",
    "TOKENIZER_FILES",
    "VLLM_ASLEEP_GIB",
    "Check",
    "GpuNeed",
    "ModelInfo",
    "CostAssumptions",
    "grid_cost",
    "check_base",
    "check_cost",
    "check_disk",
    "check_gpus",
    "check_memory",
    "check_slurm",
    "check_vllm",
    "estimate_for",
    "failed",
    "format_report",
    "grid_disk_estimate",
    "grid_shape",
    "grid_stages",
    "header",
    "inspect_model",
    "min_gpus",
    "model_shape",
    "params_from_config",
    "preflight_rule",
    "read_profile",
    "requested_gpus",
    "resolve_base",
    "rule_resources",
    "run_preflight",
    "slurm_requests",
    "tiny_base_config",
    "train_memory_estimate",
    "visible_gpus",
    "vllm_fraction",
    "vllm_version",
]
