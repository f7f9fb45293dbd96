"""Shared by the prefix-reuse tests: edits of one instance (same sources and instruction, edited images of
different sizes) and the largest score difference between two result lists."""

from __future__ import annotations

import numpy as np
from PIL import Image


def instance_edits(examples, sources_from: int = 0, extra_sizes=((200, 150), (96, 300))) -> list[dict]:
    """Every example's edited image (plus random ones of ``extra_sizes``) as edits of example ``sources_from``."""
    rng = np.random.default_rng(1)
    edits = [e["edited"] for e in examples]
    edits += [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in extra_sizes]
    base = examples[sources_from]
    return [{"sources": base["sources"], "edited": e, "instruction": base["instruction"]} for e in edits]


def max_score_diff(a, b) -> float:
    return max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in x)
