"""The log-probabilities of the tokens ``generate`` samples, recorded while it samples (GRPO's old log-probs
without a second forward: :mod:`sdpocl.train.trainers`, the exact shortcuts): a forward hook (transformers'
public extension point) reads each decoding step's logits, and :func:`recording_logps` wraps one model
instance's ``generate`` for the duration of one rollout to hand the sequences to the recorder."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch import nn


class GenerationLogps:
    """While ``generate`` samples, the log-probability of each sampled token under log_softmax(logits / T):
    a forward hook on the model reads the raw last-position logits of every decoding step (before any
    logits processor) and gathers the token that the next step receives, so one (rows x vocab) matrix is
    held at a time. :meth:`finish` returns ``(tokens, logps)`` of the generated columns, or None when the
    hook did not see exactly one forward per generated token."""

    def __init__(self, model: nn.Module, temperature: float):
        self.temperature = float(temperature)
        self.prev = None
        self.tokens, self.logps = [], []
        self.valid = True
        self.handle = model.register_forward_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        logits = getattr(output, "logits", None)
        if ids is None or logits is None or logits.dim() != 3:
            self.valid = False
            return
        if self.prev is not None:
            self._take(ids[:, -1])
        self.prev = torch.log_softmax(logits[:, -1].float() / self.temperature, dim=-1)

    def _take(self, token: torch.Tensor) -> None:
        self.tokens.append(token)
        self.logps.append(self.prev.gather(-1, token[:, None]).squeeze(-1))
        self.prev = None

    def finish(self, sequences: torch.Tensor):
        self.handle.remove()
        if self.prev is not None:
            self._take(sequences[:, -1])
        n = len(self.tokens)
        if not self.valid or n == 0 or n > sequences.size(1):
            return None
        tokens = torch.stack(self.tokens, dim=1)
        if not torch.equal(tokens, sequences[:, -n:]):
            return None
        return tokens, torch.stack(self.logps, dim=1)


@contextmanager
def recording_logps(model: nn.Module, temperature: float, keep: Callable[[tuple | None], None]):
    """Inside the block, each call of ``model.generate`` hands ``keep`` the ``(tokens, logps)`` of the tokens it
    sampled (:class:`GenerationLogps`; None when they cannot be read off); ``generate`` itself as it was, after."""
    own = model.__dict__.get("generate")  # an instance attribute already there (another wrapper)
    generate = model.generate
    recorder = GenerationLogps(model, temperature)

    def generate_recording(*args, **kwargs):
        sequences = generate(*args, **kwargs)
        keep(recorder.finish(sequences) if isinstance(sequences, torch.Tensor) else None)
        return sequences

    model.generate = generate_recording
    try:
        yield
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own
        recorder.handle.remove()
