"""`sdpocl preflight` (sdpocl.preflight): every check with a faked GPU, vLLM, base model and disk; the
memory estimate's arithmetic against hand-computed numbers; the Slurm requests; the CLI's exit status
and the on-demand rule `preflight`."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import re
import shutil
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from workflow_utils import ROOT, scheduled_jobs, snakemake

from sdpocl import preflight as pf
from sdpocl import resources
from sdpocl.cli import build_parser, main
from sdpocl.config import load_config, validate_config
from sdpocl.train.weights import weight_files

GIB = 2**30
DiskUsage = namedtuple("DiskUsage", "total used free")


@pytest.fixture
def paper():
    return load_config(ROOT / "config" / "paper.yaml")


@pytest.fixture
def tiny():
    return load_config(ROOT / "config" / "smoke.yaml")


def with_base(config: dict, base_dir: Path, **train) -> dict:
    config = copy.deepcopy(config)
    config["base"]["source"] = str(base_dir)
    config["train"].update(train)
    return config


def fake_gpus(monkeypatch, n: int, gib: float = 80.0, name: str = "NVIDIA H100 80GB HBM3"):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda i: SimpleNamespace(name=name, total_memory=int(gib * GIB))
    )


def no_vllm(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name, *a))


#: Qwen3-4B's shapes (its config.json): what the memory tests and docs/paper-preset.md's memory table use
QWEN3_4B = dict(hidden=2560, layers=36, vocab=151936, prompt_tokens=2048, response_tokens=8192)


def qwen3_4b_info(tmp_path, kv_per_token: int = 147_456) -> pf.ModelInfo:
    return pf.ModelInfo(
        path=tmp_path,
        n_params=4_022_468_096,
        file_bytes=8_044_936_192,
        hidden=2560,
        layers=36,
        vocab=151936,
        tied=True,
        kv_per_token=kv_per_token,
    )


# --- 1. GPUs ---------------------------------------------------------------------------------------------


def test_no_gpu_warns_for_the_paper_preset_and_is_fine_for_the_tiny_one(monkeypatch, paper, tiny):
    fake_gpus(monkeypatch, 0)
    check = pf.check_gpus(paper)
    assert check.status == "warn" and "no GPU visible (CPU node?)" in check.message
    assert "a train job asks for 4 GPU(s), an evaluation job for 1" in check.message
    assert "srun --nodes=1 --gpus=4" in check.fix
    check = pf.check_gpus(tiny)
    assert check.status == "ok" and "CPU jobs" in check.message


def test_gpus_visible_against_requested(monkeypatch, paper):
    fake_gpus(monkeypatch, 4)
    check = pf.check_gpus(paper)
    assert check.status == "ok" and check.message.startswith("4 GPU(s) visible")
    assert "cuda:3 NVIDIA H100 80GB HBM3, 80.0 GiB" in check.details
    fake_gpus(monkeypatch, 2)
    check = pf.check_gpus(paper)
    assert check.status == "warn" and check.message.startswith("2 GPU(s) visible")


def test_requested_gpus_follow_the_config_and_the_presets(paper, tiny):
    # null = the preset's (sdpocl.resources.PRESET_GPUS, as the rules ask for them)
    assert pf.requested_gpus(tiny)[0] == {"train": 0, "evaluate": 0, "single": 0}
    assert pf.requested_gpus(paper)[0] == {"train": 4, "evaluate": 1, "single": 1}
    nulls = copy.deepcopy(paper)
    nulls["train"]["gpus_per_job"] = nulls["evaluate"]["gpus_per_job"] = None
    gpus, notes = pf.requested_gpus(nulls)
    assert gpus == {"train": 4, "evaluate": 1, "single": 1} and "the paper preset's 4" in notes[0]
    old = copy.deepcopy(paper)
    del old["train"]["gpus_per_job"]  # a config from before the key: 1, and said so
    gpus, notes = pf.requested_gpus(old)
    assert gpus["train"] == 1 and "assuming 1" in notes[0]


# --- 2. vLLM ---------------------------------------------------------------------------------------------


def test_missing_vllm_fails_on_a_gpu_node_for_the_paper_preset(monkeypatch, paper):
    no_vllm(monkeypatch)
    monkeypatch.delenv("SDPOCL_ROLLOUTS", raising=False)
    gpu = [("NVIDIA H100", 80 * GIB)]
    check = pf.check_vllm(paper, gpu)
    assert check.status == "fail" and "vLLM is not installed" in check.message
    assert "pip install -e '.[gpu]'" in check.fix and "SDPOCL_ROLLOUTS=hf" in check.fix
    assert "evaluate.backend: hf" in check.fix
    # asking for transformers' generate in both places: a warning (slow), not a failure
    monkeypatch.setenv("SDPOCL_ROLLOUTS", "hf")
    hf = copy.deepcopy(paper)
    hf["evaluate"]["backend"] = "hf"
    assert pf.check_vllm(hf, gpu).status == "warn"
    # only one of the two: the other still needs vLLM
    check = pf.check_vllm(paper, gpu)
    assert check.status == "fail" and "(evaluation need it)" in check.message
    # on a CPU node vLLM is not needed
    assert pf.check_vllm(paper, []).status == "skip"


def test_vllm_present_reports_its_version(monkeypatch, paper):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else find_spec(name, *a)
    )
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.31.0")
    check = pf.check_vllm(paper, [("NVIDIA H100", 80 * GIB)])
    assert check.status == "ok" and check.message == "vLLM 0.31.0 importable"


def test_explicit_vllm_backend_without_vllm_fails_anywhere(monkeypatch, paper):
    no_vllm(monkeypatch)
    config = copy.deepcopy(paper)
    config["evaluate"]["backend"] = "vllm"
    assert pf.check_vllm(config, []).status == "fail"


# --- 3. the base model -----------------------------------------------------------------------------------


def test_a_complete_base_is_read_from_its_headers(tiny_standin, paper, tmp_path):
    from sdpocl.train.weights import load_tensors

    model, _ = tiny_standin
    check, info = pf.check_base(with_base(paper, model), tmp_path / "results")
    assert check.status == "ok", check
    assert "readable offline" in check.message and "chat template: yes" in check.details[2]
    # the headers' parameter count is the weights' (and the config formula's: Qwen3 with tied embeddings)
    assert info.n_params == sum(t.numel() for t in load_tensors(model).values())
    assert pf.params_from_config(json.loads((model / "config.json").read_text())) == info.n_params
    assert info.tied and info.layers == 2 and info.hidden == 32


def test_the_fetched_copy_is_what_the_jobs_read(tiny_standin, paper, tmp_path):
    model, _ = tiny_standin
    fetched = tmp_path / "results" / "base" / "model"
    shutil.copytree(model, fetched)
    path, how = pf.resolve_base(paper, tmp_path / "results")  # paper.yaml names Qwen/Qwen3-4B: not consulted
    assert path == fetched and "the workflow's copy" in how


def test_a_base_without_weights_fails(tiny_standin, paper, tmp_path):
    model, _ = tiny_standin
    broken = tmp_path / "broken"
    shutil.copytree(model, broken, ignore=shutil.ignore_patterns("*.safetensors", "*.index.json"))
    check, info = pf.check_base(with_base(paper, broken), tmp_path / "results")
    assert check.status == "fail" and info is None
    assert "holds no safetensors weights" in check.message and "base.source" in check.fix


def test_a_truncated_shard_fails(tiny_standin, paper, tmp_path):
    model, _ = tiny_standin
    broken = tmp_path / "truncated"
    shutil.copytree(model, broken)
    shard = weight_files(model)[0]
    data = shard.read_bytes()
    (broken / shard.name).write_bytes(data[: len(data) // 2])  # an interrupted download
    check, _ = pf.check_base(with_base(paper, broken), tmp_path / "results")
    assert check.status == "fail" and "unreadable safetensors header" in check.message


def test_a_hub_id_not_in_the_cache(monkeypatch, paper, tmp_path):
    config = copy.deepcopy(paper)
    config["base"]["model"] = "sdpocl-tests/no-such-model"
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    check, _ = pf.check_base(config, tmp_path / "results")
    assert check.status == "warn" and "not available offline" in check.message
    assert "fetch_base_model" in check.fix and "hf download sdpocl-tests/no-such-model" in check.fix
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the workflow itself would stop at parse time
    check, _ = pf.check_base(config, tmp_path / "results")
    assert check.status == "fail" and "HF_HUB_OFFLINE" in check.message


def test_tiny_preset_base_is_built_by_the_workflow(tiny, tmp_path):
    check, info = pf.check_base(tiny, tmp_path / "results")
    assert check.status == "ok" and "build_base" in check.message and info is None


# --- 4. memory -------------------------------------------------------------------------------------------


def test_memory_estimate_by_hand_for_qwen3_4b():
    """Qwen3-4B (4.02e9 parameters, hidden 2560, 36 layers, vocabulary 151,936), prompt 2,048 + response
    8,192 tokens, an SDPO teacher, 4 GPUs of 80 GiB, vLLM at 0.3. By hand (GiB = 2**30 bytes):

    weights  4 x 4.02e9 / 4 = 4.02e9 B                                   = 3.74392 GiB
    grads    the same                                                     = 3.74392
    adam     8 x 4.02e9 / 4 = 8.04e9 B                                    = 7.48783
    teacher  fp32 copy, sharded: = weights                                = 3.74392
    states   20 B x 4.02e9 / 4 = 20.1e9 B                                 = 18.71958
    gathered layer params (4.02e9 - 151936 x 2560) / 36 = 100,862,328.9;
             x 2 bytes (bf16) x 3 layers (2 student + 1 teacher) = 605,173,973 B = 0.56361
    activations 1 x 10,240 tokens x 2560 x 36 layers x 2 B = 1,887,436,800 B = 1.7578125
    logits   8,192 x 151,936 x 6 B (bf16 + fp32 log-softmax) x 2 (student + teacher)
             = 14,935,916,544 B                                           = 13.91015625
    overhead                                                              = 1.0
    update   18.71958 + 0.56361 + 1.7578125 + 13.91015625 + 1 + 1.5 (vLLM asleep) = 37.45116
    vllm     0.3 x 80                                                     = 24.0
    rollout  18.71958 + 1 + 24                                            = 43.71958
    total    max(rollout, update)                                         = 43.71958  (docs/paper-preset.md: ~44 GB)
    smallest GPU: max(update 37.45116, (18.71958 + 1) / 0.7 = 28.17083)  = 37.45116
    """
    est = pf.train_memory_estimate(4.02e9, 4, **QWEN3_4B, teacher=True, vllm_fraction=0.3, gpu_memory_gib=80)
    expected = {
        "weights": 3.74392,
        "grads": 3.74392,
        "adam": 7.48783,
        "teacher": 3.74392,
        "reference": 0.0,
        "states": 18.71958,
        "gathered": 0.56361,
        "activations": 1.7578125,
        "logits": 13.91015625,
        "overhead": 1.0,
        "update": 37.45116,
        "vllm": 24.0,
        "rollout": 43.71958,
        "total": 43.71958,
        "min_gpu_gib": 37.45116,
    }
    assert est == pytest.approx(expected, abs=1e-4)


def test_memory_estimate_by_hand_without_teacher_and_on_other_gpu_counts():
    """GRPO (no teacher): states 16 B x 4.02e9 / 4 = 14.97567, gathered 2 layers = 2/3 x 0.56361 = 0.37574,
    logits halved = 6.95508; update = 14.97567 + 0.37574 + 1.75781 + 6.95508 + 1 + 1.5 = 26.5643.
    SDPO on 2 GPUs: states double (37.43917); rollout 37.43917 + 1 + 24 = 62.43917, update 37.43917 + 0.56361 +
    1.75781 + 13.91016 + 1 + 1.5 = 56.17075; on 8: states 9.35979, rollout 34.35979. Fitting: the update phase
    within 75% of the GPU (60 GiB), the rollout phase within the 90% the engine's share may fill (72 GiB):
    2 GPUs fit (56.2 <= 60, 62.4 <= 72); 1 does not (update 93.6)."""
    grpo = pf.train_memory_estimate(4.02e9, 4, **QWEN3_4B, teacher=False)
    assert grpo["teacher"] == 0 and "vllm" not in grpo and "total" not in grpo
    assert grpo["gathered"] == pytest.approx(0.37574, abs=1e-4)
    assert grpo["logits"] == pytest.approx(6.95508, abs=1e-4)
    assert grpo["update"] == pytest.approx(26.5643, abs=1e-4)

    def at(n):
        return pf.train_memory_estimate(4.02e9, n, **QWEN3_4B, gpu_memory_gib=80)

    assert at(2)["total"] == pytest.approx(62.43917, abs=1e-4)
    assert at(8)["total"] == pytest.approx(34.35979, abs=1e-4)
    assert pf.min_gpus(at, 80) == 2
    # a KL reference adds one more sharded fp32 copy: 4 B x 4.02e9 / 4 = 3.74392
    ref = pf.train_memory_estimate(4.02e9, 4, **QWEN3_4B, reference=True, gpu_memory_gib=80)
    assert ref["total"] - at(4)["total"] == pytest.approx(3.74392, abs=1e-4)


def test_memory_check_against_the_visible_gpu(monkeypatch, paper, tmp_path):
    """The engine's share sized as the train job sizes it: on 4 GPUs (0.9 x 80 - 18.71958 - 1) / 80 = 0.65351, so
    the rollout phase fills 72.0 GiB; on 2, 0.41951 (update 56.2 <= 60: fits); on 1 the update phase (93.6 GiB)
    does not fit."""
    info = qwen3_4b_info(tmp_path)
    gpus = [("NVIDIA H100 80GB HBM3", 80 * GIB)] * 4
    monkeypatch.delenv("SDPOCL_VLLM_MEMORY", raising=False)
    check, need = pf.check_memory(paper, info, gpus)
    assert check.status == "ok" and "~72.0 GiB per GPU of 80.0" in check.message
    assert need == pf.GpuNeed(fewest=2, assumed=False)
    assert any(d.startswith("rollouts: vLLM gets 0.65 of 80.0 GiB (sized to 90% of the GPU") for d in check.details)
    assert any("whose KV cache also holds a step's sequences at full length: 8" in d for d in check.details)
    check, _ = pf.check_memory(with_base(paper, tmp_path, gpus_per_job=2), info, gpus)
    assert check.status == "ok"
    check, _ = pf.check_memory(with_base(paper, tmp_path, gpus_per_job=1), info, gpus)  # update 93.6 GiB
    assert check.status == "fail" and "does not fit" in check.message
    assert "train.gpus_per_job: 2" in check.fix
    # a share the user sets is taken as it is: rollout 18.7 + 1 + 16 = 35.7 < update 37.5
    monkeypatch.setenv("SDPOCL_VLLM_MEMORY", "0.2")
    check, _ = pf.check_memory(paper, info, gpus)
    assert "~37.5 GiB" in check.message and any("(SDPOCL_VLLM_MEMORY 0.2)" in d for d in check.details)


def test_the_engines_share_is_sized_to_what_the_trainer_keeps():
    """Qwen3-4B shapes (4.02e9 parameters, 147,456 B of KV cache per token), SDPO on 4 GPUs of 80 GiB, 10,240-token
    sequences, 64 per rank per step. By hand: the trainer keeps 20 B x 4.02e9 / 4 = 18.71958 GiB; the share
    (72 - 18.71958 - 1) / 80 = 0.65351 = 52.28042 GiB, less the engine's bf16 weights 7.48783 and its workspace
    2.5: KV cache 42.29259 GiB = 307,968 tokens = 30.1 sequences. At the former fixed 0.3: 24 - 9.98783 =
    14.01217 GiB = 102,035 tokens = 10.0 sequences. On 8 GPUs: 0.7705 -> 36.7 sequences >= 32: one wave."""
    from sdpocl.train.rollouts import rollout_memory

    def at(gpus, fraction=None):
        return rollout_memory(
            4.02e9,
            147_456,
            80,
            gpus,
            teacher=True,
            reference=False,
            sequence_tokens=10_240,
            rank_sequences=256 // gpus,
            fraction=fraction,
        )

    sized, fixed = at(4), at(4, 0.3)
    assert sized.resident_gib == pytest.approx(18.71958, abs=1e-4)
    assert sized.fraction == pytest.approx(0.6535, abs=1e-4) and sized.sized and not fixed.sized
    assert sized.kv_gib == pytest.approx(42.29259, abs=1e-3) and fixed.kv_gib == pytest.approx(14.01217, abs=1e-4)
    assert sized.sequences == pytest.approx(30.07, abs=0.01) and fixed.sequences == pytest.approx(9.96, abs=0.01)
    assert not sized.in_one_wave and at(8).in_one_wave and at(8).sequences == pytest.approx(36.7, abs=0.1)


def test_a_train_job_on_a_gpu_sizes_its_engine(monkeypatch, tiny_standin):
    """What build_trainer hands TRL on a GPU: the share from the stage's model files and batch."""
    from sdpocl.train.rollouts import rollout_kwargs, stage_rollout_memory

    monkeypatch.delenv("SDPOCL_VLLM_MEMORY", raising=False)
    monkeypatch.setattr("sdpocl.train.rollouts.vllm_installed", lambda: True)
    from types import SimpleNamespace

    settings = SimpleNamespace(
        family="sdpo",
        method_settings={},
        max_prompt_length=2048,
        max_completion_length=8192,
        prompts_per_step=32,
        num_generations=8,
    )
    memory = stage_rollout_memory(settings, tiny_standin[0], 4, 80.0)
    assert memory.rank_sequences == 64 and memory.sequence_tokens == 10_240 and memory.kv_tokens > 0
    assert rollout_kwargs(False, settings, memory)["vllm_gpu_memory_utilization"] == memory.fraction > 0.85
    monkeypatch.setenv("SDPOCL_VLLM_MEMORY", "0.4")
    assert stage_rollout_memory(settings, tiny_standin[0], 4, 80.0).fraction == 0.4


