"""A model plus one KV cache over B sequences of different lengths, fed in lockstep.

Batched speculative decoding accepts a different number of tokens in every row (ragged
acceptance). The cache is a grid of slots, one column per feed position, shared by the rows;
a boolean mask says which slots of a row hold its tokens. A row's tokens fill its valid slots in
order, and their positions (RoPE) count the row's valid slots, so holes change nothing a row
sees: attention never reads a masked slot.

- ``feed(tokens, valid)`` appends one column per token to every row; padding (``valid`` False)
  gives a hole. Prompts of different lengths are fed right-padded, so a padding slot has its
  row's tokens before it. A row with nothing to prefill (a one-token prompt) has only padding
  there, fully masked attention rows: transformers' attention returns finite values for them
  (tested: no NaN enters a cache), and no query ever reads those slots.
- ``rollback(lengths)`` keeps the first ``lengths[r]`` tokens of row r: its later slots become
  holes. Columns that are holes in every row are cut from the tail. Nothing is recomputed, and
  no row is cut back to another row's length.
- ``join(other)`` appends the rows of another cache of the same model, prefilled apart (requests
  joining a running batch): the narrower cache's rows get holes on the right, so both grids line
  up; nothing is recomputed.
- ``select(rows)`` keeps some rows (finished rows leave the batch); ``compact()`` drops the
  columns that are holes in every row and packs each row's tokens to the left when holes take
  more than half the cache (a gather over the cached keys and values, no forward).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specrl.engine import masks
from specrl.models import check_cache


class BatchCache:
    """One causal LM with a KV cache over B sequences (see the module doc)."""

    def __init__(self, model: PreTrainedModel, vocab_size: int, batch_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.cache = DynamicCache(config=model.config)
        check_cache(self.cache, model.config)
        if any(getattr(layer, "is_sliding", False) for layer in self.cache.layers):
            raise NotImplementedError(
                f"batched decoding does not support sliding-window layers yet ({model.config.model_type}); "
                "decode one prompt at a time"
            )
        device = model.device
        self.mask = torch.zeros((batch_size, 0), dtype=torch.bool, device=device)  # (B, slots)
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)  # valid tokens per row

    @property
    def batch_size(self) -> int:
        return self.mask.shape[0]

    @property
    def slots(self) -> int:
        return self.mask.shape[1]

    @torch.inference_mode()
    def feed(
        self, tokens: torch.Tensor, valid: torch.Tensor | None = None, keep: int | None = None
    ) -> torch.Tensor:
        """Append ``tokens`` (B, n), where ``valid`` (B, n) marks real tokens (default: all), to
        the cache; return the logits of the last ``keep`` columns (B, keep, V; default all n)."""
        if valid is None:
            valid = torch.ones_like(tokens, dtype=torch.bool)
        n = tokens.shape[1]
        positions = (self.lengths[:, None] + valid.long().cumsum(1) - 1).clamp(min=0)
        mask = torch.cat([self.mask, valid], 1)
        out = self.model(
            input_ids=tokens,
            attention_mask=self._attention(mask, n),
            position_ids=positions,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep if keep is not None else n,
        )
        self.mask = mask
        self.lengths = self.lengths + valid.sum(1)
        if self.cache.get_seq_length() != self.slots:
            raise RuntimeError(
                f"the {self.model.config.model_type} model did not extend the KV cache it was given "
                f"({self.cache.get_seq_length()} slots, {self.slots} expected)"
            )
        return out.logits[..., : self.vocab_size]

    def _attention(self, mask: torch.Tensor, n: int) -> torch.Tensor:
        """The attention mask of a feed of ``n`` columns onto the grid ``mask`` (B, slots): each new
        token sees its row's valid slots up to its own (:mod:`specrl.engine.masks`); the 2D mask
        for kernels that build their own."""
        if not masks.takes_prepared(self.model):
            return mask.long()
        allowed = mask[:, None, None, :] & masks.causal(n, mask.shape[1], mask.device)  # (B, 1, n, slots)
        return masks.prepared_mask(self.model, allowed)

    def rollback(self, lengths: torch.Tensor) -> None:
        """Keep the first ``lengths[r]`` tokens of every row r (B,); a row already shorter is left alone."""
        rank = self.mask.long().cumsum(1)  # the 1-based index of each valid slot in its row
        self.mask = self.mask & (rank <= lengths[:, None])
        self.lengths = torch.minimum(self.lengths, lengths)
        self._cut_tail()

    def _cut_tail(self) -> None:
        used = self.mask.any(0).nonzero()
        last = int(used[-1]) + 1 if len(used) else 0
        if last < self.slots:
            self.cache.crop(last - self.slots)  # transformers' crop takes minus the slots to drop
            self.mask = self.mask[:, :last]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only ``rows`` (indices into the batch, in their new order)."""
        self.cache.batch_select_indices(rows)
        self.mask, self.lengths = self.mask[rows], self.lengths[rows]
        self._cut_tail()

    def join(self, other: BatchCache) -> None:
        """Append ``other``'s rows (a cache of the same model) after this cache's rows."""
        if other.model is not self.model:
            raise ValueError("only a cache of the same model can join this batch")
        width = max(self.slots, other.slots)
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            if width == 0:
                mine.reset()  # nothing cached yet: the next feed initialises the layer at the new size
                continue
            like = (mine if self.slots else theirs).keys
            parts = ((self, mine), (other, theirs))
            keys = torch.cat([_widened(c, layer.keys, width, like) for c, layer in parts])
            values = torch.cat([_widened(c, layer.values, width, like) for c, layer in parts])
            if not mine.is_initialized:
                mine.lazy_initialization(like, like)
            mine.keys, mine.values = keys, values
        pad = torch.nn.functional.pad
        self.mask = torch.cat(
            [pad(self.mask, (0, width - self.slots)), pad(other.mask, (0, width - other.slots))]
        )
        self.lengths = torch.cat([self.lengths, other.lengths])

    def holes(self) -> float:
        """The share of slots that hold no token."""
        return 1.0 - float(self.mask.float().mean()) if self.slots else 0.0

    def compact(self, threshold: float = 0.5) -> bool:
        """Pack each row's tokens to the left when holes exceed ``threshold`` of the slots; True if it did."""
        if self.holes() <= threshold:
            return False
        width = int(self.lengths.max())
        # per row: the slot of its i-th token, i < width (rows with fewer tokens repeat their last slot)
        order = torch.sort((~self.mask).long(), dim=1, stable=True).indices[:, :width]  # valid slots first
        mask = torch.arange(width, device=self.mask.device)[None, :] < self.lengths[:, None]
        for layer in self.cache.layers:
            index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys = layer.keys.gather(2, index)
            layer.values = layer.values.gather(2, index)
        self.mask = mask
        return True


def _widened(cache: BatchCache, tensor: torch.Tensor, width: int, like: torch.Tensor) -> torch.Tensor:
    """A layer's keys or values (rows, heads, slots, dim) of ``cache`` with holes up to ``width``
    slots (zeros that the mask hides); ``like`` gives the shape of a head where it holds no slot."""
    holes = like.new_zeros((cache.batch_size, like.shape[1], width - cache.slots, like.shape[-1]))
    return torch.cat([tensor[:, :, : cache.slots], holes], 2) if cache.slots else holes
