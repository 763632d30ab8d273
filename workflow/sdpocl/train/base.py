"""build-base for the tiny preset: a BPE tokenizer and a small Qwen3 model warmed up by SFT.

The warm-up mixes the four domains, and a share of the examples is in SDPO's re-prompt format
(prompt + a correct demonstration -> answer): without it the re-prompted teacher is
off-distribution and SDPO loses every success within a few steps (NOTES.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sdpocl.data import domains
from sdpocl.data.benchmarks import general_examples
from sdpocl.data.synthetic.common import _stable_int

EOS = "<|endoftext|>"
#: sdpocl.jobserver.ENV (not imported: the job server sits above the training code); torchrun's ranks run
#: without it, in processes of their own
JOB_SERVER_ENV = "SDPOCL_JOB_SERVER"


def train_tokenizer(vocab_size: int, seed: int, out_dir: Path, difficulty: dict | None = None):
    """Byte-level BPE trained on the synthetic corpus, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Digits are split one by one, as Qwen's own tokenizer does: arithmetic stays learnable.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False)
    corpus = list(domains.corpus(seed, difficulty=difficulty))
    reasoning = domains.Difficulty.of(difficulty).reasoning
    corpus += [text for r in general_examples(600, seed, reasoning) for text in (r["prompt"], r["solution"])]
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, model_max_length=1024)
    fast.save_pretrained(out_dir)
    return fast


def init_model(tokenizer, cfg: dict, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    mcfg = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg["hidden_size"],
        intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_layers"],
        num_attention_heads=cfg["num_heads"],
        num_key_value_heads=cfg["num_kv_heads"],
        head_dim=cfg["hidden_size"] // cfg["num_heads"],
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    return Qwen3ForCausalLM(mcfg)


def warmup_examples(cfg: dict, difficulty: dict | None = None) -> list[dict]:
    """The SFT warm-up: the four domains (a share in SDPO's re-prompt format) and, for
    ``general_frac`` of the examples, the OOD benchmarks' task types (their train split), standing
    in for the general skills a real base model brings from pretraining."""
    import random

    n_general = round(cfg["sft_examples"] * cfg["general_frac"])
    examples = domains.sft_mixture(cfg["sft_examples"] - n_general, cfg["seed"], cfg["reprompt_frac"], difficulty)
    reasoning = domains.Difficulty.of(difficulty).reasoning
    examples += [
        {"prompt": r["prompt"], "completion": r["solution"]}
        for r in general_examples(n_general, cfg["seed"], reasoning)
    ]
    random.Random(_stable_int("sdpocl-warmup", cfg["seed"])).shuffle(examples)
    return [{"prompt": ex["prompt"], "completion": ex["completion"]} for ex in examples]


def sft_microbatches(cfg: dict) -> int:
    """Micro-batches per SFT step (``base.sft_microbatches``). A warm-up batch mixes domains whose
    examples run from ~30 to ~200 tokens, so padding one batch to its longest wastes ~40% of the
    arithmetic; cut by length, each micro-batch pads to its own longest."""
    micro = int(cfg.get("sft_microbatches", 1))
    if micro < 1 or cfg["sft_batch_size"] % micro:
        raise ValueError(
            f"base.sft_microbatches={micro} must be >= 1 and divide base.sft_batch_size={cfg['sft_batch_size']}"
        )
    return micro


def sft_ranks(cfg: dict) -> int:
    """CPU processes the SFT warm-up runs on (``base.sft_ranks``). The tiny model's matrices are too
    small for two threads to share one step well (1.4x on two cores); two data-parallel ranks of one
    thread each split every step's micro-batches between them (transformers' batch_rebalance sampler
    deals each rank its cost-balanced share) and all-reduce the gradients over gloo: the same loss."""
    ranks = int(cfg.get("sft_ranks", 1))
    if ranks < 1 or sft_microbatches(cfg) % ranks:
        raise ValueError(
            f"base.sft_ranks={ranks} must be >= 1 and divide base.sft_microbatches={cfg.get('sft_microbatches', 1)}"
            " (each rank takes whole micro-batches of every step)"
        )
    return ranks


def world() -> tuple[int, int]:
    """(rank, world size) of this process under torchrun; (0, 1) outside it."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _build_on_ranks(cfg: dict, data_cfg: dict, out_dir: Path, ranks: int) -> dict:
    """Rerun ``sdpocl build-base`` under torchrun with ``ranks`` CPU processes of one thread each;
    rank 0 saves the model and the report, returned here. The ranks import their libraries afresh
    (not through the job server: torchrun must own its workers)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
            "-m", "sdpocl.cli", "build-base", "--settings", json.dumps({"base": cfg, "data": data_cfg}),
            "--out", str(out_dir), "--report", str(report), "--threads", "1",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != JOB_SERVER_ENV} | {"OMP_NUM_THREADS": "1"}
        print(f"[build-base] SFT warm-up on {ranks} CPU ranks (torchrun, gloo), one thread each", flush=True)
        status = _run_forwarding_sigterm(cmd, env)
        if status != 0:
            raise RuntimeError(
                f"build-base on {ranks} ranks failed (torchrun exit status {status}; the ranks' errors are above)."
                " base.sft_ranks: 1 builds the base in this process"
            )
        return json.loads(report.read_text())


