"""bench/eval_design.py's split of a paired change's variance into the prompts' own changes and sampling
noise, on draws whose two parts are known."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sdpocl.evaluate.aggregate import paired_change

_spec = importlib.util.spec_from_file_location("eval_design", Path(__file__).parents[1] / "bench" / "eval_design.py")
eval_design = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eval_design)


def _as_docs(scores: np.ndarray) -> dict[int, np.ndarray]:
    return {i: row for i, row in enumerate(scores)}


def test_the_stderr_is_the_workflows_paired_stderr_and_the_split_adds_back_up():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.1, 0.9, size=300)
    before = (rng.random((300, 8)) < p[:, None]).astype(float)
    after = (rng.random((300, 8)) < np.clip(p + rng.normal(0.05, 0.2, 300), 0, 1)[:, None]).astype(float)
    split = eval_design.variance_split(_as_docs(after), _as_docs(before))
    _, change, stderr = paired_change(pd.Series(after.mean(1)), pd.Series(before.mean(1)))
    assert split["change"] == pytest.approx(change) and split["stderr"] == pytest.approx(stderr)
    assert split["between"] > 0
    assert eval_design.predicted_stderr(split, 300, 8) == pytest.approx(stderr)
    # more samples per prompt cannot take the stderr below what the prompts' own changes leave
    assert eval_design.predicted_stderr(split, 300, 10**6) == pytest.approx(math.sqrt(split["between"] / 300), rel=1e-3)


def test_the_split_finds_each_part_where_it_is_all_there_is():
    rng = np.random.default_rng(1)
    # the same prompt accuracy before and after, samples drawn independently: sampling noise only
    p = rng.uniform(0.2, 0.8, size=4000)
    before, after = (rng.random((2, 4000, 8)) < p[:, None]).astype(float)
    noise = eval_design.variance_split(_as_docs(after), _as_docs(before))
    total = noise["stderr"] ** 2 * 4000
    assert noise["between"] < 0.05 * total
    assert noise["per_sample"] / 8 == pytest.approx(total, rel=0.1)
    # every sample of a prompt alike, each prompt moved its own way: the prompts' changes only
    moved = rng.integers(0, 2, size=(500, 1)) * np.ones((1, 4))
    same = eval_design.variance_split(_as_docs(moved), _as_docs(np.zeros((500, 4))))
    assert same["per_sample"] == 0 and same["between"] == pytest.approx(same["stderr"] ** 2 * 500)
