"""lm-eval-harness task definitions for sdpocl benchmarks (local JSONL, no network).

One YAML per benchmark is written by :func:`write_task_yaml`; lm-eval loads it with
``TaskManager(include_path=...)``. Each task samples ``repeats`` responses per prompt, keeps
*all* of them (``take_first_k`` with k = repeats — lm-eval's default filter would score only the
first) and scores every one with the training reward of the record's ``domain``, so training
and evaluation agree. The per-prompt metric ``acc`` is the mean over the samples, so lm-eval's
``mean`` aggregation over prompts is Acc@k and its stderr is the standard error over prompts.
The same tasks run by hand: ``lm_eval --include_path <dir> --tasks sdpocl_math ...``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import yaml

from sdpocl.prompts import plain_text

TASK_PREFIX = "sdpocl_"
FILTER = "all_samples"


def task_name(benchmark: str) -> str:
    return TASK_PREFIX + benchmark


def doc_to_text(doc: dict) -> str:
    """The prompt as trained on without a chat template (a record's system text in front)."""
    return plain_text(doc)


def doc_to_user(doc: dict) -> str:
    """The user turn of the prompt as trained on with the chat template (the system message is the
    task's per-document description, which lm-eval puts in a system message)."""
    return doc["prompt"]


#: lm-eval's per-document description: the record's system message (none when it has none)
SYSTEM_DESCRIPTION = "{{ (system if system is defined else '') or '' }}"


def score_samples(doc: dict, responses: list[str]) -> list[float]:
    """Reward of each sampled response, with the record's training reward and the limits set by
    ``sdpocl.rewards.configure`` (memoised per limits, so the sample log reuses lm-eval's scoring
    instead of running generated code twice)."""
    from sdpocl.rewards import current_limits

    limits = tuple(sorted(current_limits().items()))
    return list(
        _score(doc["domain"], str(doc.get("answer", "")), tuple(doc.get("tests") or ()), tuple(responses), limits)
    )


@functools.lru_cache(maxsize=4096)
def _score(domain: str, answer: str, tests: tuple, responses: tuple, limits: tuple) -> tuple:
    from sdpocl.rewards import reward_for

    n = len(responses)
    return tuple(reward_for(domain)(list(responses), answer=[answer] * n, tests=[json.dumps(list(tests))] * n))


def process_results(doc: dict, results: list) -> dict:
    """Per-prompt accuracy = mean reward over all kept samples (results[0] is the list of them)."""
    responses = results[0] if results and isinstance(results[0], list) else list(results)
    scores = score_samples(doc, responses)
    return {"acc": sum(scores) / len(scores) if scores else 0.0}


def task_config(
    benchmark: str,
    data_file: str | Path,
    *,
    repeats: int,
    temperature: float,
    top_p: float,
    max_gen_toks: int,
    chat_template: bool = False,
) -> dict:
    """The task of one benchmark; with ``chat_template`` the prompt is the record's messages (see
    :mod:`sdpocl.prompts`), to be rendered by ``simple_evaluate(apply_chat_template=True)``."""
    cfg = {
        "task": task_name(benchmark),
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "!function sdpocl.evaluate.tasks.doc_to_text",
        "doc_to_target": "answer",
        "process_results": "!function sdpocl.evaluate.tasks.process_results",
        "generation_kwargs": {
            "until": [],
            "do_sample": True,
            "temperature": temperature,
            "top_p": top_p,
            "max_gen_toks": max_gen_toks,
        },
        "repeats": repeats,
        "filter_list": [{"name": FILTER, "filter": [{"function": "take_first_k", "k": repeats}]}],
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1, "benchmark": benchmark},
    }
    if chat_template:
        cfg["doc_to_text"] = "!function sdpocl.evaluate.tasks.doc_to_user"
        cfg["description"] = SYSTEM_DESCRIPTION
    return cfg


def write_task_yaml(out: Path, benchmark: str, data_file: str | Path, **gen) -> Path:
    """Write the task YAML (``!function`` tags resolved by lm-eval against the installed sdpocl)."""
    text = yaml.safe_dump(task_config(benchmark, data_file, **gen), sort_keys=False)
    text = re.sub(r"'!function ([\w.]+)'", r"!function \1", text)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# lm-eval task for the sdpocl benchmark {benchmark!r} (written by sdpocl)\n" + text)
    return out
