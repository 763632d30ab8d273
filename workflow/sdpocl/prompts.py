"""One prompt format for training, the SDPO re-prompt and evaluation (docs/paper.md, "Continual setting").

A record holds the user text in ``prompt`` and, for some sources, a ``system`` message. With the
chat template (the paper preset) the trainers receive the conversation ``[system?, user]`` and
render it with the model's template and ``template_kwargs`` (Qwen3: ``enable_thinking=False``);
TRL's SDPO re-prompt keeps the system message and rewrites the user turn; lm-eval receives the
same two messages (the system message as the task's per-document description) and the same
template kwargs. Without the chat template (the tiny preset, whose model has none) the prompt is
plain text, the system text (if any) in front of the user text.
"""

from __future__ import annotations

from typing import Any

#: template kwargs of the paper preset (Qwen3's chat template: no thinking block)
DEFAULT_TEMPLATE_KWARGS = {"enable_thinking": False}


def messages(record: dict[str, Any]) -> list[dict[str, str]]:
    """The conversation of a record: its system message (when it has one), then the user turn."""
    out = [{"role": "system", "content": record["system"]}] if record.get("system") else []
    return out + [{"role": "user", "content": record["prompt"]}]


def plain_text(record: dict[str, Any]) -> str:
    """A record's prompt as plain text (no chat template)."""
    system = record.get("system")
    return f"{system}\n\n{record['prompt']}" if system else record["prompt"]


def training_prompt(record: dict[str, Any], *, chat_template: bool) -> str | list[dict[str, str]]:
    """The ``prompt`` column a TRL trainer receives: a conversation, or plain text."""
    return messages(record) if chat_template else plain_text(record)


def resolve_prompt_format(config: dict) -> dict:
    """``{"chat_template": bool, "template_kwargs": dict}`` of a validated config (``chat_template: null``
    means: the paper preset uses the model's chat template, the tiny preset plain text)."""
    fmt = config.get("prompt_format", {})
    chat = fmt.get("chat_template")
    chat = config["preset"] == "paper" if chat is None else bool(chat)
    kwargs = fmt.get("template_kwargs", DEFAULT_TEMPLATE_KWARGS) if chat else {}
    return {"chat_template": chat, "template_kwargs": dict(kwargs)}
