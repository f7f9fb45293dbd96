"""The builder base: what building MIE-Bench and MER-Bench have in common.

A build runs in stages, each a method: :meth:`~DatasetBuilder.read` (each record checked) ->
:meth:`~DatasetBuilder.validate` (checks across files; every problem raised at once, before anything is written)
-> :meth:`~DatasetBuilder.label` -> :meth:`~DatasetBuilder.split` -> :meth:`~DatasetBuilder.write_splits`
(Parquet shards in a temporary folder) -> :meth:`~DatasetBuilder.write_card` -> rename into place -> optional push
to the Hub. Subclasses implement the data-specific stages and declare their name, options and card.

Before reading anything a build checks what would stop it (raw folder, output path, ``push_to_hub``), then holds
the output's lock (``utils.output_lock.exclusive_output``) until the dataset is in place and pushed, removing the
temporary folders of killed builds. Errors name the API parameters (``out_dir``, ``overwrite=True``); the command
line (:mod:`modeling_miescore.cli.dataset`) rewords them as flags.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Sequence

from tqdm.auto import tqdm

from ...utils.output_lock import exclusive_output
from ...utils.output_paths import OutputPathError, check_folder_apart, ensure_folder
from .output_folder import CardSpec, dataset_card_data, write_dataset_card
from .output_folder import AtomicOutputDir, check_hub_push, push_folder_to_hub
from .output_folder import (DEFAULT_MAX_SHARD_BYTES, DEFAULT_ROWS_PER_GROUP, format_bytes, parse_size, size_arg,
                              write_parquet_split)
from .raw_files import DatasetValidationError, ImageChecker, Problem, ProblemCollector

__all__ = ["BuildSummary", "BuildUsageError", "DatasetBuilder"]


class BuildUsageError(ValueError):
    """The build cannot run as asked: an unusable option or output path (found before anything is read)."""


@dataclasses.dataclass(kw_only=True)
class BuildSummary:
    """What a build produced. ``to_dict()`` is JSON-serialisable; ``describe()`` is the CLI's report."""

    dataset: ClassVar[str]
    out_dir: str
    splits: dict = dataclasses.field(default_factory=dict)  # name -> {num_examples, files, num_bytes, ...}
    total_bytes: int = 0
    warnings: list = dataclasses.field(default_factory=list)
    hub_url: str | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return {"dataset": self.dataset, **dataclasses.asdict(self)}

    def headline(self) -> str:
        raise NotImplementedError

    def details(self) -> list[str]:
        return []

    def describe(self) -> str:
        lines = [self.headline(), *self.details(), *(f"warning: {w}" for w in self.warnings)]
        if self.hub_url:
            lines.append(f"pushed to {self.hub_url}")
        return "\n".join(lines)


