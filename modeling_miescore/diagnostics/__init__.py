"""Checks a user runs on a checkpoint: token budgets, ...

``token_budget``: how many tokens each part of a MIEScore or SpatialReward prompt takes (rubric / D.1 prompt,
instruction, labels, chat markup, each image), the shared prefix that prefix reuse runs once, and what a
training length limit does to the per-image pixel budget (``miescore tokens``).
"""

from .token_budget import (
    DEFAULT_INSTRUCTION,
    PromptBudget,
    ShrinkResult,
    checkpoint_budgets,
    format_budget_table,
    miescore_budget,
    shrink_to_fit,
    spatialreward_budgets,
)

__all__ = ["DEFAULT_INSTRUCTION", "PromptBudget", "ShrinkResult", "checkpoint_budgets", "format_budget_table",
           "miescore_budget", "shrink_to_fit", "spatialreward_budgets"]