def _run_forwarding_sigterm(cmd: list[str], env: dict) -> int:
    """Run ``cmd``; a SIGTERM to this process (Snakemake cancelling the job) terminates it too, so no
    torchrun agent outlives its job (the agent then stops its ranks)."""
    import signal
    import threading

    proc = subprocess.Popen(cmd, env=env)
    if threading.current_thread() is not threading.main_thread():
        return proc.wait()
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def build_base(cfg: dict, data_cfg: dict, out_dir: Path, threads: int = 2) -> dict:
    """Train tokenizer, init and SFT-warm the model, save it to ``out_dir``; return a summary.
    With ``base.sft_ranks`` > 1 the warm-up runs data-parallel on that many processes (torchrun)."""
    ranks = sft_ranks(cfg)
    rank, n_ranks = world()
    if ranks > 1 and n_ranks == 1 and cfg["sft_steps"] > 0:
        return _build_on_ranks(cfg, data_cfg, Path(out_dir), ranks)

    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    torch.set_num_threads(threads)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    difficulty = data_cfg.get("difficulty")  # the training domains' task sizes (None: the defaults)
    scratch = tempfile.TemporaryDirectory()  # ranks other than 0 write their (identical) tokenizer here
    tokenizer = train_tokenizer(cfg["vocab_size"], data_cfg["seed"], out_dir if rank == 0 else scratch.name, difficulty)
    model = init_model(tokenizer, cfg, cfg["seed"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"[build-base] tokenizer: {len(tokenizer)} tokens; model: {n_params / 1e6:.2f}M parameters", flush=True)

    summary = {"vocab_size": len(tokenizer), "n_params": n_params, "sft_steps": cfg["sft_steps"]}
    micro = sft_microbatches(cfg)
    if cfg["sft_steps"] > 0:
        examples = warmup_examples(cfg, difficulty)
        with tempfile.TemporaryDirectory() as tmp:
            args = SFTConfig(
                output_dir=tmp,
                max_steps=cfg["sft_steps"],
                per_device_train_batch_size=cfg["sft_batch_size"] // micro,
                # each optimizer step's sft_batch_size examples, sorted by length and cut into `micro`
                # micro-batches (transformers' BatchRebalanceSampler): little padding, the same loss;
                # on several ranks each takes micro // n_ranks of them
                gradient_accumulation_steps=micro // n_ranks,
                ddp_backend="gloo" if n_ranks > 1 else None,
                ddp_find_unused_parameters=False,  # every parameter is used: no extra autograd traversal
                train_sampling_strategy="batch_rebalance" if micro > 1 else "random",
                learning_rate=cfg["sft_lr"],
                lr_scheduler_type="cosine",
                warmup_steps=min(50, cfg["sft_steps"] // 10),
                weight_decay=0.01,
                logging_steps=max(1, cfg["sft_steps"] // 10),
                save_strategy="no",
                report_to=[],
                use_cpu=not torch.cuda.is_available(),
                bf16=False,
                gradient_checkpointing=False,
                max_length=384,
                completion_only_loss=True,
                seed=cfg["seed"],
                disable_tqdm=True,
                dataloader_num_workers=0,
            )
            trainer = SFTTrainer(
                model=model,
                args=args,
                train_dataset=Dataset.from_list(examples),
                processing_class=tokenizer,
                callbacks=[_print_logs("build-base sft")],
            )
            trainer.remove_callback(PrinterCallback)
            t_sft = time.time()
            trainer.train()
            summary["sft_seconds"] = round(time.time() - t_sft, 1)
            model = trainer.model
            summary["sft_final_loss"] = trainer.state.log_history[-1].get("train_loss")
            summary["sft_ranks"] = n_ranks
    scratch.cleanup()
    if rank == 0:
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
    summary["seconds"] = round(time.time() - t0, 1)
    return summary


def _print_logs(tag: str):
    """A TrainerCallback printing each log line with its step, so the warm-up shows progress."""
    from transformers import TrainerCallback

    class PrintLogs(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                keep = {k: round(v, 4) if isinstance(v, float) else v for k, v in logs.items()}
                print(f"[{tag}] step {state.global_step}/{state.max_steps} {json.dumps(keep)}", flush=True)

    return PrintLogs()
