"""What SpatialReward returns for one edit, and how the generated texts become it, for every backend.

The transformers model (``modeling_spatialreward``) and the OpenAI-compatible backend (``judges.spatialreward_api``)
share all of it; only the generation step differs. Passes are averaged over those that parsed (self-ensemble) and
the sub-scores aggregated into the reward as in sec. 3.1 / 5.4.

Hub file: copied into every saved SpatialReward checkpoint. It imports only the standard library and its flat
siblings (numpy and Pillow through them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .spatialreward_aggregation import sc_pq, spatial_reward
from .spatialreward_drawing import bbox_to_pixels
from .spatialreward_parsing import ParsedOutput, parse_pq_output, parse_sc_output


@dataclass
class SpatialRewardResult:
    """The judgement of one edit: ``reward`` in [0, 1] (``config.failure_reward`` when ``failed``, with
    ``failure_reasons`` such as ``"sc:parse_failed"`` or ``"pq:api_error:timeout"``); the sub-scores on 0-25 (None
    if missing) and ``sc`` / ``pq``, their weighted sums (sec. 3.1); ``regions`` with ``bbox_2d`` in 0..1000 and
    ``bbox_pixels`` in the edited image; the SC reasoning split as ``ParsedOutput`` splits it; ``issues`` per stream
    over all passes (plus ``api_error:<kind>``); ``raw_sc`` / ``raw_pq``: the texts, one per pass."""

    reward: float
    failed: bool
    failure_reasons: List[str] = field(default_factory=list)
    s_if: Optional[float] = None
    s_con: Optional[float] = None
    s_nat: Optional[float] = None
    s_art: Optional[float] = None
    sc: Optional[float] = None
    pq: Optional[float] = None
    regions: List[Dict[str, Any]] = field(default_factory=list)
    reasoning: str = ""
    region_reasoning: Dict[int, str] = field(default_factory=dict)
    global_reasoning: Optional[str] = None
    pq_reasoning: str = ""
    sc_parse_ok: bool = False
    pq_parse_ok: bool = False
    issues: Dict[str, List[str]] = field(default_factory=lambda: {"sc": [], "pq": []})
    raw_sc: List[str] = field(default_factory=list)
    raw_pq: List[str] = field(default_factory=list)
    num_sources: int = 1
    image_size: Tuple[int, int] = (0, 0)
    id: Optional[str] = None
    backend: str = "transformers"

    @property
    def parse_ok(self) -> bool:
        return self.sc_parse_ok and self.pq_parse_ok

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable dict (NaN reward becomes None; region ids as string keys)."""
        reward = self.reward if math.isfinite(self.reward) else None
        return {
            "id": self.id,
            "reward": reward,
            "failed": self.failed,
            "failure_reasons": list(self.failure_reasons),
            "s_if": self.s_if, "s_con": self.s_con, "s_nat": self.s_nat, "s_art": self.s_art,
            "sc": self.sc, "pq": self.pq,
            "regions": [dict(r, bbox_2d=list(r["bbox_2d"]), bbox_pixels=list(r["bbox_pixels"])) for r in self.regions],
            "reasoning": self.reasoning,
            "region_reasoning": {str(k): v for k, v in self.region_reasoning.items()},
            "global_reasoning": self.global_reasoning,
            "pq_reasoning": self.pq_reasoning,
            "parse_ok": self.parse_ok, "sc_parse_ok": self.sc_parse_ok, "pq_parse_ok": self.pq_parse_ok,
            "issues": {k: list(v) for k, v in self.issues.items()},
            "raw_sc": list(self.raw_sc), "raw_pq": list(self.raw_pq),
            "num_sources": self.num_sources, "image_size": list(self.image_size), "backend": self.backend,
        }


def _mean(values: List[float]) -> Optional[float]:
    return float(sum(values) / len(values)) if values else None


def _combine(parsed: List[ParsedOutput], names: Tuple[str, str]):
    """Self-ensemble: mean of each score over the passes that parsed; the first such pass carries the text."""
    ok = [p for p in parsed if p.parse_ok]
    if ok:
        scores = {n: _mean([p.scores[n] for p in ok]) for n in names}
        return scores, ok[0], True
    first = parsed[0] if parsed else None
    scores = {n: (first.scores.get(n) if first is not None else None) for n in names}
    return scores, first, False


def _parse_passes(texts: Sequence[str], errors: Sequence[Optional[str]], parse: Callable[[str], ParsedOutput],
                  issues: List[str]) -> List[ParsedOutput]:
    """Parse the texts of one stream whose request did not fail; issue codes are appended once to ``issues``."""
    def note(code: str):
        if code not in issues:
            issues.append(code)

    parsed = []
    for text, error in zip(texts, errors):
        if error is not None:
            note(f"api_error:{error}")
            continue
        parsed.append(parse(text if isinstance(text, str) else ""))
        for code in parsed[-1].issues:
            note(code)
    return parsed


def _failure_reasons(streams) -> List[str]:
    """``["sc:parse_failed", "pq:api_error:timeout", ...]`` for the streams ``(name, parsed ok, errors)`` that
    failed: an API error when every pass of the stream failed to come back, else a parse failure."""
    reasons = []
    for stream, ok, errors in streams:
        if ok:
            continue
        api = [e for e in errors if e is not None]
        reasons.append(f"{stream}:api_error:{api[0]}" if api and len(api) == len(errors) else f"{stream}:parse_failed")
    return reasons


