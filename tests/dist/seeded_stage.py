"""``sdpocl <argv>`` (the real CLI, :func:`sdpocl.cli.main`) with three test hooks that make a stage's
result independent of the number of processes, so tests/test_two_process.py can compare a
two-process ``accelerate launch`` with the one-process run weight for weight:

* **rollouts seeded per row**: each sample is drawn by Gumbel-max (an exact sample of the
  generation's distribution) with noise seeded by the row's prompt tokens, its occurrence among the
  identical prompts of the local batch and the position: a row gets the same completion whether its
  prompt was generated in a batch of 4 on one process or of 2 on each of two (a plain sampler draws
  one random stream per process, so the completions, and hence everything after them, would differ);
* **a reward with signal**: 1 for a completion of odd length, else 0 (the stand-in model never
  answers a math question, so the real reward is 0 everywhere, every advantage 0 and no SDPO
  demonstration exists: both runs would not move, and the comparison would be empty). The reward
  is routed as the stage's own (``sdpocl.train.stage.stage_reward``);
* **GRPO's mini-batches**: TRL shuffles each process's rollout batch before splitting it into the
  optimizer steps' micro-batches. With ``SDPOCL_TEST_EMULATE="W,c"`` (the one-process run) the batch is
  ordered so that optimizer step ``j`` gets exactly the rows that ``W`` processes with micro-batches
  of ``c`` rows would give it; without it (the ``W``-process run) the order is kept;
* **a slow rank 1 at a save** (``SDPOCL_TEST_RANK1_SAVE_DELAY`` seconds, only where set): rank 1
  writes its RNG state into the trainer checkpoint that late, so a rank 0 that moves the checkpoint
  away without waiting for the other ranks is caught every time, not once in a while.

Everything else -- batch plan, TRL's trainers, DDP's gradient averaging, the cross-rank gathers,
saving, resuming -- is the stage's own code.
"""

import hashlib
import os
import sys
import time

import torch
import transformers
from transformers.generation.utils import GenerationMixin


class RowSeededSampling(transformers.LogitsProcessor):
    """Gumbel-max sampling from the (processed) scores, noise seeded per row and generated position."""

    def __init__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None):
        self.start = input_ids.size(1)
        keys, seen = [], {}
        for i in range(input_ids.size(0)):
            ids = input_ids[i] if attention_mask is None else input_ids[i][attention_mask[i].bool()]
            prompt = ids.tolist()
            occurrence = seen.get(tuple(prompt), 0)
            seen[tuple(prompt)] = occurrence + 1
            digest = hashlib.sha256(repr((prompt, occurrence)).encode()).digest()
            keys.append(int.from_bytes(digest[:6], "little"))
        self.keys = keys

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        t = input_ids.size(1) - self.start
        noise = []
        for key in self.keys:
            g = torch.Generator().manual_seed(key * 4099 + t)
            u = torch.rand(scores.size(-1), generator=g, dtype=torch.float64).clamp_(1e-12, 1 - 1e-12)
            noise.append(-torch.log(-torch.log(u)))
        gumbel = torch.stack(noise).to(scores.device)
        choice = (torch.log_softmax(scores.double(), dim=-1) + gumbel).argmax(dim=-1)
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, choice[:, None], 0.0)
        return out


_generate = GenerationMixin.generate


def seeded_generate(self, *args, **kwargs):
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    processors = transformers.LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
    processors.append(RowSeededSampling(input_ids, kwargs.get("attention_mask")))
    return _generate(self, *args, logits_processor=processors, **kwargs)


def odd_length(completions, **kwargs) -> list[float]:
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [float(len(t) % 2) for t in texts]


def emulated_order(n: int, world: int, micro: int) -> list[int]:
    """Rows of a one-process batch of ``n`` in the order that makes its micro-batch ``k * world + r``
    rank ``r``'s micro-batch ``k`` of a ``world``-process run (each rank holding ``n / world`` rows)."""
    per_rank = n // world
    return [r * per_rank + k * micro + i for k in range(per_rank // micro) for r in range(world) for i in range(micro)]


def ordered_sequence_dict(seq_dict: dict) -> dict:
    emulate = os.environ.get("SDPOCL_TEST_EMULATE")
    if not emulate:
        return seq_dict
    world, micro = (int(x) for x in emulate.split(","))
    order = emulated_order(len(next(v for v in seq_dict.values() if v is not None)), world, micro)

    def permute(v):  # as TRL's shuffle_sequence_dict, with this order for its random one
        if v is None or (isinstance(v, torch.Tensor) and v.ndim == 0):
            return v
        if isinstance(v, torch.Tensor):
            return v[torch.tensor(order)]
        return [v[i] for i in order]

    return {k: permute(v) for k, v in seq_dict.items()}


_save_rng_state = transformers.Trainer._save_rng_state


def late_rank1_rng_state(self, output_dir):
    if self.args.process_index == 1:
        time.sleep(float(os.environ["SDPOCL_TEST_RANK1_SAVE_DELAY"]))
    return _save_rng_state(self, output_dir)


def install() -> None:
    import trl.trainer.grpo_trainer as grpo

    import sdpocl.train.stage as stage

    GenerationMixin.generate = seeded_generate
    grpo.shuffle_sequence_dict = ordered_sequence_dict
    stage.stage_reward = lambda settings: odd_length
    if os.environ.get("SDPOCL_TEST_RANK1_SAVE_DELAY"):
        transformers.Trainer._save_rng_state = late_rank1_rng_state


if __name__ == "__main__":
    install()
    from sdpocl.cli import main

    sys.exit(main(sys.argv[1:]))
