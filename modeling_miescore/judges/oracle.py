"""The GRPO "oracle" consistency reward of SpatialReward (arXiv 2602.07458, sec. 3.4, appendix B.1.2, D.4).

During the RL stage a strong judge model (Gemini-3-Flash in the paper, any model behind an OpenAI-compatible
endpoint here) reads the policy's reasoning and scores with the images and says whether they are
hallucination-free and self-consistent: 1 (no issues), 0.5 (minor) or 0 (severe); that value is the reward. The
judge prompts are the paper's appendix D.4 text, verbatim (the published contract of the released recipe).

Failures are never hidden: every sample gets a status, counted in :class:`OracleStats` and logged (the first few of
each one by one, then every 100th): ``ok`` (a usable number, clamped to [0, 1]), ``api_error`` (the request
failed after retries, with the :class:`~modeling_miescore.judges.chat_client.ChatError` kind; a local error
building it is kind ``internal``), ``judge_unparsable`` (no score in the answer) or ``policy_unparsable`` (the
policy output has no scores; the judge is not called). Each failure status has its value in :class:`OracleConfig`
(``None``: not applicable for TRL). The released recipe used 0.8 for API errors and 0.5 for unparsable answers
(:func:`released_failure_values`); our defaults are 0.5 for both: a judge outage is not evidence that the policy
did well, and an output the reward model cannot use is a severe issue (0).

The instruction and the policy's reasoning are filled into the D.4 templates as JSON string literals
(``quote_inputs=True``), and the judge's verdict is its **final** JSON object with a score (several that disagree,
or a score key written twice with different values, give none): a policy under RL would otherwise learn to end
its reasoning with ``{"consistency_score": 1}`` and have it read back when the judge quotes it.

D.4 as printed says "minor issues -0.5", while the released code documents 1 / 0.5 / 0, so an answer of exactly
-0.5 means minor: with ``negative_half_is_minor=True`` (default) it becomes 0.5, counted as ``minor_alias``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..utils.credentials import redacted_url
from ..utils.text_hygiene import quoted
from .chat_client import DEFAULT_MAX_ANSWER_BYTES, ChatClient, ChatError, user_message
from ..hub.spatialreward_relaxed_json import extract_json, strip_reasoning_and_fences
from ..hub.spatialreward_parsing import finite_number, parse_pq_output, parse_sc_output

logger = logging.getLogger(__name__)

__all__ = [
    "SC_ORACLE_PROMPT",
    "PQ_ORACLE_PROMPT",
    "OracleConfig",
    "OracleRequest",
    "OracleResult",
    "OracleStats",
    "OracleJudge",
    "build_sc_oracle_prompt",
    "build_pq_oracle_prompt",
    "parse_judge_answer",
    "released_failure_values",
]

# Appendix D.4, "RL Reward Verification: Semantic Consistency (SC)", verbatim (HTML entities of the extracted
# text unescaped: "&gt; 20" -> "> 20"). Placeholders: {instruction}, {reasoning}, {scores_str}.
SC_ORACLE_PROMPT = (
    "You are an expert evaluator for image editing tasks. Please assess whether the model’s prediction on image "
    "editing is accurate and consistent. The model provides reasoning on both \"editing success\" and \"degree of "
    "over-editing\". You need to focus on checking if the model hallucinates and if the score aligns with the "
    "reasoning. Analyze the discrepancy between the model’s reasoning and the actual image: 1. Consistency with "
    "Reality: Does the model fail to notice actual changes (e.g., changed facial expression) or describe changes "
    "incorrectly? 2. Over-editing Awareness: Does the model notice unintended changes not mentioned in the "
    "instruction (e.g., pose, composition, background)? 3. Fine-grained Details: Does the model overlook subtle "
    "inconsistencies in the edited subject? 4. Hallucination Check: Does the model mention non-existent subtle "
    "changes? 5. Logical Consistency: Is the reasoning self-contradictory? 6. False Over-editing: Does the model "
    "incorrectly flag necessary composition/pose changes (required by the instruction) as over-editing? "
    "(Over-editing score should not be too low for necessary changes). 7. Score-Reasoning Alignment: The scores "
    "must reflect the reasoning. (e.g., purely positive reasoning implies a success score > 20). Editing "
    "Instruction: {instruction} Model Reasoning: {reasoning} Model Scores [Success, Over-editing] (0-25): "
    "{scores_str} Return a brief evaluation reasoning and a consistency score (0.0-1.0). If no issues, give 1; "
    "minor issues -0.5; severe issues 0. JSON Format: { \"reasoning\": \"brief reasoning\", "
    "\"consistency_score\": 0.0-1.0 }"
)

# Appendix D.4, "RL Reward Verification: Perceptual Quality (PQ)", verbatim. Placeholder: {reasoning}.
PQ_ORACLE_PROMPT = (
    "You are an expert evaluator for image editing tasks. Please assess whether the model’s quality evaluation of "
    "the edited image is accurate. Model Reasoning: {reasoning} Analyze the following aspects: 1. Factuality "
    "Check (Hallucination): - Do not label global blurriness as anatomy issues or AI artifacts. - Do not claim "
    "facial distortion if none exists. - Normal image blur or motion blur is NOT an artifact. - Do not "
    "hallucinate \"grid/dot patterns\" if they don’t exist. 2. Logical Coherence: Is the reasoning consistent? 3. "
    "Objectivity: Is the quality assessment fair? Return a brief evaluation reasoning and a quality score "
    "(0.0-1.0). If no issues, give 1; minor issues -0.5; severe issues 0. JSON Format: { \"reasoning\": \"brief "
    "reasoning\", \"quality_score\": 0.0-1.0 }"
)

STATUSES = ("ok", "api_error", "judge_unparsable", "policy_unparsable")
_LOG_FIRST = 5  # failures of each status logged one by one before switching to every 100th


def _fmt_score(x: float) -> str:
    return f"{x:g}"


def build_sc_oracle_prompt(instruction: str, reasoning: str, scores: Sequence[float], quote: bool = True) -> str:
    """Fill the D.4 SC prompt. ``scores`` = [success, over-editing] on 0-25, written like ``[18, 21.5]``;
    ``quote``: instruction and reasoning as JSON string literals (module docstring)."""
    scores_str = "[" + ", ".join(_fmt_score(float(s)) for s in scores) + "]"
    fill = quoted if quote else str
    # str.replace, not str.format: the prompt's own JSON example contains braces. The scores go in first: a
    # "{scores_str}" inside the user's text must stay text.
    return (SC_ORACLE_PROMPT.replace("{scores_str}", scores_str).replace("{reasoning}", fill(reasoning), 1)
            .replace("{instruction}", fill(instruction), 1))


def build_pq_oracle_prompt(reasoning: str, quote: bool = True) -> str:
    """Fill the D.4 PQ prompt (``quote`` as for :func:`build_sc_oracle_prompt`)."""
    return PQ_ORACLE_PROMPT.replace("{reasoning}", quoted(reasoning) if quote else reasoning)


def released_failure_values() -> Dict[str, float]:
    """Failure values of the released ms-swift recipe (``orm.py``), for exact reproduction."""
    return {"api_error_value": 0.8, "judge_unparsable_value": 0.5}


@dataclass
class OracleConfig:
    """Where the judge is (the :class:`~modeling_miescore.judges.chat_client.ChatClient` arguments) and what
    failures are worth. ``temperature`` 0.3 is the released recipe's judge setting; ``max_workers`` bounds the
    concurrent requests; images go as data URLs, downscaled to ``max_pixels``, encoded as ``image_format``."""

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.3
    max_tokens: int = 512
    timeout: float = 60.0
    max_retries: int = 2
    backoff: float = 0.5
    max_workers: int = 8
    api_error_value: Optional[float] = 0.5
    judge_unparsable_value: Optional[float] = 0.5
    policy_unparsable_value: Optional[float] = 0.0
    negative_half_is_minor: bool = True
    send_images: bool = True
    image_format: str = "JPEG"
    max_pixels: Optional[int] = 1_048_576
    extra_body: Dict[str, Any] = field(default_factory=dict)
    quote_inputs: bool = True
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES

    def __post_init__(self):
        if int(self.max_workers) < 1:
            raise ValueError(f"max_workers must be >= 1, got {self.max_workers}")
        for name in ("api_error_value", "judge_unparsable_value", "policy_unparsable_value"):
            value = getattr(self, name)
            if value is not None and not (0.0 <= float(value) <= 1.0):
                raise ValueError(f"{name} must be in [0, 1] or None, got {value!r}")


@dataclass
class OracleRequest:
    """One policy output to verify.

    ``task``: ``"sc"`` (needs ``sources``, ``edited``, ``instruction``) or ``"pq"`` (needs ``edited``).
    ``completion``: the policy's raw generation. ``num_sources`` defaults to ``len(sources)``.
    """

    task: str
    completion: str
    edited: Any = None
    sources: Sequence[Any] = ()
    instruction: str = ""
    num_sources: Optional[int] = None


@dataclass
class OracleResult:
    """Outcome for one request: ``value`` (the reward, or None), ``status`` (see module docstring),
    ``error_kind`` (ChatError kind for ``api_error``), the judge's ``judge_reasoning`` and ``raw_answer``."""

    value: Optional[float]
    status: str
    error_kind: Optional[str] = None
    judge_score: Optional[float] = None
    judge_reasoning: str = ""
    raw_answer: str = ""
    message: str = ""


