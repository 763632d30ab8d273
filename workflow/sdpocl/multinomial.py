"""``torch.multinomial``'s one-sample draw on a CPU, the same tokens at ~0.4x the time.

Sampling one token per row, ``torch.multinomial`` runs an exponential race: ``argmax(p / q)`` with
``q ~ Exp(1)`` drawn by ``exponential_``, whose CPU kernel takes one uniform double per entry from the
generator and computes ``-log1p(-u)`` one entry at a time. On a rollout batch (128 rows x 400 tokens) that
loop is ~1 ms of a ~10 ms decoding step. :func:`draw_one` draws the same uniform doubles with
``torch.rand`` (the same generator stream, the same numbers: ``rand`` and ``exponential_`` take one
``random64`` per entry), takes ``-log1p(-u)`` vectorised, rounds to float32 as ``exponential_`` does and
runs the same race: the same token and the same generator state after it. The vectorised ``log1p`` can
differ from the C library's in a double's last bit; rounded to float32 the variates were equal on 10^7
draws (tests/test_multinomial.py), and a token could change only where such a variate also decides the
race to within a float's last bit.

:func:`single_draws` puts it in place of ``torch.multinomial`` while one ``generate`` runs (transformers
calls ``torch.multinomial(probs, num_samples=1)``), for float32 probabilities on a CPU only; every other
call, and a torch whose ``multinomial`` turns out to draw otherwise (:func:`exact_here`, checked once per
process), keeps torch's own function. Invalid probabilities go to torch's function too, which raises its
own error before drawing.
"""

from __future__ import annotations

import contextlib
import functools

import torch


def draw_one(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``[rows, 1]`` token ids: ``torch.multinomial(probs, 1, generator=generator)``'s draw for a 2-D
    float32 CPU ``probs`` (valid: finite, >= 0, every row's sum > 0), computed vectorised."""
    uniform = torch.rand(probs.shape, dtype=torch.float64, generator=generator)
    variates = uniform.neg_().log1p_().neg_().to(probs.dtype)  # Exp(1), as exponential_ computes and rounds it
    return (probs / variates).argmax(dim=-1, keepdim=True)


def _valid(probs: torch.Tensor) -> bool:
    """torch's own checks before its one-sample draw: finite, no entry < 0, no row summing to 0."""
    return bool((probs.max() < float("inf")) & (probs.min() >= 0)) and not bool((probs.sum(1) == 0).any())


def _ours(probs, num_samples, generator, out) -> bool:
    """The calls :func:`draw_one` covers (one sample per row of a non-empty 2-D float32 CPU table)."""
    return (
        num_samples == 1
        and out is None
        and isinstance(probs, torch.Tensor)
        and probs.dim() == 2
        and probs.numel() > 0
        and probs.dtype == torch.float32
        and probs.device.type == "cpu"
        and not probs.requires_grad
        and (generator is None or generator.device.type == "cpu")
        and _valid(probs)
    )


@functools.cache
def exact_here() -> bool:
    """Whether :func:`draw_one` gives this torch's ``multinomial`` tokens and generator state (checked on
    random tables, with zeros, from a private generator; once per process)."""
    torch_multinomial = _original()
    tables = torch.rand(64, 97, generator=torch.Generator().manual_seed(1)) ** 4
    tables[:, ::5] = 0
    tables[3] = 0
    tables[3, 7] = 1.0
    a, b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(3):
        if not torch.equal(torch_multinomial(tables, 1, generator=a), draw_one(tables, generator=b)):
            return False
    return torch.equal(a.get_state(), b.get_state())


def _original():
    return getattr(torch.multinomial, "__wrapped_multinomial__", torch.multinomial)


def multinomial(probs, num_samples, replacement=False, *, generator=None, out=None):
    """``torch.multinomial`` with :func:`draw_one` for the calls it covers (see the module docstring)."""
    original = _original()
    if _ours(probs, num_samples, generator, out) and exact_here():
        return draw_one(probs, generator)
    return original(probs, num_samples, replacement, generator=generator, out=out)


@contextlib.contextmanager
def single_draws():
    """``torch.multinomial`` is :func:`multinomial` inside the block (one thread's ``generate``), then torch's
    own again; nested blocks leave the outer one's in place."""
    original = torch.multinomial
    if getattr(original, "__wrapped_multinomial__", None) is not None:
        yield
        return

    @functools.wraps(original)
    def patched(*args, **kwargs):
        return multinomial(*args, **kwargs)

    patched.__wrapped_multinomial__ = original
    torch.multinomial = patched
    try:
        yield
    finally:
        torch.multinomial = original
