"""A model plus one KV cache over B rows of different lengths: the engine's one cache interface.

The cache is a grid of slots shared by the rows (docs/design.md, "One KV cache interface"); a
row's positions (RoPE) count its own valid slots, so holes change nothing a row sees. A single
sequence never has a hole and runs with the model's own causal mask and positions.

- ``feed(tokens, counts)`` appends one column per token to every row, row r's first
  ``counts[r]`` real, the rest holes. A row with only padding has fully masked attention rows:
  transformers returns finite values for them (tested), and no query reads those slots.
- ``rollback(lengths)`` keeps the first ``lengths[r]`` tokens of row r; columns that are holes in
  every row are cut from the tail. Nothing is recomputed.
- ``admit(prefixes)`` prefills new rows apart and joins them; ``select(rows)`` keeps some rows;
  ``compact()`` packs each row's tokens to the left when holes pass ``COMPACT_AT`` (a gather).

Storages (``CacheSettings.kind``): ``dynamic``, transformers' ``DynamicCache``; sliding-window
layers keep past states until the next rollback trims them, so a rollback may go back to any
length since the previous one, and such a cache holds one row, no holes. ``static``, its
``StaticCache``, allocated once: a rollback moves the grid's width back, so decode forwards keep
their shapes and ``torch.compile`` can run them (one graph per token count up to
``COMPILED_TOKENS``). The grid's bookkeeping (:class:`~specrl.engine.grid.SlotGrid`) stays on
the host: feeding and rolling back never read the device.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from specrl.engine import masks
from specrl.engine.grid import COMPACT_AT, SlotGrid
from specrl.models import CacheSettings, check_cache

COMPILED_TOKENS = 16  # a verification is k + 1 tokens; longer feeds are prefills


def cache_keyword(model: PreTrainedModel) -> str:
    """The name under which ``model``'s forward takes its KV cache: ``cache`` in recent
    transformers (5.25), ``past_key_values`` in 5.19 (the version vLLM 0.32 pins)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def crop(cache: DynamicCache | StaticCache, tokens_to_remove: int) -> None:
    """transformers' ``Cache.crop`` (``tokens_to_remove`` < 0: drop that many slots from the end).
    A static layer of transformers 5.19 has no ``crop``: its filled length is then moved back
    in place, as later versions' ``StaticLayer.crop`` does (the next feed overwrites the slots)."""
    for layer in cache.layers:
        if hasattr(layer, "crop"):
            layer.crop(tokens_to_remove)
        elif tokens_to_remove < 0:
            layer.cumulative_length.sub_(-tokens_to_remove)


