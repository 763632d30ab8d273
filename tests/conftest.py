import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


#: the files whose tests use the ``smoke_results`` session fixture: one pytest-xdist work unit,
#: so one worker builds the smoke run once and runs them in a row (two workers would each build
#: it, and one's reruns and stashed files would race the other's reads).
SMOKE_FILES = frozenset({"test_caching.py", "test_eval_e2e.py", "test_mitigations.py", "test_train_e2e.py"})


def pytest_collection_modifyitems(items):
    """End-to-end (``slow``) files first, those that share the smoke run after the others: under
    pytest-xdist the rehearsal starts at once on one worker while another builds the smoke run,
    and the short files fill in, instead of the longest file running alone at the end."""

    stray = sorted(
        {item.path.name for item in items if "smoke_results" in getattr(item, "fixturenames", ())} - SMOKE_FILES
    )
    if stray:
        raise pytest.UsageError(f"tests/conftest.py: add {', '.join(stray)} to SMOKE_FILES (they use smoke_results)")

    def rank(item) -> int:
        if item.get_closest_marker("slow") is None:
            return 2
        return 1 if item.path.name in SMOKE_FILES else 0

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the SMOKE_FILES as one work unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SmokeFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "smoke_results" if Path(scope).name in SMOKE_FILES else scope

    return SmokeFilesTogether(config, log)


@pytest.fixture
def smoke_config():
    """A fresh, unvalidated copy of config/smoke.yaml."""
    return copy.deepcopy(yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text()))


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory):
    """config/smoke.yaml run once through the whole workflow (train, eval, drift, tables, figures)
    with profiles/local; shared by the end-to-end tests, which must not modify it except to
    re-create what they delete."""
    from workflow_utils import snakemake

    results = tmp_path_factory.mktemp("smoke") / "results"
    proc = snakemake("--profile", "profiles/local", results=results)
    # Snakemake's own log of this run, beside the results (bench/core_use.py reads it)
    log = re.search(r"Complete log\(s\): (\S+)", proc.stdout + proc.stderr)
    if log:
        shutil.copyfile(log.group(1), results.parent / "snakemake.log")
    return results


@pytest.fixture(scope="session")
def tiny_standin(tmp_path_factory):
    """A random tiny Qwen3 (no SFT: its samples vary in length, which the tests' rewards use) and
    the math records its tokenizer was built from; read-only for the tests that share it."""
    from sdpocl.data.domains import generate
    from sdpocl.train.paper_base import build_standin

    out = tmp_path_factory.mktemp("tiny") / "model"
    recs = generate("math", "train", 64, 0)
    build_standin(out, [r["prompt"] + r["solution"] for r in recs], vocab_size=300, hidden_size=32)
    return out, recs
