"""Run Table 3 baselines over edits and write one resumable predictions file per metric.

Every line is ``{"id", "metric", "visual_quality", "instruction_following", "attribute_preservation", "overall"}``
with the metric's value in all four score keys (the paper correlates one value with each dimension), as ``miescore
benchmark mie-bench --predictions`` reads it; a non-finite value is written as ``null``. A single-source evaluator
(:mod:`.scorers`, ``evaluator=``) writes the keys it gives, each averaged over the edit's sources.

Resuming works like ``score-batch``: lines written whole and flushed, an incomplete last line cut off, ids already
in a file skipped, an exclusive lock against a second run; a file holding another metric's predictions is refused.
An edit that cannot be read or scored is reported with its id and left out, so a rerun tries it again.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from tqdm.auto import tqdm

from ..data.schema import SCORE_KEYS
from ..hub.errors import MIEScoreInputError
from ..hub.processing_miescore import EditSample, as_edit_sample
from ..scoring.jsonl_scoring import check_output_file, read_predictions
from ..utils.output_lock import exclusive_output
from .registry import Baseline, check_weights, parse_baseline_names
from .scorers import SingleSourceEvaluator, load_scorer, per_source_scorer, resolve_device

__all__ = ["BaselinesReport", "EditError", "compute_baselines", "compute_mie_bench_baselines", "load_mie_bench_split",
           "output_paths"]

METRIC_PLACEHOLDER = "{metric}"
_FSYNC_EVERY = 32  # edits between fsyncs; a crash loses at most these (they are recomputed on the next run)
_MIE_COLUMNS = ("id", "source_images", "edited_image", "instruction")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass
class EditError:
    id: str
    metric: str
    message: str

    def __str__(self):
        return f"edit '{self.id}', {self.metric}: {self.message}"


@dataclass
class BaselinesReport:
    outputs: dict[str, Path] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    skipped_existing: dict[str, int] = field(default_factory=dict)
    errors: list[EditError] = field(default_factory=list)
    repaired: list[Path] = field(default_factory=list)


def output_paths(out, names: list[str]) -> dict[str, Path]:
    """``{metric: file}``: ``out`` itself for one metric, ``out`` with ``{metric}`` filled in for several."""
    text = os.fspath(out)
    if METRIC_PLACEHOLDER not in text:
        if len(names) > 1:
            raise MIEScoreInputError(
                f"{len(names)} metrics need one predictions file each: put {METRIC_PLACEHOLDER} in the output "
                f"path, e.g. '{Path(text).with_name(Path(text).stem + '-' + METRIC_PLACEHOLDER + '.jsonl')}'")
        return {names[0]: Path(text)}
    return {name: Path(text.replace(METRIC_PLACEHOLDER, name)) for name in names}


class _MetricOutput:
    """One metric's predictions file, locked and open for appending; ``done`` holds the ids already in it."""

    def __init__(self, name: str, path: Path, report: BaselinesReport, log: Callable[[str], None]):
        self.name, self.path, self.report, self.log = name, path, report, log
        self.done: set[str] = set()
        self._stack = contextlib.ExitStack()
        self._handle = None
        self._unsynced = 0

    def __enter__(self) -> Self:
        try:
            self._stack.enter_context(exclusive_output(self.path, "--out"))
            records, repaired = read_predictions(self.path)
            for raw in records.values():
                metric = json.loads(raw).get("metric")
                if metric != self.name:
                    raise MIEScoreInputError(
                        f"'{self.path}' holds predictions of {repr(metric) if metric else 'another evaluator'}, "
                        f"not of {self.name}; choose another output path or move that file")
            self._handle = self._stack.enter_context(open(self.path, "a", encoding="utf-8"))
            self._stack.callback(self.sync)
        except BaseException:
            self._stack.close()  # releases the lock
            raise
        if repaired:
            self.report.repaired.append(self.path)
            self.log(f"note: removed an incomplete last line from '{self.path}' (left by an interrupted run)")
        self.done = set(records)
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def write(self, sample_id: str, value: float | dict) -> None:
        scores = value if isinstance(value, dict) else {k: value for k in SCORE_KEYS}
        scores = {k: (v if math.isfinite(v) else None) for k, v in scores.items()}
        self._handle.write(json.dumps({"id": sample_id, "metric": self.name, **scores}) + "\n")
        self._handle.flush()
        self.done.add(sample_id)
        self._unsynced += 1
        if self._unsynced >= _FSYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        if self._handle is not None and not self._handle.closed and self._unsynced:
            os.fsync(self._handle.fileno())
            self._unsynced = 0


def _is_fatal(err: BaseException) -> bool:
    """Errors about the machine, not the edit: they stop the run."""
    return isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError"