class OracleStats:
    """Thread-safe counters: ``requests``, one per status, ``api_error:<kind>``, ``clamped`` and
    ``minor_alias``."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: Counter = Counter()

    def add(self, key: str, n: int = 1) -> int:
        with self._lock:
            self._counts[key] += n
            return self._counts[key]

    def __getitem__(self, key: str) -> int:
        return self._counts[key]

    def as_dict(self) -> Dict[str, int]:
        with self._lock:
            counts = dict(self._counts)
        for key in ("requests", *STATUSES):
            counts.setdefault(key, 0)
        return counts

    def failure_rate(self) -> float:
        counts = self.as_dict()
        return 0.0 if not counts["requests"] else 1.0 - counts["ok"] / counts["requests"]

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    def __repr__(self) -> str:
        return f"OracleStats({self.as_dict()})"


_SCORE_KEYS = ("consistency_score", "quality_score", "score")
_SCORE_RE = re.compile(r"[\"']?(consistency_score|quality_score)[\"']?\s*[:=]\s*[\"']?\s*(-?\d+(?:\.\d+)?)")


def parse_judge_answer(text: str, task: str) -> Dict[str, Any]:
    """Read the judge's JSON answer (D.4 format; the rules in the module docstring) -> ``{"score": float | None,
    "reasoning": str}``, the score unclamped. The score key is ``consistency_score`` (SC) or ``quality_score`` (PQ);
    the other one and a plain ``score`` are accepted too (judges mix them up). When no JSON object parses
    (:func:`~modeling_miescore.hub.spatialreward_relaxed_json.extract_json`), a key-anchored ``"..._score": x``
    pattern is searched in the same text without thinking and fences (disagreeing matches give None)."""
    if not isinstance(text, str):
        return {"score": None, "reasoning": ""}
    preferred = "consistency_score" if task == "sc" else "quality_score"
    keys = (preferred, *[k for k in _SCORE_KEYS if k != preferred])

    def score_of(obj: Any) -> Optional[float]:
        if not isinstance(obj, dict):
            return None
        return next((score for score in (finite_number(obj[k]) for k in keys if k in obj) if score is not None), None)

    found = extract_json(text, lambda value: score_of(value) is not None)
    if found.values:
        scores = {score_of(value) for value in found.values}
        obj = found.final
        if found.exhausted or len(scores) > 1 or any(k in found.duplicates[-1] for k in keys if k in obj):
            return {"score": None, "reasoning": ""}  # conflicting or ambiguous: no verdict
        reasoning = obj.get("reasoning", "")
        return {"score": score_of(obj), "reasoning": reasoning if isinstance(reasoning, str) else str(reasoning)}
    matches = {finite_number(m.group(2)) for m in _SCORE_RE.finditer(strip_reasoning_and_fences(text))}
    if len(matches) == 1:
        return {"score": matches.pop(), "reasoning": ""}
    return {"score": None, "reasoning": ""}


class OracleJudge:
    """Verifies SpatialReward outputs with a judge behind an OpenAI-compatible endpoint (paper D.4).

    ``judge(requests)`` runs them on a bounded thread pool and returns one :class:`OracleResult` per request,
    in order; it never raises for API or parsing failures (they become statuses, counts and warnings).
    ``client`` may be passed to share a :class:`ChatClient`; otherwise one is built from ``config``.
    """

    def __init__(self, config: OracleConfig, client: Optional[ChatClient] = None):
        self.config = config
        self.client = client or ChatClient(config.base_url, config.model, api_key_env=config.api_key_env,
                                           timeout=config.timeout, max_retries=config.max_retries,
                                           backoff=config.backoff, max_answer_bytes=config.max_answer_bytes)
        self.stats = OracleStats()

    def close(self) -> None:
        self.client.close()

    # -- one request --------------------------------------------------------------------------------------------
    def _messages(self, request: OracleRequest, prompt: str) -> List[dict]:
        parts: List[Any] = []
        if self.config.send_images:
            if request.task == "sc":
                sources = list(request.sources or ())
                for i, image in enumerate(sources):
                    parts += [f"Source image {i + 1}:" if len(sources) > 1 else "Source image:", image]
            if request.edited is not None:
                parts += ["Edited image:", request.edited]
        parts.append(prompt)
        return [user_message(parts, image_format=self.config.image_format, max_pixels=self.config.max_pixels)]

    def _finish(self, result: OracleResult, context: str) -> OracleResult:
        self.stats.add("requests")
        count = self.stats.add(result.status)
        if result.status != "ok" and (count <= _LOG_FIRST or count % 100 == 0):
            logger.warning("oracle %s #%d (%s): %s -> reward %s; counts so far %s", result.status, count, context,
                           result.message, result.value, self.stats.as_dict())
        return result

    def judge_one(self, request: OracleRequest) -> OracleResult:
        cfg = self.config
        task = str(request.task).lower()
        context = f"task={task}"
        if task not in ("sc", "pq"):
            raise ValueError(f"OracleRequest.task must be 'sc' or 'pq', got {request.task!r}")
        if task == "sc":
            num_sources = request.num_sources or len(request.sources or ()) or None
            parsed = parse_sc_output(request.completion or "", num_sources=num_sources)
        else:
            parsed = parse_pq_output(request.completion or "")
        if not parsed.parse_ok:
            return self._finish(OracleResult(cfg.policy_unparsable_value, "policy_unparsable",
                                             message=f"policy output has no scores ({', '.join(parsed.issues)})"),
                                context)
        pair = [float(s) for s in parsed.score_pair]
        prompt = (build_sc_oracle_prompt(request.instruction, parsed.reasoning, pair, cfg.quote_inputs)
                  if task == "sc" else build_pq_oracle_prompt(parsed.reasoning, cfg.quote_inputs))
        try:
            answer = self.client.chat(self._messages(request, prompt), temperature=cfg.temperature,
                                      max_tokens=cfg.max_tokens, **cfg.extra_body)
        except ChatError as err:
            self.stats.add(f"api_error:{err.kind}")
            return self._finish(OracleResult(cfg.api_error_value, "api_error", error_kind=err.kind,
                                             message=str(err)), context)
        judged = parse_judge_answer(answer, task)
        score = judged["score"]
        if score is None:
            excerpt = " ".join(answer.split())[:200]
            return self._finish(OracleResult(cfg.judge_unparsable_value, "judge_unparsable", raw_answer=answer,
                                             message=f"no score in the judge's answer {excerpt!r}"), context)
        value = score
        if cfg.negative_half_is_minor and score == -0.5:
            value = 0.5
            self.stats.add("minor_alias")
        elif not 0.0 <= score <= 1.0:
            value = min(1.0, max(0.0, score))
            self.stats.add("clamped")
        return self._finish(OracleResult(value, "ok", judge_score=score, judge_reasoning=judged["reasoning"],
                                         raw_answer=answer), context)

    # -- many requests ------------------------------------------------------------------------------------------
    def judge(self, requests: Sequence[OracleRequest]) -> List[OracleResult]:
        """Judge many requests concurrently (at most ``config.max_workers`` at a time), results in order."""
        requests = list(requests)
        for i, request in enumerate(requests):  # caller bugs raise here, before any request is sent
            if str(getattr(request, "task", "")).lower() not in ("sc", "pq"):
                raise ValueError(f"request {i}: task must be 'sc' or 'pq', got {getattr(request, 'task', None)!r}")
        if not requests:
            return []
        workers = min(int(self.config.max_workers), len(requests))
        if workers == 1:
            return [self._safe(r) for r in requests]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="oracle") as pool:
            return list(pool.map(self._safe, requests))

    def _safe(self, request: OracleRequest) -> OracleResult:
        try:
            return self.judge_one(request)
        except Exception as err:  # an image that cannot be encoded, ...: counted, never crashes the RL loop
            self.stats.add("internal_error")
            return self._finish(OracleResult(self.config.api_error_value, "api_error", error_kind="internal",
                                             message=f"{type(err).__name__}: {err}"), f"task={request.task}")

    def __call__(self, requests: Sequence[OracleRequest]) -> List[Optional[float]]:
        return [r.value for r in self.judge(requests)]

    def summary(self) -> Dict[str, Any]:
        config = {k: v for k, v in asdict(self.config).items() if k != "extra_body"}
        config["base_url"] = redacted_url(config["base_url"])  # a password in the URL is never written out
        return {"config": config,
                "stats": self.stats.as_dict(), "failure_rate": self.stats.failure_rate()}
