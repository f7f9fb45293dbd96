"""The converter base: a :class:`~modeling_miescore.data.builders.base.DatasetBuilder` that writes the common
schema of :mod:`.schema` as configs (``pointwise``, ``pairwise``; an editor benchmark: ``editing``), each with one
``test`` split.

A converter declares its :class:`~.schema.BenchmarkSpec` and implements :meth:`read` (parse the release, report
every bad record with file:line through the ``problems`` collector, and add rows with :meth:`add`). Everything else
(checks before building, atomic output folder, Parquet shards, card, CLI, exit status 2 for bad raw data) is the
builder machinery; the spec's release folder layout gives the ``--raw`` help
and, for a release of several files or splits, the ``--file`` / ``--split`` option (``self.choice``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar

from ..builders.base import BuildSummary, DatasetBuilder
from ..builders.output_folder import format_bytes
from ..builders.raw_files import ImageChecker, ProblemCollector
from .converted_card import card_context, card_spec, converted_card_data
from .schema import (CONFIGS, HUMAN_COLUMNS, LABELS, SPLIT, BenchmarkSpec, EditingItem, EditItem, PairItem,
                     config_features)

__all__ = ["BenchmarkConverter", "ConversionSummary", "StripPrefixOption", "content_key"]


def content_key(*parts: Any) -> str:
    """A short stable key (12 hex digits of a SHA-1) of JSON-serialisable ``parts``: what a record's identity or a
    group's sources + instruction are, independent of where the record sits in its file."""
    text = json.dumps(parts, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


@dataclasses.dataclass(kw_only=True)
class ConversionSummary(BuildSummary):
    dataset: ClassVar[str] = "converted-benchmark"
    benchmark: str = ""
    title: str = ""

    def headline(self) -> str:
        parts = [f"{info['num_examples']} {config} rows" for config, info in self.splits.items()]
        return (f"{self.title}: {', '.join(parts)} written to {self.out_dir} "
                f"({format_bytes(self.total_bytes)}, {self.elapsed_s:.1f} s)")


class BenchmarkConverter(DatasetBuilder):
    """Base of the benchmark converters (see the module docstring). ``choice`` is the release part chosen with the
    option the spec declares (``--file`` / ``--split``: ``BenchmarkSpec.release_choice``), or None."""

    spec: ClassVar[BenchmarkSpec]
    main_file: ClassVar[str]  # the file named when the release yields no row at all
    split_names = CONFIGS

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:
            cls.title = cls.spec.title
            cls.raw_help = cls.spec.release_folder
            cls.main_file = cls.spec.main_file or cls.spec.default_file
            cls.default_license = cls.spec.license
            cls.license_help = (f"license id for the card (default: {cls.spec.license}, the original release's; "
                                "its terms apply to the converted data)")
            cls.card = card_spec(cls.spec)

    def __init__(self, *args, **kwargs):
        option, default = self.spec.release_choice or (None, None)
        chosen = kwargs.pop(option, None) if option else None
        super().__init__(*args, **kwargs)
        self.choice = chosen or default
        if option == "file":
            self.main_file = self.choice
        self.rows: dict[str, list] = {config: [] for config in CONFIGS}
        self.first_at: dict[tuple[str, str], str] = {}  # (config, row id) -> where it was first read

    # ------------------------------------------------------------------------------ helpers for read()

    def add(self, item: EditItem | PairItem | EditingItem, where: tuple[str, int | None],
            problems: ProblemCollector) -> None:
        """Add a row of its config (pointwise, pairwise, editing) unless its id repeats there (reported at
        ``where``)."""
        config, kind = {EditItem: ("pointwise", "edit"), PairItem: ("pairwise", "pair"),
                        EditingItem: ("editing", "editing")}[type(item)]
        if set(getattr(item, "human", ())) - set(HUMAN_COLUMNS):
            raise ValueError(f"unknown score keys {sorted(set(item.human) - set(HUMAN_COLUMNS))}")
        if config == "pairwise" and item.label not in LABELS:
            raise ValueError(f"label must be one of {LABELS}, got {item.label!r}")
        if config == "editing" and set(item.flags) != set(self.spec.subset_flags):
            raise ValueError(f"editing row flags {sorted(item.flags)} differ from the spec's {self.spec.subset_flags}")
        if (config, item.id) in self.first_at:
            problems.add(*where, f"duplicate {kind} id {item.id!r} (first at {self.first_at[config, item.id]})")
            return
        self.first_at[config, item.id] = f"{where[0]}:{where[1]}" if where[1] is not None else where[0]
        self.rows[config].append(item)

    def release_files(self, pattern: str, problems: ProblemCollector) -> list[Path]:
        """The files of the raw folder matching ``pattern`` (sorted); none is a problem naming the pattern."""
        files = sorted(p for p in self.raw.glob(pattern) if p.is_file())
        if not files:
            problems.add(pattern, None, f"no file matches {pattern!r} in the raw folder; {self.raw_help}")
        return files

    # ------------------------------------------------------------------------------ builder stages

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def label(self) -> None:
        """Labels are read from the release as they are; nothing to compute."""

    def split(self) -> dict[str, list]:
        return {config: self.rows[config] for config in CONFIGS if config in self.spec.kinds}

    def empty_dataset_problem(self) -> tuple[str, str]:
        return self.main_file, "no usable record found; is this the benchmark's release folder?"

    def features(self, split: str | None = None):
        """The features of a row of config ``split`` (the first of the spec's kinds when None)."""
        return config_features(split or self.spec.kinds[0], self.spec.subset_flags)

    def make_row(self, item) -> dict:
        if isinstance(item, EditingItem):
            return {"id": item.id, "key": item.key, "source_images": [s.struct() for s in item.sources],
                    "instruction": item.instruction, "category": item.category, "language": item.language,
                    **item.flags}
        if isinstance(item, EditItem):
            return {"id": item.id, "source_images": [s.struct() for s in item.sources],
                    "edited_image": item.edited.struct(), "instruction": item.instruction,
                    "editing_model": item.editing_model, "group_id": item.group_id, "subset": item.subset,
                    **{column: item.human.get(key) for key, column in HUMAN_COLUMNS.items()}}
        return {"id": item.id, "source_images": [s.struct() for s in item.sources], "instruction": item.instruction,
                "edited_a": item.edited_a.struct(), "edited_b": item.edited_b.struct(),
                "edited_a_id": item.edited_a_id, "edited_b_id": item.edited_b_id, "model_a": item.model_a,
                "model_b": item.model_b, "label": LABELS.index(item.label), "dimension": item.dimension,
                "subset": item.subset, "group_id": item.group_id}

    def row_size(self, item) -> int:
        if isinstance(item, EditingItem):
            images = []
        else:
            images = [item.edited] if isinstance(item, EditItem) else [item.edited_a, item.edited_b]
        return sum(image.size() for image in (*item.sources, *images)) + 512

    def shard_location(self, split: str) -> tuple[str, str]:
        """Each config (the builder's "split") in its own folder, as its one ``test`` split:
        ``data/<config>/test-*.parquet``."""
        return f"data/{split}", SPLIT

    def card_data(self, split_info: dict[str, dict]):
        features = {config: self.features(config) for config in split_info}
        card_data = converted_card_data(self.spec, features, split_info, self.license)
        card_data.miescore_benchmark.update(self.release_metadata())
        return card_data

    def card_context(self, split_info: dict[str, dict]) -> dict[str, Any]:
        return {**card_context(self.spec, split_info), **self.release_metadata()}

    def release_metadata(self) -> dict[str, Any]:
        """What the card's ``miescore_benchmark`` block and the reports say about which part of the release was
        converted (``{"release_part": "split test_v1"}``); nothing for a converter that reads all of it."""
        choice = self.spec.release_choice
        return {"release_part": f"{choice[0]} {self.choice}"} if choice else {}

    def summary(self, split_info: dict[str, dict]) -> ConversionSummary:
        return ConversionSummary(out_dir=str(self.out), splits=split_info, benchmark=self.spec.name,
                                 title=self.spec.title)

    # ------------------------------------------------------------------------------ command line

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        super().add_builder_arguments(parser)
        choice = cls.spec.release_choice
        if choice is not None:
            what = "split of the release to convert" if choice[0] == "split" else "release file inside --raw"
            parser.add_argument(f"--{choice[0]}", default=None, help=f"the {what} (default: {choice[1]})")


class StripPrefixOption:
    """Mixin for releases whose files name images by absolute paths of the authors' machines: ``strip_prefix``
    (``--strip-prefix``) is cut from the start of every image path, leaving a path relative to the raw folder."""

    default_strip_prefix: ClassVar[str | None] = None

    def __init__(self, *args, strip_prefix: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.strip_prefix = self.default_strip_prefix if strip_prefix is None else strip_prefix

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        super().add_builder_arguments(parser)
        parser.add_argument("--strip-prefix", default=None, metavar="PREFIX",
                            help="cut this prefix from image paths in the release files, leaving paths relative "
                                 f"to --raw (default: {cls.default_strip_prefix!r})")

    def release_path(self, value: Any) -> Any:
        """``value`` without ``strip_prefix`` (other values unchanged; the image check reports what is wrong)."""
        if isinstance(value, str) and self.strip_prefix and value.startswith(self.strip_prefix):
            return value[len(self.strip_prefix):]
        return value
