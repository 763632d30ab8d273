"""lm-eval-harness task definitions for sdpocl benchmarks (local JSONL, no network).

One YAML per benchmark is written by :func:`write_task_yaml`; lm-eval loads it with
``TaskManager(include_path=...)``. Each task samples ``repeats`` responses per prompt, keeps
*all* of them (``take_first_k`` with k = repeats — lm-eval's default filter would score only the
first) and scores every one with the training reward of the record's ``domain``, so training
and evaluation agree (a filter after ``take_first_k`` scores the whole benchmark in one batch per
domain; ``process_results`` then reads the memo). The per-prompt metric ``acc`` is the mean over
the samples, so lm-eval's ``mean`` aggregation over prompts is Acc@k and its stderr is the
standard error over prompts.
The same tasks run by hand: ``lm_eval --include_path <dir> --tasks sdpocl_math ...``.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import yaml

from sdpocl.prompts import plain_text

TASK_PREFIX = "sdpocl_"
FILTER = "all_samples"
#: ``evaluate.top_k``'s default: transformers' own, which the HF backend applied before the task stated a top-k
#: (the tiny preset's evaluations were drawn with it); the paper preset's is 0 (off, as upstream's and vLLM's)
DEFAULT_TOP_K = 50


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
    return list(score_batch([doc], [responses])[0])


#: scores already computed: (domain, answer, tests, responses, limits) -> one score per response
_SCORES: OrderedDict[tuple, tuple] = OrderedDict()
_MAX_SCORES = 4096


def score_batch(docs: Sequence[dict], responses: Sequence[Sequence[str]]) -> list[tuple]:
    """The scores of many prompts' responses, with one reward call per domain for all that are not
    memoised yet. Why: the code reward starts one sandbox runner per call, so scoring a benchmark
    prompt by prompt (lm-eval's ``process_results``) starts 100 runners where one does."""
    from sdpocl.rewards import current_limits, reward_for

    limits = tuple(sorted(current_limits().items()))
    keys = [
        (d["domain"], str(d.get("answer", "")), tuple(d.get("tests") or ()), tuple(r), limits)
        for d, r in zip(docs, responses, strict=True)
    ]
    todo: dict[str, list[tuple]] = {}
    for key in dict.fromkeys(keys):  # distinct, in order
        if key not in _SCORES:
            todo.setdefault(key[0], []).append(key)
    for domain, domain_keys in todo.items():
        answers = [answer for _, answer, _, resp, _ in domain_keys for _ in resp]
        tests = [json.dumps(list(t)) for _, _, t, resp, _ in domain_keys for _ in resp]
        flat = [r for key in domain_keys for r in key[3]]
        scores = reward_for(domain)(flat, answer=answers, tests=tests) if flat else []
        at = 0
        for key in domain_keys:
            _SCORES[key] = tuple(scores[at : at + len(key[3])])
            at += len(key[3])
    out = []
    for key in keys:
        _SCORES.move_to_end(key)
        out.append(_SCORES[key])
    while len(_SCORES) > _MAX_SCORES:
        _SCORES.popitem(last=False)
    return out


def prescore(resps: list, docs: list) -> list:
    """lm-eval filter (after ``take_first_k``): score every prompt's kept samples in one batch so
    that ``process_results`` finds them memoised; the responses pass through unchanged."""
    resps = list(resps)  # the previous filter may hand over an iterator (take_first_k: a map)
    score_batch(docs, [list(r) if isinstance(r, list | tuple) else [r] for r in resps])
    return resps


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
    top_k: int = DEFAULT_TOP_K,
    chat_template: bool = False,
) -> dict:
    """The task of one benchmark; with ``chat_template`` the prompt is the record's messages (see
    :mod:`sdpocl.prompts`), to be rendered by ``simple_evaluate(apply_chat_template=True)``. Every sampling
    setting is stated (temperature, top-p, top-k: 0 is off in both backends), so that the HF backend does not
    take what a checkpoint's generation config leaves (Qwen3's top-k 20) where vLLM takes its own defaults."""
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
            "top_k": top_k,
            "max_gen_toks": max_gen_toks,
        },
        "repeats": repeats,
        "filter_list": [
            {
                "name": FILTER,
                "filter": [
                    {"function": "take_first_k", "k": repeats},
                    {"function": "custom", "filter_fn": "!function sdpocl.evaluate.tasks.prescore"},
                ],
            }
        ],
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
