"""The GPU extra installs, on the very versions the CPU path (and so CI) runs.

pip's resolver is asked for ``.[gpu,test]`` (a dry run against the package index: no download of the
wheels themselves); a ResolutionImpossible fails the test. The versions it picks for the libraries
whose behaviour on several ranks the tests rehearse must equal the ones installed here.
"""

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what a GPU run imports and the CPU tests must rehearse on the same version
SAME_ON_BOTH = ("torch", "transformers", "trl", "accelerate", "numpy", "pandas", "lm_eval", "datasets", "snakemake")


def _base(v: str) -> str:
    return v.split("+")[0]  # torch 2.13.0+cpu here, 2.13.0 (CUDA) on a GPU node


@pytest.fixture(scope="module")
def gpu_resolution(tmp_path_factory):
    report = tmp_path_factory.mktemp("pip") / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report"]
    proc = subprocess.run([*cmd, str(report), "-e", f"{ROOT}[gpu,test]"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "ResolutionImpossible" not in proc.stderr, proc.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    return {i["metadata"]["name"].lower().replace("-", "_"): i["metadata"]["version"] for i in installs}


def test_gpu_extra_resolves_with_vllm(gpu_resolution):
    assert "vllm" in gpu_resolution


@pytest.mark.parametrize("name", SAME_ON_BOTH)
def test_cpu_path_runs_the_gpu_paths_versions(gpu_resolution, name):
    assert _base(gpu_resolution[name]) == _base(version(name)), (
        f"{name}: the GPU extra resolves {gpu_resolution[name]}, this environment has {version(name)}"
    )
