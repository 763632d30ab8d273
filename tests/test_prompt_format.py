"""One prompt format: a record of every paper source, rendered through the training path (TRL's own
prompt tokenization, GRPO and SDPO, with the stage's chat-template kwargs) and through the evaluation
path (our lm-eval task, lm-eval's request building and HFLM's encoding), gives identical token ids."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from workflow_utils import ROOT

from sdpocl.config import expand_runs, load_config, stage_settings
from sdpocl.data.loaders import SOURCES, load_records
from sdpocl.prompts import messages, resolve_prompt_format, training_prompt

REHEARSAL = load_config(ROOT / "config" / "rehearsal.yaml")


def _sources() -> dict:
    return {k: (v if isinstance(v, dict) else {"train": v, "test": v}) for k, v in REHEARSAL["data"]["sources"].items()}


def _one_record_per_source() -> list[tuple[str, dict]]:
    out = []
    for name, files in sorted(_sources().items()):
        split = "train" if "train" in SOURCES[name].splits else "test"
        recs = load_records(name, split, seed=42, data_files=str(ROOT / files[split]))
        out.append((name, recs[0]))
    return out


RECORDS = _one_record_per_source()


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    from sdpocl.train.paper_base import build_standin

    out = tmp_path_factory.mktemp("standin") / "model"
    texts = [
        line for p in sorted((ROOT / "tests/fixtures/paper").glob("*.json*")) for line in p.read_text().splitlines()
    ]
    return build_standin(out, texts, vocab_size=512, hidden_size=32)


def test_every_source_and_the_system_prompts_are_covered():
    assert {name for name, _ in RECORDS} == set(REHEARSAL["data"]["sources"])
    assert any(rec.get("system") for _, rec in RECORDS), "SciKnowEval-style records carry a system prompt"


def _training_ids(tokenizer, records, template_kwargs) -> dict[str, list[list[int]]]:
    """Prompt ids as TRL's GRPOTrainer and SDPOTrainer compute them (their own methods)."""
    from trl import GRPOTrainer
    from trl.experimental.sdpo import SDPOTrainer

    prompts = [training_prompt(rec, chat_template=True) for rec in records]
    grpo = SimpleNamespace(
        processing_class=tokenizer,
        chat_template_kwargs=template_kwargs,
        _is_vlm=False,
        environment_factories=None,
        tools=None,
        chat_template=None,
    )
    sdpo = SimpleNamespace(processing_class=tokenizer, chat_template_kwargs=template_kwargs)
    grpo_ids = GRPOTrainer._tokenize_prompts(grpo, prompts)[0]
    sdpo_ids = SDPOTrainer._tokenize_prompts_untruncated(sdpo, prompts)
    return {"grpo": [list(x) for x in grpo_ids], "sdpo": [list(x) for x in sdpo_ids]}


def _evaluation_ids(model_dir, records, settings, tmp_path) -> list[list[int]]:
    """Prompt ids as evaluate-checkpoint computes them: our task YAML, lm-eval's requests, HFLM."""
    from lm_eval.tasks import TaskManager

    from sdpocl.evaluate.run import make_lm
    from sdpocl.evaluate.tasks import task_name, write_task_yaml

    lm = make_lm(
        str(model_dir), "hf", batch_size=4, max_gen_toks=8, seed=0, template_kwargs=settings["template_kwargs"]
    )
    ids = []
    for i, rec in enumerate(records):
        data = tmp_path / f"b{i}.jsonl"
        data.write_text(json.dumps(rec) + "\n")
        write_task_yaml(
            tmp_path / "tasks" / f"b{i}.yaml",
            f"b{i}",
            data,
            repeats=1,
            temperature=0.6,
            top_p=0.95,
            max_gen_toks=8,
            chat_template=settings["chat_template"],
        )
        tm = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
        task = tm.load([task_name(f"b{i}")])["tasks"][task_name(f"b{i}")] if hasattr(tm, "load") else None
        if task is None or not hasattr(task, "build_all_requests"):
            from lm_eval.tasks import get_task_dict

            task = get_task_dict([task_name(f"b{i}")], tm)[task_name(f"b{i}")]
        task.build_all_requests(
            limit=1,
            rank=0,
            world_size=1,
            apply_chat_template=True,
            chat_template=lm.apply_chat_template,
            tokenizer_name=lm.tokenizer_name,
        )
        context = task.instances[0].args[0]
        encoded, mask = lm.tok_batch_encode([context])
        ids.append([t for t, m in zip(encoded[0].tolist(), mask[0].tolist()) if m])
    return ids


def test_training_and_evaluation_prompts_are_token_identical(standin, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from transformers import AutoTokenizer

    fmt = resolve_prompt_format(REHEARSAL)
    assert fmt == {"chat_template": True, "template_kwargs": {"enable_thinking": False}}
    run = expand_runs(REHEARSAL)[0]
    assert stage_settings(REHEARSAL, run, ("math",)).prompt_format == fmt  # what train-stage receives
    eval_settings = {**REHEARSAL["evaluate"], **fmt}  # what evaluate-checkpoint receives (EVAL_SETTINGS)
    records = [rec for _, rec in RECORDS]
    tokenizer = AutoTokenizer.from_pretrained(standin)
    train = _training_ids(tokenizer, records, fmt["template_kwargs"])
    evaluation = _evaluation_ids(standin, records, eval_settings, tmp_path)
    for (name, rec), grpo, sdpo, ev in zip(RECORDS, train["grpo"], train["sdpo"], evaluation):
        assert grpo == sdpo == ev, name
        text = tokenizer.decode(ev)
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), (name, text[-80:])  # no thinking
        if rec.get("system"):
            assert text.startswith("<|im_start|>system\n" + rec["system"]), name
        else:
            assert text.startswith("<|im_start|>user\n"), name


def test_sdpo_reprompt_keeps_the_system_message():
    """TRL's re-prompt rewrites only the user turn of the conversation it is given."""
    rec = next(rec for _, rec in RECORDS if rec.get("system"))
    conv = messages(rec)
    assert conv[0] == {"role": "system", "content": rec["system"]} and conv[-1]["role"] == "user"


def test_rehearsal_differs_from_the_paper_preset_only_in_sizes():
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    rehearsal = yaml.safe_load((ROOT / "config" / "rehearsal.yaml").read_text())
    assert rehearsal["preset"] == paper["preset"] == "paper"
    assert Path(rehearsal["base"]["model"]).parts[0] == "rehearsal"  # a local stand-in, not a hub id
    for key in ("lr", "weight_decay", "max_grad_norm", "temperature"):
        assert rehearsal["train"].get(key, paper["train"].get(key)) == paper["train"].get(key), key
    for key in ("temperature", "top_p", "ood"):
        assert rehearsal["evaluate"][key] == paper["evaluate"][key], key
    assert set(rehearsal["data"]["sources"]) >= set(paper["evaluate"]["ood"])
