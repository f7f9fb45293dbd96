"""Raw releases of the external benchmarks that ship as JSON / JSON Lines files with image folders, written in exactly
those layouts from scikit-image photos, for the converter tests.

* :func:`make_raw_aurora_bench`: the pairwise ratings JSON that EditReward's ``eval_bench.py`` reads (the fields of
  the AURORA authors' own ratings file are not published; see :mod:`modeling_miescore.data.converters.aurora_bench`).
* :func:`make_raw_ebench`: LMM4Edit's ``test_{v,e,c}.json`` (JSON Lines, absolute image paths of the authors'
  machine) with the image folders.
* :func:`make_raw_ieqa`: IEQA's JSON Lines as EditHF's ``inference.py`` reads them (one line per edit and dimension).
* :func:`make_raw_mmrb2`: MMRB2's built ``edit.json`` with ``images/`` and ``input_images/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .external_images import edited_version, source_photo
from .photos import save_jpeg

__all__ = ["EBENCH_PREFIX", "make_raw_aurora_bench", "make_raw_ebench", "make_raw_ieqa", "make_raw_mmrb2"]

EBENCH_PREFIX = "/mnt/data/xzt/MM/editing_all/"
_EBENCH_QUERY = ("With the image editing prompt [{instruction}], the source image <image> is edited to generate the "
                 "target image <image>. Please rate the {what} of the target image on a scale of 0-100. Higher score "
                 "means better {what}. Just reply a sentence in the following format: [The quality score is XX.XX "
                 "(a number with two decimal)]")
_EBENCH_FILES = {"test_v.json": "visual quality", "test_e.json": "editing correspondence",
                 "test_c.json": "attribute preservation"}


def _save(root: Path, rel: str, image) -> str:
    save_jpeg(image, root / rel)
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


def make_raw_ebench(dir: str | os.PathLike, n_sources: int = 3, n_models: int = 2, prefix: str = EBENCH_PREFIX) -> dict:
    """``test_v.json``, ``test_e.json``, ``test_c.json`` (JSON Lines) naming images by absolute paths under
    ``prefix``; the images themselves are written under ``dir`` without the prefix.

    As in the release, every model folder holds its own copy of each source (``sourceimg_h/model00/H_00_01.jpg``,
    ``sourceimg_h/model01/H_00_01.jpg``, ...): ``n_sources`` instructions edited by ``n_models`` models. The truth
    holds each edit's three scores and ``groups`` (target path -> the source's file name).
    """
    root = Path(dir)
    lines: dict[str, list] = {name: [] for name in _EBENCH_FILES}
    truth, groups = {}, {}
    for s in range(n_sources):
        stem = f"H_00_{s:02d}.jpg"
        source = source_photo(s)
        for m in range(n_models):
            model, i = f"model{m:02d}", s * n_models + m
            src = _save(root, f"sourceimg_h/{model}/{stem}", source)
            tgt = _save(root, f"targetimg_h/{model}/{stem}", edited_version(source, 0.2 + 0.6 * m / n_models, i))
            scores = {name: round((20.0 + 5.5 * i + 3.0 * k) % 95, 2) for k, name in enumerate(_EBENCH_FILES)}
            truth[tgt], groups[tgt] = scores, stem
            for name, what in _EBENCH_FILES.items():
                lines[name].append({"query": _EBENCH_QUERY.format(instruction=f"Add a hat to person {s}", what=what),
                                    "response": f"The quality score is {scores[name]}",
                                    "images": [prefix + src, prefix + tgt]})
    for name, records in lines.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"scores": truth, "groups": groups}


# EditHF inference.py build_query: the three dimensions as the queries name them
_IEQA_ASPECTS = {"visual_quality": "visual quality", "editing_alignment": "editing instruction alignment",
                 "attribute_preservation": "attribute preservation"}


def ieqa_query(instruction: str, aspect: str) -> str:
    """An IEQA query as EditHF's ``build_query`` words it (dimension ``aspect`` in its "from ... aspect" clause)."""
    return (f"With the image editing prompt [{instruction}], the source image <image> is edited to generate the target "
            f"image <image>. Please rate the target image from {aspect} aspect on a scale of 0-100. Just reply a "
            "sentence in the following format: [The quality score is XX.XX (a number with two decimal)]")


