"""Shared machinery of the dataset builders (MIE-Bench, MER-Bench).

* :class:`ProblemCollector` / :class:`DatasetValidationError`: collect *every* problem of a raw
  release (file + line + message) and raise them together, once, before anything is written.
* :func:`read_jsonl` / :func:`read_csv`: readers that keep line numbers for those messages.
* :func:`check_image`: an image exists, stays inside the raw folder and decodes (truncated files,
  decompression bombs and non-images are caught here, not on the user's first ``load_dataset``).
* :class:`AtomicOutputDir`: build in a temporary folder beside the target, then rename; a failed
  build leaves nothing behind and an existing dataset is only replaced with ``overwrite=True``.
* :func:`plan_shards` / :func:`write_parquet_split`: size-bounded Parquet shards named the Hub way
  (``data/<split>-00000-of-00003.parquet``) with the ``datasets`` features embedded in the schema.
* :func:`dataset_card_yaml` / :func:`write_dataset_card`: README.md front matter (``configs`` +
  ``dataset_info``) so that ``datasets.load_dataset(folder)`` needs no loading script (datasets 5
  runs none).
* :func:`check_hub_push` / :func:`push_folder_to_hub`: the ``--push-to-hub`` guard.

Nothing here unpickles anything: inputs are JSON Lines, CSV and image files.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

__all__ = [
    "AtomicOutputDir",
    "DEFAULT_MAX_GROUP_BYTES",
    "DEFAULT_MAX_SHARD_BYTES",
    "DatasetValidationError",
    "HubPushError",
    "OutputExistsError",
    "Problem",
    "ProblemCollector",
    "check_hub_push",
    "check_image",
    "dataset_card_yaml",
    "format_bytes",
    "hash_bucket",
    "parse_size",
    "plan_shards",
    "push_folder_to_hub",
    "read_csv",
    "read_jsonl",
    "resolve_member",
    "write_dataset_card",
    "write_parquet_split",
]

# The Hub's dataset viewer and `datasets` streaming work best with shards of a few hundred MB.
DEFAULT_MAX_SHARD_BYTES = 256 * 1024 * 1024
# Rows per Parquet row group: image rows are large, and streaming reads one row group at a time.
DEFAULT_ROWS_PER_GROUP = 100
# ... and at most this many (estimated) bytes, so that memory stays bounded with large images.
DEFAULT_MAX_GROUP_BYTES = 64 * 1024 * 1024
# How many problems the exception message lists (all of them stay in `.problems`).
_MAX_PROBLEMS_SHOWN = 200


# --------------------------------------------------------------------------------------------
# Validation errors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One problem in a raw release: the file (relative to the raw folder), 1-based line, message."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"

    def to_dict(self) -> dict:
        return {"file": self.file, "line": self.line, "message": self.message}


class DatasetValidationError(ValueError):
    """A raw release has problems; ``.problems`` lists every one (file, line, message)."""

    def __init__(self, problems: Sequence[Problem], *, source: str | os.PathLike | None = None):
        self.problems = list(problems)
        self.source = os.fspath(source) if source is not None else None
        super().__init__(self._message())

    def _message(self) -> str:
        n = len(self.problems)
        where = f" in {self.source}" if self.source else ""
        lines = [f"{n} problem{'s' if n != 1 else ''} found{where}; nothing was written:"]
        lines += [f"  - {p}" for p in self.problems[:_MAX_PROBLEMS_SHOWN]]
        if n > _MAX_PROBLEMS_SHOWN:
            lines.append(f"  ... and {n - _MAX_PROBLEMS_SHOWN} more (see DatasetValidationError.problems)")
        return "\n".join(lines)


class ProblemCollector:
    """Accumulates :class:`Problem` s; :meth:`raise_if_any` raises them all at once."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else None
        self.problems: list[Problem] = []

    def add(self, file: str | os.PathLike, line: int | None, message: str) -> None:
        self.problems.append(Problem(self._rel(file), line, message))

    def _rel(self, file) -> str:
        path = Path(file)
        if self.root is not None and path.is_absolute():
            try:
                return path.relative_to(self.root).as_posix()
            except ValueError:
                return path.as_posix()
        return path.as_posix()

    def __len__(self) -> int:
        return len(self.problems)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def raise_if_any(self) -> None:
        if self.problems:
            raise DatasetValidationError(self.problems, source=self.root)


# --------------------------------------------------------------------------------------------
# Readers that keep line numbers
# --------------------------------------------------------------------------------------------


