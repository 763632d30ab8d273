"""Is SDPO's teacher better than its student on a domain? A check to run before an SDPO stage.

SDPO pulls the student's token distribution toward the teacher's on the student's own samples,
where the teacher is the same model re-prompted with a successful sibling sample as the
demonstration (docs/paper.md, "SDPO precisely"). That helps only where the re-prompted teacher is the
better policy. On the tiny preset it is on MATH (the demonstration's answer lets it solve) but
not on SCIENCE, where the longer re-prompt breaks the small model's copying of the option list:
SDPO_0 then loses SCIENCE (docs/experiments/2026-12-02-row-23-teacher-check.md).

The check samples the student on a domain's prompts, builds the teacher's re-prompt exactly as
the SDPO stage does (the first *other* successful sample of the group, ``<think>`` stripped
unless ``keep_thinking``), and reports

- ``student_acc``: mean reward of the student's samples;
- ``teacher_acc``: mean reward of samples drawn from the re-prompted teacher, on the prompts
  where the student had a success (compare ``student_acc_with_demonstration``, the student's on
  the same prompts);
- ``logp_gap``: teacher minus student log-probability per token of the student's *successful*
  samples (the tokens whose distribution SDPO moves); negative means that distilling toward the
  teacher makes the student's correct answers less likely;
- ``logp_gap_failures``: the same on the failed samples of those groups. A teacher that helps
  has ``logp_gap`` above ``logp_gap_failures``: it raises what succeeded relative to what failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sdpocl.config.stage import StageSettings
from sdpocl.data.domains import teacher_prompt
from sdpocl.prompts import messages, plain_text
from sdpocl.rewards import make_reward


def options_from_settings(settings: StageSettings) -> dict[str, Any]:
    """:func:`check_teacher`'s options from a stage's settings (``sdpocl.config.stage_settings``):
    its group size, completion length, rollout temperature, demonstration and prompt format."""
    fmt = settings.prompt_format or {}
    method = settings.method_settings or {}
    return dict(
        samples=settings.num_generations,
        max_new_tokens=settings.max_completion_length,
        temperature=settings.temperature,
        keep_thinking=not method.get("remove_thinking_from_demonstration", True),
        success_threshold=method.get("success_reward_threshold", 0.5),
        chat_template=bool(fmt.get("chat_template")),
        template_kwargs=fmt.get("template_kwargs") or {},
    )


def _render(tokenizer, record: dict, user_text: str, chat_template: bool, template_kwargs: dict) -> str:
    """The model's input text for ``record`` with its user turn replaced by ``user_text``."""
    if not chat_template:
        return plain_text({**record, "prompt": user_text})
    conv = messages({**record, "prompt": user_text})
    return tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True, **template_kwargs)


def _completion_ids(row: Sequence[int], eos: int | None) -> list[int]:
    """Generated ids up to and including the first end-of-sequence token."""
    out = []
    for t in row:
        out.append(int(t))
        if t == eos:
            break
    return out


