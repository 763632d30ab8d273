"""build-base's SFT warm-up cut into length-sorted micro-batches (``base.sft_microbatches``) trains on
the same loss as one padded batch: the gradient-accumulated loss is normalised by the step's token
count (transformers' ``num_items_in_batch``), not averaged per micro-batch. Dealt to two CPU ranks
(``base.sft_ranks``: torchrun, gloo) the micro-batches give the same step again: the token count is
summed over the ranks before the gradients are all-reduced."""

from __future__ import annotations

import pytest

from sdpocl.train.base import build_base, sft_microbatches, sft_ranks

TINY = {
    "vocab_size": 300,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "sft_steps": 1,
    "sft_batch_size": 32,
    "sft_lr": 3.0e-3,
    "sft_examples": 32,  # one step sees every example, so both runs take the same batch
    "reprompt_frac": 0.4,
    "general_frac": 0.15,
    "seed": 0,
}


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_one_step_same_loss_and_update(tmp_path):
    import torch

    whole = build_base(TINY, {"seed": 1}, tmp_path / "whole", threads=1)
    cut = build_base(TINY | {"sft_microbatches": 4}, {"seed": 1}, tmp_path / "cut", threads=1)
    assert cut["sft_final_loss"] == pytest.approx(whole["sft_final_loss"], rel=1e-5)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "cut")
    init = _weights_at_init(tmp_path)
    moved = max((a[k] - init[k]).abs().max().item() for k in a)
    assert moved > 1e-4  # the step did move the weights
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=moved * 1e-3, msg=k)


def test_two_ranks_same_loss_and_update(tmp_path):
    """The whole build through torchrun (two processes, gloo), against one process with the same cuts."""
    import torch

    one = build_base(TINY | {"sft_microbatches": 4}, {"seed": 1}, tmp_path / "one", threads=1)
    two = build_base(TINY | {"sft_microbatches": 4, "sft_ranks": 2}, {"seed": 1}, tmp_path / "two", threads=1)
    assert (one["sft_ranks"], two["sft_ranks"]) == (1, 2)
    assert two["sft_final_loss"] == pytest.approx(one["sft_final_loss"], rel=1e-5)
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    init = _weights_at_init(tmp_path)
    moved = max((a[k] - init[k]).abs().max().item() for k in a)
    assert moved > 1e-4
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=moved * 1e-3, msg=k)
    assert (tmp_path / "two" / "tokenizer.json").read_text() == (tmp_path / "one" / "tokenizer.json").read_text()


def test_a_failing_rank_fails_the_build(tmp_path):
    with pytest.raises(RuntimeError, match=r"build-base on 2 ranks failed \(torchrun exit status [1-9]"):
        build_base(TINY | {"sft_microbatches": 4, "sft_ranks": 2, "sft_lr": "fast"}, {"seed": 1}, tmp_path, threads=1)
    assert not (tmp_path / "model.safetensors").exists()


def _processes_naming(marker: str) -> list[int]:
    from pathlib import Path

    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_cancelled_build_leaves_no_rank_behind(tmp_path):
    """SIGTERM to the job (Snakemake cancelling it) stops the torchrun agent and its ranks too."""
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "cancelled-base"
    cfg = TINY | {"sft_microbatches": 4, "sft_ranks": 2, "sft_steps": 2000, "sft_examples": 320}
    code = (
        "import json, sys; from pathlib import Path; from sdpocl.train.base import build_base; "
        f"build_base(json.loads(sys.argv[1]), {{'seed': 1}}, Path({str(out)!r}), threads=1)"
    )
    job = subprocess.Popen([sys.executable, "-c", code, json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
    for line in job.stdout:  # the ranks are training once rank 0 prints a step (every 200; the 2,000 take minutes)
        if "[build-base sft] step" in line:
            break
    assert len(_processes_naming(str(out))) >= 3  # the agent and two ranks
    job.send_signal(signal.SIGTERM)
    job.stdout.close()
    assert job.wait(timeout=60) != 0
    deadline = time.time() + 15  # left alone, the ranks would go on for minutes
    while _processes_naming(str(out)) and time.time() < deadline:
        time.sleep(0.5)
    assert _processes_naming(str(out)) == []
    assert not (out / "model.safetensors").exists()


def test_ranks_run_without_the_job_server():
    from sdpocl.jobserver import ENV
    from sdpocl.train import base

    assert base.JOB_SERVER_ENV == ENV


@pytest.mark.parametrize("ranks", [0, 3])
def test_ranks_must_divide_the_microbatches(ranks):
    with pytest.raises(ValueError, match=r"sft_ranks=\d+ must be >= 1 and divide base.sft_microbatches=4"):
        sft_ranks(TINY | {"sft_microbatches": 4, "sft_ranks": ranks})


def _weights_at_init(tmp_path):
    build_base(TINY | {"sft_steps": 0}, {"seed": 1}, tmp_path / "init", threads=1)
    return _weights(tmp_path / "init")


@pytest.mark.parametrize("micro", [0, 5])
def test_microbatches_must_divide_the_batch(micro):
    with pytest.raises(ValueError, match=r"sft_microbatches=\d+ must be >= 1 and divide base.sft_batch_size=32"):
        sft_microbatches(TINY | {"sft_microbatches": micro})


def test_sft_speed_bench_times_each_cut():
    """bench/sft_speed.py on the smoke config: a row per micro-batch count, each with its step time, its
    real-token share (higher when cut finer: the point of the cut) and a finite loss."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "bench/sft_speed.py", "--config", "config/smoke.yaml"]
        + ["--steps", "2", "--micro", "1,4", "--repeats", "1", "--threads", "1"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {r["sft_microbatches"]: r for r in map(json.loads, _rows(out.stdout))}
    assert set(rows) == {1, 4}
    assert all(r["s_per_step"] > 0 and r["loss"] > 0 for r in rows.values())
    assert rows[4]["real_token_share"] > rows[1]["real_token_share"]


def _rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith('{"sft_microbatches"')]
