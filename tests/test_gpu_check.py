"""bench/gpu_check.py, the check prepared for a lent GPU, at its tiny shape on this CPU so that it cannot rot: the
model it builds loads through the stage's own trainers, one GRPO and one SDPO update run (a finite loss, gradients,
an optimizer step), and the report carries the estimate it is compared with."""

from __future__ import annotations

import json
import math
import subprocess

from workflow_utils import BIN, ROOT


def test_gpu_check_runs_one_update_of_each_method_at_the_tiny_shape():
    proc = subprocess.run(
        [str(BIN / "python"), "bench/gpu_check.py", "--shape", "tiny"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index("{\n") :])
    assert report["shape"] == "tiny" and report["n_params"] > 0
    runs = {r["method"]: r for r in report["runs"]}
    assert runs.keys() == {"grpo", "sdpo"}
    for run in runs.values():
        assert "out_of_memory" not in run
        assert math.isfinite(run["loss"]) and run["grad_norm"] > 0
        assert run["forward_backward_s"] > 0 and run["optimizer_step_s"] > 0
        assert run["estimate_1_gpu"]["states"] > run["estimate_4_gpus"]["states"] > 0
    assert runs["sdpo"]["estimate_1_gpu"]["states"] > runs["grpo"]["estimate_1_gpu"]["states"]  # the teacher


def test_the_gpu_machine_script_runs_the_check(tmp_path):
    """bench/gpu_check.sh, the one command for a lent GPU, here at the tiny shape with the machine's packages."""
    import os

    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "SKIP_INSTALL": "1", "SHAPE": "tiny"}
    env["OUT"] = str(tmp_path)
    proc = subprocess.run(
        ["bash", "bench/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["method"] for r in report["runs"]] == ["grpo", "sdpo"]
    assert "=== gpu_check: exit status 0" in (tmp_path / "console.txt").read_text()
