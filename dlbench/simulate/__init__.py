"""``dlbench simulate``: cost a strategy's plan with the HDMLP/NoPFS performance model (no I/O)."""

from .core import DISPLAY, STRATEGIES, SimWorkload, build_plan, from_workload, sample_sizes, simulate, summarize
from .model import Costing, Model
from ..system import SystemProfile
from ..system import load as load_profile

__all__ = ["DISPLAY", "STRATEGIES", "SimWorkload", "build_plan", "from_workload", "sample_sizes", "simulate",
           "summarize", "Costing", "Model", "SystemProfile", "load_profile"]
