"""Load MIE-Bench / MER-Bench dataset splits and turn them into per-item metadata frames (images never decoded).

:func:`load_split` wraps ``datasets.load_dataset`` with one-line errors for the usual mistakes;
:func:`mie_bench_frame` gives one row per edited image, :func:`mer_bench_frame` one row per K-pair group.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from .schema import MOS_COLUMN_OF, MOS_COLUMNS, TASK_CATEGORY
from .errors import EXAMPLES, BenchmarkInputError

__all__ = ["load_split", "mer_bench_frame", "mer_split_names", "mie_bench_frame", "ordered_labels", "split_names"]


def _looks_like_repo(ref: str) -> bool:
    return ref.count("/") == 1 and not ref.startswith((".", "/", "~")) and all(ref.split("/"))


def _dataset_ref(dataset: str) -> str:
    """What ``datasets`` loads for ``--dataset``: an existing folder (as a path) or a Hub repo id."""
    path = Path(dataset).expanduser()
    if not path.exists():
        if not _looks_like_repo(dataset):
            raise BenchmarkInputError(
                f"dataset '{dataset}' is not a folder and not a Hub repo id (user/name); check the path"
            )
        return dataset
    if not path.is_dir():
        raise BenchmarkInputError(f"dataset '{dataset}' is a file; pass the dataset folder (with README.md + data/)")
    return str(path)


def _cannot_load(dataset: str, err: Exception) -> BenchmarkInputError:
    first = str(err).splitlines()[0] if str(err) else ""
    hint = ("; pass a local folder written by 'miescore build-dataset' or a reachable Hub repo id"
            if isinstance(err, OSError) else "")
    return BenchmarkInputError(f"cannot load dataset '{dataset}' ({type(err).__name__}: {first}){hint}")


def load_split(dataset: str, split: str, config: str | None = None):
    """``datasets.load_dataset(dataset, config, split=split)`` with one-line errors for the usual mistakes.

    ``dataset``: a local Hub-native folder (Parquet + README) or a Hub repo id (``user/name``); ``config``: the
    dataset config (``None``: the default one).
    """
    import datasets

    ref = _dataset_ref(dataset)
    try:
        return datasets.load_dataset(ref, config, split=split)
    except ValueError as err:
        if "split" in str(err).lower():
            try:
                names = datasets.get_dataset_split_names(ref)
            except Exception:  # noqa: BLE001 - only used to improve the message
                names = []
            hint = f"; available: {', '.join(names)}" if names else ""
            raise BenchmarkInputError(f"dataset '{dataset}' has no split '{split}'{hint}") from None
        raise BenchmarkInputError(f"cannot load dataset '{dataset}': {err}") from None
    except Exception as err:  # noqa: BLE001 - datasets raises many types for unusable folders
        raise _cannot_load(dataset, err) from None


def split_names(dataset: str) -> set[str]:
    """The splits of ``dataset``; none when it cannot be read (:func:`load_split` then says why, in one line)."""
    import datasets

    try:
        return set(datasets.get_dataset_split_names(_dataset_ref(dataset)))
    except Exception:  # noqa: BLE001 - datasets raises many types for unusable folders
        return set()


def mer_split_names(dataset: str) -> list[str]:
    """The MER-Bench splits (``<K>pair``) that ``dataset`` has, smallest K first: the default ``--split``, so a
    build without e.g. ``3pair`` is evaluated on the splits it has."""
    import datasets

    ref = _dataset_ref(dataset)
    try:
        names = datasets.get_dataset_split_names(ref)
    except Exception as err:  # noqa: BLE001 - datasets raises many types for unusable folders
        raise _cannot_load(dataset, err) from None
    mer = sorted((n for n in names if _size_from_split(n)), key=_size_from_split)
    if not mer:
        raise BenchmarkInputError(f"dataset '{dataset}' has no MER-Bench split (2pair, 3pair, ...); its splits: "
                                  f"{', '.join(names) or 'none'}; pass --split")
    return mer


def _metadata(ds, columns: Sequence[str]):
    """The non-image columns of a ``datasets.Dataset`` as a pandas DataFrame (images are never decoded)."""
    keep = [c for c in columns if c in ds.column_names]
    return ds.select_columns(keep).to_pandas()


def _task_names(ds, values) -> list[str]:
    feature = ds.features.get("task")
    names = getattr(feature, "names", None)
    if names is not None:
        return [names[int(v)] for v in values]
    return [str(v) for v in values]


def mie_bench_frame(ds, *, require_mos: bool = True):
    """Per-edit metadata of a MIE-Bench split (no images): one row per edited image.

    Columns: ``id, instance_id, task`` (name), ``category, editing_model, num_sources`` and the available
    ``mos_*`` columns. ``require_mos=False`` accepts datasets without human scores (editing-model leaderboards).
    """
    required = ["id", "instance_id", "task", "editing_model"] + (list(MOS_COLUMNS) if require_mos else [])
    missing = [c for c in required if c not in ds.column_names]
    if missing:
        raise BenchmarkInputError(
            f"dataset split lacks column(s) {', '.join(missing)}; is it a MIE-Bench dataset "
            "(built with 'miescore build-dataset mie-bench')?"
        )
    df = _metadata(ds, ["id", "instance_id", "task", "category", "editing_model", "num_sources", *MOS_COLUMN_OF.values()])
    df["id"] = df["id"].astype(str)
    df["instance_id"] = df["instance_id"].astype(str)
    df["task"] = _task_names(ds, df["task"].tolist())
    if "category" not in df.columns:
        df["category"] = [TASK_CATEGORY.get(t, "other") for t in df["task"]]
    if "num_sources" not in df.columns:
        df["num_sources"] = -1
    if require_mos and MOS_COLUMN_OF["overall"] not in df.columns:
        from ..hub.miescore_overall import overall_score

        df[MOS_COLUMN_OF["overall"]] = overall_score(*(df[c].to_numpy() for c in MOS_COLUMNS))
    dup = df["id"][df["id"].duplicated()]
    if len(dup):
        raise BenchmarkInputError(f"dataset has {len(dup)} duplicated id(s), e.g. {', '.join(dup.head(EXAMPLES))}")
    if df.empty:
        raise BenchmarkInputError("dataset split is empty")
    return df.reset_index(drop=True)


def _size_from_split(split: str) -> int | None:
    m = re.fullmatch(r"(\d+)\s*pair", split.strip().lower())
    return int(m.group(1)) if m else None


def mer_bench_frame(splits: dict):
    """Per-group metadata of MER-Bench splits (``{"2pair": ds, ...}``), no images decoded.

    Columns: ``pair_id, split, k`` (group size), ``sample_id, category, subtask``.
    """
    import pandas as pd

    frames = []
    for name, ds in splits.items():
        missing = [c for c in ("pair_id",) if c not in ds.column_names]
        if missing or ("edited_images" not in ds.column_names and "editing_models" not in ds.column_names):
            raise BenchmarkInputError(
                f"MER-Bench split '{name}' lacks pair_id / edited_images; is it a MER-Bench dataset?"
            )
        df = _metadata(ds, ["pair_id", "sample_id", "category", "label", "subtask", "editing_models", "candidate_ids"])
        if "editing_models" in df.columns:
            df["k"] = [len(v) for v in df["editing_models"]]
        elif "candidate_ids" in df.columns:
            df["k"] = [len(v) for v in df["candidate_ids"]]
        elif _size_from_split(name):
            df["k"] = _size_from_split(name)
        else:  # count the images without decoding them
            from datasets import Image, List

            raw = ds.select_columns(["edited_images"]).cast_column("edited_images", List(Image(decode=False)))
            df["k"] = [len(v) for v in raw["edited_images"]]
        if "category" not in df.columns:
            df["category"] = df["label"] if "label" in df.columns else "all"
        if "sample_id" not in df.columns:
            df["sample_id"] = df["pair_id"]
        if "subtask" not in df.columns:
            df["subtask"] = ""
        df["split"] = name
        frames.append(df[["pair_id", "split", "k", "sample_id", "category", "subtask"]])
    df = pd.concat(frames, ignore_index=True)
    df["pair_id"] = df["pair_id"].astype(str)
    df["sample_id"] = df["sample_id"].astype(str)
    df["category"] = df["category"].astype(str)
    dup = df["pair_id"][df["pair_id"].duplicated()]
    if len(dup):
        raise BenchmarkInputError(
            f"MER-Bench has {len(dup)} duplicated pair_id(s), e.g. {', '.join(dup.head(EXAMPLES))}")
    if df.empty:
        raise BenchmarkInputError("MER-Bench splits are empty")
    return df


def ordered_labels(values, canonical: Sequence[str]) -> list[str]:
    """Distinct labels of ``values``: those in ``canonical`` first, in its (paper) order, then the rest sorted."""
    present = set(values)
    return [c for c in canonical if c in present] + sorted(present - set(canonical))