def read_jsonl(
    path: Path, problems: ProblemCollector, *, required: Sequence[str] = (), missing_ok: bool = False
) -> list[tuple[int, dict]]:
    """Parse a JSON Lines file into ``[(line_number, object), ...]``.

    Blank lines are skipped. Malformed lines, lines that are not JSON objects and objects missing a
    ``required`` key are reported to ``problems`` (with the line) and left out of the result.
    """
    name = path.name
    if not path.is_file():
        if not missing_ok:
            problems.add(name, None, f"file not found (expected at {path})")
        return []
    out: list[tuple[int, dict]] = []
    try:
        with open(path, "rb") as fh:
            raw_lines = fh.read().split(b"\n")
    except OSError as err:
        problems.add(name, None, f"cannot read file: {err}")
        return []
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").strip()
        except UnicodeDecodeError as err:
            problems.add(name, lineno, f"not valid UTF-8 ({err.reason} at byte {err.start}); save the file as UTF-8")
            continue
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            problems.add(name, lineno, f"malformed JSON: {err.msg} (column {err.colno})")
            continue
        if not isinstance(obj, dict):
            problems.add(name, lineno, f"expected a JSON object per line, got {type(obj).__name__}")
            continue
        missing = [k for k in required if k not in obj]
        if missing:
            problems.add(name, lineno, f"missing key(s) {', '.join(map(repr, missing))}")
            continue
        out.append((lineno, obj))
    return out


