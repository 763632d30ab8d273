"""Multi-GPU train jobs: the accelerate launch configuration shards with FSDP2 (tested on CPU:
accelerate does not run FSDP on CPU processes, so the configuration is checked as accelerate reads
it -- the launcher's environment and the FSDP plugin built from it)."""

from __future__ import annotations

import pytest

from sdpocl.train.launch import launch_command, write_launch_config


@pytest.fixture
def launch_env(tmp_path, monkeypatch):
    """The environment `accelerate launch` gives each rank, from our command and config file."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    cfg = write_launch_config(tmp_path / "fsdp.yaml")
    cmd = launch_command(4, ["train-stage", "--settings", "{}"], cfg)
    assert cmd[1:3] == ["-m", "accelerate.commands.launch"] and cmd[cmd.index("--config_file") + 1] == str(cfg)
    args = launch_command_parser().parse_args(cmd[3:])
    args, _, _ = _validate_launch_command(args)
    assert args.use_fsdp and args.num_processes == 4
    assert args.training_script == "sdpocl.cli" and args.module
    assert 0 < args.main_process_port < 65536 and args.main_process_port != 29500  # a free port, not the default
    return prepare_multi_gpu_env(args)


def test_launch_shards_with_fsdp2(launch_env):
    assert launch_env["ACCELERATE_USE_FSDP"] == "true"
    assert launch_env["FSDP_VERSION"] == "2"
    assert launch_env["FSDP_RESHARD_AFTER_FORWARD"] == "true"  # full shard, not DDP replicas
    assert launch_env["FSDP_AUTO_WRAP_POLICY"] == "TRANSFORMER_BASED_WRAP"
    assert launch_env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert launch_env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_fsdp_plugin_built_from_the_launch_environment(launch_env, monkeypatch):
    """What each rank's Accelerator builds from that environment: FSDP2, bf16 compute, fp32 params."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin

    for key, value in launch_env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
    assert str(plugin.state_dict_type).endswith("FULL_STATE_DICT")
    plugin.set_mixed_precision("bf16")
    policy = plugin.mixed_precision_policy
    assert policy.param_dtype == torch.bfloat16 and getattr(policy, "reduce_dtype", torch.float32) in (
        torch.float32,
        torch.bfloat16,
    )


def test_fsdp2_reduces_gradients_in_fp32(launch_env, monkeypatch):
    """accelerate's bf16 policy reduces in bf16; the trainers switch the plugin to fp32 reduction."""
    import torch
    from accelerate.utils import FullyShardedDataParallelPlugin

    from sdpocl.train.fsdp import use_fp32_reduction

    for key, value in launch_env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()
    plugin.set_mixed_precision("bf16")
    assert plugin.mixed_precision_policy.reduce_dtype == torch.bfloat16  # accelerate's own

    class Acc:
        class state:
            fsdp_plugin = plugin

    use_fp32_reduction(Acc)
    assert plugin.mixed_precision_policy.param_dtype == torch.bfloat16
    assert plugin.mixed_precision_policy.reduce_dtype == torch.float32


def test_two_launches_get_different_ports(tmp_path):
    cfg = write_launch_config(tmp_path / "fsdp.yaml")
    ports = {launch_command(2, [], cfg)[8] for _ in range(5)}
    assert len(ports) > 1


def test_single_gpu_and_cpu_jobs_are_not_relaunched(monkeypatch):
    from sdpocl.commands import train as cli

    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    assert cli._relaunch_on_gpus(["train-stage"]) is None
