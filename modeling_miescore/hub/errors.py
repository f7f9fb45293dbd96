"""The package's error base: an input a user supplied is unusable.

Hub file (copied into checkpoints through ``image_io``): the standard library only. Every module that refuses a
user's input raises this error or a subclass, with one line saying what, where and how to fix it.
"""

from __future__ import annotations


class MIEScoreInputError(ValueError):
    """A user-supplied input (image, instruction, sample) is unusable. The message names it and the fix."""


__all__ = ["MIEScoreInputError"]