def read_csv(
    path: Path, problems: ProblemCollector, *, required: Sequence[str]
) -> list[tuple[int, dict[str, str]]] | None:
    """Parse a CSV file with a header into ``[(line_number, {column: text}), ...]``.

    A missing or unreadable file, or missing required columns, is reported (line 1 for the header)
    and gives ``None`` (so that callers can skip checks that would only repeat the problem); rows with
    too few or too many fields are reported and skipped.
    """
    name = path.name
    if not path.is_file():
        problems.add(name, None, f"file not found (expected at {path})")
        return None
    try:
        with open(path, "r", encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                problems.add(name, 1, f"empty file; expected a header with column(s) {', '.join(required)}")
                return None
            header = [h.strip() for h in header]
            missing = [c for c in required if c not in header]
            if missing:
                problems.add(
                    name, 1,
                    f"missing column(s) {', '.join(map(repr, missing))} (header has {', '.join(map(repr, header))})",
                )
                return None
            rows: list[tuple[int, dict[str, str]]] = []
            prev_line = reader.line_num
            for fields in reader:
                lineno = prev_line + 1
                prev_line = reader.line_num
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(header):
                    problems.add(name, lineno, f"expected {len(header)} fields, found {len(fields)}")
                    continue
                rows.append((lineno, {h: f.strip() for h, f in zip(header, fields)}))
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        problems.add(name, None, f"cannot read CSV: {err}")
        return None


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def resolve_member(root: Path, rel: Any) -> tuple[Path | None, str | None]:
    """Resolve a relative path given in a raw file; refuse absolute paths and escapes from ``root``."""
    if not isinstance(rel, str) or not rel.strip():
        return None, f"image path must be a non-empty string, got {rel!r}"
    if os.path.isabs(rel) or re.match(r"^[A-Za-z]:[\\/]", rel):
        return None, f"image path {rel!r} is absolute; give it relative to the raw folder"
    norm = os.path.normpath(rel.replace("\\", "/"))
    if norm == ".." or norm.startswith("../"):
        return None, f"image path {rel!r} points outside the raw folder"
    # Lexical check only: symlinks inside the raw folder (e.g. a linked images/ folder) are allowed.
    return root / norm, None


def check_image(path: Path, rel: str, max_image_pixels: int | None = None) -> str | None:
    """Return ``None`` when ``path`` is a decodable image, else a one-line reason naming ``rel``."""
    from ...image_io import DEFAULT_MAX_IMAGE_PIXELS, ImageLoadError, load_image

    if not path.exists():
        return f"image file not found: {rel!r}"
    if not path.is_file():
        return f"image path {rel!r} is not a file"
    try:
        load_image(path, max_image_pixels=max_image_pixels or DEFAULT_MAX_IMAGE_PIXELS)
    except ImageLoadError as err:
        return f"unreadable image {rel!r}: {err}"
    except Exception as err:  # noqa: BLE001 - any decoder failure is a data problem
        return f"unreadable image {rel!r}: {type(err).__name__}: {err}"
    return None


class ImageChecker:
    """Memoised :func:`check_image` (a source photo is often shared by several instances)."""

    def __init__(self, root: Path, max_image_pixels: int | None = None):
        self.root = root
        self.max_image_pixels = max_image_pixels
        self._cache: dict[str, tuple[Path | None, str | None]] = {}

    def __call__(self, rel: Any) -> tuple[Path | None, str | None]:
        key = rel if isinstance(rel, str) else repr(rel)
        if key not in self._cache:
            path, err = resolve_member(self.root, rel)
            if err is None:
                err = check_image(path, rel, self.max_image_pixels)
            self._cache[key] = (path, err)
        return self._cache[key]

    def __len__(self) -> int:
        return len(self._cache)


def image_struct(path: Path, rel: str) -> dict:
    """The ``datasets.Image`` storage value: original file bytes (no re-encoding) + relative path."""
    return {"bytes": path.read_bytes(), "path": rel}


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------


def hash_bucket(key: str, salt: str) -> float:
    """A stable uniform number in [0, 1) from ``sha256(salt + ":" + key)``.

    Depends on nothing but the key and the salt, so a rebuild gives the same value and adding keys
    never moves the old ones.
    """
    import hashlib

    digest = hashlib.sha256(f"{salt}:{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


# --------------------------------------------------------------------------------------------
# Atomic output folder
# --------------------------------------------------------------------------------------------


class OutputExistsError(FileExistsError):
    """The output folder already holds something and ``overwrite`` was not given."""


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


class AtomicOutputDir:
    """Context manager: write into a hidden temporary folder beside ``target``, rename on success.

    * On an exception the temporary folder is deleted and ``target`` is untouched.
    * If ``target`` exists (and is not an empty folder) it is replaced only with ``overwrite=True``:
      the old folder is first renamed aside, the new one renamed in, then the old one deleted, so a
      crash in between leaves either the old or the new dataset under a recognisable name.

    Call :meth:`check` early (before the expensive work) to fail fast on an existing target.
    """

    def __init__(self, target: str | os.PathLike, *, overwrite: bool = False):
        self.target = Path(target).absolute()
        self.overwrite = overwrite
        self.tmp: Path | None = None

    def check(self) -> None:
        t = self.target
        if t.exists() and not _is_empty_dir(t) and not self.overwrite:
            raise OutputExistsError(
                f"output folder {t} already exists and is not empty; pass overwrite=True "
                "(--overwrite) to replace it, or choose another --out"
            )
        if t.exists() and not t.is_dir() and not self.overwrite:
            raise OutputExistsError(f"output path {t} exists and is a file; pass --overwrite or choose another --out")

    def __enter__(self) -> Path:
        self.check()
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:12]}"
        self.tmp.mkdir()
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        assert self.tmp is not None
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        try:
            self._commit()
        except BaseException:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        return False

    def _commit(self) -> None:
        t = self.target
        old = None
        if t.exists() or t.is_symlink():
            self.check()  # someone may have created it while we were building
            old = t.parent / f".{t.name}.old-{uuid.uuid4().hex[:12]}"
            os.replace(t, old)
        os.replace(self.tmp, t)
        if old is not None:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
# Parquet shards
# --------------------------------------------------------------------------------------------


def parse_size(value: str | int) -> int:
    """``"256MB"``, ``"1.5GiB"``, ``"500k"``, ``1048576`` -> bytes (decimal and binary units)."""
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, got {value}")
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)(i?)([bB]?)\s*", str(value))
    if not m:
        raise ValueError(f"cannot parse size {value!r}; use e.g. 500MB, 1GiB or a number of bytes")
    number, unit, binary, _ = m.groups()
    base = 1024 if binary else 1000
    power = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}[unit.lower()]
    size = int(float(number) * base**power)
    if size <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return size


def format_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def plan_shards(sizes: Sequence[int], max_shard_bytes: int) -> list[range]:
    """Cut consecutive rows into shards whose estimated size stays under ``max_shard_bytes``.

    A single row larger than the bound gets a shard of its own. Always returns at least one shard.
    """
    shards: list[range] = []
    start, acc = 0, 0
    for i, s in enumerate(sizes):
        if i > start and acc + s > max_shard_bytes:
            shards.append(range(start, i))
            start, acc = i, 0
        acc += s
    shards.append(range(start, len(sizes)))
    return shards


