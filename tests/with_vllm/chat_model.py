"""A tiny chat model that can do something: the rehearsal's stand-in (Qwen3 architecture, Qwen3's chat
template, sharded bf16 checkpoint) warmed up by SFT on the tiny preset's math records rendered with the chat
template (``enable_thinking=False``, as the paper preset renders its prompts). Its accuracy lies well inside
(0, 1) at the evaluation's sampling settings, so Acc@k compares two backends' sampling and GRPO / SDPO have
rewards that vary within a group (a random stand-in scores 0 everywhere: no update, no comparison)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from sdpocl.data.domains import generate
from sdpocl.prompts import DEFAULT_TEMPLATE_KWARGS, messages
from sdpocl.train.paper_base import build_standin

#: SFT steps x batch: ~20 s on one CPU thread
SFT_STEPS = 300
SFT_BATCH = 32


def build_chat_model(out: Path, *, seed: int = 0, steps: int = SFT_STEPS) -> tuple[Path, list[dict]]:
    """Build it into ``out``; returns (model directory, the math training records it saw)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import SFTConfig, SFTTrainer

    records = generate("math", "train", 594, seed)
    build_standin(out, [r["prompt"] + r["solution"] for r in records[:512]], vocab_size=400, hidden_size=96, seed=seed)
    tok = AutoTokenizer.from_pretrained(out)
    rows = [
        {
            "prompt": tok.apply_chat_template(
                messages(r), add_generation_prompt=True, tokenize=False, **DEFAULT_TEMPLATE_KWARGS
            ),
            "completion": r["solution"] + tok.eos_token,
        }
        for r in records
    ]
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        args = SFTConfig(
            output_dir=tmp,
            max_steps=steps,
            per_device_train_batch_size=SFT_BATCH,
            learning_rate=3e-3,
            lr_scheduler_type="cosine",
            warmup_steps=steps // 10,
            weight_decay=0.01,
            logging_steps=max(1, steps // 5),
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=False,
            max_length=256,
            completion_only_loss=True,
            seed=seed,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tok)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    trainer.model.to(torch.bfloat16).save_pretrained(out, max_shard_size="200KB")  # a hub-like bf16 checkpoint
    return out, records
