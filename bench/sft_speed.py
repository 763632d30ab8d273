"""Bench: build-base's SFT warm-up with its batch cut into length-sorted micro-batches (``base.sft_microbatches``).

A warm-up batch of 32 mixes domains whose examples run from ~30 to ~200 tokens; padded to its longest,
~40% of a step's arithmetic is padding. For each micro-batch count, in turn (interleaved over
``--repeats`` so machine noise hits all alike), the warm-up of the config's base runs ``--steps`` steps
from the same initialisation (``build_base``, the config's threads; with ``--ranks`` also on that many
torchrun ranks of one thread each, ``base.sft_ranks``, the seconds then counting the ranks' set-up); printed:
seconds per SFT step (fastest repeat), the share of the padded positions that are real tokens, and the mean
training loss (the cuts of one config draw the same batches, so their losses agree; one padded batch draws its own).

    python bench/sft_speed.py --config config/config.yaml --steps 40 --micro 1,2,4,8 --repeats 2
    python bench/sft_speed.py --config config/config.yaml --steps 200 --micro 4 --ranks 1,2 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from sdpocl.config import load_config
from sdpocl.train.base import build_base, warmup_examples


def padding_share(cfg: dict, difficulty: dict | None, tokenizer_dir: Path, micro: int, batches: int = 100) -> float:
    """Real tokens / padded positions over the first ``batches`` steps' worth of warm-up examples, each
    batch sorted by length and cut into ``micro`` equal parts (a stand-in for the rebalance sampler's cut)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    examples = warmup_examples(cfg, difficulty)[: batches * cfg["sft_batch_size"]]
    lengths = [len(tok(ex["prompt"] + ex["completion"])["input_ids"]) + 1 for ex in examples]
    real = padded = 0
    for i in range(0, len(lengths), cfg["sft_batch_size"]):
        batch = sorted(lengths[i : i + cfg["sft_batch_size"]])
        size = len(batch) // micro
        for j in range(0, len(batch), size):
            part = batch[j : j + size]
            real, padded = real + sum(part), padded + max(part) * len(part)
    return real / padded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--micro", default="1,2,4,8", help="comma-separated micro-batch counts")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="the build_base rule's threads")
    ap.add_argument(
        "--ranks", default="1", help="comma-separated base.sft_ranks (> 1: torchrun ranks, one thread each)"
    )
    args = ap.parse_args()

    config = load_config(Path(args.config))
    base = dict(config["base"]) | {"sft_steps": args.steps}
    data = {"seed": config["data"]["seed"], "difficulty": config["data"]["difficulty"]}
    cases = [(m, r) for r in map(int, args.ranks.split(",")) for m in map(int, args.micro.split(","))]
    best: dict[tuple[int, int], dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for m, r in cases:
                out = Path(tmp) / f"micro{m}-ranks{r}"
                summary = build_base(base | {"sft_microbatches": m, "sft_ranks": r}, data, out, threads=args.threads)
                per_step = summary["sft_seconds"] / args.steps
                if (m, r) not in best or per_step < best[m, r]["s_per_step"]:
                    best[m, r] = {"s_per_step": round(per_step, 4), "loss": summary["sft_final_loss"]}
        for m, r in cases:
            best[m, r]["real_token_share"] = round(padding_share(base, data["difficulty"], out, m), 3)
    ref = best[cases[0]]["s_per_step"]
    for m, r in cases:
        row = {"sft_microbatches": m, "sft_ranks": r, **best[m, r]}
        print(json.dumps(row | {"ratio": round(row["s_per_step"] / ref, 3)}))


if __name__ == "__main__":
    main()
