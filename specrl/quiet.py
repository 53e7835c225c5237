"""A plain import and a model load say nothing: the library speaks only where there is long work.

- transformers imports torchao whenever it is installed (the ``quant`` extra), and torchao then
  logs each CUDA kernel library it cannot load on this machine, and torch warns about the enums
  torchao registers. Neither concerns a user who has not asked for a quantised drafter (whose
  build, :mod:`specrl.engine.drafters.quantized`, reports its own errors), so those two loggers
  are held at ERROR while transformers is first imported.
- ``from_pretrained`` draws a weight-loading bar per model: seconds of work for our pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

IMPORT_LOGGERS = ("torchao", "torch.utils._pytree")


@contextmanager
def quiet_loggers(names: tuple[str, ...] = IMPORT_LOGGERS) -> Iterator[None]:
    """Hold the loggers ``names`` at ERROR inside the block, then restore their levels."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' progress bars off inside the block (as they were after it)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


with quiet_loggers():
    import transformers.modeling_utils  # noqa: F401  (the import that pulls torchao in)
