"""Checks a user runs on a checkpoint: ``token_budget`` (``miescore tokens``: tokens per prompt part, the shared
prefix, what a training length limit does to the pixel budget), ``doctor`` (``miescore doctor``: is the checkpoint
sane) and ``isolated_load`` (a fresh interpreter loads it through the installed package, or without this package
with ``trust_remote_code``: the Hub-boundary test and ``doctor --trust-remote-code``).
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
