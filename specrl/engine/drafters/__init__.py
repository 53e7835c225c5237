"""Drafters: what proposes tokens to the target, chosen per step by ``Action.drafter``."""

from specrl.engine.drafters.base import Drafter, DrafterError, Proposal
from specrl.engine.drafters.cascade import CascadeDrafter
from specrl.engine.drafters.model import ModelDrafter
from specrl.engine.drafters.ngram import NGramDrafter
from specrl.engine.drafters.registry import DRAFTERS, DrafterPool

__all__ = [
    "DRAFTERS",
    "CascadeDrafter",
    "Drafter",
    "DrafterError",
    "DrafterPool",
    "ModelDrafter",
    "NGramDrafter",
    "Proposal",
]
