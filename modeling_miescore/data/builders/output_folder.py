"""What a build writes: the folder, all at once; its Parquet shards and card the Hub way; the push to the Hub.

:class:`AtomicOutputDir` builds in a temporary folder beside the output and renames it into place, so a failed
build leaves nothing behind and an existing dataset is replaced only with ``overwrite=True``. A killed build's
``.<name>.tmp-*`` folder is removed by :meth:`AtomicOutputDir.remove_stale`, which the builder calls while it
holds the output's lock (``utils.output_lock.exclusive_output``), so each such folder belongs to a dead build.

:func:`write_parquet_split` writes ``data/<split>-00000-of-00003.parquet``, size-bounded, one row group at a time
(bounded memory with large images), the ``datasets`` features in each shard's schema metadata (key
``huggingface``). ``pyarrow`` is imported only when a split is written. The card (:func:`write_dataset_card`) is
``DatasetCardData`` metadata (``configs``, ``dataset_info`` with the features in the Hub's card format) rendered
through a Jinja template, so ``datasets.load_dataset(folder)`` needs no loading script.

:func:`check_hub_push` runs before anything is read: a bad repository id, offline mode, no token or an unreachable
Hub raise :class:`HubPushUnavailableError`; a failed upload after the local build raises :class:`HubPushError`.
Messages name the API parameter (``push_to_hub``); the command line rewords it as ``--push-to-hub``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from ...utils.markdown_table import markdown_table as md_table
from ...utils.output_paths import OutputPathError, ensure_folder


class OutputExistsError(FileExistsError):
    """The output path already holds something and ``overwrite`` was not given."""


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


class AtomicOutputDir:
    """Context manager: write into a hidden temporary folder beside ``target``, rename on success.

    * On an exception the temporary folder is deleted and ``target`` is untouched.
    * If ``target`` exists (and is not an empty folder) it is replaced only with ``overwrite=True``:
      the old folder is first renamed aside, the new one renamed in, then the old one deleted, so a
      crash in between leaves either the old or the new dataset under a recognisable name.

    Call :meth:`check` early (before the expensive work) to fail fast on an existing target. Messages name
    the API parameters (``out_dir``, ``overwrite=True``); the command line rewords them as flags.
    """

    def __init__(self, target: str | os.PathLike, *, overwrite: bool = False):
        self.target = Path(target).absolute()
        self.overwrite = overwrite
        self.tmp: Path | None = None

    def check(self) -> None:
        t = self.target
        if self.overwrite or not (t.exists() or t.is_symlink()) or _is_empty_dir(t):
            return
        if t.is_dir():
            raise OutputExistsError(f"out_dir {t} already exists and is not empty; pass overwrite=True to replace "
                                    "it, or choose another out_dir")
        raise OutputExistsError(f"out_dir {t} already exists and is a file, not a folder; pass overwrite=True to "
                                "replace the file with the dataset folder, or choose another out_dir")

    def _leftovers(self, kind: str) -> list[Path]:
        prefix = f".{self.target.name}.{kind}-"
        parent = self.target.parent
        return sorted(p for p in parent.iterdir() if p.name.startswith(prefix)) if parent.is_dir() else []

    def remove_stale(self) -> list[str]:
        """Remove what interrupted builds left beside the target; one line per thing removed or kept.

        Only call this while holding the output's lock (then no other build is running). ``.tmp-*`` folders
        are unfinished builds and are removed. ``.old-*`` is a dataset that an ``overwrite`` renamed aside:
        removed when the target exists (the replacement finished), otherwise kept, since it is the only copy
        of the previous dataset.
        """
        notes = []
        for path in self._leftovers("tmp"):
            _remove(path)
            notes.append(f"removed {path}, a temporary folder left by an interrupted build")
        for path in self._leftovers("old"):
            if self.target.exists():
                _remove(path)
                notes.append(f"removed {path}, a replaced dataset left by an interrupted overwrite")
            else:
                notes.append(f"kept {path}: it holds the dataset that an interrupted overwrite set aside; rename "
                             f"it to {self.target} to restore it, or delete it")
        return notes

    def __enter__(self) -> Path:
        self.check()
        ensure_folder(self.target.parent, "out_dir")
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            self.tmp.mkdir()
        except OSError as err:
            raise OutputPathError(f"out_dir: cannot write in '{self.target.parent}' ({err.strerror}); pass a folder "
                                  "you can write to") from None
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
            _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


# The Hub's dataset viewer and `datasets` streaming work best with shards of a few hundred MB.
DEFAULT_MAX_SHARD_BYTES = 256 * 1024 * 1024
# Rows per Parquet row group: image rows are large, and streaming reads one row group at a time.
DEFAULT_ROWS_PER_GROUP = 100
# ... and at most this many (estimated) bytes, so that memory stays bounded with large images.
DEFAULT_MAX_GROUP_BYTES = 64 * 1024 * 1024


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


def size_arg(text: str) -> int:
    """argparse ``type=`` for sizes such as ``256MB``."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
    items: Sequence[Any],
    features,
    *,
    make_row: Callable[[Any], dict],
    row_size: Callable[[Any], int],
    bar,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    rows_per_group: int = DEFAULT_ROWS_PER_GROUP,
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES,
    data_dir: str = "data",
) -> dict:
    """Write one row per item of ``items`` as ``<data_dir>/<split>-XXXXX-of-YYYYY.parquet``.

    ``make_row(item)`` returns the row as a dict in ``features`` storage format (images as
    ``{"bytes", "path"}``); ``row_size(item)`` estimates its size for the shard and row-group bounds (at
    most ``rows_per_group`` rows and ``max_group_bytes`` per row group). ``bar`` (a tqdm bar) advances by
    the rows written. Returns ``{"files", "num_examples", "num_bytes", "file_bytes"}`` where
    ``num_bytes`` is the Arrow (uncompressed) size, as ``datasets`` records it.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = features.arrow_schema
    sizes = [row_size(item) for item in items]
    shards = plan_shards(sizes, max_shard_bytes) if items else []
    (out_dir / data_dir).mkdir(parents=True, exist_ok=True)
    files, arrow_bytes, file_bytes = [], 0, 0
    for k, rows in enumerate(shards):
        rel = f"{data_dir}/{split}-{k:05d}-of-{len(shards):05d}.parquet"
        path = out_dir / rel
        with pq.ParquetWriter(path, schema, compression="snappy", write_statistics=True) as writer:
            for group in _row_groups(rows, sizes, rows_per_group, max_group_bytes):
                table = pa.Table.from_pylist([make_row(items[i]) for i in group], schema=schema)
                arrow_bytes += table.nbytes
                writer.write_table(table, row_group_size=len(group))
                bar.update(len(group))
        files.append(rel)
        file_bytes += path.stat().st_size
    return {"files": files, "num_examples": len(items), "num_bytes": int(arrow_bytes), "file_bytes": int(file_bytes)}


class HubPushError(RuntimeError):
    """The upload to the Hub failed (the local dataset is complete)."""


class HubPushUnavailableError(HubPushError):
    """A push cannot work (bad repository id, offline, no token, Hub unreachable): found before building."""


def hub_is_offline() -> bool:
    """Whether the Hub is in offline mode: ``HF_HUB_OFFLINE`` (else ``TRANSFORMERS_OFFLINE``) as it is set now,
    read as huggingface_hub reads it (offline for one of its ``ENV_VARS_TRUE_VALUES``: 1, ON, YES, TRUE; ``0`` is
    online); when neither is set, huggingface_hub's own ``is_offline_mode()``."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is None:
        return constants.is_offline_mode()
    return value.upper() in constants.ENV_VARS_TRUE_VALUES


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _upload_state(err: BaseException, created: bool, repo_id: str, folder, allow_patterns) -> str:
    """What a failed push left on the Hub: the repository (created or not), and whether the folder's files were
    committed (never, unless the failed request was the commit itself: then the Hub's answer is unknown)."""
    from huggingface_hub.utils import filter_repo_objects

    root = Path(folder)
    names = sorted(filter_repo_objects((p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()),
                                       allow_patterns=allow_patterns))
    files = f"{len(names)} file(s) ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
    if not created:
        return f"nothing was uploaded (the repository {repo_id} was not created or changed; {files} to push)"
    if "/commit/" in _request_url(err):
        return (f"the repository {repo_id} exists; the commit of the {files} got no usable answer, so the Hub may "
                "or may not hold them (uploads are a single commit: all of them or none): look at the "
                "repository's commits before pushing again")
    return (f"the repository {repo_id} exists, but nothing was committed to it (uploads are a single commit): none "
            f"of the {files} is on the Hub")


