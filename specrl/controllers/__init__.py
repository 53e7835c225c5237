"""Controllers choose (k, tau, drafter) for each speculative iteration."""

from specrl.controllers.base import Controller
from specrl.controllers.batch_schedule import BatchCutoffController, BatchScheduleController
from specrl.controllers.hf import HFConfidenceController, HFHeuristicController
from specrl.controllers.learned import LearnedController
from specrl.controllers.pool import PoolRuleController
from specrl.controllers.static import StaticController
from specrl.controllers.tcp import TCPController

__all__ = [
    "BatchCutoffController",
    "BatchScheduleController",
    "Controller",
    "HFConfidenceController",
    "HFHeuristicController",
    "LearnedController",
    "PoolRuleController",
    "StaticController",
    "TCPController",
]
