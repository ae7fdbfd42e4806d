"""gpuemb.sharding: the sharding planner. Tables and per-rank budgets in; a plan of table-, row-, column-wise and
data-parallel placements out, with its cost per rank (docs/design.md, "Communication and sharding";
docs/sharding.md); and the estimate of a plan's step per rank over a modelled link, under key skew and with hot
rows replicated (estimate.py, skew.py, hot.py, profile.py)."""
from .cost import Memory, RankCost, rank_costs, shard_memory
from .estimate import RankTime, StepEstimate, estimate_step
from .hot import HotRows, choose_hot_rows
from .plan import Placement, Plan, Shard, owner_hash
from .planner import PlanError, plan_tables
from .presets import PRESETS, preset_tables
from .profile import PROFILES, DeviceProfile
from .report import format_report, imbalance
from .skew import KeySkew
from .spec import RankBudget, TableSpec

__all__ = ["TableSpec", "RankBudget", "Memory", "RankCost", "shard_memory", "rank_costs", "Shard", "Placement",
           "Plan", "owner_hash", "PlanError", "plan_tables", "PRESETS", "preset_tables", "format_report",
           "imbalance", "estimate_step", "StepEstimate", "RankTime", "KeySkew", "DeviceProfile", "PROFILES",
           "HotRows", "choose_hot_rows"]
