"""GPU check: one GRPO and one SDPO update of a Qwen3-4B-shaped model at the paper's lengths, through the stage's
own trainers (:func:`sdpocl.train.stage.build_trainer` on config/paper.yaml's settings: micro-batch 1, gradient
checkpointing, fp32 master weights under bf16 autocast, SDPO's frozen teacher and its top-100 distillation), with
the peak GPU memory and the times beside the memory estimate (docs/paper-preset.md's table,
:func:`sdpocl.preflight.train_memory_estimate`). For the day a GPU is lent: no network, no vLLM (the batch is
made up, not sampled: the update is what is measured), a few minutes on one H100 or H200.

    python bench/gpu_check.py                   # on a GPU: Qwen3-4B's shape, prompt 2,048 + response 8,192
    python bench/gpu_check.py --shape tiny      # anywhere, seconds: the same code (CI runs it)

One GPU holds every state of the model (N = 1: fp32 weights, gradients, AdamW's moments, the teacher: 80 GB for
SDPO at 4B, more than an H100 has, which the script reports as such) and one micro-batch's work (activations,
logits). A train job on 4 GPUs holds a quarter of the states and the same work per rank (one sequence per
micro-batch) plus two all-gathered layers, so the measured peak bounds the 4-rank figure from above; the report
also gives ``work`` = peak - states (what the estimate's activations and logits should match) and the 4-rank
figure it implies: states / 4 + work + the gathered layers.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: model shapes (config.json fields) and the lengths they are checked at
SHAPES = {
    "qwen3-4b": {
        "model": dict(
            hidden_size=2560,
            intermediate_size=9728,
            num_hidden_layers=36,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
        ),
        "prompt": 2048,
        "response": 8192,
        "reprompt": 10240,
    },
    "tiny": {
        "model": dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            vocab_size=1024,
        ),
        "prompt": 48,
        "response": 64,
        "reprompt": 96,
    },
}
RUNS = {"grpo": "grpo_s0", "sdpo": "sdpo_a0_s0"}
GIB = 2**30


def build_model(shape: dict, out: Path, device) -> int:
    """A Qwen3 of ``shape`` with random weights, saved as a hub checkpoint would be (bf16 safetensors, Qwen3's
    chat template and a tokenizer: the rehearsal's stand-in's); returns its parameter count."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from sdpocl.train.paper_base import build_standin

    corpus = [line for p in sorted((ROOT / "tests" / "fixtures" / "paper").glob("*.json*")) for line in p.open()]
    build_standin(out, corpus, vocab_size=512, hidden_size=64)  # the tokenizer and chat template
    standin = json.loads((out / "config.json").read_text())
    for f in out.glob("model*.safetensors*"):
        f.unlink()
    cfg = Qwen3Config(
        **shape["model"],
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        eos_token_id=standin["eos_token_id"],
        pad_token_id=standin["pad_token_id"],
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size="2GB")
    n = sum(p.numel() for p in model.parameters())
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return n


def settings_for(method: str, shape: dict) -> dict:
    from sdpocl.config import load_config, run_by_name, stage_settings

    cfg = load_config(ROOT / "config" / "paper.yaml")
    return stage_settings(cfg, run_by_name(cfg, RUNS[method]), ("math",)).replace(
        max_prompt_length=shape["prompt"],
        max_completion_length=shape["response"],
        max_reprompt_length=shape["reprompt"],
        steps=1,
        warmup_steps=0,
    )


def batch(method: str, shape: dict, vocab: int, device) -> dict:
    """One micro-batch at full length: a random prompt and response (one sequence, upstream's micro-batch); for
    SDPO the teacher's re-prompt (prompt + demonstration, the re-prompt limit) before the same response."""
    import torch

    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(10, vocab, (1, shape["prompt"]), generator=gen)
    response = torch.randint(10, vocab, (1, shape["response"]), generator=gen)
    out = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones_like(prompt),
        "completion_ids": response,
        "completion_mask": torch.ones_like(response),
        "advantages": torch.tensor([1.0]),
    }
    if method == "sdpo":
        reprompt = torch.randint(10, vocab, (1, shape["reprompt"]), generator=gen)
        teacher = torch.cat([reprompt, response], 1)
        out.update(
            teacher_input_ids=teacher,
            teacher_attention_mask=torch.ones_like(teacher),
            self_distillation_mask=torch.ones(1),
        )
    return {k: v.to(device) for k, v in out.items()}


