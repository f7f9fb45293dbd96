"""What the editor benchmarks' MLLM judges share: requests through the call engine
(:class:`~modeling_miescore.judges.call_engine.CallEngine`: concurrency, retries with ``Retry-After``, the answer
cache, the usage log), the protocol's image preparation, and the rules for failures.

A judge (:class:`EditorJudge` subclass) builds the chat requests of one edit (:meth:`~EditorJudge.requests`) and
turns their answers into one judgement record (:meth:`~EditorJudge.read_answers`). :meth:`EditorJudge.score_batch`
is the callable :func:`~modeling_miescore.scoring.jsonl_scoring.score_jsonl` takes, so a run is resumable, locked
and reports bad lines like ``score-batch``:

* a request that failed for good (HTTP error after its retries, timeout, malformed body) gives no record (a
  :class:`~modeling_miescore.judges.mllm_judge.JudgeRequestError` for that edit): it is reported, and a rerun asks
  again (the other request of a GEdit edit is answered from the cache);
* a refusal, an answer without every score, a score out of the scale or not a finite number: a flagged record
  (``failed: true``, the scores ``null``, ``issues`` naming what was wrong, the answer in ``raw``), counted, listed
  and left out of every mean; never a number read from elsewhere;
* an answer cut off by the token budget is flagged ``truncated`` (and fails when its scores are incomplete).

Requests follow the run's :class:`~modeling_miescore.data.converters.schema.JudgeRequestSettings` (by default the
benchmark's released script: the order of text and images, ``max_tokens``, ``temperature``; None = not sent).

Every record carries ``judge`` (the judge's name), ``prompts`` (which prompts made it), ``request`` (the request
settings' label) and ``edited_sha256`` (the edited file's digest), which a resumed run checks.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ...judges.call_engine import CallEngine, CallResult, ChatRequest
from ...judges.mllm_judge import JudgeRequestError

__all__ = ["EditorJudge", "prepare_edited"]


def prepare_edited(sample, resize_to_source: bool):
    """The edited image as the protocol shows it: resized to the first source's size (GEdit's scorer:
    ``Image.open(edited).convert("RGB").resize(source.size)``, Pillow's default bicubic filter) or as it is."""
    edited = sample.edited
    if resize_to_source and sample.sources and edited.size != sample.sources[0].size:
        edited = edited.resize(sample.sources[0].size)
    return edited


class EditorJudge:
    """Base of the GEdit / ImgEdit MLLM judges (module docstring).

    Args:
        engine: the call engine of the judge model.
        prompts: the benchmark's prompt set (own wording, or read from the user's copy of the benchmark's files).
        name: the ``judge`` field of every record.
        info: per input id, ``{"category", "edited_sha256"}`` (the rows' task types and the edited files' digests).
        settings: how requests are sent (:class:`~modeling_miescore.data.converters.schema.JudgeRequestSettings`:
            parts order, ``max_tokens``, ``temperature``; the image settings are the backend's).
    """

    resize_to_source = False
    stage = "editor-judge"

    def __init__(self, engine: CallEngine, prompts: Any, *, name: str, info: Dict[str, dict], settings):
        self.engine, self.prompts, self.name, self.info, self.settings = engine, prompts, name, info, settings
        self.counts = {"judged": 0, "flagged": 0, "request_failed": 0}

    # ------------------------------------------------------------------------------ subclass hooks

    @classmethod
    def read_prompts(cls, path: Optional[str], categories: Sequence[str]) -> Any:  # pragma: no cover - abstract
        """The prompt set: the user's copy of the benchmark's prompt file at ``path`` (for the rows'
        ``categories``), or our own wording when ``path`` is None."""
        raise NotImplementedError

    def requests(self, sample, edited, category: str) -> List[ChatRequest]:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_answers(self, texts: Dict[str, Optional[str]], category: str) -> Dict[str, Any]:  # pragma: no cover
        """A record (scores, ``failed``, ``issues``, ``reasoning``) from the answers by request stage (``None`` for
        a refused request)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ shared

    def request(self, text: str, images: Sequence[Any], stage: str) -> ChatRequest:
        """One request: ``text`` and ``images`` in the settings' order (``text-first``: the text part, then the
        images, as GEdit's ``GPT4o.prepare_prompt`` and ImgEdit's ``basic_bench.py``; ``images-first``: as GEdit's
        Qwen2.5-VL path)."""
        parts = [text, *images] if self.settings.parts_order == "text-first" else [*images, text]
        seed = self.settings.seed
        return ChatRequest(parts, max_tokens=self.settings.max_tokens, temperature=self.settings.temperature,
                           extra={} if seed is None else {"seed": seed}, stage=stage)

    def _record(self, results: List[CallResult], stages: List[str], input_id: str, category: str):
        failed = [(s, r) for s, r in zip(stages, results) if not r.ok and r.error_kind != "refusal"]
        if failed:
            self.counts["request_failed"] += 1
            return JudgeRequestError("; ".join(f"{s} request failed: {r.error}" for s, r in failed))
        record = self.read_answers({s: (r.text if r.ok else None) for s, r in zip(stages, results)}, category)
        issues = list(record.get("issues", []))
        for stage, result in zip(stages, results):
            if not result.ok:
                issues.append(f"refusal:{stage}")
            if result.finish_reason == "length":
                issues.append(f"truncated:{stage}")
        record["failed"] = bool(record.get("failed")) or any(not r.ok for r in results)
        if record["failed"]:
            record["raw"] = {s: (r.text if r.ok else r.error)[:500] for s, r in zip(stages, results)}
        self.counts["flagged" if record["failed"] else "judged"] += 1
        reported = sorted({r.model for r in results if r.model})
        return {**record, "issues": issues, "judge": self.name, "prompts": self.prompts.label,
                **({"endpoint_model": ", ".join(reported)} if reported else {}),
                "request": self.settings.label(), "edited_sha256": self.info.get(input_id, {}).get("edited_sha256")}

    def score_batch(self, samples: Sequence[Any], batch_size: int = 0) -> List[Any]:
        """One record (or :class:`JudgeRequestError`) per loaded sample, in order."""
        plans = []
        for sample in samples:
            category = self.info.get(sample.id, {}).get("category", "")
            reqs = self.requests(sample, prepare_edited(sample, self.resize_to_source), category)
            plans.append((sample.id, category, reqs))
        results = self.engine.run([r for _, _, reqs in plans for r in reqs])
        out, start = [], 0
        for input_id, category, reqs in plans:
            chunk = results[start:start + len(reqs)]
            start += len(reqs)
            out.append(self._record(chunk, [r.stage for r in reqs], input_id, category))
        return out
