"""An editor benchmark's MLLM judge as a reward: ``gedit-judge:MODEL@URL`` (GEdit-Bench's VIEScore ``tie`` judge
behind an OpenAI-compatible endpoint), for the editor-RL trainer's ``eval_rewards``.

Each edit is judged as ``miescore benchmark gedit`` judges it; the reward is the judge's overall ``O = sqrt(SC x PQ)``
on 0-10, with ``sc`` and ``pq`` as components. A request that failed after its retries (``request_failed``) or an
answer the judge flags (``judge_flagged``) is a failed sample, never a number.
"""

from __future__ import annotations

import re
from typing import List, Sequence

from ...rewards.groups import EditGroup, GroupScores, checked_value, flat_samples, regroup
from .protocols import editor_benchmark
from ...utils.credentials import redact
from ...hub.processing_miescore import EditSample

__all__ = ["BenchmarkJudgeReward", "build_gedit_judge_reward"]


class BenchmarkJudgeReward:
    """``benchmark``'s judge (a :class:`~modeling_miescore.data.converters.schema.EditorBenchmark` name) on the
    engine of ``backend`` as an :class:`~modeling_miescore.rewards.groups.EditorReward` (module docstring)."""

    def __init__(self, benchmark: str, backend, *, name: str):
        from ...judges.call_engine import CallEngine  # deferred: loads httpcore, httpx

        self.benchmark = editor_benchmark(benchmark)
        self.engine = CallEngine(backend)
        judge_class = self.benchmark.judge_class()
        self.judge = judge_class(self.engine, judge_class.read_prompts(None, ()), name=name, info={},
                                 settings=self.benchmark.request)
        self.name = name
        self.reward_range = tuple(float(v) for v in self.benchmark.scale)

    def score_groups(self, groups: Sequence[EditGroup]) -> List[GroupScores]:
        samples, _ = flat_samples(groups)
        edits = [EditSample(sources=s["sources"], edited=s["edited"], instruction=s["instruction"], id=f"e{k}")
                 for k, s in enumerate(samples)]
        records = self.judge.score_batch(edits)
        rewards, failures = [], []
        components = {name: [] for name in self.benchmark.scores if name != self.benchmark.overall}
        for record in records:
            if not isinstance(record, dict):  # a JudgeRequestError: the request failed for good
                value, reason = None, "request_failed"
            elif record.get("failed"):
                value, reason = None, "judge_flagged"
            else:
                value, reason = checked_value(record.get(self.benchmark.overall), self.reward_range)
            rewards.append(value)
            failures.append(reason)
            for part, values in components.items():
                values.append(record.get(part) if isinstance(record, dict) and value is not None else None)
        return regroup(groups, rewards, failures, components)

    def close(self) -> None:
        self.engine.close()


def build_gedit_judge_reward(argument: str) -> BenchmarkJudgeReward:
    """``gedit-judge:MODEL@URL`` (``URL`` with its API prefix, e.g. ``http://127.0.0.1:8000/v1``) -> the GEdit
    judge on that endpoint (key from ``OPENAI_API_KEY``), its images sent as GEdit's released script sends them."""
    from ...judges.chat_backends import OpenAIChatBackend  # deferred: loads httpcore, httpx

    match = re.match(r"^(.+)@(https?://\S+)$", argument.strip())
    if match is None:
        raise ValueError(f"gedit-judge:{argument} must be gedit-judge:MODEL@URL, e.g. "
                         "gedit-judge:gpt-4.1@https://api.openai.com/v1")
    model, url = match.groups()
    request = editor_benchmark("gedit").request
    backend = OpenAIChatBackend(url, model, api_key_env="OPENAI_API_KEY", timeout=120.0, max_retries=2,
                                max_concurrency=8, image_format=request.image_format,
                                max_pixels=request.max_pixels, image_quality=request.image_quality or 90)
    return BenchmarkJudgeReward("gedit", backend, name=redact(f"gedit-judge:{argument}"))