def _sample_id(sample, position: int) -> str:
    sample_id = sample.get("id") if isinstance(sample, dict) else getattr(sample, "id", None)
    if sample_id is None or sample_id == "" or isinstance(sample_id, bool):
        raise MIEScoreInputError(f"edit {position} has no id; give every edit an 'id' (the dataset's id column)")
    return str(sample_id)


def _decoded(image):
    """Image bytes (as read from a dataset) opened with Pillow; anything else as it is."""
    if isinstance(image, (bytes, bytearray)):
        from PIL import Image

        return Image.open(io.BytesIO(image))
    return image


def _load(sample, sample_id: str) -> EditSample:
    """The edit with RGB PIL images (paths, arrays, PIL images and image bytes are accepted)."""
    edit = as_edit_sample(sample, where=f"edit '{sample_id}'")
    return EditSample(sources=[_decoded(s) for s in edit.sources], edited=_decoded(edit.edited),
                      instruction=edit.instruction, id=sample_id).load()


class _Run:
    """One pass over the edits: the metrics still missing for an edit are computed and written."""

    def __init__(self, scorers: dict[str, Callable], outputs: dict[str, _MetricOutput], report: BaselinesReport,
                 log: Callable[[str], None]):
        self.scorers, self.outputs, self.report, self.log = scorers, outputs, report, log
        self.seen: set[str] = set()

    def fail(self, sample_id: str, names: list[str], err: BaseException) -> None:
        if _is_fatal(err):
            raise err
        message = str(err) if isinstance(err, MIEScoreInputError) else f"{type(err).__name__}: {err}"
        for name in names:
            error = EditError(sample_id, name, message)
            self.report.errors.append(error)
            self.log(f"skipped {error}")

    def edit(self, position: int, sample) -> None:
        sample_id = _sample_id(sample, position)
        if sample_id in self.seen:
            raise MIEScoreInputError(f"edit {position}: duplicate id '{sample_id}'; ids must be unique")
        self.seen.add(sample_id)
        todo = [name for name, out in self.outputs.items() if sample_id not in out.done]
        for name in self.outputs:
            if name not in todo:
                self.report.skipped_existing[name] += 1
        if not todo:
            return
        try:
            loaded = _load(sample, sample_id)
        except Exception as err:  # noqa: BLE001 - an unreadable edit is reported with its id
            self.fail(sample_id, todo, err)
            return
        for name in todo:
            try:
                value = self.scorers[name](loaded)
            except Exception as err:  # noqa: BLE001 - attributed to this edit and metric
                self.fail(sample_id, [name], err)
                continue
            values = value.values() if isinstance(value, dict) else [value]
            if not all(math.isfinite(v) for v in values):
                self.log(f"note: edit '{sample_id}', {name}: the value is {value}; written as null")
            self.outputs[name].write(sample_id, value)
            self.report.written[name] += 1


@dataclass
class _Plan:
    """What a run needs once every up-front check has passed."""

    baselines: list[Baseline]
    paths: dict[str, Path]
    weights: dict[str, list]
    device: object
    evaluator: SingleSourceEvaluator | None = None

    def scorers(self) -> dict[str, Callable]:
        """Each output's scorer of loaded edits (the metrics load their weights here)."""
        if self.evaluator is not None:
            return {self.evaluator.name: per_source_scorer(self.evaluator)}
        return {b.name: load_scorer(b, self.device, self.weights[b.name]) for b in self.baselines}


def _plan(metrics, out, device: str, evaluator: SingleSourceEvaluator | None = None) -> _Plan:
    """Every check that needs no edit: names, output paths, weights files, device (nothing is written yet).
    With ``evaluator`` (a single-source evaluator, already loaded) ``metrics`` must be empty."""
    if evaluator is not None:
        if metrics:
            raise MIEScoreInputError("give either metrics (--metrics) or a single-source evaluator (--evaluator)")
        paths = output_paths(out, [evaluator.name])
        for path in paths.values():
            check_output_file(path)
        return _Plan([], paths, {}, None, evaluator)
    baselines = parse_baseline_names(metrics if isinstance(metrics, str) else ",".join(metrics))
    paths = output_paths(out, [b.name for b in baselines])
    weights = check_weights(baselines)
    torch_device = resolve_device(device)
    for path in paths.values():
        check_output_file(path)
    return _Plan(baselines, paths, weights, torch_device)


def _run(plan: _Plan, select: Callable[[dict[str, _MetricOutput]], tuple[Iterable, int | None, int]],
         progress: bool, log: Callable[[str], None]) -> BaselinesReport:
    """Lock the outputs, load the metrics, then go through the edits that ``select(outputs)`` returns with their
    count (for the progress bar) and the number of edits it left out because every output already has them."""
    paths = plan.paths
    report = BaselinesReport(outputs=paths, written={n: 0 for n in paths}, skipped_existing={n: 0 for n in paths})
    with contextlib.ExitStack() as stack:
        outputs = {name: stack.enter_context(_MetricOutput(name, path, report, log)) for name, path in paths.items()}
        edits, total, left_out = select(outputs)
        for name in report.skipped_existing:
            report.skipped_existing[name] += left_out
        run = _Run(plan.scorers(), outputs, report, log)
        with tqdm(total=total, desc="baselines", unit="edit", file=sys.stderr, disable=not progress) as bar:
            for position, sample in enumerate(edits):
                run.edit(position, sample)
                bar.update(1)
    return report


