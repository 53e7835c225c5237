"""The embedded default (target, draft) pair, built offline from the Python stdlib."""

from specrl.zoo.build import build, ensure_pair, specrl_home
from specrl.zoo.presets import PRESETS, Preset

__all__ = ["PRESETS", "Preset", "build", "ensure_pair", "specrl_home"]
