"""Two CPU ranks (torchrun, gloo) exercise the FSDP2 pieces that only show their bugs on several GPUs.

tests/dist/frozen_ranks.py runs under ``torchrun --nproc_per_node 2`` with the environment accelerate's
FSDP launch sets (``ACCELERATE_USE_FSDP``, ``FSDP_CPU_RAM_EFFICIENT_LOADING``: transformers then loads
zeros on every rank but local rank 0). The ``trl`` case is TRL's own way of building the SDPO teacher
and the KL reference: it must come out wrong on rank 1 (so the check would catch it); the others are
:mod:`sdpocl.train.frozen`'s way, which must be right on both ranks.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "dist" / "frozen_ranks.py"


CASES = ("trl", "frozen", "ema", "resume", "prefix", "finite", "reference")


def run_ranks(model_dir, work, cases) -> dict:
    """Every case in one torchrun launch (starting the ranks is most of the time); {case: {rank: values}}."""
    env = {
        **os.environ,
        "ACCELERATE_USE_FSDP": "true",
        "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
        str(SCRIPT), str(model_dir), str(work), *cases,
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    results = {}
    for m in re.finditer(r"RESULT (\w+) rank (\d) (\{.*?\})(?=RESULT|\n|$)", out):
        results.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {}).update(json.loads(m.group(3)))
    print(out[-2000:])
    return results


@pytest.fixture(scope="module")
def ranks(tiny_standin, tmp_path_factory):
    return run_ranks(tiny_standin[0], tmp_path_factory.mktemp("ranks"), CASES)


def test_grpo_kl_reference_sharded_per_layer_scores_as_the_full_model(ranks):
    """GRPO's KL reference under FSDP is built as SDPO's teacher (sharded per decoder layer, not one unit that
    gathers the whole model for every forward) with TRL's fused LM head: each rank's completion log-probs are the
    plain model's."""
    r = ranks["reference"]
    for rank in (0, 1):
        assert r[rank]["scored"] > 0 and r[rank]["max_abs_diff"] < 1e-5


def test_grpo_trainer_builds_its_kl_reference_as_a_checked_frozen_copy_under_fsdp(monkeypatch):
    """The wiring (accelerate runs CPU ranks as DDP): under FSDP, SchedGRPOTrainer replaces TRL's one-unit
    reference with :func:`sdpocl.train.fsdp.frozen_copy` of the reference's weights and adds the fused head."""
    from types import SimpleNamespace

    from sdpocl.train import grpo

    built, fused = [], []
    monkeypatch.setattr(grpo, "frozen_copy", lambda tr, source, what: built.append((source, what)) or "R")
    monkeypatch.setattr(grpo, "add_fused_lm_head", lambda model, **kw: fused.append((model, kw)))
    monkeypatch.setattr(grpo, "kl_reference_path", lambda tr: "/results/base/model")
    trainer = object.__new__(grpo.SchedGRPOTrainer)
    trainer.__dict__.update(
        args=SimpleNamespace(kl_reference="base", cast_lm_head_to_fp32=False),
        ref_model="TRL's one-unit reference",
        is_fsdp_enabled=True,
        temperature=1.0,
    )
    trainer._load_reference()
    assert built == [("/results/base/model", "KL reference")] and trainer.ref_model == "R"
    assert fused == [("R", {"temperature": 1.0, "cast_lm_head_to_fp32": False})]


def test_diverged_weights_are_decided_alike_on_every_rank(ranks):
    """train_stage asks "are the weights finite?" after trainer.train raises (diverged: record a collapse; else
    re-raise). Asked of each rank's own shard, rank 0 says finite and re-raises while rank 1 waits for it at the
    next collective; sdpocl.train.frozen.weights_finite sums the ranks' counts."""
    r = ranks["finite"]
    assert r[0]["rank_local"] is True and r[1]["rank_local"] is False  # the rank-local test disagrees
    assert r[0]["across_ranks"] is False and r[1]["across_ranks"] is False