def compute_baselines(edits: Iterable, metrics, out, *, device: str = "auto", progress: bool = True,
                      log: Callable[[str], None] = _stderr,
                      evaluator: SingleSourceEvaluator | None = None) -> BaselinesReport:
    """Compute ``metrics`` for every edit and append one line per edit to each metric's predictions file.

    Args:
        edits: dicts ``{"id", "sources": [...], "edited", "instruction"}`` or
            :class:`~modeling_miescore.hub.processing_miescore.EditSample` objects with an id; images are paths,
            PIL images or arrays.
        metrics: names from :data:`~modeling_miescore.baselines.registry.BASELINES`, as a list or ``"a,b"``.
        out: the predictions file; with several metrics a path containing ``{metric}``.
        device: ``"auto"`` (cuda when available), ``"cpu"``, ``"cuda:1"``, ...

    Ids already in a file are skipped (resume). Weights are checked before anything runs
    (:class:`~modeling_miescore.baselines.registry.WeightsMissingError` names each missing file). ``evaluator``
    (with ``metrics`` empty): a single-source evaluator (:mod:`.scorers`) instead of the Table 3 metrics.
    """
    plan = _plan(metrics, out, device, evaluator)

    def select(outputs):
        return edits, (len(edits) if hasattr(edits, "__len__") else None), 0

    return _run(plan, select, progress, log)


def load_mie_bench_split(dataset, split: str):
    """A MIE-Bench split (``datasets.load_dataset``) from a local folder or Hub repo id, with one-line errors."""
    try:
        import datasets
    except ImportError:
        raise MIEScoreInputError("reading MIE-Bench needs the data extra: pip install 'miescore[data]'") from None
    path = Path(os.fspath(dataset)).expanduser()
    if path.is_file():
        raise MIEScoreInputError(f"dataset '{dataset}' is a file; pass the dataset folder (README.md + data/)")
    try:
        ds = datasets.load_dataset(str(path) if path.exists() else os.fspath(dataset), split=split)
    except Exception as err:  # noqa: BLE001 - datasets raises many types for unusable folders and bad splits
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise MIEScoreInputError(f"cannot load split '{split}' of dataset '{dataset}' ({type(err).__name__}: "
                                 f"{first}); pass a folder written by 'miescore build-dataset mie-bench' or a "
                                 "reachable Hub repo id, and one of its splits") from None
    missing = [c for c in _MIE_COLUMNS if c not in ds.column_names]
    if missing:
        raise MIEScoreInputError(f"split '{split}' of '{dataset}' lacks column(s) {', '.join(missing)}; is it a "
                                 "MIE-Bench dataset (built with 'miescore build-dataset mie-bench')?")
    return ds


def _image_entry(entry: dict):
    """A ``datasets`` image entry read without decoding (``{"bytes", "path"}``): its bytes, else its path."""
    if entry.get("bytes") is not None:
        return entry["bytes"]
    if entry.get("path"):
        return entry["path"]
    raise MIEScoreInputError("an image of this edit has neither bytes nor a path in the dataset")


def _mie_bench_rows(ds, indices: list[int]) -> Iterator[dict]:
    """The edits at ``indices`` with their images as bytes: they are decoded per edit in the run, so a corrupt
    image fails only its own edit."""
    from datasets import Image, List

    raw = (ds.select_columns(list(_MIE_COLUMNS)).select(indices)
           .cast_column("edited_image", Image(decode=False))
           .cast_column("source_images", List(Image(decode=False))))
    for row in raw:
        yield {"id": str(row["id"]), "sources": [_image_entry(e) for e in row["source_images"]],
               "edited": _image_entry(row["edited_image"]), "instruction": row["instruction"]}


def compute_mie_bench_baselines(dataset, split: str, metrics, out, *, device: str = "auto", progress: bool = True,
                                log: Callable[[str], None] = _stderr,
                                evaluator: SingleSourceEvaluator | None = None) -> BaselinesReport:
    """:func:`compute_baselines` over a MIE-Bench split (a folder from ``miescore build-dataset`` or a Hub repo
    id); only the edits still missing from some output are decoded."""
    plan = _plan(metrics, out, device, evaluator)
    ds = load_mie_bench_split(dataset, split)

    def select(outputs):
        ids = [str(i) for i in ds["id"]]
        needed = [i for i, sid in enumerate(ids) if any(sid not in o.done for o in outputs.values())]
        return _mie_bench_rows(ds, needed), len(needed), len(ids) - len(needed)

    return _run(plan, select, progress, log)
