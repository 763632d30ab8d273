"""Drift tables: checkpoint positions along the chain, identity columns, the embedding cache."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sdpocl.drift.tables import CachedEmbed, checkpoint_position, drift_params_table
from sdpocl.plot.tables import DRIFT_PARAM_COLUMNS

STEPS = {"math": 50, "science": 50, "tooluse": 50, "code": 20}


def test_positions_follow_the_paper_axis():
    pos = lambda chain, c: checkpoint_position(chain, c, steps=STEPS, save_every=10)  # noqa: E731
    assert pos(["math"], "10") == ("math@10", 1)
    assert pos(["math"], "final") == ("math@50", 5)
    assert pos(["math", "science"], 10) == ("science@10", 6)
    assert pos(["math", "science", "tooluse", "code"], "final") == ("code@20", 17)  # 17 points, as in the paper
    assert pos(["science"], 10) == ("science@10", 1)  # a single-domain run starts at 1


def test_drift_params_table_adds_identity_and_drops_duplicate_final(tmp_path):
    results = tmp_path / "results"
    cols = [c for c in DRIFT_PARAM_COLUMNS if c.split("_")[-1] in ("mean", "median", "p10", "p90")]
    files = []
    for chain, ckpts in [("math", ["10", "20", "final"]), ("math/science", ["10", "20", "final"])]:
        d = results / "runs" / "grpo_s0" / chain
        d.mkdir(parents=True)
        rows = [{"checkpoint": c, "matrix_type": "all", **{k: 1.0 for k in cols}} for c in ckpts]
        pd.DataFrame(rows).to_csv(d / "drift_params.csv", index=False)
        files.append(d / "drift_params.csv")
    runs = {"grpo_s0": {"label": "GRPO", "method": "grpo", "alpha": None, "seed": 0}}
    df = drift_params_table(
        files, results=results, runs=runs, domains=["math", "science"], steps={"math": 20, "science": 20}, save_every=10
    )
    assert list(df.columns) == DRIFT_PARAM_COLUMNS
    assert list(df.point) == ["math@10", "math@20", "science@10", "science@20"]
    assert list(df.point_index) == [1, 2, 3, 4]
    assert set(df.label) == {"GRPO"} and list(df.stage) == [1, 1, 2, 2] and df.continual.all()


def test_cached_embed_embeds_each_text_once():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    cached = CachedEmbed(embed)
    a = cached(["x", "yy", "x"])
    b = cached(["yy", "zzz"])
    assert calls == [["x", "yy"], ["zzz"]]
    assert a[0].tolist() == a[2].tolist() == [1.0, 1.0] and b[0].tolist() == [2.0, 1.0]
    with pytest.raises(KeyError):
        CachedEmbed(lambda t: np.zeros((0, 2)))(["a"])
