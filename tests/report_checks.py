"""Shared by the report tests: hand-made report inputs, and the check that ``report.html`` holds every table of
``report.md`` and every plot as an embedded, decodable PNG."""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image


def mie_frame(n_models: int, seed: int = 0, n_instances: int = 8) -> pd.DataFrame:
    """A MIE-Bench frame joined with predictions: ``n_instances`` instances of two tasks, ``n_models`` edits each,
    noisy VQ and exact overall predictions."""
    rng = np.random.default_rng(seed)
    rows = []
    for inst in range(n_instances):
        for m in range(n_models):
            mos = {d: float(rng.uniform(10, 90)) for d in ("vq", "if", "ap", "overall")}
            rows.append({"id": f"{inst}-{m}", "instance_id": str(inst), "editing_model": f"model{m}",
                         "task": "style_transfer" if inst % 2 else "pose_change", "num_sources": 2 + inst % 2,
                         "category": "global" if inst % 2 else "regional",
                         **{f"mos_{k}": v for k, v in mos.items()},
                         "pred_visual_quality": mos["vq"] + rng.normal(0, 5), "pred_overall": mos["overall"]})
    return pd.DataFrame(rows)


def two_instance_split(seed: int = 395) -> pd.DataFrame:
    """The small test split of a 20-instance MIE-Bench build (2 instances x 12 editing models = 24 edits, one
    task each) scored by a random-weight evaluator: IF and overall predictions sit within +-0.1 of 50 whatever the
    edit (``seed`` 395: SRCC 0.087, raw PLCC 0.157, and the plain logistic fit a step through two points that
    reads PLCC 0.554), VQ predictions follow the MOS closely (a healthy fit)."""
    rng = np.random.default_rng(seed)
    mos = np.round(rng.uniform(20, 80, 24), 2)
    flat = np.round(50 + rng.normal(0, 0.05, 24), 4)
    vq_mos = np.round(np.linspace(15, 85, 24)[rng.permutation(24)], 2)
    rows = []
    for i in range(24):
        inst = i // 12
        rows.append({"id": f"{inst}-{i % 12}", "instance_id": f"inst{inst}", "editing_model": f"model{i % 12:02d}",
                     "task": ("pose_change", "style_transfer")[inst], "category": ("regional", "global")[inst],
                     "num_sources": 2, "mos_vq": vq_mos[i], "mos_if": mos[i], "mos_ap": mos[i], "mos_overall": mos[i],
                     "pred_visual_quality": vq_mos[i] + 3.0 * np.sin(i), "pred_instruction_following": flat[i],
                     "pred_overall": flat[i]})
    return pd.DataFrame(rows)


def mer_report() -> dict:
    metric = {"value": 0.5, "ci": [0.4, 0.6]}
    tau = {"overall": metric, "by_size": {"2": metric}, "by_category": {"general": metric}}
    return {"benchmark": "mer-bench", "meta": {"n_groups": 6, "n_samples": 3, "bootstrap": {"n": 0},
                                               "n_by_size": {"2": 6}, "n_by_category": {"general": 6},
                                               "groups_with_tied_scores": 0, "groups_with_missing_scores": 0,
                                               "definitions": {"accuracy": "a", "tau": "t", "tau_as_released": "r"}},
            "accuracy": {"overall": metric, "by_size": {"2": metric}, "by_category": {"general": metric}},
            "tau": tau, "tau_as_released": tau,
            "accuracy_by_size_and_category": {"2": {"general": 0.5}}, "notes": []}


class _Page(HTMLParser):
    """Images, tables (their header cells) and console-relevant tags of an HTML page."""

    def __init__(self):
        super().__init__()
        self.images: list[dict] = []
        self.tables: list[list[str]] = []
        self.scripts = 0
        self._in_th = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))
        elif tag == "table":
            self.tables.append([])
        elif tag == "th":
            self._in_th = True
            self.tables[-1].append("")
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "th":
            self._in_th = False

    def handle_data(self, data):
        if self._in_th:
            self.tables[-1][-1] += data


def _markdown_tables(markdown: str) -> list[list[str]]:
    """Header cells of every pipe table in ``report.md`` (a header line followed by a ``| :--- |`` line)."""
    lines = markdown.splitlines()
    headers = []
    for above, line in zip(lines, lines[1:]):
        if line.startswith("| ") and set(line.replace("|", "").split()) <= {":---", "---:", ":---:"}:
            headers.append([c.strip().replace("\\|", "|") for c in above.strip()[1:-1].split(" | ")])
    return headers


def assert_html_report(out: Path) -> _Page:
    """``out/report.html`` is self-contained: every image is a decodable PNG data URI (one per plot of
    ``report.json``), every table of ``report.md`` is there with the same header, and there is no script."""
    page = _Page()
    page.feed((out / "report.html").read_text(encoding="utf-8"))
    report = json.loads((out / "report.json").read_text())
    assert len(page.images) == len(report.get("plots", {})), "one <img> per plot"
    for img in page.images:
        src = img["src"]
        assert src.startswith("data:image/png;base64,"), src[:60]
        with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1], validate=True))) as im:
            im.load()
            assert im.format == "PNG" and im.width > 200 and im.height > 200
        assert img.get("alt"), "every plot keeps its caption as alt text"
    expected = _markdown_tables((out / "report.md").read_text(encoding="utf-8"))
    assert expected, "report.md has tables"
    assert [[c.strip() for c in t] for t in page.tables] == expected
    assert page.scripts == 0
    return page
