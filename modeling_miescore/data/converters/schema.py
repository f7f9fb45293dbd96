"""The common output schema of converted benchmarks: pointwise and pairwise rows of single-source edits, and
editing inputs (sources + instruction, no edited image) of the editor benchmarks.

Rows are built from :class:`EditItem` / :class:`PairItem` / :class:`EditingItem`; images are :class:`ImageRef` s (a file of the raw
release, or bytes embedded in a Parquet/Arrow release) that are written as ``datasets.Image`` storage values
(original bytes, never re-encoded). :class:`BenchmarkSpec` is what the registry knows about a benchmark
(format source, kinds, dimension mapping, tie rule, paper column) and what the dataset card records.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ..schema import SCORE_KEYS

__all__ = [
    "CONFIGS",
    "EDITING_COLUMNS",
    "HUMAN_COLUMNS",
    "LABELS",
    "BenchmarkSpec",
    "EditItem",
    "EditingItem",
    "ImageRef",
    "PairItem",
    "SPLIT",
    "editing_features",
    "pairwise_features",
    "pointwise_features",
]

CONFIGS = ("pointwise", "pairwise", "editing")
SPLIT = "test"  # converted benchmarks are evaluation sets: one split per config
# Pairwise human labels: "a" / "b" preferred, "tie" (equally good, or a plain tie vote), "both_bad" (GenAI-Bench's
# bothbad_vote; kept apart from "tie" so that a protocol may treat them differently).
LABELS = ("a", "b", "tie", "both_bad")
# One column of human scores per MIEScore score key; a benchmark without that dimension leaves it null.
HUMAN_COLUMNS = {key: f"human_{key}" for key in SCORE_KEYS}
# The columns every ``editing`` row has (an editor benchmark's input; the editor writes the edited image), before
# the benchmark's own subset flags (``BenchmarkSpec.subset_flags``, one bool column each). ``id`` is unique in the
# dataset; ``key`` is the benchmark's own key (the same as ``id`` unless the release repeats a key across languages).
EDITING_COLUMNS = ("id", "key", "source_images", "instruction", "category", "language")


@dataclass(frozen=True)
class ImageRef:
    """An image of a raw release: a file (``path`` + ``rel``, read when the row is written) or embedded ``data``."""

    rel: str  # the name written into the dataset (``Image`` storage ``path``): relative path or a stable name
    path: Path | None = None
    data: bytes | None = None

    def struct(self) -> dict:
        """The ``datasets.Image`` storage value: the original bytes and the name."""
        return {"bytes": self.data if self.data is not None else self.path.read_bytes(), "path": self.rel}

    def size(self) -> int:
        """Bytes (for shard-size estimates; 0 when the file cannot be read)."""
        if self.data is not None:
            return len(self.data)
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    @staticmethod
    def embedded(data: bytes, name: str | None, fallback: str) -> "ImageRef":
        """An embedded image; ``name`` (the release's own file name) or ``fallback`` + a short content hash."""
        if name:
            return ImageRef(rel=str(name), data=data)
        return ImageRef(rel=f"{fallback}-{hashlib.sha1(data).hexdigest()[:10]}", data=data)


@dataclass
class EditItem:
    """One edited image with human scores (a pointwise row); ``human`` maps MIEScore score keys to scores."""

    id: str
    sources: list[ImageRef]
    edited: ImageRef
    instruction: str
    human: dict[str, float] = field(default_factory=dict)
    editing_model: str = ""
    group_id: str = ""
    subset: str = ""


@dataclass
class PairItem:
    """Two edits of the same sources and instruction with a human preference (a pairwise row)."""

    id: str
    sources: list[ImageRef]
    instruction: str
    edited_a: ImageRef
    edited_b: ImageRef
    edited_a_id: str
    edited_b_id: str
    label: str  # one of LABELS
    dimension: str = "overall"  # the MIEScore score key the preference is about
    model_a: str = ""
    model_b: str = ""
    subset: str = ""
    group_id: str = ""


@dataclass
class EditingItem:
    """One editing input of an editor benchmark (an ``editing`` row): sources + instruction, with the benchmark's
    category (task type), instruction language and subset flags (``flags``: flag name -> bool)."""

    id: str
    key: str
    sources: list[ImageRef]
    instruction: str
    category: str
    language: str
    flags: dict[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class BenchmarkSpec:
    """What the registry and the dataset card say about one benchmark.

    ``dimensions`` maps the benchmark's own dimension names to MIEScore score keys (``visual_quality``,
    ``instruction_following``, ``attribute_preservation``, ``overall``); ``tie_rule`` says how human ties and
    predicted ties count, with its source; ``format_source`` is where the release format was read (URL), and
    ``format_note`` says how exactly the converter's input relates to it.
    """

    name: str
    title: str
    kinds: tuple[str, ...]  # subset of CONFIGS
    format_source: str
    format_note: str
    dimensions: dict[str, str]
    tie_rule: str
    citation: str
    paper_reference: str  # which table/column of which paper reports this benchmark
    license: str = "unknown"
    subset_flags: tuple[str, ...] = ()  # editing rows: the benchmark's subset flags (bool columns)

    def to_metadata(self) -> dict:
        """The ``miescore_benchmark`` block of the dataset card (read back by the benchmark runner)."""
        block = {"name": self.name, "title": self.title, "kinds": list(self.kinds),
                 "format_source": self.format_source, "dimensions": dict(self.dimensions),
                 "tie_rule": self.tie_rule, "paper_reference": self.paper_reference}
        if self.subset_flags:
            block["subset_flags"] = list(self.subset_flags)
        return block


def pointwise_features():
    """``datasets.Features`` of a pointwise row."""
    from datasets import Features, Image, List, Value

    return Features({
        "id": Value("string"),
        "source_images": List(Image()),
        "edited_image": Image(),
        "instruction": Value("string"),
        "editing_model": Value("string"),
        "group_id": Value("string"),
        "subset": Value("string"),
        **{column: Value("float64") for column in HUMAN_COLUMNS.values()},
    })


def pairwise_features():
    """``datasets.Features`` of a pairwise row."""
    from datasets import ClassLabel, Features, Image, List, Value

    return Features({
        "id": Value("string"),
        "source_images": List(Image()),
        "instruction": Value("string"),
        "edited_a": Image(),
        "edited_b": Image(),
        "edited_a_id": Value("string"),
        "edited_b_id": Value("string"),
        "model_a": Value("string"),
        "model_b": Value("string"),
        "label": ClassLabel(names=list(LABELS)),
        "dimension": Value("string"),
        "subset": Value("string"),
        "group_id": Value("string"),
    })


def editing_features(flags=()):
    """``datasets.Features`` of an ``editing`` row (:data:`EDITING_COLUMNS` + one bool column per subset flag)."""
    from datasets import Features, Image, List, Value

    return Features({
        "id": Value("string"),
        "key": Value("string"),
        "source_images": List(Image()),
        "instruction": Value("string"),
        "category": Value("string"),
        "language": Value("string"),
        **{flag: Value("bool") for flag in flags},
    })
