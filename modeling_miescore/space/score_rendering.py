"""The Space's score panels: labelled 0-100 / 0-25 bars as HTML (inline styles only) and the JSON results.

Every bar row carries ``data-key`` and ``data-value`` attributes so that scripts and tests can read the values;
all text is HTML-escaped. The JSON results are JSON-safe (``serving.backends.json_safe``, the reward server's
form: no NaN or infinity) and the SpatialReward regions carry pixel boxes.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

from ..serving.backends import json_safe
from .region_display import pixel_box, result_value

# Meanings from docs/scoring.md, "What the scores mean" (MIE-Bench dimensions, MIEScore paper sec. 3).
MIESCORE_DIMENSIONS: tuple[tuple[str, str, str], ...] = (
    ("visual_quality", "Visual quality (VQ)",
     "How the edited image looks on its own: realism, artifacts, colour, sharpness and detail."),
    ("instruction_following", "Instruction following (IF)",
     "Whether the requested change was applied completely and precisely, without over- or under-editing."),
    ("attribute_preservation", "Attribute preservation (AP)",
     "Whether what should carry over from each source (identity, structure, texture, style, text, "
     "unedited regions) was kept and fused coherently."),
    ("overall", "Overall",
     "VQ^0.3 · IF^0.4 · AP^0.3 (MIEScore paper eq. 2; instruction following weighs most)."),
)

# SpatialReward sub-scores are 0-25 (paper appendix D.1); SC, PQ and the reward with the paper's weights
# (sec. 3.1 / 5.4: SC = 0.6 s_if + 0.4 s_con, PQ = 0.5 nat + 0.5 art, R = (SC/25)^0.8 (PQ/25)^0.2).
SPATIAL_SCORES: tuple[tuple[str, str, float, str], ...] = (
    ("s_if", "Instruction following", 25.0, "How completely the edit carries out the instruction (0-25)."),
    ("s_con", "Source consistency", 25.0,
     "How well the sources are kept and fused, without over-editing unmentioned content (0-25)."),
    ("s_nat", "Naturalness", 25.0, "Whether the edited image looks natural: distance, shadows, lighting (0-25)."),
    ("s_art", "Artifacts", 25.0, "Absence of distortion, seams, noise or unharmonised subjects; 25 = none (0-25)."),
    ("sc", "Semantic consistency (SC)", 25.0,
     "0.6 · instruction following + 0.4 · source consistency (paper weights)."),
    ("pq", "Perceptual quality (PQ)", 25.0, "0.5 · naturalness + 0.5 · artifacts (paper weights)."),
    ("reward", "Reward", 1.0,
     "(SC/25)^0.8 · (PQ/25)^0.2 (paper default), in [0, 1]; the value an RL loop optimises."),
)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{float(value):.{digits}f}"


def _bar_row(key: str, title: str, value: Any, scale: float, meaning: str, color: str, digits: int,
             emphasis: bool = False) -> str:
    ok = isinstance(value, (int, float)) and math.isfinite(float(value))
    fraction = min(max(float(value) / scale, 0.0), 1.0) if ok else 0.0
    weight = "700" if emphasis else "600"
    shown = _fmt(value, digits)
    data_value = f"{float(value):.4f}" if ok else ""
    return (
        f'<div class="score-row" data-key="{html.escape(key)}" data-value="{data_value}" '
        'style="margin:0 0 12px 0">'
        '<div style="display:flex;justify-content:space-between;align-items:baseline;gap:8px">'
        f'<span class="score-name" style="font-weight:{weight}">{html.escape(title)}</span>'
        f'<span class="score-value" style="font-weight:{weight};font-variant-numeric:tabular-nums">'
        f'{html.escape(shown)}<span style="opacity:.6;font-weight:400"> / {_fmt(scale, 0 if scale >= 1 else 1)}'
        '</span></span></div>'
        '<div style="height:12px;border-radius:6px;background:rgba(128,128,128,.22);overflow:hidden;margin:3px 0">'
        f'<div class="score-fill" style="height:100%;width:{fraction * 100:.2f}%;background:{color}"></div></div>'
        f'<div class="score-meaning" style="font-size:.85em;opacity:.8">{html.escape(meaning)}</div>'
        '</div>'
    )


def _score_color(fraction: float) -> str:
    """Red (low) -> amber -> green (high), so a bar's colour reads at a glance."""
    fraction = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else 0.0
    if fraction < 0.5:
        r, g = 220, int(70 + 2 * fraction * 130)
    else:
        r, g = int(220 - (fraction - 0.5) * 2 * 170), 180
    return f"rgb({r},{g},60)"


