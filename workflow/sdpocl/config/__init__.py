"""Config loading, validation and grid expansion.

The config is validated against ``workflow/schemas/config.schema.yaml`` (defaults filled in) and
then against the method registry, so that a bad key stops the workflow with one message that
names the key, before any job is scheduled.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path

import yaml

from sdpocl.config.methods import (
    METHODS,
    MITIGATION_DEFAULTS,
    SDPO_ONLY_KNOBS,
    RunSpec,
    default_run_name,
    get_method,
    stable_sdpo_period,
)
from sdpocl.config.stage import StageSettings, stable_json  # noqa: F401 - stable_json: re-exported
from sdpocl.prompts import resolve_prompt_format

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A config value is invalid; the message names the key."""


def _key_path(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _fill_defaults(validator_cls):
    """A jsonschema validator class that also writes schema defaults into the instance."""
    from jsonschema import validators

    validate_properties = validator_cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(validator_cls, {"properties": set_defaults})


@functools.lru_cache(maxsize=1)
def _schema() -> dict:
    # libyaml's loader when PyYAML has it: the schema is read at every parse (10x faster, same result)
    return yaml.load(SCHEMA_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_schema() -> dict:
    """The config schema (a fresh copy, read once per process)."""
    return copy.deepcopy(_schema())


def validate_config(config: dict) -> dict:
    """Validate ``config`` in place (filling defaults) and return it; raise ConfigError naming the key."""
    from jsonschema import Draft202012Validator

    schema = load_schema()
    # Sub-objects with only defaulted keys may be missing entirely: create them so defaults apply.
    for key in ("base", "data", "drift", "evaluate", "plots", "prompt_format", "rewards"):
        config.setdefault(key, {})
    if isinstance(config.get("train"), dict) and "code_timeout_s" in config["train"]:
        raise ConfigError(
            "config error at 'train.code_timeout_s': moved to 'rewards.code_timeout_s' "
            "(the same limits now apply in training and evaluation)"
        )
    validator = _fill_defaults(Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.path))))
    if errors:
        err = errors[0]
        where = _key_path(err.absolute_path)
        msg = f"config error at '{where}': {err.message}"
        if isinstance(err.instance, str) and err.validator == "type":
            try:
                float(err.instance)
                msg += " (YAML reads a number like 1e-5 as a string; write 1.0e-5)"
            except ValueError:
                pass
        if len(errors) > 1:
            msg += f" (and {len(errors) - 1} more error(s))"
        raise ConfigError(msg)
    _check_semantics(config)
    return config