def _row_groups(rows: range, sizes: Sequence[int], max_rows: int, max_bytes: int) -> Iterator[range]:
    start, acc = rows.start, 0
    for i in rows:
        if i > start and (i - start >= max_rows or acc + sizes[i] > max_bytes):
            yield range(start, i)
            start, acc = i, 0
        acc += sizes[i]
    if start < rows.stop:
        yield range(start, rows.stop)


def write_parquet_split(
    out_dir: Path,
    split: str,
    n_rows: int,
    row_sizes: Sequence[int],
    make_row: Callable[[int], dict],
    features,
    *,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
    data_dir: str = "data",
    progress=None,
) -> dict:
    """Write rows ``0..n_rows-1`` of one split as ``<data_dir>/<split>-XXXXX-of-YYYYY.parquet``.

    ``make_row(i)`` returns row ``i`` as a dict in ``features`` storage format (images as
    ``{"bytes", "path"}``). Rows are materialised one row group at a time (at most ``rows_per_group``
    rows and, by the ``row_sizes`` estimate, ``max_group_bytes``), so memory stays bounded.
    The ``datasets`` features travel in the Parquet schema metadata (key ``huggingface``), so the
    shards also load correctly on their own. Returns ``{"files", "num_examples", "num_bytes",
    "file_bytes"}`` where ``num_bytes`` is the Arrow (uncompressed) size, as ``datasets`` records it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = features.arrow_schema
    shards = plan_shards(row_sizes, max_shard_bytes) if n_rows else []
    folder = out_dir / data_dir
    folder.mkdir(parents=True, exist_ok=True)
    files, arrow_bytes, file_bytes = [], 0, 0
    for k, rows in enumerate(shards):
        rel = f"{data_dir}/{split}-{k:05d}-of-{len(shards):05d}.parquet"
        path = out_dir / rel
        with pq.ParquetWriter(path, schema, compression="snappy", write_statistics=True) as writer:
            for idx in _row_groups(rows, row_sizes, rows_per_group, max_group_bytes):
                table = pa.Table.from_pylist([make_row(i) for i in idx], schema=schema)
                arrow_bytes += table.nbytes
                writer.write_table(table, row_group_size=len(idx))
                if progress is not None:
                    progress.update(len(idx))
        files.append(rel)
        file_bytes += path.stat().st_size
    return {"files": files, "num_examples": n_rows, "num_bytes": int(arrow_bytes), "file_bytes": int(file_bytes)}


# --------------------------------------------------------------------------------------------
# Dataset card
# --------------------------------------------------------------------------------------------


def dataset_card_yaml(
    *,
    configs: Sequence[dict],
    license: str | None,
    pretty_name: str | None = None,
    task_categories: Sequence[str] = (),
    tags: Sequence[str] = (),
    size_categories: str | None = None,
    language: Sequence[str] = ("en",),
) -> dict:
    """Card front matter. Each entry of ``configs``: ``{"config_name", "features" (datasets.Features),
    "splits": {name: {"num_examples", "num_bytes", "files"/"pattern"}}, "default": bool}``.

    The ``splits`` block carries ``num_examples`` **and** ``num_bytes`` (``datasets`` ignores split
    entries without ``num_bytes``) and only splits that have rows are listed (a ``data_files``
    pattern matching no file is an error at load time).
    """
    header: dict[str, Any] = {}
    if license:
        header["license"] = license
    if pretty_name:
        header["pretty_name"] = pretty_name
    if language:
        header["language"] = list(language)
    if task_categories:
        header["task_categories"] = list(task_categories)
    if tags:
        header["tags"] = list(tags)
    if size_categories:
        header["size_categories"] = [size_categories]
    header["configs"] = []
    header["dataset_info"] = []
    for cfg in configs:
        splits = {k: v for k, v in cfg["splits"].items() if v["num_examples"] > 0}
        entry: dict[str, Any] = {"config_name": cfg["config_name"]}
        if cfg.get("default"):
            entry["default"] = True
        entry["data_files"] = [{"split": name, "path": info["pattern"]} for name, info in splits.items()]
        header["configs"].append(entry)
        header["dataset_info"].append(
            {
                "config_name": cfg["config_name"],
                "features": cfg["features"]._to_yaml_list(),
                "splits": [
                    {"name": name, "num_bytes": int(info["num_bytes"]), "num_examples": int(info["num_examples"])}
                    for name, info in splits.items()
                ],
                "download_size": int(sum(info.get("file_bytes", 0) for info in splits.values())),
                "dataset_size": int(sum(info["num_bytes"] for info in splits.values())),
            }
        )
    return header


def size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "1M<n<10M"


def write_dataset_card(out_dir: Path, header: dict, body: str) -> Path:
    """Write ``README.md`` = YAML front matter + Markdown body (deterministic: no timestamps)."""
    import yaml

    text = "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True, width=100) + "---\n\n" + body.rstrip() + "\n"
    path = out_dir / "README.md"
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path, obj: Any) -> None:
    """Deterministic JSON (sorted keys, NaN -> null)."""
    path.write_text(json.dumps(_jsonable(obj), indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (TypeError, ValueError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (cells converted with ``str``; ``|`` escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar on stderr, or a no-op object with the same ``update``/``close`` when disabled."""
    if enabled:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="row", file=sys.stderr, dynamic_ncols=True, leave=False)

    class _Null:
        def update(self, n: int = 1) -> None:
            pass

        def close(self) -> None:
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> bool:
            return False

    return _Null()


