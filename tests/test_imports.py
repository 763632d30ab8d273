"""The sdpocl package's imports: every module imports alone, no module is part of an import cycle, and
no layer imports one above it (:data:`LAYERS`, the table docs/architecture.md cites).

The graph is read from the source with ``ast`` (tests/import_graph.py): imports anywhere in a file
count, also those inside functions (the subcommands and rules import lazily), relative ones resolved;
``from pkg import name`` is an edge to ``pkg`` (its ``__init__`` runs) and, when ``name`` is a module,
to ``pkg.name``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from import_graph import PKG, cycle_path, cycles, import_graph, modules, strongly_connected

#: The layers, lowest first: layer -> (its modules: a package covers its submodules, the longest match
#: wins; the layers it may import besides its own). An import to a layer not listed fails the test: a
#: lower layer may be added (the layer order the failure prints says which are lower), a higher one never.
LAYERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # the package's __init__ (only itself), atomic writers, prompt templates, the rules' scheduler requests and
    # priorities, the GPU settings, the generation room (every speed-up of transformers' generation), vLLM's CPU
    # adaptations
    "base": (
        (
            "sdpocl",
            "sdpocl.io",
            "sdpocl.prompts",
            "sdpocl.resources",
            "sdpocl.priorities",
            "sdpocl.gpu",
            "sdpocl.generation",
            "sdpocl.vllm_cpu",
        ),
        (),
    ),
    # the per-domain rewards and their sandbox
    "rewards": (("sdpocl.rewards",), ("base",)),
    # the tidy tables' columns, the style and the figures (evaluate and drift write the tables)
    "plot": (("sdpocl.plot",), ("base",)),
    # the tiny generators, the paper loaders, the benchmarks
    "data": (("sdpocl.data",), ("base", "rewards")),
    # the config (validation, the grid's runs and stages), chains, and the methods' table it checks
    "config": (("sdpocl.config", "sdpocl.chain"), ("base", "data")),
    # training a stage (GRPO / SDPO trainers, rollouts, FSDP), the tiny base, the teacher check
    "train": (("sdpocl.train",), ("base", "rewards", "data", "config")),
    # lm-eval tasks, evaluation of a checkpoint, the eval tables and goals
    "evaluate": (("sdpocl.evaluate", "sdpocl.lm_eval_task"), ("base", "rewards", "plot", "data", "config")),
    # parameter and response drift, domain distances
    "drift": (("sdpocl.drift",), ("base", "plot", "data", "train", "evaluate")),
    # the pre-grid checks
    "preflight": (("sdpocl.preflight",), ("base", "data", "config", "train", "evaluate")),
    # the commands: each stage's arguments and handlers, and the table of them all
    "commands": (
        ("sdpocl.commands",),
        ("base", "plot", "data", "config", "train", "evaluate", "drift", "preflight"),
    ),
    # the job server: runs the table's commands in forked children
    "jobserver": (("sdpocl.jobserver",), ("commands",)),
    # the `sdpocl` entry point
    "cli": (("sdpocl.cli",), ("commands", "jobserver")),
}

#: what the lowest modules must never reach (directly or through other modules)
FOUNDATIONS = ("sdpocl.rewards", "sdpocl.io", "sdpocl.prompts")
ABOVE_FOUNDATIONS = (
    "sdpocl.train",
    "sdpocl.evaluate",
    "sdpocl.plot",
    "sdpocl.drift",
    "sdpocl.preflight",
    "sdpocl.commands",
    "sdpocl.jobserver",
    "sdpocl.cli",
)


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str, layers=LAYERS) -> str | None:
    """The layer whose longest entry covers ``module`` (the root ``sdpocl`` covers only itself)."""
    best, length = None, -1
    for layer, (members, _) in layers.items():
        for entry in members:
            covers = module == entry if entry == "sdpocl" else _under(module, entry)
            if covers and len(entry) > length:
                best, length = layer, len(entry)
    return best


def layer_graph(graph: dict[str, set[str]], layers=LAYERS) -> dict[str, set[str]]:
    """layer -> the other layers its modules import (modules without a layer left out)."""
    out = {layer: set() for layer in layers}
    for module, targets in graph.items():
        src = layer_of(module, layers)
        for target in targets:
            dst = layer_of(target, layers)
            if src and dst and dst != src:
                out[src].add(dst)
    return out


def layer_order(graph: dict[str, set[str]], layers=LAYERS) -> str:
    """The layers lowest first as the graph orders them (``a < b``: b imports a, or they are
    independent), or the layers that import each other."""
    lg = layer_graph(graph, layers)
    mutual = [c for c in strongly_connected(lg) if len(c) > 1]
    if mutual:
        return "no order, layers import each other: " + "; ".join(" <-> ".join(c) for c in mutual)
    done: list[str] = []
    todo = dict(lg)
    while todo:  # Kahn, ties in the table's order
        ready = [layer for layer in layers if layer in todo and todo[layer] <= set(done)]
        done.append(ready[0])
        del todo[ready[0]]
    return " < ".join(done)


def import_failures(names: list[str], pkg: Path = PKG, workers: int | None = None) -> dict[str, str]:
    """Module -> the end of its traceback, for every module that fails ``python -c "import <module>"`` in a
    fresh interpreter (the package found in ``pkg``'s folder first), one interpreter per core at a time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pkg.parent), os.environ.get("PYTHONPATH", "")])}
    env.pop("SDPOCL_JOB_SERVER", None)

    def attempt(name: str) -> tuple[str, subprocess.CompletedProcess]:
        cmd = [sys.executable, "-c", f"import {name}"]
        return name, subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=pkg.parent)

    graph = import_graph(pkg)
    # the modules that import most of the package (the slow ones: torch, TRL) first, so no slow one is left
    # to run alone at the end
    ordered = sorted(names, key=lambda name: (-len(reached(graph, name)), name))
    workers = workers or max(2, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(attempt, ordered))
    return {name: "\n".join(proc.stderr.strip().splitlines()[-12:]) for name, proc in results if proc.returncode}