def check_teacher(
    model_dir: str | Path,
    records: list[dict[str, Any]],
    *,
    samples: int = 8,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    keep_thinking: bool = False,
    success_threshold: float = 0.5,
    chat_template: bool = False,
    template_kwargs: dict | None = None,
    seed: int = 0,
    threads: int = 1,
    progress: bool = True,
    rewards: Mapping[str, Callable[..., list[float]]] | None = None,
    teacher_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Student and re-prompted-teacher accuracy and log-prob gap on ``records`` (see the module).
    A sample is a success (a demonstration) at reward >= ``success_threshold``, SDPO's
    ``success_reward_threshold``. ``teacher_dir``: the teacher's weights when they are not the
    student's (SDPO_0 mid-stage: the stage's start, the student a checkpoint). ``rewards`` maps a
    domain to its reward function (default: the training rewards)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sdpocl.generation import model_kwargs, speed_up
    from sdpocl.gpu import use_gpu_kernels

    if samples < 2:
        raise ValueError(f"samples must be >= 2 (a demonstration is another sample of the group), got {samples}")
    if not records:
        raise ValueError("no records to check")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    device = torch.device("cuda" if use_gpu_kernels() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # the paper preset's models on a GPU

    def load(path):
        net = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **model_kwargs(device.type == "cpu"))
        net = net.to(device).eval()
        speed_up(net)  # a group's samples share one prefill, as in the rollouts
        return net

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load(model_dir)
    teacher_model = model if teacher_dir is None else load(teacher_dir)
    eos = tok.eos_token_id
    kwargs = dict(template_kwargs or {})
    domains = sorted({r["domain"] for r in records})
    rewards = {d: (rewards or {}).get(d) or make_reward(d) for d in domains}

    def score(rec: dict, texts: list[str]) -> list[float]:
        n = len(texts)  # every column but the prompt, as TRL passes a dataset's columns to its rewards
        columns = {k: [v] * n for k, v in rec.items() if k != "prompt"}
        return rewards[rec["domain"]](texts, prompts=[rec["prompt"]] * n, **columns)

    @torch.no_grad()
    def sample(text: str, net) -> list[list[int]]:
        ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids.to(device)
        out = net.generate(
            input_ids=ids.repeat(samples, 1),
            attention_mask=torch.ones(samples, ids.shape[1], dtype=torch.long, device=device),
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos,
        )
        return [_completion_ids(row, eos) for row in out[:, ids.shape[1] :].tolist()]

    @torch.no_grad()
    def logp(net, text: str, completion: list[int]) -> float:
        ctx = tok(text, add_special_tokens=False).input_ids
        ids = torch.tensor([ctx + completion], device=device)
        logits = (net(ids).logits[0, len(ctx) - 1 : -1].float() / temperature).log_softmax(-1)  # as SDPO's
        return logits.gather(-1, ids[0, len(ctx) :, None]).sum().item()

    student: list[float] = []
    student_demo: list[float] = []  # the student on the prompts that have a demonstration
    teacher: list[float] = []
    gaps: list[float] = []  # per-token teacher - student log-prob, one per successful sample
    fail_gaps: list[float] = []  # the same on the failed samples of groups with a demonstration
    with_demo = 0
    for k, rec in enumerate(records):
        s_text = _render(tok, rec, rec["prompt"], chat_template, kwargs)
        ids = sample(s_text, model)
        texts = tok.batch_decode(ids, skip_special_tokens=True)
        r = score(rec, texts)
        student += r
        ok = [i for i, x in enumerate(r) if x >= success_threshold]
        if ok:
            with_demo += 1
            student_demo += r
            demo = texts[ok[0]].strip()
            reprompt = teacher_prompt(rec["prompt"], demo, keep_thinking=keep_thinking)
            t_text = _render(tok, rec, reprompt, chat_template, kwargs)
            teacher += score(rec, tok.batch_decode(sample(t_text, teacher_model), skip_special_tokens=True))
            # every sample but the demonstration (ok[0], the first *other* success of each of them)
            for i in range(len(r)):
                if i != ok[0] and ids[i]:
                    gap = (logp(teacher_model, t_text, ids[i]) - logp(model, s_text, ids[i])) / len(ids[i])
                    (gaps if r[i] >= success_threshold else fail_gaps).append(gap)
        if progress and (k + 1) % 10 == 0:
            print(f"[teacher-check] {k + 1}/{len(records)} prompts", flush=True)

    def mean(v: list[float]) -> float | None:
        return sum(v) / len(v) if v else None

    def stderr(v: list[float]) -> float | None:
        if len(v) < 2:
            return None
        m = mean(v)
        return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1) / len(v))

    return {
        "model": str(model_dir),
        "teacher": str(teacher_dir or model_dir),
        "domains": domains,
        "prompts": len(records),
        "samples": samples,
        "keep_thinking": keep_thinking,
        "student_acc": mean(student),
        "student_acc_with_demonstration": mean(student_demo),
        "teacher_acc": mean(teacher),
        "prompts_with_demonstration": with_demo,
        "logp_gap": mean(gaps),
        "logp_gap_stderr": stderr(gaps),
        "successful_samples_compared": len(gaps),
        "logp_gap_failures": mean(fail_gaps),
        "failed_samples_compared": len(fail_gaps),
    }
