"""Evaluation backends: the chat-template kwargs reach lm-eval's vLLM backend as it reads them
(Qwen3 without thinking, as in training), and a GPU without vLLM stops instead of silently
generating with transformers. vLLM is not installed here: its lm-eval module is a stub."""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path

import pytest

from sdpocl.evaluate.run import choose_backend, make_lm


def _vllm_init_params() -> set[str]:
    """The parameter names of the installed lm-eval's ``VLLM.__init__`` (read, not imported)."""
    import lm_eval

    tree = ast.parse((Path(lm_eval.__file__).parent / "models" / "vllm_causallms.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VLLM")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {a.arg for a in init.args.args + init.args.kwonlyargs} - {"self"}


class _StubVLLM:
    """lm-eval 0.4.13's ``VLLM.__init__`` as far as the chat template goes: ``enable_thinking`` is
    popped from ``chat_template_args`` and then overwritten by the ``enable_thinking`` argument;
    ``apply_chat_template`` passes ``enable_thinking=self.enable_thinking, **chat_template_args``."""

    PARAMS = _vllm_init_params()
    calls: list[dict] = []

    def __init__(self, enable_thinking=None, chat_template_args=None, **kwargs):  # kwargs: vLLM's LLM(...)
        self.calls.append({"enable_thinking": enable_thinking, "chat_template_args": chat_template_args, **kwargs})
        self.chat_template_args = dict(chat_template_args or {})
        self.chat_template_args.pop("enable_thinking", enable_thinking)
        self.enable_thinking = enable_thinking

    def template_kwargs(self) -> dict:
        return {"enable_thinking": self.enable_thinking, **self.chat_template_args}


def test_vllm_backend_gets_enable_thinking_as_its_own_argument(monkeypatch):
    from sdpocl.vllm_cpu import ENGINE_ENV

    for key, value in ENGINE_ENV.items():  # set on a CPU by vllm_lm: restored after the test
        monkeypatch.setenv(key, value)
    stub = types.ModuleType("lm_eval.models.vllm_causallms")
    stub.VLLM = _StubVLLM
    monkeypatch.setitem(sys.modules, "lm_eval.models.vllm_causallms", stub)
    _StubVLLM.calls.clear()
    kwargs = {"enable_thinking": False, "custom": 1}
    lm = make_lm("some/model", "vllm", batch_size=4, max_gen_toks=16, seed=3, template_kwargs=kwargs)
    assert isinstance(lm, _StubVLLM) and len(_StubVLLM.calls) == 1
    assert _StubVLLM.calls[0]["enable_thinking"] is False
    assert lm.template_kwargs() == {"enable_thinking": False, "custom": 1}  # what the template sees
    assert kwargs == {"enable_thinking": False, "custom": 1}  # the caller's settings untouched
    assert {"enable_thinking", "chat_template_args"} <= _StubVLLM.PARAMS
    # without template kwargs (plain prompts) nothing is forced
    lm = make_lm("some/model", "vllm", batch_size=4, max_gen_toks=16, seed=3, template_kwargs=None)
    assert lm.template_kwargs() == {"enable_thinking": None}


@pytest.fixture
def cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_gpu_without_vllm_stops_naming_the_extra(cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[gpu\]'.*evaluate\.backend: hf"):
        choose_backend("auto")
    assert choose_backend("hf") == "hf"  # asked for: transformers' generate on the GPU


def test_gpu_with_vllm_uses_it_and_cpu_uses_hf(cuda, monkeypatch):
    import torch

    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    assert choose_backend("auto") == "vllm"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", None)
    assert choose_backend("auto") == "hf"


def test_every_sampling_setting_is_stated_in_the_task(tmp_path):
    """Both backends sample what the task says: without a top-k the HF backend takes the checkpoint's generation
    config's (Qwen3's 20, transformers' 50) where vLLM takes none. The default (50) is what the tiny preset's
    evaluations were drawn with; the paper preset states 0 (off, as upstream)."""
    import yaml

    from sdpocl.config import load_config
    from sdpocl.evaluate.tasks import DEFAULT_TOP_K, task_config

    kwargs = dict(repeats=2, temperature=0.6, top_p=0.95, max_gen_toks=16)
    gen = task_config("math", tmp_path / "x.jsonl", **kwargs)["generation_kwargs"]
    assert gen["top_k"] == DEFAULT_TOP_K == 50 and gen["temperature"] == 0.6 and gen["top_p"] == 0.95
    assert task_config("math", tmp_path / "x.jsonl", top_k=0, **kwargs)["generation_kwargs"]["top_k"] == 0
    root = Path(__file__).resolve().parents[1]
    assert load_config(root / "config" / "paper.yaml")["evaluate"]["top_k"] == 0
    assert load_config(root / "config" / "config.yaml")["evaluate"]["top_k"] == DEFAULT_TOP_K
    assert yaml.safe_load((root / "config" / "config.yaml").read_text())["evaluate"].get("top_k") is None
