"""The real BFCL v4 data and AST checker, read straight from the ``bfcl-eval`` wheel.

The wheel is fetched once with ``pip download --no-deps`` into a cache directory
(``$SDPOCL_TEST_CACHE``, default ``~/.cache/sdpocl-tests``) and never installed: its
dependencies pin numpy 1.26. :func:`bfcl_checker` executes the wheel's own
``ast_checker.py`` (with its imports served from the wheel and the model registry, which
pulls every API client, replaced by a stub) so tests can compare our scorer with BFCL's.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from unittest import mock

BFCL_VERSION = "2026.3.23"
BFCL_WHEEL = f"bfcl_eval-{BFCL_VERSION}-py3-none-any.whl"
BFCL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
DATA = "bfcl_eval/data/"
CHECKER_MODEL = "sdpocl-react"  # a prompt-based model: BFCL keeps dotted function names


def cache_dir() -> Path:
    return Path(os.environ.get("SDPOCL_TEST_CACHE") or Path.home() / ".cache" / "sdpocl-tests")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_wheel() -> Path:
    """The cached wheel, downloaded first if needed; ``RuntimeError`` saying why it cannot be had."""
    target = cache_dir() / "bfcl-eval"
    wheel = target / BFCL_WHEEL
    if not (wheel.exists() and _sha256(wheel) == BFCL_SHA256):
        target.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q"]
        cmd = [*pip, f"bfcl-eval=={BFCL_VERSION}", "-d", str(target)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not wheel.exists():
            raise RuntimeError(
                f"cannot download the BFCL v4 data ({' '.join(cmd)} exited {proc.returncode}); these tests need "
                f"PyPI access or the wheel placed at {wheel}:\n{proc.stderr[-2000:]}"
            )
        if _sha256(wheel) != BFCL_SHA256:
            raise RuntimeError(f"{wheel} does not have the expected sha256 {BFCL_SHA256}")
    return wheel


def read_jsonl(zf: zipfile.ZipFile, name: str) -> list[dict]:
    return [json.loads(line) for line in zf.read(name).decode("utf-8").splitlines() if line.strip()]


def category_rows(zf: zipfile.ZipFile, category: str) -> list[dict]:
    """The questions of ``category`` with their ``ground_truth`` joined by id (None without one),
    as the bfcl_v4 loader joins them."""
    rows = read_jsonl(zf, f"{DATA}BFCL_v4_{category}.json")
    answer_file = f"{DATA}possible_answer/BFCL_v4_{category}.json"
    truth = {r["id"]: r["ground_truth"] for r in read_jsonl(zf, answer_file)} if answer_file in zf.namelist() else {}
    return [{**row, "ground_truth": truth.get(row["id"])} for row in rows]


def bfcl_checker(zf: zipfile.ZipFile):
    """BFCL's own ``ast_checker`` module, executed from the wheel's source."""

    def module(name: str, source: str | None = None) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = []  # a package, so that submodules import
        if source is not None:
            exec(compile(source, f"{BFCL_WHEEL}/{name.replace('.', '/')}.py", "exec"), mod.__dict__)
        return mod

    class _Registry(dict):
        def __missing__(self, key):
            return types.SimpleNamespace(underscore_to_dot=False)

    src = {
        name: zf.read(name.replace(".", "/") + ".py").decode()
        for name in (
            "bfcl_eval.constants.enums",
            "bfcl_eval.constants.type_mappings",
            "bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter",
            "bfcl_eval.eval_checker.ast_eval.type_convertor.js_type_converter",
            "bfcl_eval.eval_checker.ast_eval.ast_checker",
        )
    }
    fake: dict[str, types.ModuleType] = {}
    with mock.patch.dict(sys.modules):
        for pkg in (
            "bfcl_eval",
            "bfcl_eval.constants",
            "bfcl_eval.eval_checker",
            "bfcl_eval.eval_checker.ast_eval",
            "bfcl_eval.eval_checker.ast_eval.type_convertor",
        ):
            sys.modules[pkg] = fake[pkg] = module(pkg)
        registry = module("bfcl_eval.constants.model_config")
        registry.MODEL_CONFIG_MAPPING = _Registry()
        sys.modules[registry.__name__] = registry
        for name, source in src.items():
            sys.modules[name] = fake[name] = module(name, source)
    return fake["bfcl_eval.eval_checker.ast_eval.ast_checker"], fake["bfcl_eval.constants.enums"].Language
