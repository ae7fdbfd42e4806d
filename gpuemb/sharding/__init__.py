"""gpuemb.sharding: the sharding planner. Tables and per-rank budgets in; a plan of table-, row-, column-wise and
data-parallel placements out, with its cost per rank (docs/design.md, "Communication and sharding";
docs/sharding.md)."""
from .cost import Memory, RankCost, rank_costs, shard_memory
from .plan import Placement, Plan, Shard, owner_hash
from .planner import PlanError, plan_tables
from .presets import PRESETS, preset_tables
from .report import format_report, imbalance
from .spec import RankBudget, TableSpec

__all__ = ["TableSpec", "RankBudget", "Memory", "RankCost", "shard_memory", "rank_costs", "Shard", "Placement",
           "Plan", "owner_hash", "PlanError", "plan_tables", "PRESETS", "preset_tables", "format_report",
           "imbalance"]