def test_memory_without_a_gpu_prints_the_estimate_only(monkeypatch, paper, tiny, tmp_path):
    monkeypatch.delenv("SDPOCL_VLLM_MEMORY", raising=False)
    check, need = pf.check_memory(paper, qwen3_4b_info(tmp_path), [])
    assert check.status == "skip" and "assumed 80 GiB" in check.message and need.assumed
    assert "per GPU (GiB): sharded states 18.7 (weights 3.7, grads 3.7, adam 7.5, teacher 3.7), overhead 1.0" in (
        check.details
    )
    check, _ = pf.check_memory(paper, None, [])
    assert check.status == "skip" and "config.json is not available" in check.message
    assert pf.check_memory(tiny, None, [])[0].status == "ok"  # CPU jobs


# --- 5. disk ---------------------------------------------------------------------------------------------


def test_grid_disk_estimate_by_hand(paper, tmp_path):
    """The paper grid: 9 runs x 4 chain stages, 3 runs also train science, tooluse and code alone (45 stages).
    save_every 10: math, science, tooluse 5 checkpoints, code 2; each stage also keeps its final model.
    Models kept: 9 x (6 + 6 + 6 + 3) + 3 x (6 + 6 + 3) = 189 + 45 = 234, each 4 bytes x 1e9 = 4 GB: 936 GB."""
    est = pf.grid_disk_estimate(paper, 10**9, tmp_path)
    assert (est["stages"], est["done"], est["model_bytes"]) == (45, 0, 4 * 10**9)
    assert est["kept"] == 234 * 4 * 10**9
    # 18 stages can run at once (9 math + 9 single-domain roots); the largest running stage: SDPO's resume state
    # besides its checkpoints (which are the kept ones, linked), AdamW 8 + EMA teacher 4 + FSDP's model copy 4 (4
    # GPUs per job) = 16 B/param, twice during a save (old and new side by side): 32 GB; at most `jobs` at once
    assert est["at_once"] == 18
    assert pf.grid_disk_estimate(paper, 10**9, tmp_path, jobs=1)["transient"] == 32 * 10**9
    one_gpu = {**paper, "train": {**paper["train"], "gpus_per_job": 1}}  # no FSDP: 2 x 12 B/param
    assert pf.grid_disk_estimate(one_gpu, 10**9, tmp_path, jobs=1)["transient"] == 24 * 10**9
    # a finished stage writes nothing more
    done = tmp_path / "runs" / "grpo_s0" / "math"
    done.mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    est = pf.grid_disk_estimate(paper, 10**9, tmp_path)
    assert (est["stages"], est["done"], est["kept"]) == (44, 1, 228 * 4 * 10**9)


