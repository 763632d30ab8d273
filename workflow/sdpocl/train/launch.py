"""Multi-GPU train-stage jobs: one process per GPU under ``accelerate launch``, parameters,
gradients and optimizer state sharded with FSDP (as upstream's FSDP workers).

Plain ``accelerate launch`` without a config is DDP: every GPU would then hold the fp32 master
weights, the gradients and the AdamW state of the whole model (about 64 GB for a 4B model) beside
the EMA teacher and vLLM. The launch configuration below shards them (FSDP2, full shard, one
wrapped unit per decoder layer), keeps fp32 master weights with bf16 compute, and gathers full
state dicts for saving, so every saved model is a complete, loadable safetensors model.

``fsdp_cpu_ram_efficient_loading`` makes transformers load the weights on rank 0 only (zeros elsewhere):
accelerate broadcasts the student's; the SDPO teacher and KL references are broadcast and checked by
:mod:`sdpocl.train.frozen`. Gradients are reduced in fp32 (:func:`sdpocl.train.fsdp.use_fp32_reduction`)
and every micro-batch (``sync_each_batch``, :mod:`sdpocl.train.plan`), so no unsharded bf16 gradients
pile up under ``no_sync``. Each launch takes a free rendezvous port: two jobs on one node do not race
for accelerate's default 29500.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import yaml

#: accelerate's config-file keys (``accelerate config`` writes the same)
FSDP_LAUNCH = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "FSDP",
    "mixed_precision": "bf16",  # autocast; the sharded master weights stay fp32
    "num_machines": 1,
    "machine_rank": 0,
    "main_training_function": "main",
    "rdzv_backend": "static",
    "same_network": True,
    "use_cpu": False,
    "fsdp_config": {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": True,  # FULL_SHARD: parameters, gradients, optimizer state
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",  # the model's _no_split_modules (decoder layers)
        "fsdp_state_dict_type": "FULL_STATE_DICT",  # saves gather a full model on rank 0
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_sync_module_states": True,
        "fsdp_offload_params": False,
        "fsdp_activation_checkpointing": False,  # train.gradient_checkpointing does it
    },
}


def write_launch_config(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(FSDP_LAUNCH, sort_keys=False))
    return path


def free_port() -> int:
    """A TCP port free on this node now (the OS picks it), for the ranks' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(n_processes: int, argv: list[str], config_file: str | Path, port: int | None = None) -> list[str]:
    """The command that reruns ``sdpocl <argv>`` under accelerate with ``n_processes`` FSDP ranks."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(config_file),
        "--num_processes",
        str(n_processes),
        "--main_process_port",
        str(port if port is not None else free_port()),
        "-m",
        "sdpocl.cli",
        *argv,
    ]
