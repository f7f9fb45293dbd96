"""Checks a user runs on a checkpoint: ``miescore tokens`` (``token_budget``) and ``miescore doctor`` (``doctor``,
``isolated_load``)."""

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
