"""The attention analysis report: ``metrics.json``, a Table-5-style ``table.md``, ``maps.npz`` and overlay PNGs.

``metrics.json``: ``{"entropy_gap" | "source_entropy" | "concentration" | "stability" | "edited_entropy" |
"edited_concentration": {"mean", "std", "n"}, "n": edits, "samples": [per-edit values], "settings": {...}}``
(SpatialReward sec. 5.4, Table 5; definitions in :mod:`.attention_maps`). Stability's mean and std are over the
distinct pairs of source maps, each sample's ``stability`` its mean correlation with the others; other means are
over the edits. Non-finite values are written as null.

``maps.npz`` (plain arrays, read with ``allow_pickle=False``): ``ids``, ``source_maps``, ``edited_maps``,
``num_sources`` and ``per_source_maps`` (``num_sources[i]`` maps for edit i, in order). Overlays (the ``plots``
extra; matplotlib's object API on an Agg canvas): each image with its map upsampled over it in ``jet``.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..evaluation.report_parts import new_figure
from ..utils.atomic_files import write_bytes_atomic, write_text_atomic
from ..utils.markdown_table import markdown_table
from ..utils.numbers import json_safe
from .attention_maps import SampleAttention, source_map, stability_per_sample, stability_summary, summarize
from .attention_maps import entropy

__all__ = ["METRIC_NAMES", "attention_metrics", "attention_table", "draw_attention_overlay", "overlay_file_name",
           "save_attention_maps", "write_attention_report", "write_overlay"]

METRIC_NAMES = ("entropy_gap", "source_entropy", "concentration", "stability")  # Table 5's four columns
_EXTRA_NAMES = ("edited_entropy", "edited_concentration")
_OVERLAY_ALPHA = 0.5


def attention_metrics(results: Sequence[SampleAttention], settings: dict | None = None,
                      overlays: dict[str, str] | None = None) -> dict:
    """The ``metrics.json`` content for analysed edits (see the module docstring).

    ``overlays``: ``{sample id: overlay path relative to the report folder}``, recorded per sample.
    """
    if not results:
        raise ValueError("no analysed edits to summarise")
    sources = [source_map(r.source_maps) for r in results]
    stability = stability_per_sample(sources)
    samples = []
    for result, sample_stability in zip(results, stability):
        samples.append({
            "id": result.id, **result.metrics, "stability": float(sample_stability),
            "num_sources": len(result.source_maps), "image_shares": list(result.image_shares),
            "query_tokens": len(result.query_positions), "token_selection": result.token_selection,
            "note": result.note, "overlay": (overlays or {}).get(result.id),
        })
    report = {name: stability_summary(sources) if name == "stability" else summarize(s[name] for s in samples)
              for name in (*METRIC_NAMES, *_EXTRA_NAMES)}
    report.update(n=len(results), samples=samples, settings=dict(settings or {}))
    return json_safe(report)


def _cell(summary: dict, digits: int = 2) -> str:
    if summary.get("mean") is None:
        return "n/a"
    return f"{summary['mean']:.{digits}f} ± {summary['std']:.{digits}f}"


def attention_table(rows: Sequence[tuple[str, dict]]) -> str:
    """A markdown table like the paper's Table 5: one ``(method name, metrics.json dict)`` per row."""
    header = ["Method", "N", "Balance: Gap |ΔH|", "Source awareness: Entropy H_src", "Source awareness: Conc.",
              "Stability: Corr."]
    body = [[name, metrics["n"], *(_cell(metrics[m]) for m in METRIC_NAMES)] for name, metrics in rows]
    return markdown_table(header, body, align="-rrrrr") + "\n"


def save_attention_maps(path, results: Sequence[SampleAttention]) -> Path:
    """Write the maps of analysed edits to an ``.npz`` of plain arrays (atomically; see the module docstring)."""
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        ids=np.array([str(r.id) for r in results], dtype=str),
        source_maps=np.stack([source_map(r.source_maps) for r in results]),
        edited_maps=np.stack([r.edited_map for r in results]),
        num_sources=np.array([len(r.source_maps) for r in results], dtype=np.int64),
        per_source_maps=np.stack([m for r in results for m in r.source_maps]),
    )
    return write_bytes_atomic(path, buffer.getvalue())


def overlay_file_name(sample_id, taken: set) -> str:
    """A file name for an edit's overlay: its id with unsafe characters replaced, unique among ``taken``."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(sample_id)).strip("._") or "edit"
    name, k = f"{stem[:100]}.png", 2
    while name in taken:
        name, k = f"{stem[:100]}-{k}.png", k + 1
    taken.add(name)
    return name


def draw_attention_overlay(images: Sequence, maps: Sequence[np.ndarray], titles: Sequence[str]):
    """A matplotlib ``Figure``: one panel per image with its attention map over it (``jet``, half transparent)."""
    fig = new_figure(3.2 * len(images), 3.6, dpi=100)
    axes = fig.subplots(1, len(images), squeeze=False)[0]
    for ax, image, attention, title in zip(axes, images, maps, titles):
        width, height = image.size
        ax.imshow(np.asarray(image.convert("RGB")), extent=(0, width, height, 0))
        # colour scale from 0 (not the map's minimum), so a near-uniform map looks uniform
        ax.imshow(attention, cmap="jet", alpha=_OVERLAY_ALPHA, interpolation="bilinear", vmin=0.0,
                  vmax=float(np.max(attention)), extent=(0, width, height, 0))
        ax.set_title(title, fontsize=9)
        ax.set_axis_off()
    return fig


def write_overlay(path, sample, result: SampleAttention) -> Path:
    """Draw ``result``'s maps over the loaded ``sample``'s images and write the PNG atomically."""
    images = [*sample.sources, sample.edited]
    maps = [*result.source_maps, result.edited_map]
    names = [f"source {k + 1}" for k in range(len(sample.sources))] + ["edited"]
    titles = [f"{name}: H={entropy(m):.2f}, share={share:.3f}"
              for name, m, share in zip(names, maps, result.image_shares)]
    fig = draw_attention_overlay(images, maps, titles)
    fig.suptitle(f"{result.id}: gap |ΔH|={result.metrics['entropy_gap']:.2f}", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return write_bytes_atomic(path, buffer.getvalue())


def write_attention_report(out_dir, results: Sequence[SampleAttention], settings: dict | None = None,
                           label: str = "model", overlays: dict[str, str] | None = None) -> dict:
    """Write ``metrics.json``, ``table.md`` and ``maps.npz`` into ``out_dir``; returns the metrics dict.

    Overlays are written separately (:func:`write_overlay`, while each edit's images are loaded); pass their
    relative paths as ``overlays`` to record them per sample.
    """
    out_dir = Path(out_dir)
    metrics = attention_metrics(results, settings, overlays)
    write_text_atomic(out_dir / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False, allow_nan=False)
                      + "\n")
    write_text_atomic(out_dir / "table.md", attention_table([(label, metrics)]))
    save_attention_maps(out_dir / "maps.npz", results)
    return metrics