def iter_progress(items: Sequence, desc: str, enabled: bool) -> Iterator:
    bar = progress_bar(len(items), desc, enabled)
    try:
        for item in items:
            yield item
            bar.update(1)
    finally:
        bar.close()


# --------------------------------------------------------------------------------------------
# Hub push guard
# --------------------------------------------------------------------------------------------


class HubPushError(RuntimeError):
    """``--push-to-hub`` cannot be done (offline, bad repo id, no credentials, network failure)."""


_TRUE = {"1", "true", "yes", "on"}


def hub_is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) is set now or was at import time."""
    if any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants

        return bool(getattr(constants, "HF_HUB_OFFLINE", False))
    except Exception:  # noqa: BLE001
        return False


def check_hub_push(repo_id: str) -> None:
    """Fail fast (before building) when a push is impossible: bad repo id or offline mode."""
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(repo_id)
    except Exception as err:  # noqa: BLE001 - HFValidationError and friends
        raise HubPushError(f"--push-to-hub: invalid repository id {repo_id!r}: {err}") from None
    if hub_is_offline():
        raise HubPushError(
            f"--push-to-hub {repo_id}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE is set); "
            "unset it and log in (`hf auth login`) to push, or drop --push-to-hub and upload the folder later"
        )


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str = "Upload dataset",
    revision: str | None = None,
) -> str:
    """Upload a finished dataset folder as **one commit** (all files or none) and return its URL.

    Raises :class:`HubPushError` with a one-line reason on any failure (offline, network, auth).
    """
    check_hub_push(repo_id)
    try:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=os.fspath(folder),
            repo_type="dataset",
            commit_message=commit_message,
            revision=revision,
        )
    except HubPushError:
        raise
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HubPushError(
            f"--push-to-hub {repo_id} failed ({type(err).__name__}: {reason}); the local dataset at "
            f"{os.fspath(folder)} is complete, and nothing was committed to the Hub (uploads are a "
            "single commit). Check the network and `hf auth login`, then push again"
        ) from None
    return getattr(info, "commit_url", None) or f"https://huggingface.co/datasets/{repo_id}"


def size_arg(text: str) -> int:
    """argparse type for sizes such as ``256MB``."""
    import argparse

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def run_build(build) -> int:
    """Run ``build()`` for a CLI: print its summary, or one clear error line; return the exit code.

    Exit 2 for invalid raw data (every problem is listed), 1 for an unusable environment or output folder.
    """
    import sys

    try:
        summary = build()
    except DatasetValidationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ImportError as err:
        print(f"error: building needs the data extra ({err.name or err} missing): pip install 'miescore[data]'",
              file=sys.stderr)
        return 1
    except (OutputExistsError, HubPushError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(summary.describe())
    return 0


def start_build(raw: Path, out: Path, overwrite: bool, push_to_hub) -> AtomicOutputDir:
    """Checks every builder makes before reading anything; returns the (checked) atomic output folder."""
    if not raw.is_dir():
        raise DatasetValidationError([Problem(raw.as_posix(), None, "raw folder not found")], source=raw)
    if out == raw or raw.is_relative_to(out):
        raise ValueError(f"--out {out} must not be the raw folder or contain it")
    atomic = AtomicOutputDir(out, overwrite=overwrite)
    atomic.check()
    if push_to_hub:
        check_hub_push(push_to_hub)
    return atomic
