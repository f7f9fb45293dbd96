"""The multi-source protocol: how a single-image metric or a single-source evaluator meets a multi-source edit.

MIEScore paper: "For methods that support only single-source image inputs, we compute the results for each source
image separately and report the average score." Per kind of metric:

- full-reference (SSIM, MS-SSIM, LPIPS): the edited image against each source, the source resized to the edited
  image's size (bicubic; the edited image is never resampled), averaged over the sources;
- no-reference (BRISQUE, CNNIQA, HyperIQA, TOPIQ, Q-Align): the edited image alone, at its own size;
- text-image (CLIPScore): the instruction against the edited image.

Each returns one number per edit as its library computes it (lower is better for BRISQUE and LPIPS).

A learned single-source evaluator (Table 3's ✩ rows, ``miescore baselines --evaluator``) is a callable
``evaluate(source, edited, instruction) -> float | {score key: float}`` named ``package.module:function``; with
``--evaluator-option KEY=VALUE`` the named object is a factory called once with those options (JSON values when they
parse). A number stands for every score key; a mapping holds some of the four score keys (others are refused).
:func:`per_source_scorer` averages each key over the sources. An evaluator that cannot score an edit raises; the
edit is reported and left out, never given a number.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from PIL import Image

from ..data.schema import SCORE_KEYS
from ..hub.errors import MIEScoreInputError
from ..hub.processing_miescore import EditSample
from ..utils.import_spec import import_callable
from .registry import FULL_REFERENCE, NO_REFERENCE, TEXT_IMAGE, Baseline, WeightsFile, require_library

RESAMPLE = Image.Resampling.BICUBIC  # how a source is brought to the edited image's size


class EditTooSmallError(MIEScoreInputError):
    """The edited image is smaller than the metric accepts."""


def resolve_device(device: str = "auto"):
    """``"auto"`` -> cuda when available, else cpu; a one-line error for a device torch does not know."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        raise MIEScoreInputError(f"unknown device '{device}'; use auto, cpu, cuda or cuda:N") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise MIEScoreInputError(f"device '{device}' asked for, but no CUDA device is available; use --device cpu")
    return resolved


def _to_tensor(image: Image.Image):
    from torchvision.transforms.functional import to_tensor

    return to_tensor(image)  # (3, H, W) float in [0, 1]


def full_reference_pairs(sample: EditSample):
    """``(edited, sources)``: two ``(S, 3, H, W)`` tensors in [0, 1], one row per source image.

    Row ``k`` holds the edited image and source ``k`` resized to the edited image's size (see the module
    docstring). ``sample`` must be loaded (RGB PIL images).
    """
    import torch

    size = sample.edited.size
    edited = _to_tensor(sample.edited)
    sources = [_to_tensor(s if s.size == size else s.resize(size, RESAMPLE)) for s in sample.sources]
    return edited.unsqueeze(0).expand(len(sources), -1, -1, -1), torch.stack(sources)


def _check_size(baseline: Baseline, sample: EditSample) -> None:
    width, height = sample.edited.size
    if baseline.min_side and min(width, height) < baseline.min_side:
        raise EditTooSmallError(f"{baseline.name} needs images at least {baseline.min_side} px on the shorter side; "
                                f"the edited image is {width}x{height}")


def _pyiqa_scorer(baseline: Baseline, device) -> Callable[[EditSample], float]:
    pyiqa = require_library(baseline)
    with contextlib.redirect_stdout(sys.stderr):  # pyiqa prints what it loads; keep stdout for results
        metric = pyiqa.create_metric(baseline.metric_id, device=device, **baseline.options)

    def score(sample: EditSample) -> float:
        import torch

        with torch.inference_mode():
            if baseline.kind == FULL_REFERENCE:
                edited, sources = full_reference_pairs(sample)
                values = metric(edited.to(device), sources.to(device))
            else:
                values = metric(_to_tensor(sample.edited).unsqueeze(0).to(device))
        return float(values.reshape(-1).double().mean())  # the average over the sources (one value for NR)

    return score


def _projected(features):
    """The embedding tensor from ``get_image_features`` / ``get_text_features`` (a model output in transformers 5)."""
    return features if hasattr(features, "norm") else features.pooler_output


def _clip_with_tensor_features(model):
    """``model`` (a ``CLIPModel``) with ``get_image_features`` / ``get_text_features`` returning tensors again.

    torchmetrics 1.9.0 expects tensors, while transformers 5 returns ``BaseModelOutputWithPooling`` whose
    ``pooler_output`` is the projected embedding (fixed upstream in Lightning-AI/torchmetrics#3408, not yet
    released); this adapter changes nothing else.
    """
    import torch

    class TensorFeatures(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.clip = model
            self.config = model.config

        def get_image_features(self, *args, **kwargs):
            return _projected(self.clip.get_image_features(*args, **kwargs))

        def get_text_features(self, *args, **kwargs):
            return _projected(self.clip.get_text_features(*args, **kwargs))

    return TensorFeatures()


def _clipscore_scorer(baseline: Baseline, device, weights: list[WeightsFile]) -> Callable[[EditSample], float]:
    require_library(baseline)
    import torch
    from torchmetrics.multimodal import CLIPScore
    from torchvision.transforms.functional import pil_to_tensor
    from transformers import CLIPModel, CLIPProcessor

    snapshot = weights[0].path.parent  # the cached Hub snapshot, read locally: no network

    def model_and_processor():
        model = CLIPModel.from_pretrained(snapshot, local_files_only=True).eval()
        return _clip_with_tensor_features(model), CLIPProcessor.from_pretrained(snapshot, local_files_only=True)

    metric = CLIPScore(model_name_or_path=model_and_processor).to(device)
    prefix = baseline.options.get("prefix", "")

    def score(sample: EditSample) -> float:
        metric.reset()
        with torch.inference_mode():
            metric.update(pil_to_tensor(sample.edited).to(device), f"{prefix} {sample.instruction}".strip())
            return float(metric.compute())

    return score


def load_scorer(baseline: Baseline, device, weights: list[WeightsFile]) -> Callable[[EditSample], float]:
    """A function ``loaded EditSample -> float`` for ``baseline`` on ``device``, following the module's protocol.

    ``weights``: the checked files of :func:`modeling_miescore.baselines.registry.check_weights`.
    """
    if baseline.library == "pyiqa" and baseline.kind in (FULL_REFERENCE, NO_REFERENCE):
        compute = _pyiqa_scorer(baseline, device)
    elif baseline.library == "torchmetrics" and baseline.kind == TEXT_IMAGE:
        compute = _clipscore_scorer(baseline, device, weights)
    else:
        raise ValueError(f"no adapter for {baseline.library} {baseline.kind} metric {baseline.name!r}")

    def score(sample: EditSample) -> float:
        _check_size(baseline, sample)
        return compute(sample)

    return score


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


__all__ = ["EditTooSmallError", "SingleSourceEvaluator", "full_reference_pairs", "load_evaluator", "load_scorer",
           "parse_evaluator_options", "per_source_scorer", "resolve_device"]
