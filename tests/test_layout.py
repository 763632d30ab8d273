"""The repository's layout and habits: no orphan modules, the old lm-eval import path, linters."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from import_graph import PKG
from import_graph import imports as _imports
from import_graph import module_name as _module_name
from workflow_utils import BIN, ROOT


def test_every_module_is_reached_from_the_rules():
    """Roots: the `sdpocl` CLI every rule calls, what the Snakefile imports at parse time, and the
    lm-eval task functions named in the task YAMLs. Every module must be imported from there."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    edges = {m: _imports(p.read_text(), m, p.name == "__init__.py") & set(modules) for m, p in modules.items()}
    rules = "\n".join(p.read_text() for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))])
    roots = {"sdpocl.cli", "sdpocl.lm_eval_task"} | set(re.findall(r"from (sdpocl[\w.]*) import", rules))
    assert "sdpocl.cli" in modules and roots <= set(modules), roots - set(modules)
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parents = [".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)]  # importing a.b runs a
        todo += [*edges[m], *(p for p in parents if p in modules)]
    orphans = sorted(set(modules) - seen)
    assert not orphans, f"modules no rule reaches (import them or delete them): {orphans}"


def test_task_yaml_naming_the_old_module_path_still_loads(tmp_path, monkeypatch):
    """Task YAMLs written before the move name `sdpocl.lm_eval_task.*`: they must keep working."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from lm_eval.tasks import TaskManager, get_task_dict

    from sdpocl.evaluate.tasks import task_name, write_task_yaml

    data = tmp_path / "toy.jsonl"
    data.write_text('{"prompt": "Compute 2+3.", "answer": "5", "tests": [], "domain": "math", "dataset": "toy"}\n')
    path = write_task_yaml(
        tmp_path / "tasks" / "toy.yaml", "toy", data, repeats=2, temperature=0.6, top_p=0.95, max_gen_toks=8
    )
    text = path.read_text()
    assert "!function sdpocl.evaluate.tasks.process_results" in text
    path.write_text(text.replace("sdpocl.evaluate.tasks.", "sdpocl.lm_eval_task."))  # as an old results dir has it
    tm = TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    task = get_task_dict([task_name("toy")], tm)[task_name("toy")]
    doc = next(iter(task.test_docs()))
    assert task.doc_to_text(doc) == "Compute 2+3."
    assert task.process_results(doc, [[" \\boxed{5}", " \\boxed{6}"]]) == {"acc": 0.5}


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed in the test environment (pip install -e '.[test]')")
    return str(path)


@pytest.mark.parametrize(
    "args",
    [
        ["ruff", "check", "workflow", "tests", "bench"],
        ["ruff", "format", "--check", "workflow", "tests", "bench"],
        ["snakefmt", "--check", "Snakefile", "workflow/rules"],
    ],
    ids=["ruff-lint", "ruff-format", "snakefmt"],
)
def test_code_style(args):
    """The habits pre-commit runs (.pre-commit-config.yaml), configured in pyproject.toml."""
    proc = subprocess.run([_tool(args[0]), *args[1:]], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"


def test_pre_commit_hooks_are_local():
    """CI cannot clone hook repositories: every hook runs the tools installed by the test extra."""
    import yaml

    cfg = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert cfg["repos"] and all(repo["repo"] == "local" for repo in cfg["repos"])
    hooks = {hook["id"] for repo in cfg["repos"] for hook in repo["hooks"]}
    assert {"ruff-check", "ruff-format", "snakefmt", "snakemake-lint"} <= hooks
    assert shutil.which("pre-commit", path=str(BIN)), "pre-commit is not installed by the test extra"