class DatasetBuilder(ABC):
    """One raw release -> one Hub-native Parquet dataset folder (see the module docstring for the stages).

    Common options (every builder): ``overwrite`` (replace an existing non-empty ``out_dir``),
    ``max_shard_bytes`` (upper bound of a Parquet shard, estimated from image file sizes; an int or a string
    such as ``"256MB"``), ``rows_per_group``, ``license`` (card license id; the builder's default when
    ``None``), ``max_image_pixels`` (decompression-bomb guard of the image check), ``follow_symlinks`` (read
    raw files and images whose symbolic links lead outside the raw folder; refused by default),
    ``push_to_hub`` (``"user/name"``: checked before building, then after the local build succeeds the folder
    is uploaded as one commit), ``private``, ``token`` and ``progress`` (tqdm bars on stderr).
    """

    # (the CLI name of a builder is its key in the registry, modeling_miescore.data.builders.BUILDERS)
    title: ClassVar[str]  # e.g. "MIE-Bench"
    raw_help: ClassVar[str]  # --raw help: the files the raw folder holds
    default_license: ClassVar[str]
    license_help: ClassVar[str]  # --license help: the default and why
    split_names: ClassVar[Sequence[str]]
    card: ClassVar[CardSpec]

    def __init__(self, raw_dir: str | os.PathLike, out_dir: str | os.PathLike, *, overwrite: bool = False,
                 max_shard_bytes: int | str = DEFAULT_MAX_SHARD_BYTES, rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
                 license: str | None = None, max_image_pixels: int | None = None, follow_symlinks: bool = False,
                 push_to_hub: str | None = None, private: bool | None = None, token: str | None = None,
                 progress: bool = True):
        self.raw = Path(raw_dir).absolute()
        self.out = Path(out_dir).absolute()
        self.overwrite = overwrite
        try:
            self.max_shard_bytes = parse_size(max_shard_bytes)
        except ValueError as err:
            raise BuildUsageError(f"max_shard_bytes: {err}") from None
        if rows_per_group < 1:
            raise BuildUsageError(f"rows_per_group must be >= 1, got {rows_per_group}")
        self.rows_per_group = rows_per_group
        self.license = license or self.default_license
        self.max_image_pixels = max_image_pixels
        self.follow_symlinks = follow_symlinks
        self.push_to_hub, self.private, self.token = push_to_hub, private, token
        self.progress = progress
        self.warnings: list[str] = []

    # ------------------------------------------------------------------------------ the run

    def build(self) -> BuildSummary:
        """Run every stage; return the summary. Nothing is written unless every stage before the write succeeds.

        Raises:
            DatasetValidationError: every problem of the raw release, with file and line; nothing is written.
            BuildUsageError: an unusable option, or ``out_dir`` is (or contains) the raw folder.
            OutputExistsError / OutputBusyError: ``out_dir`` exists without ``overwrite``, or another build writes it.
            HubPushUnavailableError: ``push_to_hub`` cannot work (checked before building).
            HubPushError: the upload failed after the build (the local dataset is then complete).
        """
        started = time.perf_counter()
        output = self.check_before_build()
        ensure_folder(self.out.parent, "out_dir")  # before the lock file is made beside the output
        with contextlib.ExitStack() as lock:
            try:
                lock.enter_context(exclusive_output(self.out, "output folder"))
            except OSError as err:
                raise BuildUsageError(f"out_dir {self.out} cannot be locked for writing: {err}") from None
            output.check()  # again, now that no other build can change it
            for note in output.remove_stale():
                self.note(note)
            summary = self.build_into(output)
            if self.push_to_hub:
                summary.hub_url = push_folder_to_hub(self.out, self.push_to_hub, private=self.private, token=self.token,
                                                     commit_message=f"Upload {self.title} (built with miescore)")
        summary.elapsed_s = time.perf_counter() - started
        return summary

    def build_into(self, output: AtomicOutputDir) -> BuildSummary:
        """The stages from reading the raw files to the dataset renamed into place."""
        problems = ProblemCollector(self.raw, follow_symlinks=self.follow_symlinks)
        self.read(problems, ImageChecker(self.raw, self.max_image_pixels, follow_symlinks=self.follow_symlinks))
        self.validate(problems)
        problems.raise_if_any()
        self.label()
        rows_by_split = self.split()
        if not any(rows_by_split.values()):
            file, message = self.empty_dataset_problem()
            raise DatasetValidationError([Problem(file, None, message)], source=self.raw)
        with output as folder:
            split_info = self.write_splits(folder, rows_by_split)
            self.write_card(folder, split_info)
            self.write_extra_files(folder)
            total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        summary = self.summary(split_info)
        summary.total_bytes, summary.warnings = total, list(self.warnings)
        return summary

    def check_before_build(self) -> AtomicOutputDir:
        """The checks made before reading anything; returns the (checked) output folder."""
        if not self.raw.is_dir():
            raise DatasetValidationError([Problem(self.raw.as_posix(), None, "raw folder not found")], source=self.raw)
        try:  # real paths: d/raw/../raw is the raw folder, a link to it too
            check_folder_apart(self.out, self.input_paths(), "out_dir")
        except OutputPathError as err:
            raise BuildUsageError(str(err)) from None
        output = AtomicOutputDir(self.out, overwrite=self.overwrite)
        output.check()
        if self.push_to_hub:
            check_hub_push(self.push_to_hub, self.token)
        return output

    def input_paths(self) -> dict:
        """``{API parameter: path}`` of everything the build reads; the output must lie apart from each."""
        return {"raw_dir": self.raw}

    def note(self, message: str) -> None:
        """A line on stderr about the build itself (not about the data)."""
        print(f"note: {message}", file=sys.stderr)

    def progress_bar(self, iterable=None, *, desc: str, total: int | None = None) -> tqdm:
        """A tqdm bar on stderr, hidden unless ``progress``."""
        return tqdm(iterable, desc=desc, total=total, unit="row", disable=not self.progress, leave=False,
                    dynamic_ncols=True, file=sys.stderr)

    def write_splits(self, folder: Path, rows_by_split: dict[str, list]) -> dict[str, dict]:
        """Write every split that has rows (shards as :meth:`shard_location` names them);
        ``{split: {files, num_examples, num_bytes, file_bytes, pattern}}``."""
        info: dict[str, dict] = {}
        total = sum(len(rows) for rows in rows_by_split.values())
        with self.progress_bar(desc=f"writing {self.title}", total=total) as bar:
            for split in self.split_names:
                items = rows_by_split.get(split) or []
                if items:
                    data_dir, name = self.shard_location(split)
                    info[split] = write_parquet_split(
                        folder, name, items, self.features(split), make_row=self.make_row, row_size=self.row_size,
                        bar=bar, max_shard_bytes=self.max_shard_bytes, rows_per_group=self.rows_per_group,
                        data_dir=data_dir)
                    info[split]["pattern"] = f"{data_dir}/{name}-*.parquet"
        return info

    def shard_location(self, split: str) -> tuple[str, str]:
        """``(folder, file prefix)`` of a split's shards: ``data/<split>-XXXXX-of-YYYYY.parquet``."""
        return "data", split

    def write_card(self, folder: Path, split_info: dict[str, dict]) -> None:
        write_dataset_card(folder, self.card_data(split_info), self.card, max_shard=format_bytes(self.max_shard_bytes),
                           warnings=self.warnings, repo_id=self.push_to_hub or self.card.repo_placeholder,
                           splits=list(split_info), default_license=self.default_license,
                           **self.card_context(split_info))

    def card_data(self, split_info: dict[str, dict]):
        """The card's metadata (``DatasetCardData``: configs, features, splits, license, tags)."""
        return dataset_card_data(features=self.features(), splits=split_info, license=self.license,
                                 pretty_name=self.card.pretty_name, task_categories=self.card.task_categories,
                                 tags=self.card.tags)

    def write_extra_files(self, folder: Path) -> None:
        """Files beside the data and the card (reports); none by default."""

    # ------------------------------------------------------------------------------ the data-specific stages

    @abstractmethod
    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        """Parse the raw files, reporting every bad record to ``problems``."""

    def validate(self, problems: ProblemCollector) -> None:
        """Checks across files (after :meth:`read`), reported to ``problems``."""

    @abstractmethod
    def label(self) -> None:
        """Turn the human judgements into the dataset's labels."""

    @abstractmethod
    def split(self) -> dict[str, list]:
        """The items of each split, in row order."""

    @abstractmethod
    def empty_dataset_problem(self) -> tuple[str, str]:
        """``(file, message)`` of the problem raised when no split has a row."""

    @abstractmethod
    def features(self, split: str | None = None):
        """The ``datasets.Features`` of a row (of ``split``)."""

    @abstractmethod
    def make_row(self, item) -> dict:
        """One row, in the features' storage format (images as ``{"bytes", "path"}``)."""

    @abstractmethod
    def row_size(self, item) -> int:
        """Estimated bytes of a row (bounds shards and row groups)."""

    @abstractmethod
    def card_context(self, split_info: dict[str, dict]) -> dict[str, Any]:
        """The variables of the card template (besides ``card_data``, ``license``, ``max_shard``, ``warnings``)."""

    @abstractmethod
    def summary(self, split_info: dict[str, dict]) -> BuildSummary:
        """The build's summary (sizes, warnings and timing are filled in by :meth:`build`)."""

    # ------------------------------------------------------------------------------ command line

    @classmethod
    def add_cli_arguments(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Add this builder's options to ``parser`` (``miescore build-dataset <name>``).

        Each ``dest`` is the constructor's parameter name, so that the command line can reword the API's
        messages as flags (:func:`modeling_miescore.cli.dataset.flag_wording`).
        """
        parser.add_argument("--raw", dest="raw_dir", metavar="RAW", required=True, type=Path, help=cls.raw_help)
        parser.add_argument("--out", dest="out_dir", metavar="OUT", required=True, type=Path,
                            help="output dataset folder (written atomically)")
        parser.add_argument("--overwrite", action="store_true", help="replace an existing output folder")
        parser.add_argument("--max-shard-bytes", type=size_arg, default=DEFAULT_MAX_SHARD_BYTES,
                            help="maximum Parquet shard size, e.g. 256MB (default: %(default)s bytes)")
        parser.add_argument("--license", default=cls.default_license, help=cls.license_help)
        parser.add_argument("--follow-symlinks", action="store_true",
                            help="read raw files and images whose symbolic links lead outside the raw folder "
                                 "(refused by default)")
        parser.add_argument("--push-to-hub", metavar="REPO", default=None,
                            help="after building, upload to this Hub dataset repo (one commit); the token and "
                                 "the network are checked before building")
        parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
        parser.add_argument("--no-progress", action="store_true", help="no progress bars")
        cls.add_builder_arguments(parser)
        return parser

    @classmethod
    def add_builder_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """The options only this builder has (``dest`` = constructor parameter name)."""

    @classmethod
    def builder_options(cls, args: argparse.Namespace) -> dict[str, Any]:
        """Constructor keywords from the options of :meth:`add_builder_arguments`: each option's ``dest`` is the
        constructor parameter it sets, so the options are declared once, there."""
        declared = argparse.ArgumentParser(add_help=False)
        cls.add_builder_arguments(declared)
        return {action.dest: getattr(args, action.dest) for action in declared._actions}

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "DatasetBuilder":
        """The builder that parsed command-line ``args`` describe (raises on unusable options)."""
        return cls(args.raw_dir, args.out_dir, overwrite=args.overwrite, max_shard_bytes=args.max_shard_bytes,
                   license=args.license, follow_symlinks=args.follow_symlinks, push_to_hub=args.push_to_hub,
                   private=True if args.private else None, progress=not args.no_progress, **cls.builder_options(args))
