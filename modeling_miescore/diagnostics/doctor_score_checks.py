"""The checks of ``miescore doctor`` on what the model says about the example edits and their perturbations.

MIEScore: the spread of every score (constant, NaN, saturated). SpatialReward: the parse-failure rate, the boxes,
the spread of the rewards. Both: the expected directions of :mod:`edit_perturbations` (warnings only: a model
may disagree on one example, and random weights are expected to).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from .doctor_context import DoctorContext, error, ok, skip, warn

# Fractions of the score scale (100 for MIEScore, 1 for the SpatialReward reward):
CONSTANT_SPREAD = 5e-4  # max - min below this over all edits: constant scores -> error
NARROW_SPREAD = 1e-2  # below this: scores barely depend on the input -> warning
SATURATED = 5e-3  # a score this close to 0 or the top counts as saturated
MOVED = 5e-3  # a mean change at least this large counts as "moved"
# SpatialReward generations that fail to parse: above this share -> warning (all of them -> error).
PARSE_FAILURE_WARN = 0.2
BOX_ISSUES = ("bbox_clamped", "bbox_reordered", "bbox_degenerate", "region_invalid")
# An error of one of these makes the perturbation directions meaningless (they would repeat it four times).
BROKEN_SCORE_CHECKS = ("weights", "score_spread", "parse_rate", "reward_spread")


def _spread_problem(name: str, values: list, top: float) -> tuple:
    """``(status, text)`` for one score over all edits: NaN, constant, saturated or narrow; None if fine."""
    if any(not math.isfinite(v) for v in values):
        return "error", f"{name} is NaN or infinite for {sum(not math.isfinite(v) for v in values)} edits"
    spread = max(values) - min(values)
    if spread < CONSTANT_SPREAD * top:
        return "error", f"{name} is constant ({values[0]:.4g} for all {len(values)} edits)"
    saturated = sum(min(v, top - v) < SATURATED * top for v in values)
    if saturated == len(values):
        return "error", f"{name} is saturated at 0 or {top:g} for every edit"
    if saturated * 2 >= len(values):
        return "warn", f"{name} is saturated at 0 or {top:g} for {saturated} of {len(values)} edits"
    if spread < NARROW_SPREAD * top:
        return "warn", f"{name} barely moves (range {spread:.3g} over very different edits)"
    return None


def _worst(problems: list) -> str:
    return "error" if any(s == "error" for s, _ in problems) else "warn"


def check_score_spread(ctx: DoctorContext):
    """MIEScore: every score over the examples and their perturbations is finite, varies, is not saturated."""
    ctx.need("model")
    scores = ctx.scores()
    top = float(ctx.model.config.score_scale)
    stats, problems = {}, []
    for name in scores[0]:
        values = [float(s[name]) for s in scores]
        finite = [v for v in values if math.isfinite(v)] or [float("nan")]
        stats[name] = {"min": min(finite), "max": max(finite), "mean": sum(finite) / len(finite)}
        problem = _spread_problem(name, values, top)
        if problem:
            problems.append(problem)
    details = {"edits": len(scores), "scores": stats}
    if problems:
        finding = error if _worst(problems) == "error" else warn
        return finding("; ".join(text for _, text in problems), **details)
    ranges = ", ".join(f"{name} {s['min']:.1f}-{s['max']:.1f}" for name, s in stats.items())
    return ok(f"{len(scores)} edits: {ranges}", **details)


def check_parse_rate(ctx: DoctorContext):
    """SpatialReward: the share of edits whose SC and PQ generations parse."""
    results = ctx.scores()
    failed = [r for r in results if r.failed]
    issues = Counter(code for r in failed for stream in ("sc", "pq") for code in r.issues.get(stream, []))
    details = {"edits": len(results), "failed": len(failed),
               "sc_failed": sum(not r.sc_parse_ok for r in results),
               "pq_failed": sum(not r.pq_parse_ok for r in results),
               "issues": dict(issues.most_common(8)),
               "example_failed_text": (failed[0].raw_sc or [""])[0][:300] if failed else None}
    share = len(failed) / len(results)
    if share == 1:
        return error(f"no generation of the {len(results)} edits parses (issues: "
                     f"{', '.join(issues) or 'none'}); the model does not write the D.1 JSON answer", **details)
    if share > PARSE_FAILURE_WARN:
        return warn(f"{len(failed)} of {len(results)} edits fail to parse ({share:.0%})", **details)
    return ok(f"{len(results) - len(failed)} of {len(results)} edits parse", **details)


def check_boxes(ctx: DoctorContext):
    """SpatialReward: the edit regions lie inside the image (0..1000, x1 < x2, y1 < y2) as written."""
    parsed = [r for r in ctx.scores() if r.sc_parse_ok]
    if not parsed:
        return skip("no SC generation parsed (see 'parse_rate')")
    boxes = sum(len(r.regions) for r in parsed)
    bad = [r for r in parsed if set(r.issues.get("sc", [])) & set(BOX_ISSUES)]
    details = {"parsed": len(parsed), "boxes": boxes, "answers_with_bad_boxes": len(bad),
               "issues": dict(Counter(code for r in bad for code in r.issues["sc"] if code in BOX_ISSUES))}
    if boxes == 0:
        return warn(f"none of the {len(parsed)} parsed SC answers names an edit region", **details)
    if len(bad) == len(parsed):
        return error("every SC answer has boxes outside the image or empty (clamped/reordered/degenerate)", **details)
    if bad:
        return warn(f"{len(bad)} of {len(parsed)} SC answers have boxes outside the image or empty", **details)
    return ok(f"{boxes} boxes in {len(parsed)} SC answers, all inside the image", **details)


def check_reward_spread(ctx: DoctorContext):
    """SpatialReward: the rewards of the parsed edits are finite, vary and are not all at 0 or 1."""
    rewards = [r.reward for r in ctx.scores() if not r.failed]
    if len(rewards) < 2:
        return skip(f"{len(rewards)} parsed edit(s); the spread needs two (see 'parse_rate')")
    details = {"parsed": len(rewards), "min": min(rewards), "max": max(rewards)}
    problem = _spread_problem("the reward", rewards, 1.0)
    if problem:
        return (error if problem[0] == "error" else warn)(problem[1], **details)
    return ok(f"{len(rewards)} parsed edits: reward {min(rewards):.3f}-{max(rewards):.3f}", **details)


@dataclass(frozen=True)
class Direction:
    """What a perturbation should do to one score: ``"lower"`` or ``"moves"`` (either way)."""

    variant: str
    expect: str
    miescore: str  # the MIEScore score name
    spatialreward: str  # the SpatialRewardResult field
    why: str


DIRECTIONS = (
    Direction("source_as_edited", "lower", "instruction_following", "s_if",
              "the edited image replaced by its first source (nothing edited)"),
    Direction("noise", "lower", "visual_quality", "pq", "heavy Gaussian noise on the edited image"),
    Direction("blur", "lower", "visual_quality", "pq", "a heavy blur on the edited image"),
    Direction("swapped_sources", "moves", "attribute_preservation", "s_con",
              "the sources in reverse order (the instruction names them by position)"),
)


def _pairs(ctx: DoctorContext, direction: Direction) -> tuple:
    """``(score name, scale, [(original, perturbed)])`` over the examples where both have the score."""
    if ctx.kind == "miescore":
        name, scale = direction.miescore, float(ctx.model.config.score_scale)
        by = ctx.scores_by(lambda s: s.get(name))
    else:
        name, scale = direction.spatialreward, float(ctx.model.config.score_range)
        by = ctx.scores_by(lambda r: getattr(r, name))
    pairs = [(by[(example, "original")], value) for (example, variant), value in by.items()
             if variant == direction.variant and value is not None and by.get((example, "original")) is not None]
    return name, scale, [(float(a), float(b)) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]


def check_direction(ctx: DoctorContext, direction: Direction):
    """A perturbation changes its score as expected for most examples (warning otherwise); skipped after an error
    of the weights or of the scores themselves (constant, NaN, never parsed), which it would only repeat."""
    ctx.need("model")
    ctx.need_sound(*BROKEN_SCORE_CHECKS)
    name, scale, pairs = _pairs(ctx, direction)
    if not pairs:
        return skip(f"no example has {name} both as made and with {direction.why}")
    changes = [after - before for before, after in pairs]
    mean = sum(changes) / len(changes)
    details = {"score": name, "changes": changes, "mean_change": mean, "expect": direction.expect}
    if direction.expect == "lower":
        lower = sum(c < 0 for c in changes)
        text = f"{name} {mean:+.3g} on average with {direction.why} (lower for {lower} of {len(changes)})"
        good = lower * 2 > len(changes) and mean < 0
    else:
        text = f"{name} moves by {sum(abs(c) for c in changes) / len(changes):.3g} on average with {direction.why}"
        good = sum(abs(c) for c in changes) / len(changes) >= MOVED * scale
    return ok(text, **details) if good else warn(f"expected {name} {direction.expect}: {text}", **details)


__all__ = ["DIRECTIONS", "Direction", "check_boxes", "check_direction", "check_parse_rate", "check_reward_spread",
           "check_score_spread"]
