"""Shared by the prefix-reuse and editor-RL reward tests: edits of one instance (same sources and instruction,
edited images of different sizes), the largest score difference between two result lists, and editor-RL groups
built from the example edits."""

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


def rl_groups(examples, sizes=(3, 3)) -> list:
    """Editor-RL groups (``EditGroup``) from the example edits: group g keeps example g's sources and instruction
    (made unique by its index) and takes ``sizes[g]`` of the examples' edited images as its G edits."""
    from modeling_miescore.training.editor_rl.reward_types import EditGroup, group_key

    groups, start = [], 0
    for g, size in enumerate(sizes):
        base = examples[(2 * g) % len(examples)]
        edits = tuple(examples[(start + e) % len(examples)]["edited"] for e in range(size))
        start += size
        instruction = f"{base['instruction']} (group {g})"
        ids = tuple(f"example-{(2 * g) % len(examples)}-source-{i}" for i in range(len(base["sources"])))
        groups.append(EditGroup(group_key(ids, instruction), tuple(base["sources"]), instruction, edits, ids))
    return groups

