"""A key/value cache that writes each new token into spare room instead of concatenating (transformers' public
extension point: a ``DynamicCache`` subclass handed to ``generate``; it replaces nothing).

transformers' ``DynamicCache`` appends a generated token by ``torch.cat`` of the whole cache with it, in
every layer at every token: a copy of all the keys and values so far. On the tiny preset those copies
were up to a sixth of a rollout batch's generation (128 rows, 60-150 prompt tokens, 64 new).
:class:`GrowingCache` keeps each layer's keys and values in a buffer with room for more tokens (``SPARE``,
or a quarter of the length if more) and writes a new token in place; what attention reads is a view of
the filled part: the same values in the same order. On a CPU torch's attention kernel reads the view as
it read the copy, so the logits and the sampled tokens are the same (tests/test_kv_cache.py; the default
preset's checkpoints and scores to the byte; ``python bench/kv_cache_speed.py`` prints the speed ratio).
Generation only: its forwards run without gradients (an in-place write would invalidate a view saved for
backward).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

SPARE = 64  # tokens of room a buffer is made with: a rollout's or an evaluation's whole completion


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose ``keys`` / ``values`` are views of buffers with spare room.

    Any other method that replaces ``keys`` (``reorder_cache``, ``crop``, ``batch_select_indices``, ...)
    leaves a tensor that is not the view this layer made; the next ``update`` then copies it into a new
    buffer, so every inherited method stays right without being rewritten."""

    _keys_buffer: torch.Tensor | None = None
    _values_buffer: torch.Tensor | None = None
    _keys_view: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        filled = self.keys.shape[-2] if self.keys.dim() == 4 else 0  # lazy init leaves an empty 1-d tensor
        end = filled + key_states.shape[-2]
        own = self._keys_view is not None and self.keys is self._keys_view
        if not own or end > self._keys_buffer.shape[-2]:
            self._grow(end + max(SPARE, end // 4), filled, key_states, value_states)
        self._keys_buffer[:, :, filled:end] = key_states
        self._values_buffer[:, :, filled:end] = value_states
        self.keys = self._keys_view = self._keys_buffer[:, :, :end]
        self.values = self._values_buffer[:, :, :end]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (:mod:`sdpocl.generation.finished_rows`): one copy of the buffers' rows, spare room
        included."""
        own = self._keys_view is not None and self.keys is self._keys_view
        if not own:
            return super().batch_select_indices(indices)
        filled = self.keys.shape[-2]
        self._keys_buffer, self._values_buffer = self._keys_buffer[indices], self._values_buffer[indices]
        self.keys = self._keys_view = self._keys_buffer[:, :, :filled]
        self.values = self._values_buffer[:, :, :filled]

    def _grow(self, capacity: int, filled: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads = key_states.shape[:2]
        keys = key_states.new_empty(batch, heads, capacity, key_states.shape[-1])
        values = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if filled:
            keys[:, :, :filled] = self.keys
            values[:, :, :filled] = self.values
        self._keys_buffer, self._values_buffer = keys, values


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` whose full-attention layers are :class:`GrowingLayer`.

    With ``config`` the layers are the model's (``DynamicCache(config=...)``): a sliding-window or other
    special layer keeps transformers' class, only plain ``DynamicLayer`` s grow in place. Without one, every
    layer is a ``GrowingLayer``, made as the decoder layers first write (what ``DynamicCache()`` does)."""

    def __init__(self, config=None) -> None:
        super().__init__(config=config)
        if self.layer_class_to_replicate is DynamicLayer:
            self.layer_class_to_replicate = GrowingLayer
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