def _pixel_regions(parsed: Optional[ParsedOutput], width: int, height: int) -> List[Dict[str, Any]]:
    if parsed is None:
        return []
    return [{"id": region["id"], "label": region["label"], "bbox_2d": list(region["bbox_2d"]),
             "bbox_pixels": bbox_to_pixels(region["bbox_2d"], width, height)} for region in parsed.regions]


def assemble_result(
    config,
    num_sources: int,
    image_size: Tuple[int, int],
    sc_texts: Sequence[str],
    pq_texts: Sequence[str],
    sc_errors: Optional[Sequence[Optional[str]]] = None,
    pq_errors: Optional[Sequence[Optional[str]]] = None,
    sample_id: Optional[str] = None,
    backend: str = "transformers",
) -> SpatialRewardResult:
    """Parse the SC / PQ generations of one edit (one text per pass; ``*_errors``: per pass, None or the kind of
    error when the text could not be obtained) and aggregate them into a result. Never raises for any text."""
    score_max = float(config.score_range)
    sc_errors = list(sc_errors) if sc_errors is not None else [None] * len(sc_texts)
    pq_errors = list(pq_errors) if pq_errors is not None else [None] * len(pq_texts)
    issues: Dict[str, List[str]] = {"sc": [], "pq": []}
    sc_parsed = _parse_passes(sc_texts, sc_errors, lambda text: parse_sc_output(
        text, num_sources=num_sources, score_max=score_max), issues["sc"])
    pq_parsed = _parse_passes(pq_texts, pq_errors, lambda text: parse_pq_output(text, score_max=score_max),
                              issues["pq"])
    sc_scores, sc_main, sc_ok = _combine(sc_parsed, ("s_if", "s_con"))
    pq_scores, pq_main, pq_ok = _combine(pq_parsed, ("naturalness", "artifacts"))
    s_if, s_con = sc_scores["s_if"], sc_scores["s_con"]
    s_nat, s_art = pq_scores["naturalness"], pq_scores["artifacts"]

    kwargs = dict(w_sc=config.w_sc, w_pq=config.w_pq, score_range=score_max)
    sc_value = float(sc_pq(s_if, s_con, 0.0, 0.0, **kwargs)[0]) if s_if is not None and s_con is not None else None
    pq_value = float(sc_pq(0.0, 0.0, s_nat, s_art, **kwargs)[1]) if s_nat is not None and s_art is not None else None

    reasons = _failure_reasons((("sc", sc_ok, sc_errors), ("pq", pq_ok, pq_errors)))
    reward = float("nan")
    if sc_ok and pq_ok:
        reward = float(spatial_reward(s_if, s_con, s_nat, s_art, mode=config.aggregation_mode,
                                      alpha=config.alpha, **kwargs))
        if not math.isfinite(reward):  # cannot happen for parsed scores; kept so no NaN ever leaks as a reward
            reasons.append("aggregation:non_finite")
    failed = bool(reasons)
    if failed:
        reward = float(config.failure_reward)

    width, height = image_size
    return SpatialRewardResult(
        reward=reward, failed=failed, failure_reasons=reasons,
        s_if=s_if, s_con=s_con, s_nat=s_nat, s_art=s_art, sc=sc_value, pq=pq_value,
        regions=_pixel_regions(sc_main, width, height),
        reasoning=sc_main.reasoning if sc_main is not None else "",
        region_reasoning=dict(sc_main.region_reasoning) if sc_main is not None else {},
        global_reasoning=sc_main.global_reasoning if sc_main is not None else None,
        pq_reasoning=pq_main.reasoning if pq_main is not None else "",
        sc_parse_ok=sc_ok, pq_parse_ok=pq_ok, issues=issues,
        raw_sc=[t if isinstance(t, str) else "" for t in sc_texts],
        raw_pq=[t if isinstance(t, str) else "" for t in pq_texts],
        num_sources=int(num_sources), image_size=(int(width), int(height)), id=sample_id, backend=backend,
    )


class SpatialRewardScoringMixin:
    """Conveniences built on ``evaluate_edits`` (shared by the transformers model and the API backend)."""

    def evaluate_edit(self, sources, edited, instruction: str, **kwargs) -> SpatialRewardResult:
        """Judge one edit; see ``evaluate_edits``."""
        sample = {"sources": sources, "edited": edited, "instruction": instruction}
        return self.evaluate_edits([sample], batch_size=1, **kwargs)[0]

    def score_candidates(self, sources, instruction: str, candidates: Sequence, batch_size: Optional[int] = None,
                         return_results: bool = False, **kwargs):
        """Rewards of K candidate edits of one (sources, instruction), one MER-Bench or RL group (default: all K
        in one batch); ``(rewards, results)`` with ``return_results``. Failed candidates get
        ``config.failure_reward`` and are flagged in their result."""
        candidates = list(candidates)
        if not candidates:
            return ([], []) if return_results else []
        samples = [{"sources": sources, "edited": c, "instruction": instruction} for c in candidates]
        results = self.evaluate_edits(samples, batch_size=batch_size or len(samples), **kwargs)
        rewards = [r.reward for r in results]
        return (rewards, results) if return_results else rewards


__all__ = ["SpatialRewardResult", "SpatialRewardScoringMixin", "assemble_result"]
