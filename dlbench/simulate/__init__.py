"""``dlbench simulate``: cost a strategy's plan with the HDMLP/NoPFS performance model (no I/O)."""

from ..system import SystemProfile
from ..system import load as load_profile
from .core import (
    DISPLAY,
    LOWERBOUND,
    SimWorkload,
    build_plan,
    display_name,
    from_workload,
    policy_of,
    sample_sizes,
    sim_context,
    simulate,
    strategy_names,
    summarize,
)
from .model import Costing, Model

__all__ = ["DISPLAY", "LOWERBOUND", "policy_of", "sim_context", "strategy_names", "SimWorkload", "build_plan", "display_name", "from_workload", "sample_sizes", "simulate",
           "summarize", "Costing", "Model", "SystemProfile", "load_profile"]
