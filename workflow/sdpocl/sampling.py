"""Quick sampled accuracy (Acc@k) of a local model with transformers' generate.

Used by build-base to report the base model's accuracy per domain. The full evaluation of every
checkpoint goes through lm-eval-harness (evaluate-checkpoint); both score with sdpocl.rewards.
"""

from __future__ import annotations

import json


def sample_completions(model, tokenizer, prompts: list[str], *, n: int, max_new_tokens: int, temperature: float,
                       top_p: float, seed: int, batch_prompts: int = 16) -> list[list[str]]:
    """``n`` sampled completions per prompt (left-padded batches, seeded)."""
    import torch

    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    out: list[list[str]] = []
    model.eval()
    for i in range(0, len(prompts), batch_prompts):
        chunk = prompts[i : i + batch_prompts]
        enc = tokenizer(chunk, return_tensors="pt", padding=True).to(model.device)
        with torch.no_grad():
            gen = model.generate(
                **enc,
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                top_k=0,
                max_new_tokens=max_new_tokens,
                num_return_sequences=n,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts = tokenizer.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        out += [texts[j * n : (j + 1) * n] for j in range(len(chunk))]
    return out


def domain_accuracy(model, tokenizer, records: list[dict], domain: str, *, n: int = 8, max_new_tokens: int = 48,
                    temperature: float = 0.6, top_p: float = 0.95, seed: int = 0) -> dict:
    """Acc@n over ``records`` of one domain: mean reward over all n samples of all prompts."""
    from .rewards import reward_for

    reward = reward_for(domain)
    samples = sample_completions(model, tokenizer, [r["prompt"] for r in records], n=n,
                                 max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    flat = [c for cs in samples for c in cs]
    cols = {"answer": [r.get("answer", "") for r in records for _ in range(n)],
            "tests": [json.dumps(r.get("tests", [])) for r in records for _ in range(n)]}
    scores = reward(flat, **cols)
    acc = sum(scores) / max(1, len(scores))
    return {"domain": domain, "acc": acc, "n_prompts": len(records), "samples_per_prompt": n,
            "example": flat[0] if flat else ""}
