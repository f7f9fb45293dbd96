"""The qualitative view of an editor comparison (SpatialReward paper, Fig. 7 and appendix C.2): for the keys where
an editor gained or lost most against the baseline, one picture each of source | baseline edit | compared edit,
with the scores above the panels.

:func:`gain_loss_cases` picks the keys (largest overall gains first, then largest losses; only keys both runs
judged); :func:`draw_case` writes one PNG into the report folder (``grid/``), which the report embeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from ...hub.errors import MIEScoreInputError
from ...hub.image_io import load_image
from ...utils.atomic_files import atomic_write

__all__ = ["draw_case", "gain_loss_cases"]

PANEL_HEIGHT = 224
_LABEL = 34


def gain_loss_cases(base_rows, run_rows, overall: str, k: int) -> List[Dict]:
    """The ``k`` largest gains and the ``k`` largest losses of ``run_rows`` over ``base_rows`` (per-row frames with
    ``row``, ``category``, ``instruction``, ``edited``, ``sources``, ``run_dir`` and the ``overall`` score), as dicts
    ``{"kind": "gain"|"loss", "row", "category", "instruction", "base", "run", "delta", "source", "base_edited",
    "run_edited"}``."""
    both = base_rows.merge(run_rows, on="row", suffixes=("_base", "_run"))
    if both.empty or k <= 0:
        return []
    both["delta"] = both[f"{overall}_run"] - both[f"{overall}_base"]
    gains = both[both["delta"] > 0].sort_values("delta", ascending=False, kind="stable").head(k)
    losses = both[both["delta"] < 0].sort_values("delta", kind="stable").head(k)
    cases = []
    for kind, part in (("gain", gains), ("loss", losses)):
        for _, r in part.iterrows():
            sources = r["sources_base"] or []
            cases.append({"kind": kind, "row": r["row"], "category": r["category_base"],
                          "instruction": r["instruction_base"], "base": float(r[f"{overall}_base"]),
                          "run": float(r[f"{overall}_run"]), "delta": float(r["delta"]),
                          "source": str(Path(r["run_dir_base"]) / sources[0]) if sources else None,
                          "base_edited": r["edited_base"], "run_edited": r["edited_run"]})
    return cases


def _panel(path, label: str):
    """One labelled panel; the image is read as every image of the package is (regular files only, a size and a
    pixel bound: a report's path to a FIFO or a huge file cannot hang or exhaust the comparison)."""
    from PIL import Image, ImageDraw

    try:
        image = load_image(path)
    except (MIEScoreInputError, OSError, ValueError, TypeError):
        image = Image.new("RGB", (PANEL_HEIGHT, PANEL_HEIGHT), (235, 235, 235))
        label += " (image not found)"
    width = max(1, round(image.width * PANEL_HEIGHT / max(1, image.height)))
    image = image.resize((min(width, 3 * PANEL_HEIGHT), PANEL_HEIGHT))
    panel = Image.new("RGB", (image.width, PANEL_HEIGHT + _LABEL), "white")
    panel.paste(image, (0, _LABEL))
    ImageDraw.Draw(panel).text((4, 4), label, fill=(20, 20, 20))
    return panel


def draw_case(case: Dict, names: tuple[str, str], score_label: str, out_dir, stem: str) -> str:
    """One PNG ``grid/<stem>.png`` (source | baseline | compared run); returns its path relative to ``out_dir``."""
    from PIL import Image

    base_name, run_name = names
    panels = [_panel(case["source"], "source"),
              _panel(case["base_edited"], f"{base_name}: {score_label} {case['base']:.2f}"),
              _panel(case["run_edited"], f"{run_name}: {score_label} {case['run']:.2f} ({case['delta']:+.2f})")]
    gap = 8
    canvas = Image.new("RGB", (sum(p.width for p in panels) + gap * (len(panels) - 1), panels[0].height), "white")
    x = 0
    for panel in panels:
        canvas.paste(panel, (x, 0))
        x += panel.width + gap
    rel = f"grid/{stem}.png"
    with atomic_write(Path(out_dir) / rel, "wb") as handle:
        canvas.save(handle, format="PNG")
    return rel
