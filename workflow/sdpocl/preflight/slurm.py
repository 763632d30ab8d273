"""What the jobs ask for: GPUs per job from the config (as the rules ask, :mod:`sdpocl.resources`), and the
Snakemake profile's requests per rule family (``default-resources``, the rules' own, ``set-resources``)."""

from __future__ import annotations

import re
from pathlib import Path

from sdpocl import resources

ROOT = Path(__file__).resolve().parents[3]
RULES_DIR = ROOT / "workflow" / "rules"
DEFAULT_PROFILE = ROOT / "profiles" / "slurm"

#: rules that exist in one preset only (defined under ``if TINY:`` / ``else:`` in workflow/rules/data.smk)
PRESET_RULES = {"build_base": "tiny", "fetch_base_model": "paper"}


def requested_gpus(config: dict) -> tuple[dict, list[str]]:
    """GPUs per job of each kind (train, evaluate, single: teacher_check, compute_drift) as the rules ask for
    them (:func:`sdpocl.resources.gpus_by_kind`), and notes on where each number came from. Unlike the rules,
    it takes configs without the keys (older schemas) or with an unknown preset: 1 GPU, and said so."""
    notes, out = [], {}
    presets = resources.PRESET_GPUS
    for section in ("train", "evaluate"):
        sect = config.get(section) or {}
        if "gpus_per_job" not in sect:
            out[section] = 1
            notes.append(f"{section}.gpus_per_job is not in this config (older schema): assuming 1")
        elif sect["gpus_per_job"] is not None:
            out[section] = int(sect["gpus_per_job"])
        elif section in presets.get(config.get("preset"), {}):
            out[section] = int(presets[config["preset"]][section])
            notes.append(f"{section}.gpus_per_job null: the {config.get('preset')} preset's {out[section]}")
        else:
            out[section] = 1
            notes.append(f"{section}.gpus_per_job null and no preset default found: assuming 1")
    return resources.kind_gpus(out["train"], out["evaluate"]), notes


def read_profile(profile_path: str | Path) -> dict:
    """A Snakemake profile's config.yaml (``profile_path`` is the profile folder or the file)."""
    import yaml

    path = Path(profile_path)
    if path.is_dir():
        path = path / "config.yaml"
    return yaml.safe_load(path.read_text()) or {}


def rule_resources(rules_dir: Path = RULES_DIR) -> dict[str, dict]:
    """Per rule of workflow/rules/*.smk: its ``threads`` (a number, or ``THREADS`` = ``train.threads``) and
    whether it is a local rule, read from the rule files' text. (Its GPUs, CPUs and memory, for the rules
    that have GPUs: :mod:`sdpocl.resources`.)"""
    out = {}
    for smk in sorted(rules_dir.glob("*.smk")):
        text = smk.read_text()
        starts = [(m.start(), m.group(1)) for m in re.finditer(r"^\s*rule (\w+):", text, re.M)]
        for i, (pos, name) in enumerate(starts):
            block = text[pos : starts[i + 1][0] if i + 1 < len(starts) else len(text)]
            threads = re.search(r"^\s*threads:\s*(\w+)", block, re.M)
            out[name] = {
                "threads": threads.group(1) if threads else "1",
                "local": bool(re.search(r"^\s*localrule:\s*True", block, re.M)),
            }
    return out


def _eval_resource(value, attempt: int = 1, threads: int = 1):
    """A profile value (a number, or a Python expression in attempt / threads as a string) at attempt 1."""
    if not isinstance(value, str):
        return value
    try:
        return eval(value, {"__builtins__": {"max": max, "min": min}}, {"attempt": attempt, "threads": threads})  # noqa: S307
    except Exception:  # noqa: BLE001 - "2h" and the like: shown as written
        return value


def slurm_requests(config: dict, profile: dict) -> dict[str, dict]:
    """What each non-local rule family asks Slurm for at attempt 1: ``default-resources``, then the rule's own
    resources (its GPUs from the config: :mod:`sdpocl.resources`, as the rules' ``job_resources``), then
    ``set-resources``."""
    req, _ = requested_gpus(config)
    rules = rule_resources()
    default = profile.get("default-resources") or {}
    overrides = profile.get("set-resources") or {}
    names = [r for r in overrides if r in rules] + [r for r in rules if r in resources.RULE_GPUS]
    out = {}
    for name in dict.fromkeys(names):
        spec = rules[name]
        if spec["local"] or PRESET_RULES.get(name, config.get("preset")) != config.get("preset"):
            continue
        threads = int(config["train"]["threads"]) if spec["threads"] == "THREADS" else int(spec["threads"])
        own: dict = {}
        if name in resources.RULE_GPUS:
            gpus = req[resources.RULE_GPUS[name]]
            own = resources.gpu_resources(gpus, **resources.cpu_job(name))
            own = {k: v(None, threads) if callable(v) else v for k, v in own.items()}  # cpus_per_task(wc, threads)
        merged = {**default, **own, **(overrides.get(name) or {})}
        merged = {k: _eval_resource(v, threads=threads) for k, v in merged.items()}
        merged.setdefault("cpus_per_task", threads)
        out[name] = merged
    return out
