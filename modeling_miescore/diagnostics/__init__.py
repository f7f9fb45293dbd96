"""Checks a user runs on a checkpoint: token budgets, whether it is sane, whether it loads on its own.

``token_budget``: how many tokens each part of a MIEScore or SpatialReward prompt takes (rubric / D.1 prompt,
instruction, labels, chat markup, each image), the shared prefix that prefix reuse runs once, and what a
training length limit does to the per-image pixel budget (``miescore tokens``).

``doctor``: ``miescore doctor``, the checks of a checkpoint (files, config <-> processor <-> tokenizer, token
budget, score spread and directions on perturbed examples, SpatialReward parsing, throughput).

``isolated_load``: a fresh interpreter in which a checkpoint loads either through the installed package (nothing
from the folder runs: the doctor's default ``fresh_process`` check) or, without this package and its non-Hub
dependencies, with ``trust_remote_code`` (the Hub-boundary test and ``doctor --trust-remote-code``).
"""

from .doctor import CheckResult, DoctorReport, diagnose_checkpoint, format_report
from .isolated_load import (IsolatedLoadJob, load_and_score_with_package, load_and_score_without_package,
                            run_without_package)
from .token_budget import (
    DEFAULT_INSTRUCTION,
    PromptBudget,
    ShrinkResult,
    TrainingLength,
    budget_legend,
    checkpoint_budgets,
    format_budget_table,
    miescore_budget,
    shrink_to_fit,
    spatialreward_budgets,
    training_length,
)

__all__ = ["CheckResult", "DEFAULT_INSTRUCTION", "DoctorReport", "IsolatedLoadJob", "PromptBudget", "ShrinkResult",
           "TrainingLength", "budget_legend", "checkpoint_budgets", "diagnose_checkpoint", "format_budget_table",
           "format_report", "load_and_score_with_package", "load_and_score_without_package", "miescore_budget",
           "run_without_package", "shrink_to_fit", "spatialreward_budgets", "training_length"]