class KVCache:
    """One causal LM with a KV cache over ``rows`` rows, empty at first (see the module doc);
    ``max_length`` is the context window no row passes (a static cache's size)."""

    def __init__(
        self,
        model: PreTrainedModel,
        vocab_size: int,
        settings: CacheSettings | None = None,
        max_length: int = 0,
        rows: int = 1,
    ) -> None:
        self.model = model
        self.cache_keyword = cache_keyword(model)
        self.vocab_size = vocab_size  # logits beyond the shared tokenizer are padding rows
        self.settings = settings or CacheSettings()
        self.static = self.settings.kind == "static"
        self.max_length = max_length  # the context window: no row holds more
        self.capacity = max_length + COMPILED_TOKENS + 1  # a static grid's slots: a window, holes of a step
        self.cache = self._new_storage()
        self.window = min(
            (layer.sliding_window for layer in self.cache.layers if getattr(layer, "is_sliding", False)),
            default=None,
        )
        if self.window is not None:
            self.cache.activate_past_recording()
        self.floor = 0  # sliding layers: no rollback below the length at the last trim
        self.checked = False
        self.compiled = (
            torch.compile(model.forward, dynamic=False) if self.static and self.settings.compile else None
        )
        self.grid = SlotGrid(rows)  # per row, the column of each token; the width
        self.mask: torch.Tensor | None = None  # (B, slots) valid slots; None while there is no hole

    def _new_storage(self) -> DynamicCache | StaticCache:
        if not self.static:
            cache = DynamicCache(config=self.model.config)
            check_cache(cache, self.model.config)  # refuse, by name, a cache that cannot be cut back
            return cache
        cache = StaticCache(config=self.model.config, max_cache_len=self.capacity)
        sliding = [type(layer).__name__ for layer in cache.layers if type(layer) is not StaticLayer]
        if sliding:
            raise ValueError(
                f"the {self.model.config.model_type} model has {sliding[0]} layers, which a static cache "
                "cannot roll back (their ring buffer overwrites the slots a rejection would go back to); "
                "load the pair with kv_cache='dynamic'"
            )
        return cache

    # ---- state --------------------------------------------------------------------------------

    @property
    def rows(self) -> int:
        return self.grid.rows

    @property
    def slots(self) -> int:
        """The grid's width: columns in use, holes included."""
        return self.grid.width

    @property
    def lengths(self) -> list[int]:
        """Tokens each row holds."""
        return self.grid.lengths

    @property
    def length(self) -> int:
        """Tokens the one row holds (a single sequence's cache)."""
        if self.rows != 1:
            raise ValueError(f"the cache holds {self.rows} rows; read lengths[r] for a row's length")
        return len(self.grid.slots_of[0])

    def holes(self) -> float:
        """The share of slots that hold no token."""
        return self.grid.holes()

    def _valid(self) -> torch.Tensor:
        """(B, slots) the valid slots, materialised."""
        if self.mask is not None:
            return self.mask
        return torch.ones((self.rows, self.slots), dtype=torch.bool, device=self.model.device)

    def _mask_of_rows(self) -> torch.Tensor | None:
        """The valid slots once rows were cut back or packed: None when the grid has no hole."""
        if self.grid.dense():
            return None
        lengths = on_device([[length] for length in self.lengths], self.model.device)
        return torch.arange(self.slots, device=self.model.device)[None, :] < lengths

    # ---- feeding ------------------------------------------------------------------------------

    @torch.inference_mode()
    def feed(self, tokens: torch.Tensor, counts: list[int] | None = None, keep: int = 1) -> torch.Tensor:
        """Append ``tokens`` (B, n) to the cache, row r's first ``counts[r]`` real (default: all);
        return the logits of the last ``keep`` columns (B, keep, V)."""
        rows, n = tokens.shape
        if rows != self.rows:
            raise ValueError(f"fed {rows} rows to a cache of {self.rows}")
        ragged = counts is not None and any(count != n for count in counts)
        if ragged and self.window is not None:
            raise NotImplementedError(
                f"the {self.model.config.model_type} model has sliding-window layers, whose cache cannot "
                "hold the holes of a batch with ragged rows yet; decode one prompt at a time"
            )
        if self.static and self.slots + n > self.capacity:
            self.compact(0.0)  # a static grid is full: pack its holes away first
            if self.slots + n > self.capacity:
                raise RuntimeError(
                    f"the static KV cache holds {self.capacity} slots and is full ({self.slots} used, "
                    f"{n} more fed); it is sized to the pair's context window, which generations never pass"
                )
        mask = None  # (B, slots + n) the valid slots after the feed; None while there is no hole
        if ragged:
            new = torch.arange(n, device=tokens.device)[None, :] < on_device(
                [[c] for c in counts], tokens.device
            )
            mask = torch.cat([self._valid(), new], 1)
        elif self.mask is not None:
            mask = torch.cat([self.mask, torch.ones((rows, n), dtype=torch.bool, device=tokens.device)], 1)
        before = self.slots
        out = self._forward(tokens, mask, keep)
        self.grid.feed(n, counts)
        self.mask = mask
        self._check_grew(before)
        return out.logits[..., : self.vocab_size]

    def _forward(self, tokens: torch.Tensor, mask: torch.Tensor | None, keep: int):
        """The model's forward over ``tokens`` (B, n) onto the grid (``mask``: after the feed, or None
        while there is no hole: then the model's own causal mask and positions serve)."""
        n = tokens.shape[1]
        arguments = {
            "input_ids": tokens,
            self.cache_keyword: self.cache,
            "use_cache": True,
            "logits_to_keep": keep,
        }
        if mask is not None or self.static:
            # positions count each row's own tokens; each new token sees its row's valid slots up to its own
            lengths = on_device([[length] for length in self.lengths], tokens.device)  # (B, 1)
            real = mask[:, self.slots :] if mask is not None else torch.ones_like(tokens, dtype=torch.bool)
            arguments["position_ids"] = (lengths + real.long().cumsum(1) - 1).clamp(min=0)
            arguments["attention_mask"] = self._attention(mask, n)
        if self.compiled is not None and n <= COMPILED_TOKENS:
            return self.compiled(**arguments)
        return self.model(**arguments)  # the module's call: its hooks run (forward counters)

    def _attention(self, mask: torch.Tensor | None, n: int) -> torch.Tensor | None:
        """The attention mask of a feed of ``n`` columns onto the grid (:mod:`specrl.engine.masks`):
        (B, 1, n, width) in the kernel's form; a 2D mask for kernels that build their own."""
        width = self.capacity if self.static else self.slots + n
        if not masks.takes_prepared(self.model):
            return None if mask is None else torch.nn.functional.pad(mask, (0, width - mask.shape[1])).long()
        allowed = masks.causal(n, width, self.slots, self.model.device)  # (n, width)
        if mask is not None:
            allowed = torch.nn.functional.pad(mask, (0, width - mask.shape[1]))[:, None, None, :] & allowed
        else:
            allowed = allowed.expand(self.rows, 1, n, width)
        return masks.prepared_mask(self.model, allowed)

    def _check_grew(self, before: int) -> None:
        """The first feed checks that the model extended the cache it was given."""
        if self.checked or self.static:
            return
        self.checked = True
        if self.window is None and self.cache.get_seq_length() != self.slots:
            raise RuntimeError(
                f"the {self.model.config.model_type} model ({type(self.model).__name__}) did not extend the "
                f"KV cache it was given ({before} -> {self.cache.get_seq_length()} slots, {self.slots} "
                "expected): its forward does not take transformers' `cache` argument, so specrl cannot "
                "decode with it incrementally"
            )

    def verify(self, pending: list[list[int]], proposal: torch.Tensor, proposed: list[int]) -> torch.Tensor:
        """Feed each row's pending tokens (the sequence after its cached prefix; empty: the row
        takes no part) and then its ``proposed[r]`` proposals (``proposal``: (B, w), right-padded);
        return (B, w + 1, V): the logits at each row's last pending token and at each proposal,
        the verifier's p_1..p_{m+1}."""
        rows, w = proposal.shape
        device = proposal.device
        widths = [len(tokens) for tokens in pending]
        if all(width == 1 for width in widths) and all(m == w for m in proposed):  # a single sequence's step
            return self.feed(torch.cat([on_device(pending, device), proposal], 1), keep=w + 1)
        base, _ = padded(pending, device)  # (B, P)
        first = base.shape[1]
        counts = [width + m if width else 0 for width, m in zip(widths, proposed, strict=True)]
        width_fed = max(max(counts), 1)
        columns = [  # each row's pending tokens, then its proposals, then padding
            [*range(width), *range(first, first + m)] + [0] * (width_fed - count)
            for width, m, count in zip(widths, proposed, counts, strict=True)
        ]
        ids = torch.cat([base, proposal], 1).gather(1, on_device(columns, device))
        logits = self.feed(ids, counts, keep=width_fed)  # (B, width_fed, V)
        if all(width == 1 for width in widths):
            return logits[:, : w + 1]
        at = [[min(max(width - 1, 0) + j, width_fed - 1) for j in range(w + 1)] for width in widths]
        return logits.gather(1, on_device(at, device)[..., None].expand(-1, -1, logits.shape[-1]))

    # ---- rolling back, rows joining and leaving -------------------------------------------------

    def rollback(self, lengths: list[int]) -> None:
        """Keep the first ``lengths[r]`` tokens of every row r; a row already shorter is left alone."""
        before = self.slots
        valid = self._valid() if self.mask is not None else None
        cut = self.grid.rollback(lengths)
        if self.window is not None:
            self._trim_window(before)
            return
        if not cut:
            return
        if self.grid.dense():
            self.mask = None  # the cut left no hole
        elif valid is not None:  # a hole stays a hole: each row keeps its first valid slots
            rank = valid.long().cumsum(1)  # the 1-based index of each valid slot in its row
            lengths_now = on_device([[length] for length in self.lengths], self.model.device)
            self.mask = (valid & (rank <= lengths_now))[:, : self.slots]
        else:
            self.mask = self._mask_of_rows()
        self._crop(before)

    def _trim_window(self, before: int) -> None:
        """Sliding layers (one row, no holes): crop even when nothing is rejected, to trim them to
        the window; no rollback may go below the length of the last trim."""
        length = self.lengths[0] if self.rows else 0
        if length < self.floor:
            raise RuntimeError(
                f"cannot roll the {self.model.config.model_type} cache back to {length} tokens: its "
                f"sliding-window layers were trimmed at {self.floor}"
            )
        trims = before >= self.window
        crop(self.cache, -(before - length))
        self.grid.cut(length)
        if trims:
            self.floor = length

    def _crop(self, before: int) -> None:
        """Cut the storage (``before`` columns) and the mask to the grid's width."""
        if self.slots < before:
            crop(self.cache, self.slots - before)  # transformers' crop takes minus the slots to drop
            if self.mask is not None:
                self.mask = self.mask[:, : self.slots]

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (indices into the batch, in their new order)."""
        before = self.slots
        self.grid.select(rows)
        if not rows:
            self.cache, self.mask = self._new_storage(), None
            return
        index = torch.tensor(rows, device=self.model.device)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys, layer.values = layer.keys[index], layer.values[index]
        if self.mask is not None:
            self.mask = self.mask[index]
        self._crop(before)
        if self.grid.dense():
            self.mask = None

    def admit(self, prefixes: list[list[int]]) -> None:
        """Append new rows holding ``prefixes`` (prefilled apart, right-padded, then joined)."""
        joining = KVCache(self.model, self.vocab_size, self.settings, self.max_length, rows=len(prefixes))
        joining.compiled = self.compiled
        if any(prefixes):
            ids, counts = padded(prefixes, self.model.device)
            joining.feed(ids, counts, keep=1)
        self.join(joining)

    def join(self, other: KVCache) -> None:
        """Append ``other``'s rows (a cache of the same model) after this cache's rows."""
        if other.model is not self.model:
            raise ValueError("only a cache of the same model can join this batch")
        if not self.rows:
            self.cache, self.grid, self.mask = other.cache, other.grid, other.mask
            self.floor, self.checked = other.floor, self.checked or other.checked
            return
        if self.window is not None:
            raise NotImplementedError(
                f"the {self.model.config.model_type} model has sliding-window layers, whose cache cannot "
                "take rows joining a running batch yet; decode one prompt at a time"
            )
        width = max(self.slots, other.slots)
        mine_valid, their_valid = self._valid(), other._valid()
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            if not mine.is_initialized and not theirs.is_initialized:
                continue  # nothing cached yet: the next feed initialises the layer at the new size
            like = (mine if mine.is_initialized else theirs).keys
            parts = ((self, mine), (other, theirs))
            keys = torch.cat([cache._widened(layer, "keys", width, like) for cache, layer in parts])
            values = torch.cat([cache._widened(layer, "values", width, like) for cache, layer in parts])
            if not mine.is_initialized:
                mine.lazy_initialization(like, like)
            mine.keys, mine.values = keys, values
        pad = torch.nn.functional.pad
        self.mask = torch.cat(
            [pad(mine_valid, (0, width - self.slots)), pad(their_valid, (0, width - other.slots))]
        )
        self.grid.join(other.grid)
        if self.static:
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.cumulative_length.fill_(width)
        if self.grid.dense():
            self.mask = None

    def _widened(self, layer, name: str, width: int, like: torch.Tensor) -> torch.Tensor:
        """A layer's keys or values (rows, heads, slots, dim) with holes up to ``width`` slots (zeros
        that the mask hides; a static grid's are the allocated slots after its width)."""
        tensor = getattr(layer, name) if layer.is_initialized else None
        if self.static:
            if tensor is None:
                return like.new_zeros((self.rows, *like.shape[1:]))
            return tensor
        holes = like.new_zeros((self.rows, like.shape[1], width - self.slots, like.shape[-1]))
        return (
            torch.cat([tensor[:, :, : self.slots], holes], 2) if tensor is not None and self.slots else holes
        )

    def compact(self, threshold: float = COMPACT_AT) -> bool:
        """Pack each row's tokens to the left when holes exceed ``threshold`` of the slots; True if it did."""
        if self.mask is None or self.holes() <= threshold:
            return False
        order = self.grid.pack()  # per row: the old slot of each new column
        width = self.slots
        index_rows = torch.tensor(order, device=self.model.device)  # (B, width)
        for layer in self.cache.layers:
            if not layer.is_initialized:
                continue
            index = index_rows[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            keys, values = layer.keys.gather(2, index), layer.values.gather(2, index)
            if self.static:
                layer.keys[:, :, :width], layer.values[:, :, :width] = keys, values
                layer.cumulative_length.fill_(width)
            else:
                layer.keys, layer.values = keys, values
        self.mask = self._mask_of_rows()
        return True


def padded(rows: list[list[int]], device: torch.device) -> tuple[torch.Tensor, list[int] | None]:
    """Right-padded (B, width) token ids on the device, and each row's count of real tokens (None
    when every row fills the width)."""
    width = max(1, max(len(row) for row in rows))
    ids = on_device([row + [0] * (width - len(row)) for row in rows], device)
    counts = [len(row) for row in rows]
    return ids, None if all(count == width for count in counts) else counts


def on_device(values: list, device: torch.device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A host table copied to the device without waiting for it (pinned, non-blocking on CUDA)."""
    table = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return table
    return table.pin_memory().to(device, non_blocking=True)
