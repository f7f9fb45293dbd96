"""The rows of a converted editor benchmark: metadata as a frame (images never decoded), the ``--language`` /
``--category`` selection, the source images written once as files for the judges, and an editor's outputs
(``--edits``) matched to those rows (:func:`resolve_edits`). Accepted forms of ``--edits``:

* a folder of ``<key>.png`` (or ``.jpg`` / ``.jpeg`` / ``.webp``; ImgEdit's ``basic_bench.py`` reads
  ``<result_img_folder>/<key>.png``);
* GEdit's own layout, ``fullset/<task_type>/<language>/<key>.png`` (Step1X-Edit ``GEdit-Bench/
  generate_image_example.py``); the ``<key>_SRCIMG.png`` files beside the edits are the saved sources and are skipped;
* in both folder forms, ``<key>_sample<k>.png`` is sample ``k`` of a key (EditScore's best-of-N layout,
  ``examples/OmniGen2-RL/evaluation/GEdit-Bench``: sample 0 is ``<key>.png``);
* a JSONL of ``{"id": "<key>", "edited": "path"}`` lines, which includes what ``miescore edit`` writes (with several
  samples per key, ids ``<key>#<k>``; with ``--select``, every candidate is a sample of the key, the selected one
  marked, so a report can compare the first sample, the selected one and the judge's own best of N).

Edits named by keys the benchmark lacks are an error that lists them (exit status 2), and so are two files for
one (row, sample) and, when the selection holds one key in two languages, a bare ``<key>.png``. Edits of rows
outside the selection are counted and left out; selected rows without any edit are listed as missing.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from ...data.converters.converted_card import read_benchmark_metadata
from ...data.converters.schema import EDITING_COLUMNS, SPLIT
from ...data.dataset_splits import load_split
from ...data.errors import EXAMPLES, BenchmarkInputError
from ...data.input_export import safe_file_name, store_image
from .protocols import EditorBenchmark

__all__ = ["EditRef", "EditingRows", "ResolvedEdits", "export_sources", "load_editing_rows", "resolve_edits",
           "select_rows"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
_SAMPLE_NAME = re.compile(r"^(?P<name>.+)_sample(?P<k>\d+)$")


@dataclass
class EditingRows:
    """A benchmark's rows: ``frame`` (index ``id``; ``key``, ``instruction``, ``category``, ``language`` and the
    subset flags), the loaded split ``ds`` (for the source images) and which part or version of the release was
    converted (``release``, from the card; e.g. ImgEdit's ``basic_edit.json`` version)."""

    dataset: str
    benchmark: EditorBenchmark
    frame: object
    ds: object
    flags: tuple[str, ...]
    release: str = ""


def load_editing_rows(dataset: str, benchmark: EditorBenchmark) -> EditingRows:
    """Open ``dataset`` (a folder or Hub repo from ``miescore convert-benchmark <benchmark.dataset>``)."""
    import pandas as pd

    metadata = read_benchmark_metadata(dataset)
    if metadata is None or "editing" not in metadata.get("kinds", []):
        raise BenchmarkInputError(
            f"dataset '{dataset}' is not a converted editor benchmark (its README.md has no miescore_benchmark block "
            f"with an editing config); make it with 'miescore convert-benchmark {benchmark.dataset}'")
    if metadata.get("name") != benchmark.dataset:
        raise BenchmarkInputError(f"dataset '{dataset}' is {metadata.get('name')!r}, not {benchmark.dataset!r}; "
                                  f"'miescore benchmark {benchmark.name}' evaluates {benchmark.title}")
    ds = load_split(dataset, SPLIT, "editing")
    flags = tuple(metadata.get("subset_flags", []))
    missing = [c for c in (*EDITING_COLUMNS, *flags) if c not in ds.column_names]
    if missing:
        raise BenchmarkInputError(f"dataset '{dataset}' lacks column(s) {', '.join(missing)} of an editing config; "
                                  "convert the release again")
    columns = [c for c in (*EDITING_COLUMNS, *flags) if c != "source_images"]
    frame = pd.DataFrame({c: ds[c] for c in columns}).astype({"id": str, "key": str}).set_index("id", drop=False)
    return EditingRows(dataset, benchmark, frame, ds, flags, str(metadata.get("release_part", "")))


def _pick(frame, column: str, wanted: Sequence[str] | None, option: str):
    if not wanted:
        return frame
    available = sorted(set(frame[column]))
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise BenchmarkInputError(f"{option} {', '.join(unknown)} matches no row; the dataset has "
                                  f"{', '.join(available) or 'none'}")
    return frame[frame[column].isin(list(wanted))]


def select_rows(rows: EditingRows, languages: Sequence[str] | None = None,
                categories: Sequence[str] | None = None):
    """The rows of the given languages and categories (all when None); a value that matches no row is an error
    naming the values the dataset has."""
    frame = _pick(rows.frame, "language", languages, "--language")
    frame = _pick(frame, "category", categories, "--category")
    if frame.empty:
        raise BenchmarkInputError(f"no row has language {', '.join(languages or ['*'])} and category "
                                  f"{', '.join(categories or ['*'])} together; check the filters")
    return frame


def export_sources(rows: EditingRows, ids: Sequence[str], folder: Path, progress: bool = False) -> dict[str, list]:
    """Write the source images of rows ``ids`` into ``folder/images/`` (original bytes, each once); returns
    ``{id: [path, ...]}`` with paths relative to ``folder`` (where the judges' input JSONL lives)."""
    from datasets import Image, List  # deferred: loads pyarrow

    wanted = set(ids)
    positions = [i for i, row_id in enumerate(rows.frame["id"]) if row_id in wanted]
    raw = rows.ds.select(positions).select_columns(["id", "source_images"]).cast_column(
        "source_images", List(Image(decode=False)))
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    out: dict[str, list] = {}
    for row in tqdm(raw, total=len(raw), desc="export sources", unit="row", file=sys.stderr, leave=False,
                    disable=not progress):
        stem = safe_file_name(str(row["id"]))
        out[str(row["id"])] = [store_image(e, images, f"{stem}_s{k + 1}") for k, e in enumerate(row["source_images"])]
    lost = wanted - {i for i, paths in out.items() if paths}
    if lost:
        raise BenchmarkInputError(f"{len(lost)} rows have no source image in the dataset, e.g. "
                                  f"{', '.join(sorted(lost)[:EXAMPLES])}")
    return out


@dataclass(frozen=True)
class EditRef:
    """One edited image: ``sample`` ``k`` of row ``row`` at ``path``; ``input_id`` = ``"<row>#<k>"``;
    ``selected``: the sample a reward selected among the key's candidates (``miescore edit --select``)."""

    row: str
    sample: int
    path: Path
    selected: bool = False

    @property
    def input_id(self) -> str:
        return f"{self.row}#{self.sample}"


@dataclass
class ResolvedEdits:
    """The edits of the selected rows (row order, then sample), the selected rows without one (``missing``), and
    how many edits belong to rows outside the selection (``outside_selection``); ``selector``: the reward that
    selected one sample per key (``miescore edit --select``), None when the edits hold no selection."""

    edits: list[EditRef]
    missing: list[str]
    outside_selection: int = 0
    form: str = ""
    problems: list[str] = field(default_factory=list)
    selector: str | None = None


class _Rows:
    """Name -> row id lookups over every row of the dataset (``all_rows``), preferring the ``selected`` ones."""

    def __init__(self, all_rows, selected):
        self.language = dict(zip(all_rows["id"], all_rows["language"]))
        self.category = dict(zip(all_rows["id"], all_rows["category"]))
        self.selected = set(selected["id"])
        self.by_key: dict[str, list[str]] = {}
        for row_id, key in zip(all_rows["id"], all_rows["key"]):
            self.by_key.setdefault(key, []).append(row_id)

    def match(self, name: str, language: str | None = None) -> str:
        """The row id ``name`` names; ``BenchmarkInputError`` with the reason when none or several do."""
        if name in self.language and language in (None, self.language[name]):
            return name
        candidates = [r for r in self.by_key.get(name, []) if language in (None, self.language[r])]
        if not candidates:
            raise LookupError("unknown")
        chosen = [r for r in candidates if r in self.selected] or candidates
        if len(chosen) > 1:
            raise LookupError(f"ambiguous: key {name!r} is in languages {', '.join(self.language[r] for r in chosen)}"
                              "; use GEdit's layout fullset/<task>/<language>/<key>.png or the row ids")
        return chosen[0]


def _split_sample(stem: str) -> tuple[str, int]:
    match = _SAMPLE_NAME.match(stem)
    return (match["name"], int(match["k"])) if match else (stem, 0)


def _folder_entries(root: Path) -> tuple[str, list[tuple[str, str, int, str | None, str | None]]]:
    """``(form, [(where, name, sample, language, task, selected)])`` of the image files of an edits folder."""
    layout = root if root.name == "fullset" else root / "fullset"
    entries = []
    if layout.is_dir():
        for path in sorted(layout.glob("*/*/*")):
            if path.suffix.lower() in IMAGE_SUFFIXES and not path.stem.endswith("_SRCIMG") and path.is_file():
                name, k = _split_sample(path.stem)
                entries.append((str(path), name, k, path.parent.name, path.parent.parent.name, False))
        return "GEdit layout fullset/<task>/<language>/<key>.png", entries
    for path in sorted(root.iterdir()):
        if path.suffix.lower() in IMAGE_SUFFIXES and not path.stem.endswith("_SRCIMG") and path.is_file():
            name, k = _split_sample(path.stem)
            entries.append((str(path), name, k, None, None, False))
    return "folder of <key>.png", entries


def _edited_path(value, where: str, base: Path) -> str:
    if not isinstance(value, str):
        raise BenchmarkInputError(f"{where}: edited must be an image path, got {value!r}")
    edited = Path(value).expanduser()
    edited = edited if edited.is_absolute() else base / edited
    if not edited.is_file():
        raise BenchmarkInputError(f"{where}: edited image '{edited}' is not a file")
    return str(edited)


def _sample_number(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BenchmarkInputError(f"{where}: sample must be an integer >= 0, got {value!r}")
    return value


def _candidate_entries(record: dict, name: str, where: str, base: Path) -> list:
    """The samples of a ``miescore edit --select`` line: every candidate, the selected one marked."""
    candidates = record["candidates"]
    if not isinstance(candidates, list) or not candidates or not all(isinstance(c, dict) for c in candidates):
        raise BenchmarkInputError(f'{where}: candidates must be a list of {{"sample", "edited"}} objects')
    selected = _sample_number(record.get("sample"), where)
    samples = [_sample_number(c.get("sample"), f"{where}: candidate") for c in candidates]
    if selected not in samples or len(set(samples)) != len(samples):
        raise BenchmarkInputError(f"{where}: the selected sample {selected} must be one of the candidates' samples "
                                  f"{samples}, each once")
    return [(_edited_path(c.get("edited"), f"{where}: candidate {k}", base), name, k, None, None, k == selected)
            for c, k in zip(candidates, samples)]


def _jsonl_entries(path: Path) -> tuple[list[tuple], str | None]:
    """``(entries, selector)`` of a JSONL of edits; ``selector``: the reward named by ``selected_by`` (every line
    with candidates must name the same one)."""
    entries, selectors, plain = [], set(), 0
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise BenchmarkInputError(f"{where}: not a JSON line ({err}); expected "
                                      '{"id": "<key>", "edited": "path"}') from None
        if not isinstance(record, dict) or not isinstance(record.get("edited"), str) or not (
                isinstance(record.get("id"), (str, int)) or isinstance(record.get("key"), (str, int))):
            raise BenchmarkInputError(f'{where}: expected {{"id": "<key>", "edited": "path"}} (optional "key", '
                                      f'"sample"), got {raw[:120].decode("utf-8", "replace")}')
        name, k = str(record.get("key", record.get("id"))), 0
        if "key" not in record and "#" in name and name.rsplit("#", 1)[1].isdigit():
            name, k = name.rsplit("#", 1)[0], int(name.rsplit("#", 1)[1])
        if "candidates" in record:
            entries += _candidate_entries(record, name, where, path.parent)
            selectors.add(str(record.get("selected_by") or "a reward"))
            continue
        sample = _sample_number(record.get("sample", k), where)
        plain += 1
        entries.append((_edited_path(record["edited"], where, path.parent), name, sample, None, None, False))
    if len(selectors) > 1:
        raise BenchmarkInputError(f"'{path}' mixes edits selected by {', '.join(sorted(selectors))}; pass the output "
                                  "of one 'miescore edit --select' run")
    if selectors and plain:
        raise BenchmarkInputError(f"'{path}' mixes lines with candidates (miescore edit --select) and lines without; "
                                  "pass the output of one run")
    return entries, (selectors.pop() if selectors else None)


def _raise_listed(what: str, items: list[str], hint: str) -> None:
    shown = ", ".join(items[:EXAMPLES]) + (f" and {len(items) - EXAMPLES} more" if len(items) > EXAMPLES else "")
    raise BenchmarkInputError(f"{len(items)} {what}: {shown}; {hint}")


def resolve_edits(edits: str, all_rows, selected) -> ResolvedEdits:
    """Match ``--edits`` (module docstring) to the rows: ``all_rows`` is every row of the dataset, ``selected`` the
    rows being evaluated (frames with ``id``, ``key``, ``language``, ``category``)."""
    path = Path(edits).expanduser()
    selector = None
    if path.is_dir():
        form, entries = _folder_entries(path)
    elif path.is_file():
        (entries, selector), form = _jsonl_entries(path), "JSONL"
    else:
        raise BenchmarkInputError(f"--edits '{edits}' is neither a folder nor a JSONL file")
    if not entries:
        raise BenchmarkInputError(f"--edits '{edits}' holds no edited image (expected <key>.png files, GEdit's "
                                  "fullset/<task>/<language>/<key>.png, or JSONL lines {\"id\", \"edited\"})")
    rows = _Rows(all_rows, selected)
    found: dict[tuple[str, int], str] = {}
    chosen_samples: set[tuple[str, int]] = set()
    unknown, ambiguous, duplicates, misfiled = [], [], [], []
    for where, name, sample, language, task, is_selected in entries:
        try:
            row = rows.match(name, language)
        except LookupError as err:
            if str(err) == "unknown":
                unknown.append(where)
            else:
                ambiguous.append(f"{Path(where).name} ({err})")
            continue
        if task is not None and task != rows.category[row]:
            misfiled.append(f"{where} (the benchmark files key {name!r} under {rows.category[row]!r})")
        elif (row, sample) in found:
            duplicates.append(f"{where} and {found[(row, sample)]}")
        else:
            found[(row, sample)] = where
            if is_selected:
                chosen_samples.add((row, sample))
    if unknown:
        _raise_listed("edits name keys the benchmark lacks", unknown,
                      f"the dataset's keys look like {next(iter(rows.by_key))!r}; check --edits and --dataset")
    for what, items in (("edits are ambiguous", ambiguous), ("edits are filed under the wrong task type", misfiled),
                        ("pairs of files are edits of the same row and sample", duplicates)):
        if items:
            _raise_listed(what, items, "rename or remove them")
    order = {row_id: i for i, row_id in enumerate(selected["id"])}
    chosen = sorted((k for k in found if k[0] in order), key=lambda k: (order[k[0]], k[1]))
    refs = [EditRef(row, sample, Path(found[(row, sample)]).resolve(), (row, sample) in chosen_samples)
            for row, sample in chosen]
    have = {r.row for r in refs}
    form += f" (one sample per key selected by {selector})" if selector else ""
    return ResolvedEdits(refs, [r for r in selected["id"] if r not in have], len(found) - len(refs), form,
                         selector=selector)