def miescore_html(scores: Mapping[str, float], note: str | None = None) -> str:
    """The MIEScore result as labelled 0-100 bars with a one-line meaning each (HTML, inline styles only).

    Every row carries ``data-key`` and ``data-value`` attributes so that scripts and tests can read values.
    """
    rows = []
    for key, title, meaning in MIESCORE_DIMENSIONS:
        value = scores.get(key)
        fraction = float(value) / 100.0 if isinstance(value, (int, float)) else 0.0
        rows.append(_bar_row(key, title, value, 100.0, meaning, _score_color(fraction), 1, key == "overall"))
    extra = f'<div style="font-size:.85em;opacity:.75;margin-top:4px">{html.escape(note)}</div>' if note else ""
    return ('<div class="miescore-scores" id="miescore-scores">' + "".join(rows)
            + '<div style="font-size:.8em;opacity:.7">0-100 MOS scale of MIE-Bench; higher is better.</div>'
            + extra + "</div>")


def miescore_json(scores: Mapping[str, float], model: str | None = None) -> dict:
    """Raw MIEScore result for the JSON panel / API: the four scores (full precision) and the scale."""
    out = {key: float(scores[key]) for key, _, _ in MIESCORE_DIMENSIONS if key in scores}
    for key, value in scores.items():  # checkpoints with extra score names keep them
        out.setdefault(key, float(value))
    out["scale"] = [0, 100]
    if model:
        out["model"] = model
    return out


def placeholder_html(message: str) -> str:
    return f'<div class="score-placeholder" style="opacity:.75;padding:8px 0">{html.escape(message)}</div>'


def _flat_issues(issues: Any) -> list[str]:
    """Issue codes as ``["sc:missing_score", ...]`` from a ``{"sc": [...], "pq": [...]}`` dict or a list."""
    if isinstance(issues, Mapping):
        return [f"{stream}:{code}" for stream, codes in issues.items() for code in (codes or [])]
    return [str(code) for code in (issues or [])]


def spatialreward_html(result: Any) -> str:
    """The four 0-25 sub-scores, SC, PQ and the reward as labelled bars (HTML, inline styles only)."""
    rows = []
    for key, title, scale, meaning in SPATIAL_SCORES:
        value = result_value(result, key)
        ok = isinstance(value, (int, float)) and math.isfinite(float(value))
        fraction = float(value) / scale if ok else 0.0
        rows.append(_bar_row(key, title, value, scale, meaning, _score_color(fraction),
                             3 if scale <= 1 else 1, key == "reward"))
    warning = ""
    if result_value(result, "failed", False) or not result_value(result, "parse_ok", True):
        reasons = list(result_value(result, "failure_reasons") or []) or _flat_issues(result_value(result, "issues"))
        warning = ('<div class="parse-warning" style="color:#c62828;font-weight:600;margin-bottom:8px">'
                   f"The model's output could not be used ({html.escape(', '.join(reasons) or 'unparseable')}); "
                   "missing scores are shown as n/a and the reward is the configured failure value.</div>")
    return '<div class="spatialreward-scores" id="spatialreward-scores">' + warning + "".join(rows) + "</div>"


def spatialreward_json(result: Any, width: int | None = None, height: int | None = None) -> dict:
    """JSON-safe copy of one SpatialReward result; every region gets ``bbox_pixels`` when the size is known."""
    data = json_safe(result)
    if not isinstance(data, dict):
        data = {"result": data}
    if width and height and isinstance(data.get("regions"), list):
        for region in data["regions"]:
            if isinstance(region, dict) and region.get("bbox_pixels") is None:
                box = pixel_box(region, width, height)
                region["bbox_pixels"] = list(box) if box else None
    return data


__all__ = ["MIESCORE_DIMENSIONS", "SPATIAL_SCORES", "miescore_html", "miescore_json", "placeholder_html",
           "spatialreward_html", "spatialreward_json"]
