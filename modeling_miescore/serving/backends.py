"""What the reward server scores with: the :class:`ScorerBackend` interface, its MIEScore, SpatialReward and
plain-callable implementations, and :func:`load_backend` (a checkpoint -> the right backend)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections import Counter
from typing import Callable

from ..hub.processing_miescore import EditSample
from ..utils.numbers import json_safe
from ..scoring.loading import ModelLoadError, load_scorer, load_spatialreward, read_checkpoint_config

__all__ = ["ScorerBackend", "MIEScoreBackend", "SpatialRewardBackend", "CallableBackend", "load_backend",
           "score_by_shared_prefix", "shared_prefix_parts", "takes_group_ids"]


class ScorerBackend:
    """What the server needs from a model: score a list of loaded samples, in order.

    Subclasses implement :meth:`score_samples`; it runs in one worker thread (never concurrently with
    itself), gets at most ``max_batch`` samples whose images are already RGB ``PIL.Image`` objects, and
    returns one JSON-serialisable dict per sample, in input order. Raising fails the batch; the server then
    retries each sample alone so that one bad sample does not fail the others.

    :meth:`prepare` splits a batch into the work before the model (on the server's preparing thread) and the
    model call; a backend whose ``prepare`` does real work sets ``prepares = True``.

    ``max_pixels`` is the model's pixel budget per image (its processor resizes every image to at most that);
    the server decodes larger uploads reduced towards it (never below it). None: decode at full size.

    A backend with ``accepts_group_ids = True`` is called as ``score_samples(samples, group_ids=...)``: one
    id per sample, equal for samples that share sources and instruction (a content hash of the uploaded
    source bytes and the instruction), so it can run their shared prefix once.
    """

    name = "backend"
    accepts_group_ids = False
    max_pixels: int | None = None
    prepares = False  # True: prepare() does real work, worth overlapping with the previous model call

    def score_samples(self, samples: list[EditSample]) -> list[dict]:  # pragma: no cover - interface
        raise NotImplementedError

    def prepare(self, samples: list[EditSample], group_ids: list | None = None) -> Callable[[], list]:
        """The work before the model for one batch; returns the call that scores it.

        The server runs ``prepare`` on its preparing thread, while the model thread may still run the previous
        batch, and then the returned call on the model thread. Default: nothing to prepare, the call is
        :meth:`score_samples` (with ``group_ids`` when the backend takes them).
        """
        if group_ids is not None and self.accepts_group_ids:
            return functools.partial(self.score_samples, samples, group_ids=group_ids)
        return functools.partial(self.score_samples, samples)

    def describe(self) -> dict:
        return {"backend": self.name}


class MIEScoreBackend(ScorerBackend):
    """A loaded :class:`MIEScoreModel`: ``score_batch`` per server batch (see :func:`score_by_shared_prefix`).

    :meth:`prepare` builds the model inputs (``prepare_batch``: tokenising, image preprocessing, prefix groups)
    on the server's preparing thread, so the model thread only runs ``score_prepared``; checkpoints whose code
    predates that split are scored by ``score_batch`` on the model thread.
    """

    name = "miescore"

    def __init__(self, model, batch_size: int | None = None, max_image_pixels: int | None = None):
        self.model = model
        self.batch_size = batch_size
        self.max_image_pixels = max_image_pixels
        self.max_pixels = _config_max_pixels(model)
        self.accepts_group_ids = takes_group_ids(model.score_batch)
        self.prepares = all(callable(getattr(model, name, None)) for name in ("prepare_batch", "score_prepared"))
        # the tokenizer sets its padding state on every call: one thread at a time uses the processor
        self._processor_lock = threading.Lock()

    def _kwargs(self) -> dict:
        return {} if self.max_image_pixels is None else {"max_image_pixels": self.max_image_pixels}

    def _parts(self, group_ids: list | None, count: int) -> list[tuple[list[int], dict]]:
        if group_ids is None or not self.accepts_group_ids:
            return [(list(range(count)), {})]
        return shared_prefix_parts(group_ids)

    def score_samples(self, samples: list[EditSample], group_ids: list | None = None) -> list[dict]:
        with self._processor_lock:
            return _in_input_order(len(samples), [
                (indices, self.model.score_batch([samples[i] for i in indices],
                                                 batch_size=self.batch_size or len(indices), **self._kwargs(), **kw))
                for indices, kw in self._parts(group_ids, len(samples))])

    def prepare(self, samples: list[EditSample], group_ids: list | None = None) -> Callable[[], list]:
        if not self.prepares:
            return super().prepare(samples, group_ids)
        with self._processor_lock:
            prepared = [(indices, self.model.prepare_batch([samples[i] for i in indices],
                                                           batch_size=self.batch_size or len(indices),
                                                           **self._kwargs(), **kw))
                        for indices, kw in self._parts(group_ids, len(samples))]
        return lambda: _in_input_order(len(samples), [(indices, self.model.score_prepared(part))
                                                      for indices, part in prepared])

    def describe(self) -> dict:
        config = self.model.config
        return {"backend": self.name, "model": config.name_or_path or None,
                "scores": [*config.score_names, "overall"], "device": str(self.model.device),
                "dtype": str(self.model.dtype).replace("torch.", "")}


class SpatialRewardBackend(ScorerBackend):
    """A loaded ``SpatialRewardModel`` (generative SC + PQ passes): ``evaluate_edits`` per server batch."""

    name = "spatialreward"

    def __init__(self, model, batch_size: int | None = None):
        self.model = model
        self.batch_size = batch_size
        self.max_pixels = _config_max_pixels(model)
        self.accepts_group_ids = takes_group_ids(model.evaluate_edits)

    def score_samples(self, samples: list[EditSample], group_ids: list | None = None) -> list[dict]:
        if group_ids is None or not self.accepts_group_ids:
            results = self.model.evaluate_edits(samples, batch_size=self.batch_size or max(1, len(samples)))
        else:
            results = score_by_shared_prefix(self.model.evaluate_edits, samples, group_ids, self.batch_size)
        return [json_safe(r) for r in results]

    def describe(self) -> dict:
        config = getattr(self.model, "config", None)
        return {"backend": self.name, "model": getattr(config, "name_or_path", None) or None,
                "scores": ["reward", "s_if", "s_con", "s_nat", "s_art", "sc", "pq"],
                "device": str(getattr(self.model, "device", "unknown"))}


class CallableBackend(ScorerBackend):
    """Wrap a plain ``fn(list[EditSample]) -> list[dict]`` as a backend (fakes in tests, custom scorers);
    ``max_pixels``: the scorer's own pixel budget per image, if it has one."""

    name = "callable"

    def __init__(self, fn: Callable[[list[EditSample]], list[dict]], name: str = "callable",
                 max_pixels: int | None = None):
        self.fn = fn
        self.name = name
        self.max_pixels = max_pixels

    def score_samples(self, samples: list[EditSample]) -> list[dict]:
        return self.fn(samples)


def takes_group_ids(method) -> bool:
    """Whether a scorer's batch method takes ``groups`` and ``reuse_prefix`` (older remote code and the API
    scorers do not)."""
    return {"groups", "reuse_prefix"} <= set(inspect.signature(method).parameters)


def shared_prefix_parts(group_ids: list) -> list[tuple[list[int], dict]]:
    """How :func:`score_by_shared_prefix` splits a batch: ``(indices, kwargs)`` for the samples that share their
    prefix with another one (``groups=`` their ids) and for the others (``reuse_prefix=False``); empty parts
    are left out."""
    counts = Counter(group_ids)
    shared = [i for i, group in enumerate(group_ids) if counts[group] > 1]
    alone = [i for i, group in enumerate(group_ids) if counts[group] == 1]
    return [(indices, kwargs) for indices, kwargs in ((shared, {"groups": [group_ids[i] for i in shared]}),
                                                      (alone, {"reuse_prefix": False})) if indices]


def score_by_shared_prefix(score: Callable, samples: list[EditSample], group_ids: list,
                           batch_size: int | None = None) -> list:
    """``score`` (``score_batch`` / ``evaluate_edits``) called on the samples that share their prefix with
    another one, with their ``groups`` (the shared prefix runs once), and separately on the others with
    ``reuse_prefix=False``; results in input order.

    The model runs the same batches as in one call (it batches groups and single samples apart anyway), but it
    hashes the source pixels only of the grouped samples (to check their ids) instead of every sample's.
    """
    return _in_input_order(len(samples), [
        (indices, score([samples[i] for i in indices], batch_size=batch_size or len(indices), **kwargs))
        for indices, kwargs in shared_prefix_parts(group_ids)])


def _in_input_order(count: int, parts: list) -> list:
    """``[(indices, results)]`` of the parts of a batch -> one result per sample, in input order."""
    results: list = [None] * count
    for indices, scored in parts:
        for i, result in zip(indices, scored):
            results[i] = result
    return results


def _config_max_pixels(model) -> int | None:
    """The checkpoint's ``config.max_pixels`` (MIEScore and SpatialReward both have one), or None."""
    value = getattr(getattr(model, "config", None), "max_pixels", None)
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def load_backend(model: str, device: str = "auto", dtype: str = "auto", batch_size: int | None = None) -> ScorerBackend:
    """A backend for a checkpoint folder or Hub repo: MIEScore or SpatialReward, chosen by ``model_type``."""
    model_type = read_checkpoint_config(model).get("model_type")
    if model_type == "miescore":
        return MIEScoreBackend(load_scorer(model, device=device, dtype=dtype), batch_size=batch_size)
    if model_type in ("spatialreward", "qwen3_vl"):  # ours, or the authors' plain Qwen3-VL checkpoint
        return SpatialRewardBackend(load_spatialreward(model, device=device, dtype=dtype), batch_size=batch_size)
    raise ModelLoadError(
        f"model '{model}' has model_type={model_type!r}; the server serves 'miescore' and 'spatialreward' checkpoints"
    )