def _request_url(err: BaseException) -> str:
    """The URL of the request an HTTP error (huggingface_hub's or httpx's) failed on, or ``""``."""
    response = getattr(err, "response", None)
    try:  # httpx raises RuntimeError for a request or response it does not have
        request = response.request if response is not None else getattr(err, "request", None)
    except RuntimeError:
        return ""
    return str(getattr(request, "url", ""))


def check_hub_push(repo_id: str, token: str | None = None) -> str | None:
    """Raise :class:`HubPushUnavailableError` unless ``repo_id`` is valid, the Hub is online, a token is
    available (``token`` or the logged-in one) and the Hub accepts it (one ``whoami`` request); returns the
    token's user name (the namespace a bare ``repo_id`` is created in)."""
    import huggingface_hub
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except Exception as err:  # noqa: BLE001 - HFValidationError and friends
        raise HubPushUnavailableError(f"push_to_hub: invalid repository id {repo_id!r}: {err}") from None
    if hub_is_offline():
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE is set); unset it and "
            "log in (`hf auth login`) to push, or build without push_to_hub and upload the folder later"
        )
    token = token or huggingface_hub.get_token()
    if not token:
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: no Hugging Face token; log in with `hf auth login` or set HF_TOKEN, or build "
            "without push_to_hub and upload the folder later"
        )
    try:
        user = huggingface_hub.HfApi(token=token).whoami()
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: cannot use the Hub ({type(err).__name__}: {_first_line(err)}); check the "
            "network and the token (`hf auth whoami`), or build without push_to_hub and upload the folder later"
        ) from None
    return user.get("name") if isinstance(user, dict) else None


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str = "Upload dataset",
    revision: str | None = None,
    repo_type: str = "dataset",
    allow_patterns: list[str] | None = None,
) -> str:
    """Upload a finished folder (a dataset, or with ``repo_type="model"`` a model / adapter) as **one commit**
    (all files or none) and return its URL. ``allow_patterns``: only the files matching these globs.

    Raises :class:`HubPushError` with a one-line reason on any failure (network, auth, HTTP).
    """
    what = "dataset" if repo_type == "dataset" else "folder"
    created = False
    try:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        created = True
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=os.fspath(folder),
            repo_type=repo_type,
            commit_message=commit_message,
            revision=revision,
            allow_patterns=allow_patterns,
        )
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        raise HubPushError(
            f"push_to_hub {repo_id} failed ({type(err).__name__}: {_first_line(err)}); "
            f"{_upload_state(err, created, repo_id, folder, allow_patterns)}; the local {what} at "
            f"{os.fspath(folder)} is complete. Check the network and `hf auth login`, then push the folder again"
        ) from None
    prefix = "datasets/" if repo_type == "dataset" else ""
    return getattr(info, "commit_url", None) or f"https://huggingface.co/{prefix}{repo_id}"


