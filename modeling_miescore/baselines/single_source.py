"""The single-source evaluator protocol of ``miescore baselines --evaluator``: learned evaluators that take one
source image (Table 3's ✩ rows: LMM4Edit, EditScore, EditReward, EditHF, "IEQA-specialized MLLMs").

MIEScore paper, "Implementation Details": "For methods that support only single-source image inputs, we compute the
results for each source image separately and report the average score." An evaluator is a Python callable

    evaluate(source: PIL.Image, edited: PIL.Image, instruction: str) -> float | {score key: float}

named ``package.module:function``. With ``--evaluator-option KEY=VALUE`` (repeatable) the named object is a
*factory*: it is called once with those options (values read as JSON when they parse, else as text) and returns the
evaluator, which is how an adapter loads its model once (:mod:`.editscore_adapter`). A number stands for every score
key; a mapping holds some of ``visual_quality``, ``instruction_following``, ``attribute_preservation``,
``overall`` (others are refused). :func:`per_source_scorer` calls the evaluator once per source of an edit and
averages each key over the sources; the predictions file has the keys the evaluator gave (a missing ``overall`` is
computed by the benchmark reader with the paper's eq. 2). An evaluator that cannot score an edit raises; the edit is
then reported with its id and left out of the file (a rerun tries it again), never given a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..data.schema import SCORE_KEYS
from ..image_io import MIEScoreInputError
from ..processing_miescore import EditSample
from ..utils.import_spec import import_callable

__all__ = ["SingleSourceEvaluator", "load_evaluator", "parse_evaluator_options", "per_source_scorer"]


@dataclass(frozen=True)
class SingleSourceEvaluator:
    """A loaded evaluator: ``name`` (the predictions' ``metric`` field) and the per-source callable."""

    name: str
    evaluate: Callable


def parse_evaluator_options(items: Sequence[str]) -> dict:
    """``["model_name_or_path=/ckpt", "num_pass=2"]`` -> ``{"model_name_or_path": "/ckpt", "num_pass": 2}``."""
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise MIEScoreInputError(f"--evaluator-option {item!r} is not KEY=VALUE (KEY a Python identifier)")
        try:
            options[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            options[key.strip()] = value
    return options


def load_evaluator(spec: str, options: Mapping | None = None, name: str | None = None) -> SingleSourceEvaluator:
    """Import ``spec`` (``package.module:function``); with ``options`` call it as a factory first."""
    target = import_callable(spec, "--evaluator")
    if options:
        target = target(**options)
        if not callable(target):
            raise MIEScoreInputError(f"--evaluator {spec!r} with options returned {type(target).__name__}, not a "
                                     "callable evaluate(source, edited, instruction)")
    return SingleSourceEvaluator(name or spec.rpartition(":")[2], target)


def _as_scores(value, where: str) -> dict[str, float]:
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(SCORE_KEYS))
        if unknown or not value:
            raise ValueError(f"{where} returned keys {sorted(value)}; expected some of {', '.join(SCORE_KEYS)}")
        scores = dict(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        scores = {key: value for key in SCORE_KEYS}
    else:
        raise ValueError(f"{where} returned {type(value).__name__}; expected a number or a mapping of score keys")
    out = {}
    for key, score in scores.items():
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(f"{where} returned {key}={score!r}, not a finite number")
        out[key] = float(score)
    return out


def per_source_scorer(evaluator: SingleSourceEvaluator) -> Callable[[EditSample], dict[str, float]]:
    """A scorer of loaded edits: the evaluator on each source with the edited image, averaged per key."""

    def score(sample: EditSample) -> dict[str, float]:
        per_source = [_as_scores(evaluator.evaluate(source, sample.edited, sample.instruction),
                                 f"{evaluator.name} on source {k + 1}") for k, source in enumerate(sample.sources)]
        keys = set(per_source[0])
        if any(set(s) != keys for s in per_source):
            raise ValueError(f"{evaluator.name} returned different score keys for different sources")
        return {key: sum(s[key] for s in per_source) / len(per_source) for key in SCORE_KEYS if key in keys}

    return score
