"""Per-sample records of an editor-RL step (opt-in, ``save_rollouts_steps: N``): what each edit looked like, what
the reward said about it and what advantage it got, in a file every scorer of this package reads.

Every N-th step, ``output_dir/rollouts/`` gets

- ``step-<N>/g<group>-e<k>.png``: the G edits of each group (``group`` = the group's index in the run, over all
  processes; every process writes its own groups);
- ``sources/<group key>-<k>.png``: each group's sources as the reward saw them (written once per group key);
- ``rollouts.jsonl``: one line per edit in the ``score-batch`` input format, paths relative to the file,
  ``{"id", "sources", "edited", "instruction"}``, plus ``step``, ``rank``, ``group``, ``sample``, ``key`` (the
  group key advantages are normalised under), ``request`` (the request's id), ``reward`` (None where it failed),
  ``failure`` (the reason, or None), ``advantage`` (None where the sample takes no part in the loss) and
  ``components`` (the reward's named parts, e.g. MIEScore's three scores).

So ``miescore score-batch --input output_dir/rollouts/rollouts.jsonl`` re-scores a run's edits, and a person can
open the edits behind a suspicious reward. On ``--resume`` the lines of steps after the checkpoint are dropped
(those steps run again and rewrite their images). The images live where each process wrote them: with several
machines, ``output_dir`` must be a shared folder for the JSONL to name files that are all in one place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional, Sequence

from ...utils.atomic_files import atomic_write
from .checkpoints import truncate_metrics

__all__ = ["RolloutLog"]


def _save_png(path: Path, image) -> None:
    with atomic_write(path, "wb") as handle:
        image.save(handle, format="PNG")


class RolloutLog:
    """``output_dir/rollouts/`` (module docstring). :meth:`records` on every process (writes its images),
    :meth:`append` on the main process with every process's records."""

    def __init__(self, output_dir, every: int):
        self.folder = Path(output_dir) / "rollouts"
        self.path = self.folder / "rollouts.jsonl"
        self.every = int(every)

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def _sources(self, rollout) -> List[str]:
        names = []
        for k, image in enumerate(rollout.sources):
            name = f"sources/{rollout.key}-{k}.png"
            if not (self.folder / name).is_file():
                _save_png(self.folder / name, image)
            names.append(name)
        return names

    def records(self, step: int, rank: int, rollouts: Sequence, scores: Sequence, advantages: Sequence,
                groups: Sequence[int], requests: Sequence[str]) -> List[dict]:
        """Write this process's edits of ``step`` and return their records (one per edit, in order).
        ``groups``: each rollout's run-wide group index; ``requests``: each rollout's request id."""
        out = []
        for rollout, score, advantage, group, request in zip(rollouts, scores, advantages, groups, requests):
            sources = self._sources(rollout)
            for k, image in enumerate(rollout.images):
                member = rollout.first_member + k  # a split group's piece starts at its first member
                edited = f"step-{step:06d}/g{group:05d}-e{member:02d}.png"
                _save_png(self.folder / edited, image)
                out.append({"id": f"s{step:06d}-g{group:05d}-e{member:02d}", "sources": sources, "edited": edited,
                            "instruction": rollout.instruction, "step": step, "rank": rank, "group": group,
                            "sample": member, "key": rollout.key, "request": request, "reward": score.rewards[k],
                            "failure": score.failures[k], "advantage": advantage[k],
                            "components": {name: values[k] for name, values in score.components.items()}})
        return out

    def append(self, records: Sequence[dict]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r, default=_plain) + "\n" for r in records))
            handle.flush()

    def truncate(self, last_step: int) -> None:
        """Drop the lines of steps after ``last_step`` (resume)."""
        truncate_metrics(self.path, last_step)

    def read(self) -> List[dict]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _plain(value) -> Optional[float]:
    """Numbers JSON does not know (numpy / torch scalars) as floats."""
    return float(value)
