"""A small raw MIE-Bench release built in milliseconds: chosen instance counts per task, three tiny shared images,
MOS given in ``mos.csv`` (no screening), optionally with its lines shuffled. For tests of the splits and the card,
where the MOS signal does not matter (``modeling_miescore.testing.raw_benchmarks`` makes realistic releases)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Mapping

from PIL import Image

__all__ = ["instance_ids", "tiny_mie_raw"]


def instance_ids(sizes: Mapping[str, int]) -> dict[str, str]:
    """``{instance_id: task}`` of the release :func:`tiny_mie_raw` writes for ``sizes``."""
    return {f"{task}-{k:03d}": task for task, n in sizes.items() for k in range(n)}


def tiny_mie_raw(root: Path, sizes: Mapping[str, int], *, edits_per_instance: int = 2,
                 shuffle_seed: int | None = None) -> Path:
    """Write the release for ``sizes`` (``{task: number of instances}``) under ``root``; lines of
    ``instances.jsonl``, ``edits.jsonl`` and ``mos.csv`` are shuffled with ``shuffle_seed`` when given."""
    (root / "img").mkdir(parents=True)
    for name, colour in (("a", (200, 30, 30)), ("b", (30, 200, 30)), ("edit", (30, 30, 200))):
        Image.new("RGB", (16, 16), colour).save(root / "img" / f"{name}.png")
    instances, edits, mos = [], [], []
    for k, (iid, task) in enumerate(instance_ids(sizes).items()):
        instances.append(json.dumps({"instance_id": iid, "task": task, "instruction": f"Combine the images ({k}).",
                                     "sources": ["img/a.png", "img/b.png"]}))
        for j in range(edits_per_instance):
            edits.append(json.dumps({"edit_id": f"{iid}-e{j}", "instance_id": iid, "editing_model": f"model-{j}",
                                     "image": "img/edit.png"}))
            mos.append(f"{iid}-e{j},{(7 * k + j) % 90 + 5},{(11 * k + j) % 90 + 5},{(13 * k + j) % 90 + 5}")
    if shuffle_seed is not None:
        rng = random.Random(shuffle_seed)
        for lines in (instances, edits, mos):
            rng.shuffle(lines)
    (root / "instances.jsonl").write_text("\n".join(instances) + "\n", encoding="utf-8")
    (root / "edits.jsonl").write_text("\n".join(edits) + "\n", encoding="utf-8")
    (root / "mos.csv").write_text("edit_id,mos_vq,mos_if,mos_ap\n" + "\n".join(mos) + "\n", encoding="utf-8")
    return root