def test_trl_way_leaves_rank1_with_zeros_and_the_check_catches_it(ranks):
    r = ranks["trl"]
    assert r[0]["local_embedding_abs_sum"] > 0
    assert r[1]["local_embedding_abs_sum"] == 0.0  # transformers' zeros, never broadcast
    assert "rank 1: the teacher's weights differ" in r[1]["error"]
    assert "another rank's teacher differs" in r[0]["error"]


def test_frozen_copy_is_right_on_every_rank(ranks):
    r = ranks["frozen"]
    for rank in (0, 1):
        assert r[rank]["checked"] > 0
        assert r[rank]["local_embedding_abs_sum"] > 0
    # rotary inv_freq (a buffer outside the state dict) equal on both ranks, and not zeros
    assert r[0]["inv_freq_abs_sums"] == r[1]["inv_freq_abs_sums"]
    assert all(v > 0 for v in r[1]["inv_freq_abs_sums"])


def test_ema_update_between_sharded_student_and_teacher(ranks):
    r = ranks["ema"]
    # teacher <- 0.95 teacher + 0.05 (parent + 0.25) == parent + 0.0125, element by element
    assert r[0]["ema_max_abs_error"] < 1e-6


def test_saved_teacher_resumes_identically_on_every_rank(ranks):
    r = ranks["resume"]
    assert r[0]["resumed_max_abs_diff"] == 0.0
    assert r[0]["checked"] == r[1]["checked"] > 0


def test_shared_prefixes_under_fsdp2_give_the_full_forward(ranks):
    """sdpocl.train.prefix on two ranks: the sharded frozen teacher's logits (no grad), a per-layer sharded
    student's reduce-scattered gradient shards and a DDP student's averaged gradients equal the full
    forward's, each rank on its own rows. (The two-process stages of tests/test_two_process.py run micro-batches
    of one completion, upstream's, where there is no prefix to share.)"""
    r = ranks["prefix"]
    for rank in (0, 1):
        assert r[rank]["teacher_max_abs_diff"] < 1e-5 * r[rank]["scale"]
        assert r[rank]["student_grad_rel_diff"] < 1e-5
        assert r[rank]["ddp_grad_rel_diff"] < 1e-5


def test_sdpo_trainer_builds_its_teacher_as_a_checked_frozen_copy_under_fsdp(monkeypatch):
    """The wiring the CPU ranks cannot reach (accelerate runs CPU ranks as DDP): under FSDP, MaskedSDPOTrainer
    builds a separate teacher through :func:`sdpocl.train.fsdp.frozen_copy`, never TRL's zero-filled one."""
    from types import SimpleNamespace

    from sdpocl.train import sdpo

    built = []
    monkeypatch.setattr(sdpo, "frozen_copy", lambda tr, source, what: built.append((source, what)) or "T")
    monkeypatch.setattr(sdpo.SDPOTrainer, "_setup_teacher_model", lambda self: built.append("trl"))
    for kind, callbacks in (("base", 0), ("ema", 1)):
        built.clear()
        trainer = object.__new__(sdpo.MaskedSDPOTrainer)
        added = []
        trainer.__dict__.update(
            args=SimpleNamespace(teacher_model_kind=kind),
            model=SimpleNamespace(config=SimpleNamespace(_name_or_path="/runs/parent/model")),
            is_fsdp_enabled=True,
            accelerator=None,
            add_callback=added.append,
        )
        trainer._setup_teacher_model()
        assert built == [("/runs/parent/model", "SDPO teacher")] and trainer.teacher_model == "T"
        assert len(added) == callbacks
    trainer.__dict__["args"] = SimpleNamespace(teacher_model_kind="live")
    built.clear()
    trainer._setup_teacher_model()
    assert built == ["trl"]  # the student itself: nothing to load