def make_raw_ieqa(dir: str | os.PathLike, n_edits: int = 5, file: str = "ieqa.jsonl") -> dict:
    """IEQA as EditHF's ``inference.py`` reads it: JSON Lines ``{"images": [source, edited], "query", "response"}``,
    one line per edit and dimension (the dimension named in the query), lines of one edit not adjacent; the edits of
    two editors share each source (a copy per editor folder). The truth holds the MOS per edited-image path."""
    root = Path(dir)
    records, rows = {aspect: [] for aspect in _IEQA_ASPECTS}, []
    for i in range(n_edits):
        model, s = f"editor-{i % 2}", i // 2
        source = source_photo(s)
        src = _save(root, f"source/{model}/{s}.jpg", source)
        edited = _save(root, f"edited/{model}/ieqa-{i}.jpg", edited_version(source, 0.15 * i, 5 * i))
        mos = {"visual_quality": 20.0 + 10 * i, "editing_alignment": 60.0 - 5 * i,
               "attribute_preservation": 40.0 + (i % 2) * 10}
        instruction = f"brighten photo {s}"
        for native, aspect in _IEQA_ASPECTS.items():
            records[native].append({"images": [src, edited], "query": ieqa_query(instruction, aspect),
                                    "response": f"The quality score is {mos[native]:.2f}"})
        rows.append({"id": edited, "editing_model": model, "instruction": instruction, **mos})
    lines = [r for native in _IEQA_ASPECTS for r in records[native]]
    (root / file).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return {"rows": rows}


# The prompts of the MMRB2 fixture, as the release lays them out (benchmark/edit.json): (prompt_source, input image
# names, instruction). Two *different* multi-image prompts share the origin "new_synthetic_edit", as 684 source sets
# share 6 origins in the release.
_MMRB2_PROMPTS = (
    ("dreambench", ("dreambench_output_images_object_39.jpg",), "Take a photo of this guitar on a sandy beach."),
    ("emu-edit", ("emu-edit_images_test_global_2121.jpg",), "Fill the room with thick smoke."),
    ("new_synthetic_edit", ("dreambench_output_images_live_subject_animal_23.jpg", "dreambooth_output_images_vase.jpg",
                            "dreambench_output_images_style_09.jpg"),
     "Feature the lion from the first image near the vase from the second, in the style of the third."),
    ("new_synthetic_edit", ("dreambench_output_images_live_subject_animal_37.jpg",
                            "GPTGeminiAgent_gemini_2_5_flash_0.jpg"),
     "Combine the toucan from the first image and the orchid from the second into one poster."),
)
_MMRB2_SCHEDULE = (0, 1, 2, 1, 0, 3)  # pair i uses prompt _MMRB2_SCHEDULE[i % 6]: subsets s s m s s m


def make_raw_mmrb2(dir: str | os.PathLike, n_pairs: int = 6, multi_image_responses: int = 0) -> dict:
    """MMRB2's built edit benchmark: ``edit.json`` (``{"pairs": [...]}``), ``images/``, ``input_images/``.

    Pairs cycle through four prompts (two single-image, two multi-image prompts that share the ``prompt_source``
    ``new_synthetic_edit``), so pairs 0 and 4 share a prompt and pairs 2 and 5 share only the origin; ``chosen``
    alternates A / B. The last ``multi_image_responses`` pairs answer with two images in ``response_b``. The truth
    holds ``pairs`` (id, label, subset), ``sources`` (pair id -> its input image files, in order) and ``multi`` (ids
    of the pairs with a multi-image response).
    """
    root = Path(dir)
    pairs, truth, sources, multi = [], [], {}, []
    for i in range(n_pairs):
        prompt_index = _MMRB2_SCHEDULE[i % len(_MMRB2_SCHEDULE)]
        origin, names, instruction = _MMRB2_PROMPTS[prompt_index]
        inputs = [source_photo(3 * prompt_index + k) for k in range(len(names))]
        pair_id = f"{origin}_{prompt_index}_{1000 + prompt_index}_gemini-2.5-flash_{i}_gpt-image-1_{i}"
        chosen = "A" if i % 2 == 0 else "B"
        quality = {"A": 0.8, "B": 0.3} if chosen == "A" else {"A": 0.3, "B": 0.8}
        prompt = [["image", _save(root, f"input_images/{name}", im)] for name, im in zip(names, inputs)]
        prompt.append(["text", instruction])
        responses = {side: {"model_name": model, "response_content": [[
            "image", _save(root, f"images/{pair_id}_{n}.jpg", edited_version(inputs[0], quality[side], 9 * i + n))]]}
            for n, (side, model) in enumerate((("A", "gemini-2.5-flash"), ("B", "gpt-image-1")))}
        if i >= n_pairs - multi_image_responses:
            extra = edited_version(inputs[0], 0.5, 9 * i + 7)
            responses["B"]["response_content"].append(["image", _save(root, f"images/{pair_id}_2.jpg", extra)])
            multi.append(pair_id)
        pairs.append({"id": pair_id, "response_a": responses["A"], "response_b": responses["B"], "chosen": chosen,
                      "human_annotations": [5, 6, 5], "prompt_source": origin,
                      "prompt_metadata": {"id": prompt_index, "category": "fixture"}, "prompt_content": prompt})
        truth.append((pair_id, chosen.lower(), "multi" if len(names) > 1 else "single"))
        sources[pair_id] = [part[1] for part in prompt if part[0] == "image"]
    (root / "edit.json").write_text(json.dumps({"pairs": pairs}, indent=2))
    return {"pairs": [t for t in truth if t[0] not in multi], "sources": sources, "multi": multi}
