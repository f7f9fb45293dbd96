"""The errors of the benchmark runner: bad input (dataset, split, predictions file) and mismatched ids.

Both subclass :class:`~modeling_miescore.image_io.MIEScoreInputError`, so ``miescore benchmark`` prints the
message on one line and exits with status 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..image_io import MIEScoreInputError

if TYPE_CHECKING:
    from .alignment import Alignment

__all__ = ["EXAMPLES", "BenchmarkInputError", "PredictionMismatchError"]

EXAMPLES = 5  # how many example ids an error message or a report lists


class BenchmarkInputError(MIEScoreInputError):
    """Bad benchmark input (dataset, split, predictions file); the message names the file/field and the fix."""


class PredictionMismatchError(BenchmarkInputError):
    """Prediction ids and dataset ids differ; ``alignment`` holds the counts and examples."""

    def __init__(self, message: str, alignment: Alignment):
        super().__init__(message)
        self.alignment = alignment
