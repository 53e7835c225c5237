"""The embedded default (target, draft) pair, built offline from the Python stdlib."""

from specrl.embedded.build import build, ensure_pair, specrl_home
from specrl.embedded.presets import PRESETS, Preset

__all__ = ["PRESETS", "Preset", "build", "ensure_pair", "specrl_home"]
