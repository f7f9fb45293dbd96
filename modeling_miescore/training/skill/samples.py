"""The MIE-Bench edits skill optimisation evaluates: :class:`SkillSample` (images, instruction, human MOS) and
:class:`SkillSampleSplit`, a split whose rows are decoded only when they are evaluated."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

from ...data.schema import MOS_COLUMNS
from ...hub.errors import MIEScoreInputError

__all__ = ["SkillSample", "SkillSampleSplit", "to_skill_sample"]

@dataclass
class SkillSample:
    """One edit with human scores. ``mos``: (VQ, IF, AP) on 0-100 (MIE-Bench MOS)."""

    id: str
    sources: List[Any]
    edited: Any
    instruction: str
    mos: Tuple[float, float, float]


def to_skill_sample(row: Any, index: int = 0) -> SkillSample:
    """A :class:`SkillSample` from a MIE-Bench row (``id, instruction, source_images, edited_image, mos_vq,
    mos_if, mos_ap``), a dict with ``sources``/``edited`` instead of the image columns, or a SkillSample."""
    if isinstance(row, SkillSample):
        return row
    if not isinstance(row, Mapping):
        raise MIEScoreInputError(f"sample {index} is a {type(row).__name__}; expected a MIE-Bench row (dict)")
    sources = row.get("source_images", row.get("sources"))
    edited = row.get("edited_image", row.get("edited"))
    missing = [k for k, v in (("source_images", sources), ("edited_image", edited),
                              ("instruction", row.get("instruction"))) if v is None]
    missing += [k for k in MOS_COLUMNS if row.get(k) is None]
    if missing:
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) lacks {', '.join(missing)}; "
                                 "skill optimisation needs MIE-Bench rows with images and mos_vq/mos_if/mos_ap")
    if not isinstance(sources, (list, tuple)):
        sources = [sources]
    try:
        mos = tuple(float(row[k]) for k in MOS_COLUMNS)
    except (TypeError, ValueError):
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) has a non-numeric MOS") from None
    if not all(math.isfinite(m) for m in mos):
        raise MIEScoreInputError(f"sample {index} (id {row.get('id')!r}) has a NaN/infinite MOS")
    return SkillSample(id=str(row.get("id", index)), sources=list(sources), edited=edited,
                       instruction=str(row["instruction"]), mos=mos)  # type: ignore[arg-type]


class SkillSampleSplit:
    """Samples decoded on access: a MIE-Bench split held as decoded images would not fit in memory, and only
    the rollout subset and the validation batches are needed at any time.

    A ``datasets.Dataset`` is checked through its light columns (ids, MOS) without decoding images; other
    sequences (lists of rows / SkillSample) are converted and checked at once."""

    def __init__(self, rows: Any, name: str):
        columns = getattr(rows, "column_names", None)
        if columns is not None and hasattr(rows, "select_columns"):
            missing = [c for c in ("instruction", "source_images", "edited_image", *MOS_COLUMNS) if c not in columns]
            if missing:
                raise MIEScoreInputError(f"the {name} split lacks the column(s) {', '.join(missing)}; "
                                         "skill optimisation needs MIE-Bench rows")
            light = rows.select_columns([c for c in ("id", *MOS_COLUMNS) if c in columns]).to_dict()
            self.ids = [str(x) for x in light["id"]] if "id" in light else [str(i) for i in range(len(rows))]
            for key in MOS_COLUMNS:
                bad = [i for i, v in enumerate(light[key]) if v is None or not math.isfinite(float(v))]
                if bad:
                    raise MIEScoreInputError(f"the {name} split has a missing or NaN {key} in row {bad[0]} "
                                             f"(id {self.ids[bad[0]]!r}) and {len(bad) - 1} more")
            self.rows = rows
            self.decoded = False
        else:
            self.rows = [to_skill_sample(rows[i], i) for i in range(len(rows))]
            self.ids = [s.id for s in self.rows]
            self.decoded = True
        seen = set()
        for sample_id in self.ids:
            if sample_id in seen:
                raise MIEScoreInputError(f"the {name} split has the id {sample_id!r} twice; sample ids must be unique")
            seen.add(sample_id)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self.decoded:
            return self.rows[index]
        sample = to_skill_sample(self.rows[index], index)
        sample.id = self.ids[index]
        return sample