def upward_imports(graph: dict[str, set[str]], layers=LAYERS) -> tuple[list[str], list[str]]:
    """Imports of a layer the importer's layer may not import (``a (layer) -> b (layer)``), and the
    modules no layer covers."""
    bad, unplaced = [], sorted(m for m in graph if layer_of(m, layers) is None)
    for module, targets in sorted(graph.items()):
        src = layer_of(module, layers)
        for target in sorted(targets):
            dst = layer_of(target, layers)
            if src and dst and dst != src and dst not in layers[src][1]:
                bad.append(f"{module} ({src}) -> {target} ({dst})")
    return bad, unplaced


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module importing ``start`` runs (its imports, theirs, ...)."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


# --- the tests ---------------------------------------------------------------------------------------


@pytest.mark.slow  # a minute of CPU: every module's imports, torch and TRL included
def test_every_module_imports_alone():
    """Each module in a fresh interpreter: a module that works only when something else was imported
    first (an import cycle entered from the wrong side, a missing import) fails here."""
    failures = import_failures(sorted(modules()))
    report = "\n\n".join(f"--- import {name}\n{tail}" for name, tail in sorted(failures.items()))
    assert not failures, f"{len(failures)} module(s) do not import alone:\n\n{report}"


def test_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    report = "\n".join(
        f"cycle among {', '.join(c)}:\n    "
        + " -> ".join(cycle_path(graph, c))
        + "\n    edges: "
        + "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c)
        for c in found
    )
    assert not found, f"{len(found)} import cycle(s) in workflow/sdpocl:\n{report}"


def folder(module: str) -> str:
    """The folder a module lives in, ``sdpocl.train`` for ``sdpocl.train.stage`` and for ``sdpocl.train`` itself;
    a module at the package's top (``sdpocl.io``, ``sdpocl.cli``) stands for itself."""
    return ".".join(module.split(".")[:2])


def test_no_import_loop_between_folders():
    """The folders (subpackages) import one another in one direction: a module of folder A importing folder B
    while a module of B imports A is a loop, even without a cycle between the modules themselves
    (``train/resume.py`` importing the config while ``config.py`` imported ``train.methods`` was one)."""
    graph = import_graph()
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folders.setdefault(folder(module), set()).update(folder(t) for t in targets)
    for name, targets in folders.items():
        targets.discard(name)
    loops = cycles(folders)
    edges = {
        (a, b): sorted(m for m, t in graph.items() if folder(m) == a and any(folder(x) == b for x in t))
        for c in loops
        for a in c
        for b in folders[a] & set(c)
    }
    assert not loops, f"import loops between folders: {loops}; through {edges}"


def test_the_layer_table_is_an_order():
    """LAYERS itself: every layer's allowed imports are layers of the table, none allows itself, and the
    allowances never loop (so lower and higher are defined)."""
    allowed = {layer: set(imports) for layer, (_, imports) in LAYERS.items()}
    unknown = {layer: sorted(a - set(LAYERS)) for layer, a in allowed.items() if a - set(LAYERS)}
    assert not unknown, f"LAYERS allows layers it does not define: {unknown}"
    assert not [layer for layer, a in allowed.items() if layer in a]
    loops = [c for c in strongly_connected(allowed) if len(c) > 1]
    assert not loops, f"LAYERS lets these layers import each other: {loops}"
    order = list(LAYERS)
    for layer, a in allowed.items():
        above = [b for b in a if order.index(b) > order.index(layer)]
        assert not above, f"LAYERS lists {layer} below {above}, which it may import: list lower layers first"


def test_no_layer_imports_a_higher_one():
    graph = import_graph()
    bad, unplaced = upward_imports(graph)
    table = "\n".join(
        f"    {layer}: {', '.join(m)}  (imports: {', '.join(a) or '-'})" for layer, (m, a) in LAYERS.items()
    )
    context = f"\nthe layers as the graph orders them: {layer_order(graph)}\nLAYERS (lowest first):\n{table}"
    assert not unplaced, f"modules no layer of LAYERS covers (add them to one): {unplaced}{context}"
    assert not bad, f"{len(bad)} import(s) against LAYERS (a higher layer, or one not listed):\n  " + (
        "\n  ".join(bad) + context
    )


def test_the_foundations_reach_nothing_above_them():
    """rewards, io and prompts run inside the sandbox, the lm-eval tasks and the trainers: importing them
    must not pull in training, evaluation, plotting, drift or the CLI, not even through another module."""
    graph = import_graph()
    bad = {}
    for module in graph:
        if any(_under(module, f) for f in FOUNDATIONS):
            above = sorted(m for m in reached(graph, module) if any(_under(m, a) for a in ABOVE_FOUNDATIONS))
            if above:
                bad[module] = above
    assert not bad, "foundation modules that reach higher layers:\n" + "\n".join(
        f"  {m} -> {', '.join(a)}" for m, a in sorted(bad.items())
    )
