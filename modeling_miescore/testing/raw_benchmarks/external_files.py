"""Raw releases of the external benchmarks that ship as JSON / JSON Lines / CSV files with image folders, written in
exactly those layouts from scikit-image photos, for the converter tests.

* :func:`make_raw_aurora_bench`: the pairwise ratings JSON that EditReward's ``eval_bench.py`` reads (the AURORA
  authors' own ratings file was not found; see :mod:`modeling_miescore.data.converters.aurora_bench`).
* :func:`make_raw_ebench`: LMM4Edit's ``test_{v,e,c}.json`` (JSON Lines, absolute image paths of the authors'
  machine) with the image folders.
* :func:`make_raw_ieqa`: **from the paper's description** (the IEQA release format was not found): ``ieqa.csv``.
* :func:`make_raw_mmrb2`: MMRB2's built ``edit.json`` with ``images/`` and ``input_images/``.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from .external_images import edited_version, jpeg_bytes, source_photo

__all__ = ["EBENCH_PREFIX", "make_raw_aurora_bench", "make_raw_ebench", "make_raw_ieqa", "make_raw_mmrb2"]

EBENCH_PREFIX = "/mnt/data/xzt/MM/editing_all/"
_EBENCH_QUERY = ("With the image editing prompt [{instruction}], the source image <image> is edited to generate the "
                 "target image <image>. Please rate the {what} of the target image on a scale of 0-100. Higher score "
                 "means better {what}. Just reply a sentence in the following format: [The quality score is XX.XX "
                 "(a number with two decimal)]")
_EBENCH_FILES = {"test_v.json": "visual quality", "test_e.json": "editing correspondence",
                 "test_c.json": "attribute preservation"}


def _save(root: Path, rel: str, image) -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(jpeg_bytes(image))
    return rel


def make_raw_aurora_bench(dir: str | os.PathLike, n_pairs: int = 6,
                          file: str = "valid_aurora_human_ratings_pairwise.json") -> dict:
    """A JSON array of ``{prompt, path_src, path1, path2, model1_dim1_score, model2_dim1_score}``; every third pair
    is a tie (equal scores)."""
    root = Path(dir)
    records, labels = [], []
    for i in range(n_pairs):
        source = source_photo(i)
        first, second = (2.0, 1.0) if i % 3 == 0 else (1.0, 2.0) if i % 3 == 1 else (1.5, 1.5)
        records.append({
            "prompt": f"move the camera closer in photo {i}",
            "path_src": _save(root, f"images/{i}_src.jpg", source),
            "path1": _save(root, f"images/{i}_aurora.jpg", edited_version(source, first / 2, 3 * i)),
            "path2": _save(root, f"images/{i}_pix2pix.jpg", edited_version(source, second / 2, 3 * i + 1)),
            "model1_dim1_score": first, "model2_dim1_score": second, "model1": "AURORA", "model2": "Pix2Pix"})
        labels.append("a" if first > second else "b" if first < second else "tie")
    (root / file).write_text(json.dumps(records, indent=2))
    return {"labels": labels}


def make_raw_ebench(dir: str | os.PathLike, n_edits: int = 6, prefix: str = EBENCH_PREFIX) -> dict:
    """``test_v.json``, ``test_e.json``, ``test_c.json`` (JSON Lines) naming images by absolute paths under
    ``prefix``; the images themselves are written under ``dir`` without the prefix."""
    root = Path(dir)
    lines: dict[str, list] = {name: [] for name in _EBENCH_FILES}
    truth = {}
    for i in range(n_edits):
        model, stem = f"model{i % 2:02d}", f"H_00_{i:02d}.jpg"
        source = source_photo(i)
        src = _save(root, f"sourceimg_h/{model}/{stem}", source)
        tgt = _save(root, f"targetimg_h/{model}/{stem}", edited_version(source, 0.2 + 0.12 * i, i))
        scores = {name: round(30.0 + 7.5 * i + 3.0 * k, 2) for k, name in enumerate(_EBENCH_FILES)}
        truth[tgt] = scores
        for name, what in _EBENCH_FILES.items():
            lines[name].append({"query": _EBENCH_QUERY.format(instruction=f"Add a hat to person {i}", what=what),
                                "response": f"The quality score is {scores[name]}",
                                "images": [prefix + src, prefix + tgt]})
    for name, records in lines.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"scores": truth}


def make_raw_ieqa(dir: str | os.PathLike, n_edits: int = 5) -> dict:
    """FROM THE PAPER'S DESCRIPTION (no release format found): ``ieqa.csv`` with image paths and three MOS columns."""
    root = Path(dir)
    rows = []
    for i in range(n_edits):
        source = source_photo(i)
        rows.append({"id": f"ieqa-{i}", "source_image": _save(root, f"source/{i}.jpg", source),
                     "edited_image": _save(root, f"edited/{i}.jpg", edited_version(source, 0.15 * i, 5 * i)),
                     "instruction": f"brighten photo {i}", "visual_quality": 20.0 + 10 * i,
                     "editing_alignment": 60.0 - 5 * i, "attribute_preservation": 40.0 + (i % 2) * 10,
                     "editing_model": f"editor-{i % 2}"})
    with open(root / "ieqa.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return {"rows": rows}


def make_raw_mmrb2(dir: str | os.PathLike, n_pairs: int = 6) -> dict:
    """MMRB2's built edit benchmark: ``edit.json`` (``{"pairs": [...]}``), ``images/``, ``input_images/``.

    Every third pair has two input images (a *multi*-image edit); ``chosen`` alternates A / B.
    """
    root = Path(dir)
    pairs, truth = [], []
    for i in range(n_pairs):
        n_inputs = 2 if i % 3 == 2 else 1
        inputs = [source_photo(i + 5 * k) for k in range(n_inputs)]
        pair_id = f"emu-edit_{i}_gemini-2.5-flash_{i}_gpt-image-1_{i}"
        chosen = "A" if i % 2 == 0 else "B"
        quality = {"A": 0.8, "B": 0.3} if chosen == "A" else {"A": 0.3, "B": 0.8}
        prompt = [["image", _save(root, f"input_images/in_{i}_{k}.jpg", im)] for k, im in enumerate(inputs)]
        prompt.append(["text", f"Combine the inputs of pair {i} into one poster."])
        responses = {side: {"model_name": model, "response_content": [[
            "image", _save(root, f"images/{pair_id}_{n}.jpg", edited_version(inputs[0], quality[side], 9 * i + n))]]}
            for n, (side, model) in enumerate((("A", "gemini-2.5-flash"), ("B", "gpt-image-1")))}
        pairs.append({"id": pair_id, "response_a": responses["A"], "response_b": responses["B"], "chosen": chosen,
                      "human_annotations": [5, 6, 5], "prompt_source": "emu-edit",
                      "prompt_metadata": {"id": i, "task": "global"}, "prompt_content": prompt})
        truth.append((pair_id, chosen.lower(), "multi" if n_inputs > 1 else "single"))
    (root / "edit.json").write_text(json.dumps({"pairs": pairs}, indent=2))
    return {"pairs": truth}
