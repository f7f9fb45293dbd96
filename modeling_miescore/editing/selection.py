"""Reward-guided best-of-N for ``miescore edit --num-images N --select SPEC``: keep, per request, the candidate the
reward scores highest (EditScore, arXiv 2509.23909, sec. 5: a reward model used to *select* among an editor's N
samples raises its GEdit score; its ``examples/OmniGen2-RL/evaluation/GEdit-Bench`` best-of-N keeps the max).

The reward is any ``--reward`` spec of the trainer (:data:`~.rewards.specs.REWARD_KINDS`: ``miescore:CKPT``,
``spatialreward:CKPT``, ``module:function``, a weighted sum, a served reward): the N candidates of one request are
one :class:`~.rewards.groups.EditGroup` (the same sources and instruction), so MIEScore and SpatialReward score them
together with the group's shared prompt prefix run once, as the trainer's groups are.

Files (``miescore edit`` writes the candidates first, :func:`~.generation.generate_edits` into
``candidates.jsonl``; then :func:`select_edits`):

* ``OUT/candidates.jsonl``: every candidate, ``{"id": "<request>#<k>", "key", "sample", "sources", "edited",
  "instruction"}``; the images in ``OUT/images/``;
* ``OUT/edits.jsonl``: one line per request in the ``score-batch`` input format, the selected candidate: ``{"id":
  "<request>", "sources", "edited", "instruction", "sample": k, "reward", "selected_by", "candidates": [{"sample",
  "edited", "reward", "failure", "components"}, ...]}`` (every candidate with its reward, ``None`` and a reason
  where its reward failed). ``miescore benchmark gedit`` / ``imgedit`` read it as N samples per key with the
  selected one marked, and compare the first sample, the selected one and the judge's own best of N.

The highest reward wins (the lowest sample on a tie); a candidate whose reward failed is never selected, and a
request whose every reward failed gets no line (listed; a rerun scores it again). Resuming: requests already in
``edits.jsonl`` are skipped; one run at a time per ``OUT`` (a lock).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from ..rewards.groups import EditGroup, group_key
from ..utils.atomic_files import atomic_write

__all__ = ["CANDIDATES_FILE", "SelectionRun", "prepare_selection", "select_edits"]

CANDIDATES_FILE = "candidates.jsonl"
GROUPS_PER_CALL = 4  # requests scored per reward call (each its own group, so its own shared prefix)


@dataclass
class SelectionRun:
    """What :func:`select_edits` did: ``selected`` requests, ``skipped`` (already in ``edits.jsonl``), ``failed``
    requests (``(id, message)``: every candidate's reward failed, or a candidate is missing)."""

    selected: int = 0
    skipped: int = 0
    failed: List[tuple] = field(default_factory=list)


def _candidates(out: Path) -> dict:
    """``{request id: {sample: line}}`` of ``candidates.jsonl``."""
    from ..scoring.jsonl_scoring import read_predictions

    records, _ = read_predictions(out / CANDIDATES_FILE, repair=False)
    by_request: dict = {}
    for raw in records.values():
        line = json.loads(raw)
        by_request.setdefault(str(line["key"]), {})[int(line["sample"])] = line
    return by_request


def _group(request, lines: dict, out: Path) -> EditGroup:
    from ..image_io import load_image

    edits = tuple(load_image(out / lines[k]["edited"]) for k in sorted(lines))
    return EditGroup(key=group_key(request.source_ids, request.instruction), sources=tuple(request.load_sources()),
                     instruction=request.instruction, edits=edits, source_ids=tuple(request.source_ids))


def _line(request, lines: dict, scores, selected_by: str) -> Optional[dict]:
    """The ``edits.jsonl`` line of a request (module docstring); None when no candidate has a reward."""
    samples = sorted(lines)
    valid = [(r, -k) for k, r in zip(samples, scores.rewards) if r is not None]
    if not valid:
        return None
    best = -max(valid)[1]
    candidates = []
    for i, k in enumerate(samples):
        components = {name: values[i] for name, values in (scores.components or {}).items()}
        candidates.append({"sample": k, "edited": lines[k]["edited"], "reward": scores.rewards[i],
                           "failure": scores.failures[i], "components": components})
    chosen = lines[best]
    return {"id": request.id, "sources": chosen["sources"], "edited": chosen["edited"],
            "instruction": request.instruction, "sample": best, "reward": scores.rewards[samples.index(best)],
            "selected_by": selected_by, "candidates": candidates}


def select_edits(reward, requests: Sequence, out, *, num_images: int, selected_by: str,
                 progress: Optional[Callable] = None) -> SelectionRun:
    """Score the ``num_images`` candidates of each request of ``requests`` with ``reward`` (an
    :class:`~.rewards.groups.EditorReward`) and append the selected one to ``OUT/edits.jsonl`` (module docstring);
    ``selected_by`` names the reward in every line (no secret: :func:`~.rewards.specs.reward_identity`)."""
    from ..scoring.jsonl_scoring import read_done_ids
    from ..utils.output_lock import exclusive_output

    out = Path(out)
    jsonl = out / "edits.jsonl"
    run = SelectionRun()
    with exclusive_output(jsonl, "output folder"):
        done, _ = read_done_ids(jsonl)
        candidates = _candidates(out)
        pending = []
        for request in requests:
            lines = candidates.get(request.id, {})
            if request.id in done:
                run.skipped += 1
            elif sorted(lines) != list(range(num_images)):
                run.failed.append((request.id, f"{num_images - len(lines)} of its {num_images} candidates were "
                                               "not made (see above)"))
            else:
                pending.append((request, lines))
                continue  # counted once scored
            if progress is not None:
                progress(1)
        with open(jsonl, "a", encoding="utf-8") as handle:
            for start in range(0, len(pending), GROUPS_PER_CALL):
                chunk = pending[start:start + GROUPS_PER_CALL]
                scored = reward.score_groups([_group(request, lines, out) for request, lines in chunk])
                for (request, lines), scores in zip(chunk, scored):
                    line = _line(request, lines, scores, selected_by)
                    if line is None:
                        reasons = sorted({f for f in scores.failures if f})
                        run.failed.append((request.id, f"no candidate has a reward ({', '.join(reasons)})"))
                    else:
                        handle.write(json.dumps(line) + "\n")
                        handle.flush()
                        run.selected += 1
                    if progress is not None:
                        progress(1)
    return run


def prepare_selection(out, selected_by: str, num_images: int) -> None:
    """Refuse an ``OUT`` made otherwise (another reward, another N, or edits without ``--select``), else record
    this selection in ``OUT/selection.json``: a rerun extends a folder only with the same selection."""
    from ..image_io import MIEScoreInputError

    out = Path(out)
    note, wanted = out / "selection.json", {"selected_by": selected_by, "num_images": num_images}
    if note.is_file():
        try:
            recorded = json.loads(note.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = None
        if recorded != wanted:
            raise MIEScoreInputError(f"--out '{out}' holds a selection of {recorded!r}, not {wanted!r}; pass another "
                                     "--out (or the same --select and --num-images to resume)")
        return
    if (out / "edits.jsonl").is_file() and (out / "edits.jsonl").stat().st_size:
        raise MIEScoreInputError(f"--out '{out}' holds edits made without --select; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(note, "w") as handle:
        json.dump(wanted, handle)
