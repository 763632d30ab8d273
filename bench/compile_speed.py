"""Bench: would ``torch.compile`` (inductor, CPU) speed up the tiny model's rollout step?

A rollout step of the tiny preset is generation, forwards and a backward (``bench/step_phases.py``). This
times, on one thread as a train-stage job runs, eager against compiled, each in its own process (one compile
per job, as a stage would pay it): ``--shape train``, one forward and backward of ``--batch`` rows of
``--tokens`` tokens; ``--shape decode``, a prompt of ``--tokens`` tokens then ``--new`` greedy tokens on a
key/value cache (compiled with dynamic shapes). Printed: the compile's seconds (the first call), the seconds
per call after ``--warmup`` untimed calls (mean of ``--calls``), and each mode's first loss (train) or last
logits' mean (decode), which agree to float rounding (a JSON report last).

    python bench/compile_speed.py --model results/base/model
    python bench/compile_speed.py --model results/base/model --shape decode --batch 128 --tokens 30 --calls 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def one(model_dir: str, compiled: bool, shape: str, batch: int, tokens: int, new: int, warmup: int, calls: int) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from sdpocl.generation import model_kwargs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, **model_kwargs(on_cpu=True))  # the jobs' attention
    ids = torch.randint(1, model.config.vocab_size, (batch, tokens))
    # decoding grows the key/value cache by one token a call: a graph for every length unless dynamic
    run = torch.compile(model, dynamic=shape == "decode") if compiled else model

    def train() -> float:
        model.zero_grad(set_to_none=True)
        logits = run(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        loss = torch.log_softmax(logits.float(), -1)[..., 1].mean()
        loss.backward()
        return float(loss)

    @torch.no_grad()
    def decode() -> float:
        out = run(input_ids=ids, past_key_values=DynamicCache(), use_cache=True)
        for _ in range(new):
            token = out.logits[:, -1:].argmax(-1)
            out = run(input_ids=token, past_key_values=out.past_key_values, use_cache=True)
        return float(out.logits[:, -1].mean())

    step = train if shape == "train" else decode
    model.train(shape == "train")
    t = time.perf_counter()
    check = step()
    first = time.perf_counter() - t
    for _ in range(warmup):
        step()
    t = time.perf_counter()
    for _ in range(calls):
        step()
    seconds = (time.perf_counter() - t) / calls
    return {"compiled": compiled, "first_call_s": first, "s_per_call": seconds, "check": check}  # unrounded: > 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a saved model folder, e.g. results/base/model")
    ap.add_argument("--shape", choices=["train", "decode"], default="train", help="forward and backward, or generation")
    ap.add_argument("--batch", type=int, default=32, help="rows (train: GRPO's 32; decode: a rollout's 128)")
    ap.add_argument("--tokens", type=int, default=110, help="tokens a row (train: prompt + completion; decode: prompt)")
    ap.add_argument("--new", type=int, default=40, help="decode: tokens generated a call (MATH's completion limit)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--one", choices=["eager", "compiled"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.model, a.one == "compiled", a.shape, a.batch, a.tokens, a.new, a.warmup, a.calls)))
        return
    results = {}
    for mode in ("eager", "compiled"):
        out = subprocess.run(
            [sys.executable, __file__, *sys.argv[1:], "--one", mode], check=True, capture_output=True, text=True
        ).stdout
        results[mode] = json.loads(out.strip().splitlines()[-1])
        first, per_call = results[mode]["first_call_s"], results[mode]["s_per_call"]
        print(f"{mode:9s} first call {first:6.2f} s, {per_call:.3f} s a call")
    ratio = results["compiled"]["s_per_call"] / results["eager"]["s_per_call"]
    print(f"compiled / eager: {ratio:.2f}x a call")
    gap = abs(results["compiled"]["check"] - results["eager"]["check"])
    report = {"shape": a.shape, "modes": results, "ratio_compiled_over_eager": ratio, "check_gap": gap}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
