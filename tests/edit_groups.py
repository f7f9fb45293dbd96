"""Shared by the prefix-reuse and editor-RL reward tests: edits of one instance (same sources and instruction,
edited images of different sizes), the largest score difference between two result lists, editor-RL groups
built from the example edits, and a scripted SpatialReward judge (for :class:`local_http.RoutedChatServer`)."""

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
    from modeling_miescore.rewards.groups import EditGroup, group_key

    groups, start = [], 0
    for g, size in enumerate(sizes):
        base = examples[(2 * g) % len(examples)]
        edits = tuple(examples[(start + e) % len(examples)]["edited"] for e in range(size))
        start += size
        instruction = f"{base['instruction']} (group {g})"
        ids = tuple(f"example-{(2 * g) % len(examples)}-source-{i}" for i in range(len(base["sources"])))
        groups.append(EditGroup(group_key(ids, instruction), tuple(base["sources"]), instruction, edits, ids))
    return groups



def spatialreward_sub_scores(value: int, instruction: str):
    """What :func:`spatialreward_judge` answers for an edit whose top-left red value is ``value``:
    ``(s_if, s_con, s_nat, s_art)`` on SpatialReward's 0-25 scale."""
    return (10 + len(instruction) % 7, round(value / 255 * 25), value // 20, 25 - value // 20)


def spatialreward_judge(body, repeat):
    """A SpatialReward endpoint's answers (SC and PQ requests, appendix D.1 formats) from
    :func:`spatialreward_sub_scores` of the request's last image. Instructions holding ``FLAKY`` get a 500 the
    first time, ``BROKEN`` always; ``GARBAGE`` gets an answer that does not parse."""
    import json

    from local_http import chat_completion, request_images, request_text

    text = request_text(body)
    value = int(np.asarray(request_images(body)[-1].convert("RGB"))[0, 0, 0])
    if "Editing instruction:" in text:
        instruction = text.split("Editing instruction:")[-1].strip()
        if ("FLAKY" in instruction and repeat == 0) or "BROKEN" in instruction:
            return 500, {"error": {"message": "engine restarting"}}, None, 0
        if "GARBAGE" in instruction:
            return 200, chat_completion("I cannot judge this."), None, 0
        s_if, s_con, _, _ = spatialreward_sub_scores(value, instruction)
        answer = {"edit_region": [{"id": 0, "label": "edit", "bbox_2d": [0, 0, 500, 500]}],
                  "reasoning": "<|bbox_0|> changed. <|global|> fine.", "score": [s_if, s_con]}
    else:
        _, _, nat, art = spatialreward_sub_scores(value, "")
        answer = {"reasoning": "looks natural", "score": [nat, art]}
    return 200, chat_completion(json.dumps(answer)), None, 0
