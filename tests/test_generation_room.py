"""Library patches live in one room (sdpocl.generation): no module outside it assigns to an attribute of torch or
transformers (a module, a class or a function of theirs), nor replaces a model instance's ``generate``,
``forward`` or a private method of transformers'; read from the source with ``ast``. The room itself is
applied explicitly (:func:`sdpocl.generation.speed_up`) and only on a CPU."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "workflow" / "sdpocl"
ROOM = PKG / "generation"
LIBRARIES = ("torch", "transformers")
#: model attributes whose replacement is a patch of transformers' behaviour
MODEL_METHODS = {"generate", "forward", "_prepare_special_tokens"}


def library_names(tree: ast.Module) -> set[str]:
    """Names bound (anywhere in the file) to torch's or transformers' modules and objects."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches(path: Path) -> list[str]:
    """``file:line target`` of every assignment to a library attribute or a model method in ``path``."""
    tree = ast.parse(path.read_text())
    libraries = library_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if node.args and isinstance(node.args[1] if len(node.args) > 1 else None, ast.Constant):
                name = node.args[1].value
                if root(node.args[0]) in libraries or name in MODEL_METHODS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} setattr(..., {name!r})")
            continue
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            if root(target) in libraries or target.attr in MODEL_METHODS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(target)}")
    return found


def test_no_module_outside_the_generation_room_patches_torch_or_transformers():
    outside = [p for p in PKG.rglob("*.py") if ROOM not in p.parents]
    assert len(outside) > 50
    found = [hit for p in outside for hit in patches(p)]
    assert found == [], "library patches outside sdpocl/generation/: " + "; ".join(found)


def test_the_scan_finds_a_patch(tmp_path):
    """The scan's own check: each kind of patch is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import torch\nfrom transformers import GenerationMixin as G\n"
        "torch.multinomial = f\nG._sample = f\nmodel.generate = f\nsetattr(model, 'forward', f)\nx.y = 1\n"
    )
    sample.rename(ROOT / "tests" / "_scan_sample.py")
    try:
        hits = patches(ROOT / "tests" / "_scan_sample.py")
    finally:
        (ROOT / "tests" / "_scan_sample.py").unlink()
    assert [h.split(" ", 1)[1] for h in hits] == [
        "torch.multinomial",
        "G._sample",
        "model.generate",
        "setattr(..., 'forward')",
    ]


def test_the_room_applies_only_where_asked_and_on_a_cpu(monkeypatch, tiny_standin):
    from transformers import AutoModelForCausalLM

    from sdpocl.generation import ENV, model_kwargs, speed_up

    model = AutoModelForCausalLM.from_pretrained(tiny_standin[0], dtype=torch.float32)
    assert "generate" not in model.__dict__
    assert speed_up(model, top_k_sampler=True) == ("prefill", "top_k_sampler") and "generate" in model.__dict__
    assert model_kwargs(on_cpu=True) == {"attn_implementation": "sdpocl_cpu_gqa"} and model_kwargs(False) == {}
    monkeypatch.setenv(ENV, "stock")
    other = AutoModelForCausalLM.from_pretrained(tiny_standin[0], dtype=torch.float32)
    assert speed_up(other) == () and "generate" not in other.__dict__ and model_kwargs(on_cpu=True) == {}
    monkeypatch.setenv(ENV, "fast")
    monkeypatch.setattr(torch.Tensor, "device", property(lambda self: torch.device("cuda")), raising=False)
    assert speed_up(other) == ()  # a model on a GPU keeps transformers' generation
    monkeypatch.setenv(ENV, "fastest")
    with pytest.raises(ValueError, match="SDPOCL_GENERATION"):
        speed_up(other)
