"""Controllers choose (k, tau) for each speculative iteration."""

from specrl.controllers.base import Controller
from specrl.controllers.static import StaticController

__all__ = ["Controller", "StaticController"]
