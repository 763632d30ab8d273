"""``sdpocl`` commands of the data and the base model: the tiny generators and the paper loaders, the tiny base, the
paper base: each command's arguments and its handler, side by side."""

from __future__ import annotations

import json
from pathlib import Path

from sdpocl.commands.base import Command, arg, source_args, threads
from sdpocl.io import write_json, write_jsonl


def _paper_records(sources: list[str], split: str, a, stats: dict | None = None) -> list[dict]:
    """Records of paper sources; ``--sources`` maps a source to local files (all splits) or to
    ``{split: files}`` (a source whose splits are separate files, e.g. ToolAlpaca); ``stats`` (if
    given) receives each source's counts by name."""
    from sdpocl.data.loaders import load_records

    files = json.loads(a.sources) if a.sources else {}
    records = []
    for name in sources:
        local = files.get(name)
        if isinstance(local, dict):
            local = local.get(split)
        counts: dict = {}
        records += load_records(name, split, seed=a.seed, n=a.n, data_files=local, stats=counts)
        if stats is not None:
            stats[name] = counts
    return records


def cmd_prepare_data(a) -> None:
    if a.preset == "paper":  # hub datasets (or local mirrors) through sdpocl.data.loaders
        from sdpocl.data.loaders import IN_DOMAIN_EVAL, TRAINING_SETS

        sources = [TRAINING_SETS[a.domain]] if a.split == "train" else [s for s, _ in IN_DOMAIN_EVAL[a.domain]]
        records = _paper_records(sources, a.split, a)
    else:
        from sdpocl.data.domains import generate

        records = generate(a.domain, a.split, a.n, a.seed, json.loads(a.difficulty) if a.difficulty else None)
    write_jsonl(a.out, records)
    print(f"[prepare-data] {len(records)} {a.domain}/{a.split} records -> {a.out}")


def cmd_build_base(a) -> None:
    from sdpocl.train.base import build_base, world

    cfg = json.loads(a.settings)
    summary = build_base(cfg["base"], cfg["data"], Path(a.out), threads=a.threads)
    if world()[0] == 0:  # under torchrun (base.sft_ranks > 1) rank 0 reports
        write_json(a.report, summary)


def cmd_fetch_base(a) -> None:
    from sdpocl.train.paper_base import fetch_base_model

    fetch_base_model(a.model, a.out, source=a.source)


def cmd_build_standin(a) -> None:
    from sdpocl.train.paper_base import build_standin

    texts = [line for path in a.corpus for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    out = build_standin(a.out, texts, vocab_size=a.vocab_size)
    print(f"[build-standin] {out}")


def cmd_prepare_benchmark(a) -> None:
    """The benchmark's JSONL, and beside it (``--meta``, default ``meta.json`` in the same folder)
    what was loaded: record count, settings and, for the paper loaders, the source's counts
    (rows, skipped, per group: BFCL's categories)."""
    meta: dict = {"benchmark": a.name, "preset": a.preset, "seed": a.seed, "n": a.n}
    if a.preset == "paper":
        sources: dict = {}
        records = _paper_records([a.name], "test", a, stats=sources)
        meta["sources"] = sources
        for counts in sources.values():
            for group, c in (counts.get("groups") or {}).items():
                print(
                    f"[prepare-benchmark] {a.name} {group}: {c['rows']} rows, {c['converted']} loaded "
                    f"({c['without_reference']} without a reference answer), {c['skipped']} skipped"
                )
    else:
        from sdpocl.data.benchmarks import generate_ood

        records = generate_ood(a.name, a.n, a.seed)
    meta["records"] = len(records)
    write_jsonl(a.out, records)
    meta_path = Path(a.meta) if a.meta else Path(a.out).with_name("meta.json")
    write_json(meta_path, meta)
    print(f"[prepare-benchmark] {len(records)} {a.name} records -> {a.out} (counts: {meta_path})")


COMMANDS: list[Command] = [
    Command(
        "prepare-data",
        "write one domain split as JSONL (tiny generator or paper loader)",
        cmd_prepare_data,
        [
            arg("--domain", required=True),
            arg("--split", required=True, choices=["train", "test"]),
            *source_args("records (tiny: required; paper: a seeded subsample, default all)"),
            arg("--difficulty", help="tiny preset: JSON task sizes (config data.difficulty; default: the defaults)"),
        ],
    ),
    Command(
        "build-base",
        "train the tokenizer and SFT-warm the tiny base model",
        cmd_build_base,
        [
            arg("--settings", required=True, help="JSON with base and data settings"),
            arg("--out", required=True, help="model directory"),
            arg("--report", required=True, help="JSON report (sizes, SFT loss)"),
            threads(2),
        ],
    ),
    Command(
        "fetch-base",
        "resolve the paper preset's base model (hub id or local copy) to a local directory",
        cmd_fetch_base,
        [
            arg("--model", required=True, help="hub id or local directory"),
            arg("--source", help="local copy of the model (a mirror), used instead of the hub"),
            arg("--out", required=True, help="model directory"),
        ],
    ),
    Command(
        "build-standin",
        "a tiny sharded Qwen3 stand-in with Qwen3's chat template (the paper preset's rehearsal)",
        cmd_build_standin,
        [
            arg("--out", required=True, help="model directory"),
            arg("--corpus", nargs="+", required=True, help="text files (any format) whose lines train the tokenizer"),
            arg("--vocab-size", type=int, default=1024),
        ],
    ),
    Command(
        "prepare-benchmark",
        "write one OOD benchmark as JSONL (tiny generator or paper loader)",
        cmd_prepare_benchmark,
        [
            arg("--name", required=True),
            *source_args("records (tiny: required; paper: default all)"),
            arg("--meta", help="JSON of what was loaded (default: meta.json beside --out)"),
        ],
    ),
]
