"""Write benchmark reports: ``report.json`` (every number with its CI), ``report.md`` (tables laid out like
the papers' tables, ready to paste) and ``report.html`` (the same page with its plots embedded).

Input: a report dict (:mod:`.mie_bench_report`, :mod:`.mer_bench_report`, :mod:`.editing_models_report`, an editor
benchmark's run or comparison), optionally with ``report["plots"] = {name: relative PNG path}`` and
``report["run"]`` (dataset, split, predictions / model). Metrics are ``{"value", "ci": [low, high]}``. Files are
written atomically (:mod:`modeling_miescore.utils.atomic_files`): a crash never leaves half a report. A report's
``protocol`` (:mod:`.protocol`: the settings that decide its numbers and their fingerprint) heads its Markdown,
which the renderer of its kind writes (:func:`report_renderer`) from the parts in :mod:`.report_parts`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..utils.atomic_files import write_text_atomic
from ..utils.import_spec import import_attribute
from ..data.errors import BenchmarkInputError
from .protocol import with_protocol_header
from .report_html import render_html
from ..data.converters import editor_protocols

__all__ = ["REPORT_FILES", "REPORT_KINDS", "as_json", "render_markdown", "report_renderer", "write_benchmarks_report",
           "write_json", "write_report"]

# The Markdown renderer of each report kind that is not an editor benchmark's run (``module:function``, relative
# to this package, imported when a report of that kind is rendered).
REPORT_KINDS = {
    "mie-bench": ".mie_bench_report:mie_bench_markdown",
    "mer-bench": ".mer_bench_report:mer_bench_markdown",
    "editing-models": ".editing_models_report:editing_models_markdown",
    "editors": ".editor_benchmarks.editor_report:comparison_markdown",  # ``miescore benchmark editors``
}


# The files a report writes into its folder (an input file must be none of them: it would be overwritten).
REPORT_FILES = ("report.json", "report.md", "report.html")


def _clean(obj: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so the JSON is strict (no NaN tokens)."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def as_json(data: Any) -> Any:
    """``data`` as ``report.json`` holds it (:func:`write_json`'s cleaning and a JSON round trip)."""
    return json.loads(json.dumps(_clean(data), allow_nan=False))


def write_json(path, data: dict) -> Path:
    """Write ``data`` as strict JSON (NaN/inf as null), atomically."""
    return write_text_atomic(path, json.dumps(_clean(data), indent=2, allow_nan=False) + "\n")


def write_benchmarks_report(out_dir, kind: str, results: list[dict], *, row_name: str, run: dict | None,
                            published: dict, markdown: Callable[[dict], str],
                            protocol: dict | None = None) -> tuple[Path, Path]:
    """``report.json`` + ``report.md`` (rendered by ``markdown``) of a run over several benchmarks: ``results``
    (one dict per benchmark, each benchmark at most once) keyed by their ``"benchmark"`` next to the
    ``published`` rows they are compared with."""
    by_name = {}
    for result in results:
        if result["benchmark"] in by_name:
            raise BenchmarkInputError(f"{result['benchmark']} was given twice; pass each benchmark once")
        by_name[result["benchmark"]] = result

    report = {"benchmark": kind, "row_name": row_name, "results": by_name, "published": published, "run": run or {}}
    if protocol is not None:
        report["protocol"] = protocol
    out = Path(out_dir)
    return (write_json(out / "report.json", report),
            write_text_atomic(out / "report.md", with_protocol_header(markdown(report), protocol)))


def write_report(out_dir, report: dict) -> tuple[Path, Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out_dir``; returns the JSON and Markdown
    paths (the HTML page is ``out_dir/report.html``: the Markdown with its plots embedded, :mod:`.report_html`).

    Markdown and HTML are rendered before any file is written, so a report that cannot be rendered (or whose
    plots are missing) leaves all three files as they were.
    """
    out = Path(out_dir)
    markdown = render_markdown(report)
    page = render_html(markdown, out)
    paths = write_json(out / "report.json", report), write_text_atomic(out / "report.md", markdown)
    write_text_atomic(out / "report.html", page)
    return paths


def report_renderer(kind: str) -> Callable[[dict], str]:
    """The Markdown renderer of reports of ``kind``: a :data:`REPORT_KINDS` entry, or the renderer an editor
    benchmark's protocol declares (``gedit``, ``imgedit``: ``EditorBenchmark.report``)."""
    if kind in REPORT_KINDS:
        return import_attribute(REPORT_KINDS[kind], __package__)

    protocols = editor_protocols()
    if kind in protocols:
        return protocols[kind].report_renderer()
    raise ValueError(f"unknown report kind {kind!r}; known: {', '.join([*REPORT_KINDS, *protocols])}")


def render_markdown(report: dict) -> str:
    """The Markdown of a report dict, by its ``benchmark`` kind (:func:`report_renderer`), headed (below its title)
    by the protocol's fingerprint and the settings that differ from the released protocol
    (:func:`~.protocol.protocol_header`)."""
    return with_protocol_header(report_renderer(report.get("benchmark"))(report), report.get("protocol"))
