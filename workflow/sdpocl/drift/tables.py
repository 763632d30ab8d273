"""Drift jobs beyond the weights, and the drift tables the figures read.

* :func:`run_response_drift` — response drift of every stage of one run against the base model
  (one job per run: the embedder and the base responses are loaded and embedded once);
* :func:`dataset_distances` — MMD between every pair of training/evaluation prompt sets, and t-SNE;
* :func:`drift_params_table` — the per-stage parameter-drift CSVs with run identity and the
  checkpoint's position along the continual sequence (``math@10`` ... ``code@20``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sdpocl.data.benchmarks import benchmark
from sdpocl.evaluate.aggregate import identity
from sdpocl.plot.tables import DRIFT_PARAM_COLUMNS, DRIFT_RESPONSE_COLUMNS


class CachedEmbed:
    """``embed`` that remembers texts already embedded (the base responses recur for every stage)."""

    def __init__(self, embed):
        self.embed, self.cache = embed, {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if new:
            self.cache.update(zip(new, self.embed(new)))
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 1), dtype=np.float32)


def run_response_drift(
    base_samples: Path,
    stage_samples: dict[str, Path],
    *,
    meta: dict,
    domains: list[str],
    embedding_model: str,
    n_samples: int,
    n_prompts: int | None = None,
    threads: int | None = None,
) -> pd.DataFrame:
    """DRIFT_RESPONSE_COLUMNS rows for every stage (chain -> its eval samples dir) of one run; with
    ``n_prompts``, over each benchmark's first ``n_prompts`` prompts."""
    from sdpocl.drift.distance import read_samples, response_similarity
    from sdpocl.drift.embeddings import load_embedder

    embed = CachedEmbed(load_embedder(embedding_model, threads=threads))
    base = {p.stem: read_samples(p) for p in sorted(Path(base_samples).glob("*.jsonl"))}
    frames = []
    for chain, samples_dir in stage_samples.items():
        ident = identity({**meta, "chain": chain}, domains)
        for path in sorted(Path(samples_dir).glob("*.jsonl")):
            if path.stem not in base:
                raise ValueError(
                    f"benchmark {path.stem!r} of {samples_dir} has no base-model samples in {base_samples}"
                )
            sim = response_similarity(
                base[path.stem], read_samples(path), embed, n_samples=n_samples, n_prompts=n_prompts
            )
            sim = sim.assign(**ident, kind=benchmark(path.stem).kind)
            frames.append(sim)
        print(
            f"[response-drift] {meta['run']} {chain}: mean similarity "
            f"{pd.concat(frames[-len(base) :]).similarity.mean():.1f}",
            flush=True,
        )
    if not frames:
        return pd.DataFrame(columns=DRIFT_RESPONSE_COLUMNS)
    return pd.concat(frames, ignore_index=True)[DRIFT_RESPONSE_COLUMNS]


def dataset_distances(
    datasets: dict[str, tuple[str, Path]],
    *,
    embedding_model: str,
    n_prompts: int,
    seed: int,
    bandwidth: float | None,
    perplexity: float,
    threads: int | None = None,
):
    """(domain_mmd, tsne) tables over ``datasets`` (name -> (role, JSONL path))."""
    from sdpocl.drift.distance import domain_distances, load_prompts, tsne_map
    from sdpocl.drift.embeddings import load_embedder

    embed = load_embedder(embedding_model, threads=threads)
    emb = {name: (role, embed(load_prompts(path, n_prompts, seed))) for name, (role, path) in datasets.items()}
    return domain_distances(emb, bandwidth=bandwidth), tsne_map(emb, perplexity=perplexity, seed=seed)


def checkpoint_position(chain: list[str], checkpoint, *, steps: dict[str, int], save_every: int) -> tuple[str, int]:
    """(``domain@step``, index along the chain): math@10 is 1, science@10 after a 50-step math is 6."""
    step = steps[chain[-1]] if str(checkpoint) == "final" else int(checkpoint)
    before = sum(-(-steps[d] // save_every) for d in chain[:-1])
    return f"{chain[-1]}@{step}", before + -(-step // save_every)


def drift_params_table(
    files: list[Path],
    *,
    results: Path,
    runs: dict[str, dict],
    domains: list[str],
    steps: dict[str, int],
    save_every: int,
) -> pd.DataFrame:
    """Concatenate ``runs/<run>/<chain>/drift_params.csv`` files with identity and position columns.

    ``final`` rows duplicate the last intermediate checkpoint when the stage length is a multiple
    of ``save_every``; they are kept only when no step row has the same position.
    """
    frames = []
    for f in files:
        rel = Path(f).resolve().relative_to((Path(results) / "runs").resolve()).parts
        run, chain = rel[0], list(rel[1:-1])
        df = pd.read_csv(f)
        pos = [checkpoint_position(chain, c, steps=steps, save_every=save_every) for c in df.checkpoint]
        df = df.assign(
            **identity({**runs[run], "run": run, "chain": "/".join(chain)}, domains),
            point=[p for p, _ in pos],
            point_index=[i for _, i in pos],
        )
        df["_final"] = df.checkpoint.astype(str) == "final"
        df = df.sort_values("_final").drop_duplicates(["point_index", "matrix_type"], keep="first")
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=DRIFT_PARAM_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["checkpoint"] = out.checkpoint.astype(str)
    return out.sort_values(["run", "stage", "chain", "point_index", "matrix_type"])[DRIFT_PARAM_COLUMNS].reset_index(
        drop=True
    )
