"""The sdpocl package's import graph, read from the source with ``ast`` (nothing is imported):
tests/test_layout.py (every module reachable from the rules) and tests/test_imports.py (no cycle, no
upward import between layers) share it."""

from __future__ import annotations

import ast
from pathlib import Path

from workflow_utils import ROOT

PKG = ROOT / "workflow" / "sdpocl"


def module_name(path: Path, pkg: Path = PKG) -> str:
    """``sdpocl.a.b`` of ``pkg/a/b.py`` (``sdpocl.a`` of ``pkg/a/__init__.py``)."""
    rel = Path(path).relative_to(pkg.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(source: str, module: str, is_package: bool) -> set[str]:
    """sdpocl modules a source imports, anywhere (rules and subcommands import lazily inside functions):
    ``import a.b`` names ``a.b``; ``from a import b`` names ``a`` (its ``__init__`` runs) and ``a.b`` (kept
    by the caller when ``b`` is a module); relative imports are resolved against ``module``."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out |= {f"{target}.{alias.name}" for alias in node.names}  # `from pkg import submodule`
    return {name for name in out if name == "sdpocl" or name.startswith("sdpocl.")}


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {module_name(p, pkg): p for p in sorted(pkg.rglob("*.py"))}


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """module -> the package's modules it imports (self-imports, e.g. ``from . import x`` naming the
    package itself, left out)."""
    mods = modules(pkg)
    return {
        m: (imports(p.read_text(encoding="utf-8"), m, p.name == "__init__.py") & set(mods)) - {m}
        for m, p in mods.items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The components with more than one module: each is an import cycle (or several)."""
    return sorted(c for c in strongly_connected(graph) if len(c) > 1)


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through ``component``'s first module, as ``[a, b, ..., a]`` (breadth-first: shortest)."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node] & members):
            if child == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return [*reversed(chain), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return component
