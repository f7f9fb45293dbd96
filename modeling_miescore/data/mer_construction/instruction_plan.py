"""Which source image gets which instruction job: category (2:1:1), subtask (balanced) and 2-5 operations.

SpatialReward paper sec. 4.2: source images from laion2B-en-aesthetic and CC12M (general) and headshot_pexels_v1
(people); instructions with 2-5 operations in three categories, general : human-basic : human-fine = 2:1:1,
15 subtasks. The sources are listed in a JSONL manifest, one image a line::

    {"image_id": "laion-000017", "image": "general/000017.jpg", "domain": "general"}
    {"image_id": "pexels-0042", "image": "people/0042.jpg", "domain": "human"}

(``image`` relative to the manifest's folder or absolute; ``domain`` ``general`` or ``human``). A folder with
``general/`` and ``human/`` subfolders of images is read as the same manifest.

Each job's number of operations is seeded by the seed and the image id, so a plan (and a resumed run) is the same
whatever else is in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from ...hub.errors import MIEScoreInputError
from .instruction_prompts import MER_SUBTASKS

__all__ = ["InstructionJob", "MIN_EDITS", "MAX_EDITS", "SourceImage", "plan_jobs", "read_sources"]

MIN_EDITS, MAX_EDITS = 2, 5  # sec. 4.2: instructions with 2-5 operations
DOMAINS = ("general", "human")
_IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp"}


@dataclass(frozen=True)
class SourceImage:
    image_id: str
    path: str  # absolute
    domain: str


@dataclass(frozen=True)
class InstructionJob:
    id: str  # the sample id the later stages use
    image_id: str
    image: str
    category: str
    subtask: str
    num_edits: int

    def as_dict(self) -> dict:
        return asdict(self)


def _from_folder(root: Path) -> List[SourceImage]:
    found = []
    for domain in DOMAINS:
        for path in sorted((root / domain).glob("*")) if (root / domain).is_dir() else []:
            if path.suffix.lower() in _IMAGE_SUFFIXES:
                found.append(SourceImage(f"{domain}-{path.stem}", str(path.resolve()), domain))
    if not found:
        raise MIEScoreInputError(f"source folder '{root}' has no images in general/ or human/; put the images "
                                 "there or pass a JSONL manifest")
    return found


def _manifest_line(root: Path, line: int, text: str, where: str) -> SourceImage:
    try:
        obj = json.loads(text)
        image_id, image, domain = str(obj["image_id"]), obj["image"], obj["domain"]
    except (ValueError, KeyError, TypeError):
        raise MIEScoreInputError(f"{where} line {line}: expected a JSON object with image_id, image and domain "
                                 '(e.g. {"image_id": "a1", "image": "a1.jpg", "domain": "general"})') from None
    if domain not in DOMAINS:
        raise MIEScoreInputError(f"{where} line {line}: domain {domain!r} is not 'general' or 'human'")
    path = (root / str(image)).resolve()
    if not path.is_file():
        raise MIEScoreInputError(f"{where} line {line}: image '{path}' does not exist")
    return SourceImage(image_id, str(path), domain)


def read_sources(path) -> List[SourceImage]:
    """The source images of a JSONL manifest or a ``general/`` + ``human/`` folder; one-line errors."""
    path = Path(path)
    if path.is_dir():
        return _from_folder(path)
    if not path.is_file():
        raise MIEScoreInputError(f"sources '{path}' does not exist; pass a JSONL manifest or a folder")
    sources, seen = [], set()
    for line, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text.strip():
            source = _manifest_line(path.parent, line, text, f"'{path}'")
            if source.image_id in seen:
                raise MIEScoreInputError(f"'{path}' line {line}: image_id {source.image_id!r} appears twice")
            seen.add(source.image_id)
            sources.append(source)
    if not sources:
        raise MIEScoreInputError(f"sources '{path}' lists no image")
    return sources


def _num_edits(seed: int, image_id: str) -> int:
    digest = hashlib.sha256(f"{seed}|{image_id}".encode()).digest()
    return random.Random(digest).randint(MIN_EDITS, MAX_EDITS)


def _deal(category: str, count: int, rng: random.Random) -> List[str]:
    names = sorted(MER_SUBTASKS[category])
    rng.shuffle(names)
    return [names[i % len(names)] for i in range(count)]


def plan_jobs(sources: Sequence[SourceImage], total: Optional[int] = None, seed: int = 0) -> List[InstructionJob]:
    """One job per used source image (module docstring); ``total`` keeps the plan 2:1:1 (error if the manifest
    has too few images of a domain)."""
    general = [s for s in sources if s.domain == "general"]
    human = [s for s in sources if s.domain == "human"]
    if total is not None:
        want_general, want_human = (total + 1) // 2, total // 2
        if len(general) < want_general or len(human) < want_human:
            raise MIEScoreInputError(f"a 2:1:1 plan of {total} instructions needs {want_general} general and "
                                     f"{want_human} human images; the sources have {len(general)} and {len(human)}")
        general, human = general[:want_general], human[:want_human]
    rng = random.Random(seed)
    categories = [("general", s) for s in general]
    categories += [("human_basic" if i % 2 == 0 else "human_fine", s) for i, s in enumerate(human)]
    subtasks = {c: iter(_deal(c, sum(cat == c for cat, _ in categories), rng)) for c in MER_SUBTASKS}
    return [InstructionJob(f"mer-{s.image_id}", s.image_id, s.path, c, next(subtasks[c]), _num_edits(seed, s.image_id))
            for c, s in categories]
