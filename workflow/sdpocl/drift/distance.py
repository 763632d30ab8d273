"""Response drift and domain distance (docs/paper.md, "Diagnostics") on sentence embeddings.

- response drift: per prompt, 100 x cosine similarity between the embeddings of the base
  model's and a checkpoint's responses (sample i vs sample i, averaged over samples);
- domain distance: squared MMD with an RBF kernel between the prompt-embedding sets of two
  datasets, plus a t-SNE map of all of them.

Embeddings come from :mod:`sdpocl.drift.embeddings` (any ``embed(texts) -> array`` works); tables
follow :data:`sdpocl.plot.tables.DOMAIN_MMD_COLUMNS` and :data:`sdpocl.plot.tables.TSNE_COLUMNS`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial.distance import cdist, pdist

from sdpocl.plot.tables import DOMAIN_MMD_COLUMNS, ROLES, SAMPLE_KEYS, TSNE_COLUMNS

SIMILARITY_COLUMNS = ["benchmark", "doc_id", "similarity"]


def _matrix(x, what: str = "embeddings") -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array, got shape {a.shape}")
    return a


# ------------------------------------------------------------------------------------------
# MMD
# ------------------------------------------------------------------------------------------


def median_bandwidth(Z) -> float:
    """Median heuristic: the median pairwise Euclidean distance of the rows of ``Z`` (diagonal
    excluded). Falls back to the mean non-zero distance when more than half the pairs coincide,
    and to 1.0 when all rows are equal, so the kernel never degenerates."""
    z = _matrix(Z)
    if len(z) < 2:
        raise ValueError(f"median_bandwidth needs at least 2 points, got {len(z)}")
    d = pdist(z)
    med = float(np.median(d))
    if med > 0:
        return med
    nonzero = d[d > 0]
    return float(nonzero.mean()) if nonzero.size else 1.0


def _kernel_mean(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """Mean of the RBF kernel exp(-||a-b||^2 / (2 sigma^2)) over all pairs (a in x, b in y)."""
    return float(np.exp(-cdist(x, y, "sqeuclidean") / (2.0 * bandwidth**2)).mean())


def _check_bandwidth(bandwidth: float) -> float:
    bw = float(bandwidth)
    if not np.isfinite(bw) or bw <= 0:
        raise ValueError(f"MMD bandwidth must be a positive number, got {bandwidth}")
    return bw


def mmd_rbf(X, Y, bandwidth: float | None = None) -> tuple[float, float]:
    """Squared MMD between the row sets ``X`` and ``Y`` with k(a,b) = exp(-||a-b||^2 / (2 sigma^2)).

    Uses the biased (V-statistic) estimator mean k(X,X) + mean k(Y,Y) - 2 mean k(X,Y): it is
    never meaningfully negative and gives exactly 0 for identical sets (the unbiased U-statistic
    drops the diagonal and can go below 0, which a distance heatmap should not show); float
    round-off negatives are clipped to 0. ``bandwidth`` None = median heuristic on X u Y.
    Returns (mmd^2, sigma used)."""
    x, y = _matrix(X, "X"), _matrix(Y, "Y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X and Y have different dimensions: {x.shape[1]} vs {y.shape[1]}")
    bw = median_bandwidth(np.vstack([x, y])) if bandwidth is None else _check_bandwidth(bandwidth)
    mmd = _kernel_mean(x, x, bw) + _kernel_mean(y, y, bw) - 2.0 * _kernel_mean(x, y, bw)
    return max(mmd, 0.0), bw


def _check_sets(embeddings: dict[str, tuple[str, np.ndarray]]) -> dict[str, tuple[str, np.ndarray]]:
    if not embeddings:
        raise ValueError("no datasets given")
    out = {}
    for name, (role, emb) in embeddings.items():
        if role not in ROLES:
            raise ValueError(f"dataset {name!r}: role {role!r} is not one of {ROLES}")
        out[name] = (role, _matrix(emb, f"embeddings of {name!r}"))
    dims = {e.shape[1] for _, e in out.values()}
    if len(dims) != 1:
        raise ValueError(f"datasets have embeddings of different dimensions: {sorted(dims)}")
    return out


def domain_distances(embeddings: dict[str, tuple[str, np.ndarray]], bandwidth: float | None = None) -> pd.DataFrame:
    """MMD^2 (see :func:`mmd_rbf`) of every ordered pair of datasets, diagonal included.

    ``embeddings`` maps dataset name -> (role, embedding matrix). With ``bandwidth`` None ONE
    median-heuristic bandwidth is computed on all datasets pooled, so that every entry of the
    heatmap uses the same kernel and entries are comparable (a per-pair bandwidth would rescale
    each pair differently). The table is exactly symmetric with a zero diagonal."""
    sets = _check_sets(embeddings)
    names = list(sets)
    bw = (
        median_bandwidth(np.vstack([e for _, e in sets.values()])) if bandwidth is None else _check_bandwidth(bandwidth)
    )
    k = np.zeros((len(names), len(names)))
    for i, a in enumerate(names):
        for j in range(i, len(names)):
            k[i, j] = k[j, i] = _kernel_mean(sets[a][1], sets[names[j]][1], bw)
    rows = []
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            mmd = 0.0 if i == j else max(k[i, i] + k[j, j] - 2.0 * k[i, j], 0.0)
            rows.append([a, sets[a][0], b, sets[b][0], mmd, bw])
    return pd.DataFrame(rows, columns=DOMAIN_MMD_COLUMNS)


# ------------------------------------------------------------------------------------------
# t-SNE
# ------------------------------------------------------------------------------------------


def tsne_map(embeddings: dict[str, tuple[str, np.ndarray]], *, perplexity: float = 30, seed: int = 0) -> pd.DataFrame:
    """2-D t-SNE (scikit-learn, PCA init, ``random_state=seed``: deterministic) of all datasets'
    embeddings pooled, one row per point. ``perplexity`` is capped at (n - 1) / 3 so that the
    3 x perplexity neighbours t-SNE uses exist for small n (it must stay below n anyway)."""
    from sklearn.manifold import TSNE

    sets = _check_sets(embeddings)
    z = np.vstack([e for _, e in sets.values()])
    if len(z) < 4:
        raise ValueError(f"t-SNE needs at least 4 points, got {len(z)}")
    if perplexity <= 0:
        raise ValueError(f"perplexity must be positive, got {perplexity}")
    perp = min(float(perplexity), (len(z) - 1) / 3.0)
    xy = TSNE(n_components=2, perplexity=perp, init="pca", random_state=seed).fit_transform(z)
    frames, start = [], 0
    for name, (role, emb) in sets.items():
        n = len(emb)
        frames.append(
            pd.DataFrame(
                {
                    "dataset": name,
                    "role": role,
                    "index": np.arange(n),
                    "x": xy[start : start + n, 0],
                    "y": xy[start : start + n, 1],
                }
            )
        )
        start += n
    return pd.concat(frames, ignore_index=True)[TSNE_COLUMNS]


# ------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------


def _read_jsonl(path) -> list[tuple[int, dict]]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object")
            out.append((lineno, rec))
    return out


def read_samples(path) -> list[dict]:
    """Records of a sample log (JSONL with the keys of :data:`sdpocl.plot.tables.SAMPLE_KEYS`)."""
    records = []
    for lineno, rec in _read_jsonl(path):
        missing = [k for k in SAMPLE_KEYS if k not in rec]
        if missing:
            raise ValueError(f"{path}:{lineno}: sample record lacks {missing}")
        if not isinstance(rec["responses"], list):
            raise ValueError(f"{path}:{lineno}: 'responses' must be a list")
        records.append(rec)
    return records


def load_prompts(path, n: int, seed: int) -> list[str]:
    """A seeded sample of at most ``n`` prompts (``prompt`` key) of a data JSONL, in file order,
    so that the same file, n and seed always give the same prompt set."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    prompts = []
    for lineno, rec in _read_jsonl(path):
        if not isinstance(rec.get("prompt"), str):
            raise ValueError(f"{path}:{lineno}: record has no string 'prompt'")
        prompts.append(rec["prompt"])
    if not prompts:
        raise ValueError(f"{path}: no prompts")
    keep = sorted(random.Random(seed).sample(range(len(prompts)), min(n, len(prompts))))
    return [prompts[i] for i in keep]