def test_disk_check_with_little_and_much_free_space(monkeypatch, tiny_standin, paper, tmp_path):
    model, _ = tiny_standin
    config = with_base(paper, model)
    _, info = pf.check_base(config, tmp_path)
    est = pf.grid_disk_estimate(config, info.n_params, tmp_path, jobs=64)
    for free, status in [(1000, "fail"), (est["kept"] + 1, "warn"), (est["total"] * 2, "ok")]:
        monkeypatch.setattr(shutil, "disk_usage", lambda path, free=free: DiskUsage(10**15, 0, free))
        check = pf.check_disk(config, tmp_path / "results", info, jobs=64)
        assert check.status == status, (free, check)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: DiskUsage(10**15, 0, 1000))
    check = pf.check_disk(config, tmp_path / "results", info)
    assert "0.0 MB free" in check.message and "results=" in check.fix


# --- 6. the Slurm profile --------------------------------------------------------------------------------


def test_slurm_requests_per_rule_family(paper, tiny):
    profile = pf.read_profile(ROOT / "profiles" / "slurm")
    req = pf.slurm_requests(paper, profile)
    # the rules' own resources (train.gpus_per_job 4: max(8 threads, 8) CPUs and 48 GB per GPU), the profile's runtime
    assert {k: req["train_stage"][k] for k in ("gpu", "nodes", "cpus_per_task", "mem_mb", "runtime")} == {
        "gpu": 4,
        "nodes": 1,
        "cpus_per_task": 32,
        "mem_mb": 192000,
        "runtime": 240,
    }
    assert req["evaluate_checkpoint"]["gpu"] == 1 and req["compute_drift"]["gpu"] == 1
    assert req["response_drift"]["mem_mb"] == 16000 and "gpu" not in req["response_drift"]
    assert "build_base" not in req and "prepare_data" not in req  # tiny only; a local rule
    # the tiny preset: CPU jobs with the rules' own memory
    req = pf.slurm_requests(tiny, profile)
    assert "gpu" not in req["train_stage"] and req["train_stage"]["mem_mb"] == 2000 and "build_base" in req


