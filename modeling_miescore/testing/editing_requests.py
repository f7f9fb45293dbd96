"""Tiny editing requests (``{"id", "sources", "instruction"}`` JSONL + PNG sources) made from scikit-image's
photos, for the editor-RL tests, the CPU recipe and ``miescore edit`` examples."""

from __future__ import annotations

import json
from pathlib import Path

from ..data.example_edits import fit_within, load_photo

__all__ = ["REQUESTS", "write_editing_requests"]

# (id, photos, instruction); photos are scikit-image data names
REQUESTS = (
    ("cat-red", ("chelsea",), "Make the cat's fur bright red."),
    ("coffee-cat", ("coffee", "chelsea"), "Put the cat from image 2 next to the cup in image 1."),
    ("rocket-red", ("rocket",), "Paint the sky red behind the rocket."),
    ("astronaut-rocket", ("astronaut", "rocket"), "Place the astronaut from image 1 in front of the rocket in image 2."),
)


def write_editing_requests(path, *, size: int = 64, count: int | None = None) -> Path:
    """Write ``path`` (a JSONL file) and its source PNGs (``size`` px on the long side, beside it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for request_id, photos, instruction in REQUESTS[:count]:
        names = []
        for k, photo in enumerate(photos):
            image = fit_within(load_photo(photo), size).resize((size, size))
            name = f"{request_id}-{k}.png"
            image.save(path.parent / name)
            names.append(name)
        lines.append(json.dumps({"id": request_id, "sources": names, "instruction": instruction}))
    path.write_text("\n".join(lines) + "\n")
    return path
