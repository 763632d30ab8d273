"""A stage's settings: everything that determines one train stage's result, as one frozen dataclass.

Built once from the config (:func:`sdpocl.config.stage_settings`), serialised once for the rule
(:meth:`StageSettings.to_json`: what Snakemake tracks, so the JSON is the same, key for key, as the settings
dict it replaces: an existing results folder reruns nothing), parsed once by the CLI
(:meth:`StageSettings.from_json`), and read by attribute in ``sdpocl.train``. The method's TRL settings, the
recorded run, the prompt format, the reward limits and replay stay plain mappings: they are handed on whole.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StageSettings:
    run: dict  # the recorded run (sdpocl.config.recorded_run): name, method, seed, knobs
    chain: tuple[str, ...]  # the domains learned so far, this stage's last
    domain: str
    method_settings: dict  # the method's TRL config fields (sdpocl.config.methods)
    family: str  # "grpo" | "sdpo"
    steps: int  # rollout steps
    save_every: int
    prompts_per_step: int
    num_generations: int
    max_completion_length: int
    max_prompt_length: int
    max_reprompt_length: int | None
    optimizer_steps_per_rollout: int
    micro_batch_size: int | None
    gradient_checkpointing: bool
    mixed_precision: str
    prompt_format: dict  # {"chat_template": bool, "template_kwargs": dict}
    temperature: float
    lr: float
    weight_decay: float
    max_grad_norm: float
    warmup_steps: int
    rewards: dict  # the reward limits that score this stage
    collapse_patience: int
    stop_on_collapse: bool
    seed: int
    #: replay of the earlier domains ({"frac", "domains"}); None: none, and no ``replay`` key in the JSON
    replay: dict | None = field(default=None)

    #: keys left out of the JSON at None (they did not exist before their knob was set)
    OPTIONAL = ("replay",)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (shallow: the mappings are the settings' own; ``chain`` a list, as JSON has it)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["chain"] = list(self.chain)
        for key in self.OPTIONAL:
            if out[key] is None:
                del out[key]
        return out

    def to_json(self) -> str:
        """The stable JSON (sorted keys) the rule passes and Snakemake tracks."""
        return stable_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict) -> StageSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"stage settings: unknown key(s) {', '.join(unknown)}")
        missing = sorted(f.name for f in dataclasses.fields(cls) if f.name not in data and f.name not in cls.OPTIONAL)
        if missing:
            raise ValueError(f"stage settings: missing key(s) {', '.join(missing)}")
        return cls(**{**data, "chain": tuple(data["chain"])})

    @classmethod
    def from_json(cls, text: str) -> StageSettings:
        return cls.from_dict(json.loads(text))

    def replace(self, **changes) -> StageSettings:
        return dataclasses.replace(self, **changes)

    @property
    def tag(self) -> str:
        """``<run> <chain>``: the stage's name in progress lines."""
        return f"{self.run['name']} {'/'.join(self.chain)}"


def stable_json(obj: Any) -> str:
    """Serialise with sorted keys so that key order in the YAML never triggers a rerun."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))