def test_the_rules_resources_come_from_sdpocl_resources(paper, tiny):
    """Every `**job_resources(config, "<rule>")` in workflow/rules/*.smk sits in <rule> itself, and
    sdpocl.resources.RULE_GPUS (what preflight reports) names exactly those rules."""
    called = {}
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=\s*rule \w+:)", smk.read_text()):
            rule = re.match(r"\s*rule (\w+):", block)
            for arg in re.findall(r'job_resources\(config, "(\w+)"\)', block):
                called[arg] = rule.group(1) if rule else None
    assert called == {rule: rule for rule in resources.RULE_GPUS}
    train = resources.job_resources(paper, "train_stage")  # train.gpus_per_job 4
    assert train["gpu"] == 4 and train["mem_mb"] == 192000
    assert train["cpus_per_task"](None, 8) == 32 and train["cpus_per_task"](None, 12) == 48  # max(threads, 8) per GPU
    assert resources.job_resources(paper, "compute_drift")["gpu"] == 1
    assert resources.job_resources(paper, "evaluate_base")["mem_mb"] == 48000
    # the tiny preset: CPU jobs with the rules' own memory (compute_drift: the default)
    assert resources.job_resources(tiny, "train_stage") == {"mem_mb": 2000}
    assert resources.job_resources(tiny, "evaluate_checkpoint") == {"mem_mb": 3000}
    assert resources.job_resources(tiny, "compute_drift") == {}