# ``task_categories`` must be ids of the Hub's task list (PIPELINE_DATA in huggingface.js,
# packages/tasks/src/pipelines.ts). None names rating or preference data, so both datasets are filed under the
# task whose outputs they rate, instruction-guided editing ("image-to-image"), and the task of the judges they
# train and test, which read images and an instruction and answer with scores or an order ("image-text-to-text").
# What the labels are (MOS, rankings) is said by the tags.
EDIT_RATING_TASK_CATEGORIES = ("image-to-image", "image-text-to-text")


@dataclass(frozen=True)
class CardSpec:
    """What a dataset's card says besides its data: the Jinja template and the Hub metadata.

    Every template also gets ``repo_id`` (the ``push_to_hub`` repository, else ``repo_placeholder``) and
    ``splits`` (the splits this build has, in order) for its usage snippet, and ``column_table`` (``columns``
    as a Markdown table).
    """

    template: str  # ``{{ card_data }}`` is the YAML metadata; the builder's card_context fills the rest
    pretty_name: str
    citation: str  # BibTeX, shown in the card's last section
    repo_placeholder: str  # the repo id in the usage snippet of a build that is not pushed
    columns: Mapping[str, str] = field(default_factory=dict)  # column name -> what it holds, in card order
    task_categories: tuple[str, ...] = EDIT_RATING_TASK_CATEGORIES
    tags: tuple[str, ...] = ()


# Every card ends with its citation (Jinja drops a template's last newline, hence the blank line).
_CITATION_SECTION = """
## Citation

```bibtex
{{ citation }}
```

"""