# ------------------------------------------------------------------------------------------
# response drift
# ------------------------------------------------------------------------------------------


def _by_doc(records: Sequence[dict], side: str) -> dict:
    out = {}
    for rec in records:
        key = (rec["benchmark"], rec["doc_id"])
        if key in out:
            raise ValueError(f"benchmark {key[0]!r}: doc_id {key[1]!r} appears twice in the {side} records")
        out[key] = rec
    return out


def _first_docs(keys: list[tuple], n: int) -> list[tuple]:
    """The (benchmark, doc_id) keys among each benchmark's ``n`` smallest doc ids, in their given order."""
    per_bench: dict = {}
    for bench, doc in keys:
        per_bench.setdefault(bench, []).append(doc)
    kept = {(bench, doc) for bench, docs in per_bench.items() for doc in sorted(docs)[:n]}
    return [k for k in keys if k in kept]


def _check_match(base: dict, ckpt: dict) -> None:
    if base.keys() == ckpt.keys():
        return
    benches = sorted({str(b) for b, _ in base.keys() ^ ckpt.keys()})
    only_base = sorted(str(d) for d in {k[1] for k in base.keys() - ckpt.keys()})
    only_ckpt = sorted(str(d) for d in {k[1] for k in ckpt.keys() - base.keys()})
    raise ValueError(
        f"benchmark {', '.join(benches)}: doc ids of base and checkpoint differ "
        f"(only in base: {only_base[:5]}, only in checkpoint: {only_ckpt[:5]})"
    )