def update(method: str, shape: dict, model_dir: Path, work: Path) -> dict:
    """One micro-batch forward and backward and one optimizer step of the stage's trainer; times and memory."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from sdpocl.train.stage import build_trainer

    cuda = torch.cuda.is_available()
    settings = settings_for(method, shape)
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": "1+1?"}]] * 4, "answer": ["2"] * 4})

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t0 = time.time()
    trainer = build_trainer(settings, model_dir, data, tok, [lambda completions, **kw: [0.0] * len(completions)], work)
    sync()
    t_build = time.time() - t0
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # as train() sets it
    inputs = batch(method, shape, shape["model"]["vocab_size"], trainer.accelerator.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = {"method": method, "build_s": round(t_build, 2)}
    try:
        t0 = time.time()
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
        sync()
        out["forward_backward_s"] = round(time.time() - t0, 3)
        out["loss"] = float(loss.detach())
        out["grad_norm"] = float(
            torch.norm(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None]))
        )
        t0 = time.time()
        optimizer = trainer.create_optimizer()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        out["optimizer_step_s"] = round(time.time() - t0, 3)
    except torch.OutOfMemoryError as exc:
        out["out_of_memory"] = str(exc).splitlines()[0]
    if cuda:
        out["peak_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
        out["gpu_gib"] = round(torch.cuda.get_device_properties(0).total_memory / GIB, 2)
    del trainer, model, inputs
    if cuda:
        torch.cuda.empty_cache()
    return out


def estimate(method: str, shape: dict, n_params: int, gpus: int) -> dict:
    """docs/paper-preset.md's estimate of the update phase for ``gpus`` ranks, without vLLM (not here)."""
    from sdpocl.preflight import train_memory_estimate

    m = shape["model"]
    est = train_memory_estimate(
        n_params,
        gpus,
        hidden=m["hidden_size"],
        layers=m["num_hidden_layers"],
        vocab=m["vocab_size"],
        prompt_tokens=shape["prompt"],
        response_tokens=shape["response"],
        teacher=method == "sdpo",
        vllm_asleep_gib=0.0,
        overhead_gib=0.0,
    )
    return {k: round(v, 4) for k, v in est.items() if k in ("states", "gathered", "activations", "logits", "update")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    p.add_argument("--methods", default="grpo,sdpo")
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one; the 4B model is 8 GB)")
    a = p.parse_args()

    import torch

    os.environ.setdefault("SDPOCL_ROLLOUTS", "hf")  # no vLLM here: the update is measured, not the rollouts
    shape = SHAPES[a.shape]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report = {"shape": a.shape, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "runs": []}
    with tempfile.TemporaryDirectory(dir=a.work) as tmp:
        t0 = time.time()
        n_params = build_model(shape, Path(tmp) / "model", device)
        report["n_params"] = n_params
        report["model_build_s"] = round(time.time() - t0, 1)
        print(f"[gpu-check] {a.shape}: {n_params:,} parameters on {report['device']}", flush=True)
        for method in a.methods.split(","):
            run = update(method, shape, Path(tmp) / "model", Path(tmp) / f"out-{method}")
            one, four = estimate(method, shape, n_params, 1), estimate(method, shape, n_params, 4)
            run["estimate_1_gpu"], run["estimate_4_gpus"] = one, four
            if "peak_gib" in run:
                run["work_gib"] = round(run["peak_gib"] - one["states"], 3)  # activations, logits, buffers
                run["implied_4_gpus_gib"] = round(one["states"] / 4 + run["work_gib"] + four["gathered"], 3)
            report["runs"].append(run)
            print(f"[gpu-check] {json.dumps(run)}", flush=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
