"""Controllers choose (k, tau, drafter) for each speculative iteration."""

from specrl.controllers.base import Controller
from specrl.controllers.batch_schedule import BatchCutoffController, BatchScheduleController
from specrl.controllers.hf_rules import HFConfidenceController, HFHeuristicController
from specrl.controllers.learned import LearnedController
from specrl.controllers.pool_rule import PoolRuleController
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
