"""Will a batch's KV caches fit? Refuse one that would not, saying how many rows would."""

from __future__ import annotations

import torch

from specrl.engine.cache import COMPACT_AT
from specrl.models import ModelPair


class BatchTooLargeError(ValueError):
    """The batch's KV caches would not fit in the device's free memory."""


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes one token takes in a model's KV cache (keys and values of every layer)."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    return 2 * config.num_hidden_layers * heads * head_dim * dtype.itemsize


def free_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` (None where it cannot be told)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_batch_memory(pair: ModelPair, rows: int, tokens_per_row: int) -> None:
    """Refuse a batch whose KV caches (target and draft, holes up to ``COMPACT_AT`` included)
    would not fit in free memory, saying how many rows would."""
    per_row = int(tokens_per_row / (1 - COMPACT_AT)) * (
        kv_bytes_per_token(pair.target) + kv_bytes_per_token(pair.draft)
    )
    free = free_bytes(pair.device)
    if free is None or rows * per_row <= free:
        return
    raise BatchTooLargeError(
        f"a batch of {rows} prompts needs about {rows * per_row / 2**30:.1f} GiB of KV cache "
        f"({tokens_per_row} tokens a row, room for rejected slots included) but {pair.device} has "
        f"{free / 2**30:.1f} GiB free: at most {free // per_row} rows fit; decode in smaller batches"
    )