def response_similarity(
    base_records: Sequence[dict],
    ckpt_records: Sequence[dict],
    embed: Callable[[list[str]], np.ndarray],
    *,
    n_samples: int = 4,
    n_prompts: int | None = None,
) -> pd.DataFrame:
    """Response drift per prompt: 100 x the mean over i < n_samples of cosine(embed(base
    response i), embed(checkpoint response i)), records matched by (benchmark, doc_id); with
    ``n_prompts``, of the first ``n_prompts`` doc ids of each benchmark only (config
    ``drift.response_prompts``: the similarity is a mean over prompts, and embedding every judged
    prompt of every stage is most of the job's time).

    Sample i is compared with sample i (config ``drift.response_samples``): both are independent
    draws, so each pair estimates the expected base-vs-checkpoint similarity. Fewer samples are
    used when a record has fewer. All texts go to one batched ``embed`` call;
    identical texts are embedded once, so an unchanged response scores exactly 100. Raises
    ValueError naming the benchmark when doc ids or the prompts of a matched doc differ.
    Rows follow the order of ``base_records``; columns :data:`SIMILARITY_COLUMNS`."""
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    if n_prompts is not None and n_prompts < 1:
        raise ValueError(f"n_prompts must be >= 1 or None, got {n_prompts}")
    base, ckpt = _by_doc(base_records, "base"), _by_doc(ckpt_records, "checkpoint")
    _check_match(base, ckpt)
    keys = list(base)
    if n_prompts is not None:
        keys = _first_docs(keys, n_prompts)
    pairs, owner = [], []
    for n, key in enumerate(keys):
        b, c = base[key], ckpt[key]
        if b["prompt"] != c["prompt"]:
            raise ValueError(f"benchmark {key[0]!r}: doc_id {key[1]!r} has different prompts in base and checkpoint")
        k = min(n_samples, len(b["responses"]), len(c["responses"]))
        if k == 0:
            raise ValueError(f"benchmark {key[0]!r}: doc_id {key[1]!r} has no responses")
        pairs += [(str(b["responses"][i]), str(c["responses"][i])) for i in range(k)]
        owner += [n] * k
    if not keys:
        return pd.DataFrame(columns=SIMILARITY_COLUMNS)
    unique = list(dict.fromkeys(t for pair in pairs for t in pair))
    row = {t: i for i, t in enumerate(unique)}
    emb = np.asarray(embed(unique), dtype=np.float64)
    if emb.shape[0] != len(unique):
        raise ValueError(f"embed returned {emb.shape[0]} rows for {len(unique)} texts")
    ia = np.array([row[a] for a, _ in pairs])
    ib = np.array([row[b] for _, b in pairs])
    norms = np.linalg.norm(emb, axis=1)
    denom = norms[ia] * norms[ib]
    dots = np.einsum("ij,ij->i", emb[ia], emb[ib])
    cos = np.clip(np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0), -1.0, 1.0)
    cos[ia == ib] = 1.0  # identical texts: exactly 100, not 100 - round-off
    sims = np.bincount(owner, weights=100.0 * cos) / np.bincount(owner)
    return pd.DataFrame({"benchmark": [k[0] for k in keys], "doc_id": [k[1] for k in keys], "similarity": sims})[
        SIMILARITY_COLUMNS
    ]