def test_slurm_check_flags_too_few_gpus_for_the_memory(paper, tmp_path):
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile["set-resources"]["train_stage"]["gpu"] = 1  # a profile value replaces the rule's
    profile["set-resources"]["train_stag"] = {"runtime": 10}  # a typo
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(profile))
    check = pf.check_slurm(paper, path, pf.GpuNeed(fewest=4, assumed=False))
    assert check.status == "fail" and "train_stage asks for 1 GPU(s); the memory estimate needs 4" in check.message
    assert "train_stag" in check.message and "train.gpus_per_job: 4" in check.fix
    assert pf.check_slurm(paper, path, pf.GpuNeed(fewest=4, assumed=True)).status == "warn"
    check = pf.check_slurm(paper, ROOT / "profiles" / "slurm", pf.GpuNeed(fewest=4, assumed=False))
    assert check.status == "ok" and any(d.startswith("train_stage: gpu 4, nodes 1") for d in check.details)
    assert pf.check_slurm(paper, tmp_path / "none").status == "skip"


# --- the report, the CLI and the rule ----------------------------------------------------------------------


def test_report_and_cli_exit_status(monkeypatch, tiny_standin, paper, tmp_path, capsys):
    model, _ = tiny_standin
    fake_gpus(monkeypatch, 0)
    config = with_base(paper, model)
    config["results"] = str(tmp_path / "results")
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(config))
    validate_config(yaml.safe_load(path.read_text()))
    assert "preflight" in build_parser().format_help()

    monkeypatch.setattr(shutil, "disk_usage", lambda p: DiskUsage(10**15, 0, 10**14))
    out = tmp_path / "report.txt"
    assert main(["preflight", "--config", str(path), "--out", str(out)]) == 0  # warnings only
    report = capsys.readouterr().out
    assert report == out.read_text()
    assert "[WARN] gpus" in report and "no GPU visible (CPU node?)" in report
    assert "[  OK] base model" in report and "[  OK] disk" in report
    assert f"--config {path}" in report  # the fixes name the config file
    assert report.rstrip().splitlines()[-1].startswith("preflight passed (0 failed")

    monkeypatch.setattr(shutil, "disk_usage", lambda p: DiskUsage(10**15, 0, 1000))
    with pytest.raises(SystemExit) as exc:
        main(["preflight", "--config", str(path)])
    assert exc.value.code == 1
    report = capsys.readouterr().out
    assert "[FAIL] disk" in report and "preflight FAILED" in report