def column_table(columns: Mapping[str, str]) -> str:
    """The card's table of columns: name (as code) and description."""
    return md_table(["column", "description"], [[f"`{name}`", text] for name, text in columns.items()])


def size_category(n: int) -> str:
    """The Hub's ``size_categories`` label for ``n`` rows."""
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "1M<n<10M"


def _feature_yaml(feature: Mapping[str, Any]) -> dict:
    """One feature of ``Features.to_dict()`` in the card's YAML form (the kinds the builders use)."""
    kind = feature["_type"]
    if kind == "Value":
        return {"dtype": feature["dtype"]}
    if kind == "Image" and not feature.get("mode") and feature.get("decode", True):
        return {"dtype": "image"}
    if kind == "ClassLabel":  # the card wants string keys: names {'0': first, '1': second, ...}
        return {"dtype": {"class_label": {"names": {str(i): name for i, name in enumerate(feature["names"])}}}}
    if kind == "List" and feature.get("length", -1) == -1:
        inner = _feature_yaml(feature["feature"])
        return {"list": inner["dtype"] if isinstance(inner.get("dtype"), str) and len(inner) == 1 else inner}
    raise ValueError(f"no card form for feature {feature!r}; extend _feature_yaml")


def features_yaml(features) -> list[dict]:
    """``datasets.Features`` -> the ``dataset_info.features`` list of a dataset card."""
    return [{"name": name, **_feature_yaml(feature)} for name, feature in features.to_dict().items()]


def dataset_card_data(
    *,
    features,
    splits: Mapping[str, Mapping[str, Any]],
    license: str | None,
    pretty_name: str,
    task_categories: Sequence[str] = (),
    tags: Sequence[str] = (),
    language: Sequence[str] = ("en",),
    config_name: str = "default",
):
    """The card metadata of a one-config dataset.

    ``splits`` maps each split to ``{"num_examples", "num_bytes", "file_bytes", "pattern"}``. Only splits
    with rows are listed (a ``data_files`` pattern matching no file is an error at load time), and each
    carries ``num_examples`` **and** ``num_bytes`` (``datasets`` ignores split entries without ``num_bytes``).
    """
    from huggingface_hub import DatasetCardData

    splits = {name: info for name, info in splits.items() if info["num_examples"] > 0}
    n_rows = sum(int(info["num_examples"]) for info in splits.values())
    return DatasetCardData(
        license=license or None,
        pretty_name=pretty_name,
        language=list(language) or None,
        task_categories=list(task_categories) or None,
        tags=list(tags) or None,
        size_categories=[size_category(n_rows)],
        configs=[{
            "config_name": config_name,
            "default": True,
            "data_files": [{"split": name, "path": info["pattern"]} for name, info in splits.items()],
        }],
        dataset_info=[{
            "config_name": config_name,
            "features": features_yaml(features),
            "splits": [{"name": name, "num_bytes": int(info["num_bytes"]), "num_examples": int(info["num_examples"])}
                       for name, info in splits.items()],
            "download_size": int(sum(info.get("file_bytes", 0) for info in splits.values())),
            "dataset_size": int(sum(info["num_bytes"] for info in splits.values())),
        }],
    )


def write_dataset_card(out_dir: Path, card_data, spec: CardSpec, **context) -> Path:
    """Render ``spec.template`` (Jinja; ``{{ card_data }}`` is the YAML metadata) with ``context`` and the
    column table, then the citation, into ``out_dir/README.md``.

    Deterministic: no timestamps, and the same metadata gives the same YAML.
    """
    from huggingface_hub import DatasetCard

    card = DatasetCard.from_template(card_data, template_str=spec.template.rstrip("\n") + "\n" + _CITATION_SECTION,
                                     citation=spec.citation, column_table=column_table(spec.columns), **context)
    path = out_dir / "README.md"
    card.save(path)
    return path


__all__ = ["AtomicOutputDir", "CardSpec", "DEFAULT_MAX_GROUP_BYTES", "DEFAULT_MAX_SHARD_BYTES",
           "DEFAULT_ROWS_PER_GROUP", "EDIT_RATING_TASK_CATEGORIES", "HubPushError", "HubPushUnavailableError",
           "OutputExistsError", "check_hub_push", "dataset_card_data", "features_yaml", "format_bytes",
           "hub_is_offline", "md_table", "parse_size", "plan_shards", "push_folder_to_hub",
           "size_arg", "size_category", "write_dataset_card", "write_parquet_split"]
