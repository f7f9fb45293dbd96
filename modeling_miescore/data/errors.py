"""The error of bad benchmark input (dataset, split, predictions file).

It subclasses :class:`~modeling_miescore.hub.image_io.MIEScoreInputError`, so ``miescore benchmark`` prints the
message on one line and exits with status 2.
"""

from __future__ import annotations

from ..hub.errors import MIEScoreInputError

__all__ = ["EXAMPLES", "BenchmarkInputError"]

EXAMPLES = 5  # how many example ids an error message or a report lists


class BenchmarkInputError(MIEScoreInputError):
    """Bad benchmark input (dataset, split, predictions file); the message names the file/field and the fix."""