@pytest.mark.slow
def test_preflight_rule_on_demand_and_every_time(tmp_path):
    """`snakemake preflight` runs the checks (again on every call); `all` does not include it."""
    assert "preflight" not in scheduled_jobs(snakemake("-n", results=tmp_path).stdout)
    for _ in range(2):
        proc = snakemake("preflight", results=tmp_path, cores=1)
        assert "preflight passed" in proc.stdout + proc.stderr
    report = (tmp_path / "preflight.txt").read_text()
    assert report == (tmp_path / "logs" / "preflight.log").read_text()
    assert "config/smoke.yaml (preset tiny)" in report and "[  OK] slurm profile" in report


# --- 7. cost -------------------------------------------------------------------------------------------


SHAPE = {"n_params": 10**9, "embed": 10**8, "vocab": 10**5, "hidden": 1000, "layers": 10, "attn_width": 1000}


def test_forward_flops_by_hand():
    """2 x matrix parameters (1e9 - 1e8 embedding + 1e5 x 1e3 LM head = 1e9) + 4 x 10 layers x 1,000 x context."""
    from sdpocl.preflight.cost import forward_flops

    assert forward_flops(SHAPE, 100) == 2e9 + 4e6
    assert forward_flops(SHAPE, 0) == 2e9


def test_grid_cost_by_hand(paper, tmp_path):
    """One GRPO math stage of 1 rollout step x 2 prompts x 2 samples (4 rows); assumed prompt 20 tokens, responses
    half of 100; 1 TFLOPS at 100% (compute) and 50% (decoding). F(c) = 2e9 + 4e4 c FLOPs per token:
    rollout 4 x 20 x F(10) / 1e12 + 4 x 50 x F(45) / 0.5e12 = 0.16003 + 0.80144 s; update 4 x 70 x 4 x F(35) /
    1e12 = 2.24157 s; old log-probs 4 x 70 x F(35) / 1e12 = 0.56039 s. Evaluation: the stage's final model and the
    base (2 jobs) x math's 60 prompts (assumed: no prepared data) x 8 samples: per job 480 x 20 x F(10) / 1e12 +
    480 x 50 x F(45) / 0.5e12 = 19.20384 + 96.1728 s."""
    from sdpocl.preflight.cost import CostAssumptions, grid_cost

    config = copy.deepcopy(paper)
    config.update(domains=["math"], runs=[{"method": "grpo"}], single_domain_runs=[])
    config["train"].update(
        steps={"math": 1}, prompts_per_step=2, num_generations=2, max_completion_length={"math": 100}
    )
    config["evaluate"].update(ood=[], max_gen_toks=100)
    a = CostAssumptions(peak_tflops=1.0, compute_mfu=1.0, decode_mfu=0.5, prompt_tokens=20, response_fill=0.5)
    cost = grid_cost(config, SHAPE, tmp_path, a)
    h = {k: v * 3600 for k, v in cost["gpu_hours"].items()}  # seconds
    assert cost["stages"] == 1 and cost["evaluation_jobs"] == 2 and cost["prompts"] == {"math": 60}
    assert h["rollout"] == pytest.approx(0.16003 + 0.80144, rel=1e-3)
    assert h["update_grpo"] == pytest.approx(2.24157, rel=1e-3) and h["update_sdpo"] == 0
    assert h["teacher_and_reference"] == pytest.approx(0.56039, rel=1e-3)
    assert h["evaluate"] == pytest.approx(2 * (19.20384 + 96.1728), rel=1e-3)
    assert cost["prompts_assumed"] == ["math"]
    # the prepared data's count replaces the assumed one
    (tmp_path / "data" / "math").mkdir(parents=True)
    (tmp_path / "data" / "math" / "test.jsonl").write_text("{}\n" * 30)
    assert grid_cost(config, SHAPE, tmp_path, a)["prompts"] == {"math": 30}


