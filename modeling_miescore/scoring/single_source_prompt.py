"""MIEScore on single-source edits: the prompt variant of the zero-shot results (MIEScore paper, "Zero-shot Results
on Other Benchmarks": "adapted to the single-source setting by slightly modifying the evaluation prompt while
keeping the model parameters unchanged").

The variant is data: :data:`SINGLE_SOURCE_PROMPT_TEMPLATE` and :data:`SINGLE_SOURCE_LABEL` replace the checkpoint's
``prompt_template`` / ``source_label`` (the skill text, weights and head stay as they are). The prompt says that
there is one source and labels it "Source image:" instead of "Source image 1:". :func:`score_edits` picks it
automatically for every sample with exactly one source and scores the others with the checkpoint's own prompt.

How (no Hub file changes): ``MIEScoreModel.score_batch`` builds every prompt from ``model.config``, so the variant is
applied by scoring those samples while ``model.config`` is a copy with the two fields replaced
(:func:`single_source_config`, :func:`prompt_config`), then restoring the original. Once the Hub files select the
variant themselves (``build_messages`` using ``config.single_source_prompt_template`` / ``single_source_label``
when ``num_sources == 1``), :func:`score_edits` reduces to ``model.score_batch``.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Sequence

from ..processing_miescore import as_edit_sample

__all__ = ["SINGLE_SOURCE_LABEL", "SINGLE_SOURCE_PROMPT_TEMPLATE", "prompt_config", "score_edits",
           "single_source_config"]

SINGLE_SOURCE_PROMPT_TEMPLATE = (
    "{skill}\n\n"
    "This edit has a single source image: judge attribute preservation against it alone.\n"
    "{sources}\n"
    "Editing instruction: {instruction}\n\n"
    "{edited}\n"
    "Rate the edited image for visual quality, instruction following and attribute preservation."
)
SINGLE_SOURCE_LABEL = "Source image:"


def single_source_config(config):
    """A copy of a :class:`MIEScoreConfig` with the single-source template and label (everything else equal)."""
    variant = copy.deepcopy(config)
    variant.prompt_template = SINGLE_SOURCE_PROMPT_TEMPLATE
    variant.source_label = SINGLE_SOURCE_LABEL
    variant.validate_scoring_fields()
    return variant


@contextmanager
def prompt_config(model, config):
    """Score with ``config`` as ``model.config`` inside the block; the model's own config is restored after."""
    original = model.config
    model.config = config
    try:
        yield model
    finally:
        model.config = original


def score_edits(model, samples: Sequence, batch_size: int = 8, **kwargs) -> list[dict]:
    """``model.score_batch`` with the single-source prompt for one-source samples (results in input order).

    ``kwargs`` go to ``score_batch`` (``progress``, ``processor``, ``max_image_pixels``, ``reuse_prefix``).
    """
    normalised = [as_edit_sample(sample, where=f"sample {i}") for i, sample in enumerate(samples)]
    single = [i for i, sample in enumerate(normalised) if len(sample.sources) == 1]
    multi = [i for i, sample in enumerate(normalised) if len(sample.sources) != 1]
    results: list[dict | None] = [None] * len(normalised)
    if single:
        with prompt_config(model, single_source_config(model.config)):
            scored = model.score_batch([normalised[i] for i in single], batch_size=batch_size, **kwargs)
        for i, result in zip(single, scored):
            results[i] = result
    if multi:
        for i, result in zip(multi, model.score_batch([normalised[i] for i in multi], batch_size=batch_size,
                                                      **kwargs)):
            results[i] = result
    return results