def _check_semantics(config: dict) -> None:
    missing = [d for d in config["domains"] if d not in config["train"]["steps"]]
    if missing:
        raise ConfigError(f"config error at 'train.steps': no step count for domain(s) {', '.join(missing)}")
    sizes = config["data"]["train_size"]
    missing = [d for d in config["domains"] if isinstance(sizes, dict) and d not in sizes]
    if missing:
        raise ConfigError(f"config error at 'data.train_size': no size for domain(s) {', '.join(missing)}")
    train = config["train"]
    k, prompts = train["grpo_minibatches"], train["prompts_per_step"]
    if prompts % k:
        raise ConfigError(
            f"config error at 'train.grpo_minibatches': {prompts} prompts per step cannot be split into {k} "
            "GRPO mini-batches of whole prompts"
        )
    micro = train["micro_batch_size"]
    for name, size in (("a GRPO mini-batch", prompts // k), ("an SDPO step", prompts)):
        if micro and (size * train["num_generations"]) % micro:
            raise ConfigError(
                f"config error at 'train.micro_batch_size': {size * train['num_generations']} completions of "
                f"{name} cannot be split into micro-batches of {micro}"
            )
    for i, run in enumerate(config["runs"]):
        where = f"runs[{i}]"
        if run["method"] not in METHODS:
            raise ConfigError(
                f"config error at '{where}.method': unknown method {run['method']!r}; "
                f"known methods: {', '.join(sorted(METHODS))}"
            )
        method = get_method(run["method"])
        if method.needs_alpha and "alpha" not in run:
            raise ConfigError(f"config error at '{where}.alpha': method {run['method']!r} needs an alpha")
        if not method.needs_alpha and "alpha" in run:
            raise ConfigError(f"config error at '{where}.alpha': method {run['method']!r} takes no alpha")
        if method.family != "sdpo":
            for knob in SDPO_ONLY_KNOBS:
                if knob in run:
                    raise ConfigError(f"config error at '{where}.{knob}': only SDPO-family methods take {knob!r}")
        if "kl_reference" in run and not run.get("kl_beta"):
            raise ConfigError(
                f"config error at '{where}.kl_reference': a KL reference needs kl_beta > 0 (kl_beta 0 adds no KL term)"
            )
        if run.get("confidence_threshold") and run.get("distillation_weight") == 0:
            raise ConfigError(
                f"config error at '{where}.confidence_threshold': distillation_weight 0 distils nothing, so a "
                "teacher-confidence filter has no effect"
            )
        if run["method"] == "stable_sdpo":
            try:
                stable_sdpo_period(run.get("alpha", 0.0), run.get("sync_steps"))
            except ValueError as exc:
                raise ConfigError(f"config error at '{where}.alpha': {exc}") from None
    names = [r.name for r in expand_runs(config)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"config error at 'runs': duplicate run name(s) {', '.join(dupes)}; set 'name' to tell them apart"
        )
    unknown = sorted(set(config.get("single_domain_runs", [])) - {_base_name(r) for r in config["runs"]})
    if unknown:
        raise ConfigError(f"config error at 'single_domain_runs': unknown run(s) {', '.join(unknown)}")


def _schema_at(schema: dict, key) -> dict | None:
    """The sub-schema of an object's property ``key`` or an array's item."""
    if isinstance(key, int):
        return schema.get("items")
    if key in schema.get("properties", {}):
        return schema["properties"][key]
    for pattern, sub in schema.get("patternProperties", {}).items():
        if re.search(pattern, key):
            return sub
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


_SCALARS = {"null": {"null": None, "~": None, "none": None}, "boolean": {"true": True, "false": False}}


def _coerce(value: str, types: list[str]):
    """``value`` (a string) as the first schema type it parses as; unchanged if none."""
    for t in types:
        low = value.strip().lower()
        if t in _SCALARS and low in _SCALARS[t]:
            return _SCALARS[t][low]
        try:
            if t == "integer":
                return int(value)
            if t == "number":
                return float(value)
        except ValueError:
            continue
    return value


def coerce_overrides(config: dict, overrides: dict, schema: dict | None = None) -> None:
    """Give the values that came from ``snakemake --config`` the types the schema asks for, in place.

    Snakemake parses a ``--config`` value that is a list or mapping with YAML's base loader, so
    every number inside it arrives as a string (``seeds=[0,1,2]`` gives ``["0", "1", "2"]``). Only
    the keys present in ``overrides`` (Snakemake's ``workflow.config_settings.config``: the
    ``--config`` values alone, not those of ``--configfile``) are touched, so a
    YAML ``1e-5`` in a config *file* is still refused by :func:`validate_config`."""
    schema = load_schema() if schema is None else schema

    def walk(value, override, sub):
        if sub is None:
            return value
        if isinstance(value, dict) and isinstance(override, dict):
            for key in override:
                if key in value:
                    value[key] = walk(value[key], override[key], _schema_at(sub, key))
            return value
        if isinstance(value, list) and isinstance(override, list):
            return [walk(v, o, _schema_at(sub, i)) for i, (v, o) in enumerate(zip(value, override))]
        if isinstance(value, str):
            types = sub.get("type", [])
            types = [types] if isinstance(types, str) else list(types)
            if "string" not in types:
                return _coerce(value, types)
        return value

    walk(config, overrides, schema)


def load_config(path: str | Path) -> dict:
    """Read a YAML config file and validate it."""
    with open(path) as fh:
        config = yaml.safe_load(fh) or {}
    return validate_config(config)


def _spec(entry: dict, seed: int) -> RunSpec:
    return RunSpec(
        name="",
        method=entry["method"],
        seed=seed,
        alpha=entry.get("alpha"),
        sync_steps=entry.get("sync_steps"),
        cot=bool(entry.get("cot", False)),
        mask_prob=float(entry.get("mask_prob", 0.0)),
        lr=entry.get("lr"),
        temperature=entry.get("temperature"),
        **{k: type(v)(entry[k]) for k, v in MITIGATION_DEFAULTS.items() if k in entry},
    )


def _base_name(entry: dict) -> str:
    return entry.get("name") or default_run_name(_spec(entry, 0))


def expand_runs(config: dict) -> list[RunSpec]:
    """All runs of the grid: every run entry crossed with every seed."""
    runs = []
    for entry in config["runs"]:
        for seed in config.get("seeds", [0]):
            spec = _spec(entry, seed)
            label = entry.get("label") or get_method(spec.method).default_label(spec)
            runs.append(RunSpec(**{**spec.to_dict(), "name": f"{_base_name(entry)}_s{seed}", "label": label}))
    return runs


def recorded_run(run: RunSpec) -> dict:
    """A run as its stages and evaluations record it (params tracking, score and drift metadata): its
    fields with the label its settings give it (the method's default) in place of the config's ``label``.
    A label only names a run in tables and figures, which take it from ``RunSpec.label``, so
    relabelling a run reruns its aggregations and figures, not its training or evaluations; a run
    without a ``label`` records what it recorded before the two were apart."""
    return {**run.to_dict(), "label": get_method(run.method).default_label(run)}


def run_by_name(config: dict, name: str) -> RunSpec:
    runs = expand_runs(config)
    for run in runs:
        if run.name == name:
            return run
    raise ValueError(f"no run named {name!r} in the config; runs: {', '.join(r.name for r in runs)}")


def chains_for(config: dict, run: RunSpec) -> list[tuple[str, ...]]:
    """Chains (tuples of domains) a run trains: every prefix of the sequence, plus single domains if asked."""
    domains = tuple(config["domains"])
    chains = [domains[: i + 1] for i in range(len(domains))]
    base = run.name.rsplit("_s", 1)[0]
    if base in config.get("single_domain_runs", []):
        chains += [(d,) for d in domains[1:]]
    return chains


def reward_settings(config: dict, domains: list[str]) -> dict:
    """The ``rewards`` limits that score ``domains`` (their ``<domain>_*`` keys): a stage's settings
    hold only these, so changing the code limits reruns code stages only (and those replaying code)."""
    return {k: v for k, v in config["rewards"].items() if k.split("_", 1)[0] in domains}


def replay_settings(run: RunSpec, chain: tuple[str, ...]) -> dict | None:
    """Replay of a stage: the share of its prompt pool drawn from the earlier domains of its chain
    (stage k: domains 1..k-1), or None (no replay knob, or a first stage: nothing to replay)."""
    if not run.replay_frac or len(chain) < 2:
        return None
    return {"frac": float(run.replay_frac), "domains": list(chain[:-1])}


def stage_settings(config: dict, run: RunSpec, chain: tuple[str, ...]) -> StageSettings:
    """Everything that determines a stage's result (and nothing else), for params tracking and the trainer.

    Mitigation knobs at their default values appear nowhere here (``RunSpec.to_dict``, the method's
    settings, no ``replay`` key), so adding a knob to the code reruns no existing stage."""
    domain = chain[-1]
    train = config["train"]
    method = get_method(run.method)
    replay = replay_settings(run, chain)
    return StageSettings(
        run=recorded_run(run),
        chain=tuple(chain),
        domain=domain,
        method_settings=method.settings(run),
        family=method.family,
        steps=train["steps"][domain],
        save_every=train["save_every"],
        prompts_per_step=train["prompts_per_step"],
        num_generations=train["num_generations"],
        max_completion_length=train["max_completion_length"].get(domain, 48),
        max_prompt_length=train["max_prompt_length"],
        max_reprompt_length=train["max_reprompt_length"],
        optimizer_steps_per_rollout=train["grpo_minibatches"] if method.family == "grpo" else 1,
        micro_batch_size=train["micro_batch_size"],
        gradient_checkpointing=train["gradient_checkpointing"],
        mixed_precision=train["mixed_precision"],
        prompt_format=resolve_prompt_format(config),
        temperature=run.temperature if run.temperature is not None else train["temperature"],
        lr=run.lr if run.lr is not None else train["lr"],
        weight_decay=train["weight_decay"],
        max_grad_norm=train["max_grad_norm"],
        warmup_steps=train["warmup_steps"],
        # replayed prompts score too
        rewards=reward_settings(config, [domain, *(replay["domains"] if replay else [])]),
        collapse_patience=train["collapse_patience"],
        stop_on_collapse=train["stop_on_collapse"],
        seed=run.seed,
        replay=replay,
    )


def train_size_for(config: dict, domain: str) -> int:
    """How many training prompts ``domain`` gets: ``data.train_size``, one number or one per domain."""
    size = config["data"]["train_size"]
    return size[domain] if isinstance(size, dict) else size
