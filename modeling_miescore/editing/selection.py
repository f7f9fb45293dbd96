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
request whose every reward failed gets no line (listed; a rerun scores it again). The reward runs on a
:class:`~.rewards.worker.RewardWorker`, as the trainer's does: whatever it raises (``SystemExit``,
``KeyboardInterrupt``, ``os._exit``, a result of the wrong length) stops the selection with
:class:`~.rewards.groups.RewardUnavailableError` naming the reward, never the process. Resuming: requests already in
``edits.jsonl`` are skipped; one run at a time per ``OUT`` (a lock). A ``candidates.jsonl`` line that is not one
of this run's candidates is refused with its line number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..hub.errors import MIEScoreInputError
from ..rewards.groups import EditGroup, RewardUnavailableError, group_key
from ..rewards.worker import RewardWorker, reward_error
from ..utils.atomic_files import atomic_write
from .generation import EditRun, edit_file_name
from ..scoring.jsonl_scoring import complete_lines, read_done_ids
from ..hub.image_io import load_image
from ..utils.output_lock import exclusive_output

__all__ = ["CANDIDATES_FILE", "prepare_selection", "select_edits"]

CANDIDATES_FILE = "candidates.jsonl"
GROUPS_PER_CALL = 4  # requests scored per reward call (each its own group, so its own shared prefix)


def _candidates(out: Path, num_images: int) -> dict:
    """``{request id: {sample: line}}`` of ``candidates.jsonl``; a line that is not one of this run's candidates
    is one error naming the file and the line."""
    path = out / CANDIDATES_FILE
    data, _ = complete_lines(path, repair=False)
    by_request: dict = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:  # not JSON, not UTF-8
            line = None
        problem = _candidate_problem(line, num_images)
        if problem:
            raise MIEScoreInputError(f"'{path}' line {number}: {problem}; this file is written by `miescore edit "
                                     "--select`: move it away (its candidates are made again) or pass another --out")
        by_request.setdefault(line["key"], {})[line["sample"]] = line
    return by_request


def _candidate_problem(line, num_images: int) -> Optional[str]:
    """Why ``line`` is not a candidate line of :func:`~.generation.generate_edits` for N = ``num_images``
    (its image must be the one that function writes: never a file elsewhere), or None."""
    if not isinstance(line, dict):
        return "is not a JSON object"
    key, sample = line.get("key"), line.get("sample")
    if not isinstance(key, str):
        return f"'key' must be the request's id (a string), got {key!r}"
    if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample < num_images:
        return f"'sample' must be an integer from 0 to {num_images - 1} (--num-images {num_images}), got {sample!r}"
    expected = edit_file_name(key, sample, num_images)
    if line.get("edited") != expected or line.get("id") != f"{key}#{sample}":
        return (f"candidate {sample} of request {key!r} must be 'id': {key + '#' + str(sample)!r}, 'edited': "
                f"{expected!r}; got {line.get('id')!r}, {line.get('edited')!r}")
    return None


def _group(request, lines: dict, out: Path) -> EditGroup:
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
                 progress: Optional[Callable] = None) -> EditRun:
    """Score the ``num_images`` candidates of each request of ``requests`` with ``reward`` (an
    :class:`~.rewards.groups.EditorReward`, run and then closed by a :class:`~.rewards.worker.RewardWorker`) and
    append the selected one to ``OUT/edits.jsonl`` (module docstring); ``selected_by`` names the reward in every
    line (no secret: :func:`~.rewards.specs.reward_identity`). ``EditRun.written``: the requests selected;
    ``failed``: those whose every candidate's reward failed, or with a candidate missing."""
    out = Path(out)
    jsonl = out / "edits.jsonl"
    run = EditRun()
    with RewardWorker(reward) as worker, exclusive_output(jsonl, "output folder"):
        done, _ = read_done_ids(jsonl)
        candidates = _candidates(out, num_images)
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
                scored = _scores(worker, [_group(request, lines, out) for request, lines in chunk], selected_by)
                for (request, lines), scores in zip(chunk, scored):
                    line = _line(request, lines, scores, selected_by)
                    if line is None:
                        reasons = sorted({f for f in scores.failures if f})
                        run.failed.append((request.id, f"no candidate has a reward ({', '.join(reasons)})"))
                    else:
                        handle.write(json.dumps(line) + "\n")
                        handle.flush()
                        run.written += 1
                    if progress is not None:
                        progress(1)
    return run


def _scores(worker: RewardWorker, groups: list, selected_by: str) -> list:
    """The groups' scores from ``worker``; :class:`RewardUnavailableError` naming the reward when it raised
    anything (a ``SystemExit`` or ``os._exit`` of its own, a result of the wrong length, a bug)."""
    future = worker.submit(groups)
    try:
        return future.result()
    except BaseException as error:  # noqa: BLE001 - the reward's own, whatever its class; a real Ctrl-C re-raised
        what = reward_error(future, error)
        if what is None or isinstance(error, RewardUnavailableError):
            raise
        raise RewardUnavailableError(selected_by, f"failed while scoring the candidates: {what}") from error


def prepare_selection(out, selected_by: str, num_images: int) -> None:
    """Refuse an ``OUT`` made otherwise (another N, edits selected by another reward, or edits without
    ``--select``), else record this selection in ``OUT/selection.json``: a rerun extends a folder only with the
    same selection. A recorded reward that selected nothing yet is replaced (its spec may have been unusable)."""
    out = Path(out)
    note, wanted = out / "selection.json", {"selected_by": selected_by, "num_images": num_images}
    edits = out / "edits.jsonl"
    selected = edits.is_file() and edits.stat().st_size > 0
    if note.is_file():
        try:
            recorded = json.loads(note.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = None
        if recorded == wanted:
            return
        same_candidates = isinstance(recorded, dict) and recorded.get("num_images") == num_images
        if selected or not same_candidates:
            raise MIEScoreInputError(f"--out '{out}' holds a selection of {recorded!r}, not {wanted!r}; pass another "
                                     "--out (or the same --select and --num-images to resume)")
    elif selected:
        raise MIEScoreInputError(f"--out '{out}' holds edits made without --select; pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(note, "w") as handle:
        json.dump(wanted, handle)