def test_the_gpu_checks_measured_update_replaces_the_estimate(paper, tmp_path):
    from sdpocl.preflight.cost import grid_cost, measured_update

    report = {"shape": "qwen3-4b", "runs": [{"method": "sdpo", "forward_backward_s": 10.24}]}
    (tmp_path / "check.json").write_text(json.dumps(report))
    measured = measured_update(tmp_path / "check.json")
    assert measured == {"sdpo": pytest.approx(1e-3)}  # 10.24 s / 10,240 tokens
    plain, with_check = grid_cost(paper, SHAPE, tmp_path), grid_cost(paper, SHAPE, tmp_path, measured=measured)
    assert with_check["measured_update"] == ["sdpo"]
    assert with_check["gpu_hours"]["update_grpo"] == plain["gpu_hours"]["update_grpo"]
    assert with_check["gpu_hours"]["update_sdpo"] != plain["gpu_hours"]["update_sdpo"]
    # SDPO's teacher forward is inside the measured time: no longer added
    assert with_check["gpu_hours"]["teacher_and_reference"] < plain["gpu_hours"]["teacher_and_reference"]


def test_cost_check_for_the_paper_grid(paper, tmp_path):
    check = pf.check_cost(paper, tmp_path, qwen3_4b_info(tmp_path))
    assert check.status == "ok" and "GPU-hours" in check.message
    assert any(d.startswith("assumptions: H100 SXM, 989 TFLOPS") for d in check.details)
    assert any(d.startswith("train_stage (45 stages)") for d in check.details)
    assert any(d.startswith("evaluate (46 jobs") for d in check.details)
