"""Reward callables for online RL of image editors (Flow-GRPO, DanceGRPO, TRL-style loops):
``reward_fn(edited_images, instructions, source_images)``.

- :class:`SpatialRewardFunction`: a SpatialReward scorer in this process (``SpatialRewardModel`` or
  ``SpatialRewardAPI``) -> ``(rewards, details)``; an unusable sample gets ``failure_reward`` and is counted in
  ``details`` (``n_failed``, ``failure_reasons``, ``issues``), only caller bugs (mismatched lengths) raise.
- :func:`make_reward_fn`: any model behind ``miescore serve`` (one replica or several) -> ``list[float]``.

These reward *image editors*; the GRPO rewards that train the SpatialReward judge itself are in
:mod:`modeling_miescore.training.spatialreward_grpo_rewards`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..hub.errors import MIEScoreInputError
from ..hub.processing_miescore import as_edit_sample
from ..serving.reward_client import RewardClient, RewardServerError, as_image_list
from ..hub.spatialreward_judgement import SpatialRewardResult

__all__ = ["SpatialRewardFunction", "make_reward_fn"]


def _input_failure(value: float, num_sources: int, backend: str) -> SpatialRewardResult:
    return SpatialRewardResult(reward=float(value), failed=True, failure_reasons=["input_error"],
                               num_sources=num_sources, backend=backend)


class SpatialRewardFunction:
    """Batched, never-crashing reward callable around a SpatialReward scorer.

    Args:
        scorer: a ``SpatialRewardModel`` or ``SpatialRewardAPI`` (anything with ``evaluate_edits`` and
            ``config``).
        batch_size: samples per generate call / per in-flight API batch.
        failure_reward: value for failed samples (default: ``scorer.config.failure_reward``, 0.0).

    Calling ``fn(images, instructions, sources)`` returns ``(rewards, details)``:
        rewards: list of floats, one per edited image, in input order.
        details: ``{"results": [SpatialRewardResult], "n", "n_failed", "failure_rate", "failure_reasons":
        {reason: count}, "issues": {"sc:<code>"|"pq:<code>": number of samples}, "input_errors": {index:
        message}, "mean_reward" (over non-failed samples, None if all failed), "elapsed_s"}``.
    :attr:`totals` accumulates ``n``, ``n_failed``, ``failure_reasons`` and ``issues`` over all calls.
    """

    def __init__(self, scorer, batch_size: int = 8, failure_reward: Optional[float] = None):
        if not hasattr(scorer, "evaluate_edits"):
            raise TypeError(f"scorer must have evaluate_edits (SpatialRewardModel or SpatialRewardAPI), got "
                            f"{type(scorer).__name__}")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.scorer = scorer
        self.batch_size = int(batch_size)
        config = getattr(scorer, "config", None)
        default = getattr(config, "failure_reward", 0.0)
        self.failure_reward = float(default if failure_reward is None else failure_reward)
        self.totals: Dict[str, Any] = {"n": 0, "n_failed": 0, "failure_reasons": Counter(), "issues": Counter()}
        self.__name__ = "spatialreward"  # TRL and loggers name reward functions by __name__

    def __call__(self, images: Sequence, instructions: Sequence[str], sources: Sequence):
        """Rewards for ``images[i]`` edited from ``sources[i]`` (one image or a list) by ``instructions[i]``."""
        images, instructions, sources = list(images), list(instructions), list(sources)
        if not (len(images) == len(instructions) == len(sources)):
            raise ValueError(f"images, instructions and sources must have the same length, got {len(images)}, "
                             f"{len(instructions)} and {len(sources)}")
        started = time.perf_counter()
        backend = getattr(self.scorer, "backend", "transformers")
        results: List[Optional[SpatialRewardResult]] = [None] * len(images)
        input_errors: Dict[int, str] = {}
        valid, valid_index = [], []
        for i, (image, instruction, src) in enumerate(zip(images, instructions, sources)):
            try:
                sample = as_edit_sample({"sources": src, "edited": image, "instruction": instruction},
                                        where=f"sample {i}")
                sample = sample.load()
            except MIEScoreInputError as err:
                input_errors[i] = str(err)
                n_src = len(src) if isinstance(src, (list, tuple)) else 1
                results[i] = _input_failure(self.failure_reward, n_src, backend)
                continue
            valid.append(sample)
            valid_index.append(i)
        if valid:
            judged = self.scorer.evaluate_edits(valid, batch_size=self.batch_size)
            for i, result in zip(valid_index, judged):
                if result.failed:
                    result.reward = self.failure_reward
                results[i] = result
        rewards = [float(r.reward) for r in results]
        reasons: Counter = Counter()
        issues: Counter = Counter()
        for r in results:
            reasons.update(r.failure_reasons)
            for stream, codes in r.issues.items():
                issues.update(f"{stream}:{code}" for code in codes)
        ok = [r.reward for r in results if not r.failed and math.isfinite(r.reward)]
        n_failed = sum(1 for r in results if r.failed)
        details = {
            "results": results,
            "n": len(results),
            "n_failed": n_failed,
            "failure_rate": n_failed / len(results) if results else 0.0,
            "failure_reasons": dict(reasons),
            "issues": dict(issues),
            "input_errors": input_errors,
            "mean_reward": sum(ok) / len(ok) if ok else None,
            "elapsed_s": time.perf_counter() - started,
        }
        self.totals["n"] += len(results)
        self.totals["n_failed"] += n_failed
        self.totals["failure_reasons"].update(reasons)
        self.totals["issues"].update(issues)
        return rewards, details

    def as_trl_reward_func(self, edited_column: str = "edited_image", sources_column: str = "source_images",
                           instruction_column: str = "instruction"):
        """A function with TRL's reward signature ``f(prompts, completions, **kwargs) -> list[float]``.

        The edited images come from the ``edited_column`` batch column, or from ``completions`` when they are
        images (image-generating trainers built on TRL's reward plumbing); the sources from ``sources_column``;
        the instruction from ``instruction_column``, else from ``prompts`` when they are strings. The failure
        fraction is reported through TRL's ``log_metric`` (``spatialreward/failed_fraction``) and each sample's
        failure flag through ``log_extra`` when the trainer provides them.
        """

        def spatialreward(prompts=None, completions=None, **kwargs) -> List[float]:
            edited = kwargs.get(edited_column)
            if edited is None:
                edited = completions
            if edited is None:
                raise ValueError(f"no edited images: add a '{edited_column}' column or pass images as completions")
            sources = kwargs.get(sources_column)
            if sources is None:
                raise ValueError(f"no source images: the batch needs a '{sources_column}' column")
            instructions = kwargs.get(instruction_column)
            if instructions is None:
                if prompts is None or not all(isinstance(p, str) for p in prompts):
                    raise ValueError(f"no instructions: add an '{instruction_column}' column (or string prompts)")
                instructions = prompts
            rewards, details = self(edited, instructions, sources)
            log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
            if callable(log_metric):
                log_metric("spatialreward/failed_fraction", details["failure_rate"])
            if callable(log_extra):
                log_extra("spatialreward_failed", [r.failed for r in details["results"]])
            return rewards

        spatialreward.__name__ = "spatialreward"
        return spatialreward



# ---------------------------------------------------------------------------------------------- over HTTP


def make_reward_fn(base_url: str, key: str = "overall", scale: float = 0.01, api_key: str | None = None,
                   on_error: float | None = None, **client_kwargs) -> Callable[..., list[float]]:
    """A reward callable on a ``miescore serve`` server: ``reward_fn(images, instructions, sources) -> list[float]``.

    ``base_url`` may name several replicas (a list or ``"http://a:8000,http://b:8000"``): each group of
    candidates goes whole to one of them (:class:`~modeling_miescore.serving.reward_client.RewardClient`).

    Args:
        key: which result field is the reward (``overall`` for MIEScore; ``reward`` with ``scale=1.0`` for a
            SpatialReward server, whose reward is already in [0, 1]).
        scale: multiplies it (0.01 maps MIEScore's 0-100 scale to [0, 1]).
        on_error: ``None`` (default) raises :class:`RewardServerError` when the server cannot score; a float
            is returned for every sample of a failed call instead (the failure is then silent: log it).
        client_kwargs: for :class:`~modeling_miescore.serving.reward_client.RewardClient` (``timeout``,
            ``max_retries``, ``max_retry_wait``, ...).

    ``images`` is a list (or a 4-D array/tensor) of edited images and ``instructions`` one string per image
    (or one string for all). ``sources`` is one list of source images per image; a flat list of images is
    read as one source per image when its length equals the number of images, else as the sources shared by
    all images (to share exactly ``len(images)`` sources, pass ``[shared] * len(images)``). Candidates of one
    prompt that share the same sources objects and instruction go to the server as one group.
    ``reward_fn.client`` is the client (``reward_fn.client.close()`` when done).
    """
    client = RewardClient(base_url, api_key=api_key, **client_kwargs)

    def reward_fn(images, instructions, sources, **_ignored) -> list[float]:
        samples = _edit_samples(images, instructions, sources)
        try:
            results = client.score_batch(samples)
        except RewardServerError:
            if on_error is None:
                raise
            return [float(on_error)] * len(samples)
        return [_reward_of(result, key, scale, on_error) for result in results]

    reward_fn.client = client
    return reward_fn


def _edit_samples(images, instructions, sources) -> list[dict]:
    """``reward_fn``'s arguments -> one ``{"sources", "edited", "instruction"}`` dict per edited image."""
    edited = as_image_list(images)
    count = len(edited)
    if isinstance(instructions, str):
        instructions = [instructions] * count
    instructions = list(instructions)
    if sources is None:
        raise ValueError("sources is None; MIEScore needs the source image(s) of every edit")
    if not isinstance(sources, (list, tuple)):
        sources = [[sources]] * count  # one source image shared by all
    elif sources and not isinstance(sources[0], (list, tuple)):
        # flat list: one source per image if the lengths match, else one shared list of sources
        sources = [[s] for s in sources] if len(sources) == count else [list(sources)] * count
    sources = list(sources)
    if len(instructions) != count or len(sources) != count:
        raise ValueError(f"got {count} images, {len(instructions)} instructions and {len(sources)} source "
                         "lists; give one instruction and one source list per image (or one for all)")
    return [{"sources": s, "edited": e, "instruction": t} for s, e, t in zip(sources, edited, instructions)]


def _reward_of(result: dict, key: str, scale: float, on_error: float | None) -> float:
    if key not in result:
        raise KeyError(f"reward key '{key}' not in the server's result (keys: {sorted(result)}); pass key=")
    value = result[key]
    if value is not None:
        return float(value) * scale
    # the server's JSON has no NaN: a failed score arrives as null
    if on_error is None:
        raise RewardServerError(200, f"the server returned no value for '{key}' (a failed score); pass "
                                     "on_error=<float> to use a fixed reward instead")
    return float(on_error)
