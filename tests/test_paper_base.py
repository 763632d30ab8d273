"""The paper preset's base model: hub id or local directory resolved once (fetch_base_model), and
sharded safetensors read and copied like single files."""

from __future__ import annotations

import pytest
import torch
from workflow_utils import snakemake

from sdpocl.train.paper_base import BaseModelError, build_standin, check_base_available, fetch_base_model
from sdpocl.train.weights import INDEX, load_tensors, weight_files


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    out = tmp_path_factory.mktemp("standin") / "model"
    texts = ["Compute 2+3. Please reason step by step.", "<answer>B</answer> Action: f", "def f(x): return x"] * 20
    return build_standin(out, texts, vocab_size=300, hidden_size=32, max_shard_size="40KB")


def test_standin_is_sharded_with_a_qwen3_chat_template(sharded):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    files = weight_files(sharded)
    assert len(files) >= 2 and (sharded / INDEX).exists()
    tok = AutoTokenizer.from_pretrained(sharded)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    model = AutoModelForCausalLM.from_pretrained(sharded)
    state = load_tensors(sharded)
    for name, tensor in model.state_dict().items():
        if name in state:
            assert torch.equal(state[name].to(tensor.dtype), tensor), name
    assert all(bool(torch.isfinite(t).all()) for t in state.values())


def test_missing_shard_is_a_clear_error(sharded, tmp_path):
    import shutil

    dst = shutil.copytree(sharded, tmp_path / "broken")
    weight_files(dst)[0].unlink()
    with pytest.raises(FileNotFoundError, match="missing shard"):
        weight_files(dst)


def test_fetch_links_a_local_directory_or_mirror(sharded, tmp_path):
    out = fetch_base_model(str(sharded), tmp_path / "base")
    assert {p.name for p in out.iterdir()} == {p.name for p in sharded.iterdir()}
    assert all(p.is_symlink() for p in out.iterdir())  # no copy of the weights
    mirrored = fetch_base_model("Qwen/Qwen3-4B", tmp_path / "base2", source=str(sharded))
    assert load_tensors(mirrored).keys() == load_tensors(sharded).keys()


def test_missing_local_copies_are_named(tmp_path):
    with pytest.raises(BaseModelError, match="not a directory"):
        check_base_available("Qwen/Qwen3-4B", source=str(tmp_path / "nowhere"))
    with pytest.raises(BaseModelError, match="looks like a local path"):
        check_base_available(str(tmp_path / "nowhere"))


def test_offline_without_a_snapshot_names_the_model(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(BaseModelError, match="'Qwen/Qwen3-4B' is not available offline"):
        check_base_available("Qwen/Qwen3-4B")
    with pytest.raises(BaseModelError, match="Qwen/Qwen3-4B"):
        fetch_base_model("Qwen/Qwen3-4B", tmp_path / "base")
    assert not (tmp_path / "base").exists()


def test_offline_paper_preset_stops_before_any_job(tmp_path):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    proc = snakemake("-n", results=tmp_path / "r", configfile="config/paper.yaml", check=False, env=env)
    assert proc.returncode != 0
    assert "base model 'Qwen/Qwen3-4B' is not available offline" in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()


def test_paper_preset_resolves_its_base_once(tmp_path):
    """One fetch_base_model job feeds stage 1 of every run, evaluate_base and compute_drift."""
    from workflow_utils import dry_run_jobs

    proc = snakemake("-n", results=tmp_path, configfile="config/paper.yaml")
    jobs = dry_run_jobs(proc.stdout)
    assert sum(j["rule"] == "fetch_base_model" for j in jobs) == 1
    assert not any(j["rule"] == "build_base" for j in jobs)
