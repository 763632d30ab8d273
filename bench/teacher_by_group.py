"""Bench: can the tiny base copy from its context? Its re-prompted teacher per task group, and random strings.

SDPO's teacher helps where it reads the answer from a demonstration that the student cannot produce
alone (MATH: the boxed digits). ``sdpocl teacher-check`` gives one number per domain; this splits it
by group (TOOLUSE: by tool), with the *reference* solution as the demonstration, so every prompt has
one and a failure is a failure to read it. Two measurements on a model folder:

- per group of a domain's training prompts (the seed's draw, as a stage samples them): the student's
  accuracy and the teacher's (the same model, re-prompted with the reference exactly as TRL's
  SDPOTrainer builds it), ``--samples`` samples each at ``--temperature`` (the rollouts' 1.0);
- with ``--copy N``: greedy exact copies of N strings of 1-3 random lowercase/capitalised words named
  in a prompt (``Repeat the words: ...``): a model that copies a span whatever it is copies these; one
  that has memorised its lists does not.

    python bench/teacher_by_group.py --model results/base/model --difficulty "$DIFF" --prompts 60 --copy 60
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections import defaultdict


def _random_words(rng: random.Random) -> str:
    def word() -> str:
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
        return w.capitalize() if rng.random() < 0.3 else w

    return " ".join(word() for _ in range(rng.randint(1, 3)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--domain", default="tooluse")
    ap.add_argument("--difficulty", default="{}", help="data.difficulty as JSON (the run's)")
    ap.add_argument("--prompts", type=int, default=60)
    ap.add_argument("--seed", type=int, default=3, help="the run seed whose training draw is checked")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--copy", type=int, default=0, help="random strings to copy (0: skip)")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sdpocl.data.domains import generate, teacher_prompt
    from sdpocl.generation import model_kwargs
    from sdpocl.prompts import plain_text
    from sdpocl.rewards import make_reward

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, **model_kwargs(on_cpu=True)).eval()
    reward = make_reward(args.domain)

    @torch.no_grad()
    def sample(text: str, k: int, greedy: bool = False) -> list[str]:
        ids = tok(text, return_tensors="pt", add_special_tokens=False).input_ids
        kw = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature, top_p=1.0, top_k=0)
        out = net.generate(
            input_ids=ids.repeat(k, 1),
            attention_mask=torch.ones(k, ids.shape[1], dtype=torch.long),
            max_new_tokens=args.max_new_tokens,
            pad_token_id=tok.eos_token_id,
            **kw,
        )
        return tok.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)

    def score(rec: dict, texts: list[str]) -> float:
        cols = {k: [v] * len(texts) for k, v in rec.items() if k != "prompt"}
        return sum(reward(texts, prompts=[rec["prompt"]] * len(texts), **cols)) / len(texts)

    def group(rec: dict) -> str:
        if args.domain == "tooluse":
            return json.loads(rec["answer"])["actions"][0]
        return args.domain

    acc: dict[str, list[tuple[float, float]]] = defaultdict(list)
    records = generate(args.domain, "train", args.prompts, args.seed, json.loads(args.difficulty))
    for rec in records:
        student = score(rec, sample(plain_text(rec), args.samples))
        reprompt = teacher_prompt(rec["prompt"], rec["solution"].strip())
        teacher = score(rec, sample(plain_text({**rec, "prompt": reprompt}), args.samples))
        acc[group(rec)].append((student, teacher))
    result: dict = {"model": args.model, "domain": args.domain, "groups": {}}
    every = [row for rows in acc.values() for row in rows]
    for name, rows in [*sorted(acc.items()), ("all", every)]:
        s, t = (sum(r[i] for r in rows) / len(rows) for i in (0, 1))
        result["groups"][name] = {"prompts": len(rows), "student": round(s, 3), "teacher": round(t, 3)}
        print(f"{name:18s} prompts {len(rows):3d}  student {s:.3f}  teacher (reference demonstration) {t:.3f}")
    if args.copy:
        rng = random.Random(12345)
        words = [_random_words(rng) for _ in range(args.copy)]
        exact = sum(sample(f"Repeat the words: {w}", 1, greedy=True)[0].strip() == w for w in words) / len(words)
        result["copy_exact"] = exact
        print(f"random strings copied exactly (greedy): {exact:.3f} of {args.copy}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
