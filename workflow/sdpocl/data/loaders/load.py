"""Records of a paper source: its rows converted, counted (per group), deduplicated, subsampled; written."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sdpocl.data.loaders.reader import holdout_indices, iter_source
from sdpocl.data.loaders.registry import source
from sdpocl.data.synthetic.common import _stable_int
from sdpocl.io import write_jsonl

log = logging.getLogger(__name__)

#: the per-group counts of load_records(stats=...)
_GROUP_COUNTS = ("rows", "skipped", "no_record", "converted", "without_reference", "records")


def load_records(
    name: str,
    split: str,
    *,
    seed: int = 42,
    n: int | None = None,
    data_files: str | Sequence[str] | None = None,
    stats: dict | None = None,
) -> list[dict[str, Any]]:
    """Records of ``name``/``split`` (see :func:`prepare_paper_dataset`), without writing them.

    A ``stats`` dict is filled with the counts: ``rows`` read (after the source's selection),
    ``skipped`` (unconvertible, for ``skip_invalid`` sources), ``no_record`` (rows that yield no
    record by design), ``converted`` records and ``records`` returned (after the subsample); for
    sources with a ``group``, ``groups`` holds the same counts per group, plus
    ``without_reference`` (records whose ``solution`` is empty -- BFCL: rows on which BFCL's
    checker rejects every answer), and a log line per group reports them."""
    src = source(name, split)
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
        raise ValueError(f"n must be a non-negative integer or None, got {n!r}")
    indexed: Iterable[tuple[int, Any]] = (
        (i, row) for i, row in enumerate(iter_source(src, split, data_files)) if src.select is None or src.select(row)
    )  # lazy: DAPO's hub split has 1.8M rows
    if src.holdout is not None:
        pool = list(indexed)
        indexed = [pool[j] for j in holdout_indices(len(pool), split, src.holdout, seed)]
    records: list[dict[str, Any]] = []
    record_groups: list[str | None] = []
    groups: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    rows = invalid = dropped = 0
    for index, row in indexed:
        rows += 1
        group = None
        if src.group is not None:
            group = src.group(row)
            counts = groups.setdefault(group, dict.fromkeys(_GROUP_COUNTS, 0))
            counts["rows"] += 1
        try:
            converted = src.convert(row, seed)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            if not src.skip_invalid:
                raise ValueError(f"{name} ({split}): cannot convert row {index}: {exc}") from exc
            invalid += 1
            if group is not None:
                groups[group]["skipped"] += 1
            log.log(
                logging.WARNING if invalid <= 10 else logging.DEBUG,
                "%s (%s): skipping row %d%s: %s",
                name,
                split,
                index,
                "" if group is None else f" ({group})",
                exc,
            )
            continue
        if not converted:
            dropped += 1
            if group is not None:
                groups[group]["no_record"] += 1
        for rec in converted:
            if src.dedupe:
                if rec["prompt"] in seen:
                    continue
                seen.add(rec["prompt"])
            records.append(rec)
            record_groups.append(group)
            if group is not None:
                groups[group]["converted"] += 1
                groups[group]["without_reference"] += not rec.get("solution")
    if invalid:
        log.warning("%s (%s): %d unconvertible rows skipped (%s)", name, split, invalid, src.notes)
        if not records:
            raise ValueError(f"{name} ({split}): no row could be converted ({invalid} invalid)")
    if dropped:
        log.info("%s (%s): %d rows yield no record by design", name, split, dropped)
    converted_total = len(records)
    if n is not None and n < len(records):
        keep = sorted(random.Random(_stable_int("paper-subsample", name, split, seed)).sample(range(len(records)), n))
        records = [records[i] for i in keep]
        record_groups = [record_groups[i] for i in keep]
    elif n is not None and n > len(records):
        log.warning("%s (%s): %d records requested, only %d available", name, split, n, len(records))
    for group in record_groups:
        if group is not None:
            groups[group]["records"] += 1
    for group, counts in groups.items():
        log.log(
            logging.WARNING if counts["skipped"] else logging.INFO,
            "%s (%s): %s: %d rows, %d converted (%d without a reference), %d skipped, %d records kept",
            name,
            split,
            group,
            counts["rows"],
            counts["converted"],
            counts["without_reference"],
            counts["skipped"],
            counts["records"],
        )
    if stats is not None:
        stats.update(
            rows=rows,
            skipped=invalid,
            no_record=dropped,
            converted=converted_total,
            records=len(records),
        )
        if src.group is not None:
            stats["groups"] = groups
    return records


def prepare_paper_dataset(
    name: str,
    split: str,
    out: Path,
    *,
    seed: int = 42,
    n: int | None = None,
    data_files: str | None = None,
    stats: dict | None = None,
) -> int:
    """Load ``name``'s ``split`` (hub id, or local ``data_files`` in the source's own format for
    offline fixtures and mirrors), convert it to the common schema, write JSONL atomically and
    return the number of records.

    ``seed`` drives the seeded parts (hold-out split, GPQA option order, the subsample); ``n``
    keeps a seeded subsample of that many records (in source order; all if fewer exist).
    Unknown names or splits raise ``ValueError`` listing the valid ones; an unconvertible row
    raises ``ValueError`` naming the source and row index (skipped and counted for the sources
    with ``skip_invalid``). ``stats`` receives the counts of :func:`load_records`.
    """
    records = load_records(name, split, seed=seed, n=n, data_files=data_files, stats=stats)
    write_jsonl(out, records, ensure_ascii=False)
    return len(records)
