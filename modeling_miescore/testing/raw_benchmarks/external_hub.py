"""Raw releases of the external benchmarks that ship as Hub datasets (Parquet shards / ``save_to_disk`` Arrow),
written in exactly those layouts from scikit-image photos, for the converter tests.

Each ``make_raw_*`` returns its planted truth (ids, labels, scores) so that tests can check the converted rows.
The layouts and columns are the ones the converters' docstrings cite (:mod:`modeling_miescore.data.converters`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .external_images import edited_version, source_photo, write_parquet
from .photos import image_bytes, save_jpeg

__all__ = ["make_raw_editreward_bench", "make_raw_editscore_bench", "make_raw_genai_bench", "make_raw_imagenhub"]

VOTES = ("leftvote", "rightvote", "tievote", "bothbad_vote")


def _image(data: bytes, name: str) -> dict:
    return {"bytes": data, "path": name}


def make_raw_genai_bench(dir: str | os.PathLike, n_votes: int = 8, split: str = "test_v1",
                         other_splits: dict[str, int] | None = None) -> dict:
    """``image_edition/<split>-00000-of-00001.parquet`` of TIGER-Lab/GenAI-Bench; votes cycle through all four types.

    ``other_splits`` (default ``{"test": n_votes + 2}``; the Hub repository holds ``test`` with 983 votes beside
    ``test_v1`` with 919) are written beside it with votes of their own; the truth describes ``split``.
    """
    for other, count in ({"test": n_votes + 2} if other_splits is None else other_splits).items():
        if other != split:
            _genai_split(Path(dir), other, count, offset=50)
    return _genai_split(Path(dir), split, n_votes)


def _genai_split(root: Path, split: str, n_votes: int, offset: int = 0) -> dict:
    from datasets import Features, Image, Value

    features = Features({"source_prompt": Value("string"), "target_prompt": Value("string"),
                         "instruct_prompt": Value("string"), "source_image": Image(), "left_model": Value("string"),
                         "left_output_image": Image(), "right_model": Value("string"),
                         "right_output_image": Image(), "vote_type": Value("string")})
    rows, votes = [], []
    for i in range(n_votes):
        source = source_photo(i + offset)
        vote = VOTES[i % len(VOTES)]
        good, bad = edited_version(source, 0.9, 10 * (i + offset)), edited_version(source, 0.2, 10 * (i + offset) + 1)
        left, right = (good, bad) if vote == "leftvote" else (bad, good)
        rows.append({"source_prompt": "a photo", "target_prompt": "a tinted photo",
                     "instruct_prompt": f"give photo {i} a warm tint",
                     "source_image": _image(image_bytes(source), None),
                     "left_model": "MagicBrush", "left_output_image": _image(image_bytes(left), None),
                     "right_model": "InstructPix2Pix", "right_output_image": _image(image_bytes(right), None),
                     "vote_type": vote})
        votes.append(vote)
    write_parquet(root / "image_edition" / f"{split}-00000-of-00001.parquet", rows, features)
    return {"votes": votes, "ids": [f"{split}-{i + 1:05d}" for i in range(n_votes)]}


def _editreward_row(group: str, letters, subset: str, source: bytes, images: dict, scores: dict) -> dict:
    a, b = letters
    better = a if scores[a] > scores[b] else b
    worse = b if better == a else a
    ranking = "A=B" if scores[a] == scores[b] else f"{better}>{worse}"
    return {"id": f"{group}{a}vs{b}", "instruction": f"edit group {group}",
                   "source_image": _image(source, f"{group}_source.jpg"),
                   "candidate_1": _image(images[a], f"{group}_{a}.jpg"),
                   "candidate_2": _image(images[b], f"{group}_{b}.jpg"), "ranking": ranking,
                   "comparison_type": f"{a}vs{b}", "score_1": scores[a], "score_2": scores[b],
                   "model_1": f"model-{a}", "model_2": f"model-{b}", "dataset": subset}


def make_raw_editreward_bench(dir: str | os.PathLike) -> dict:
    """``2pair/``, ``3pair/``, ``4pair/`` Parquet shards of TIGER-Lab/EditReward-Bench: one row per comparison.

    2pair: three groups (A better, B better, a tie); 3pair: one group A > B > C; 4pair: one group D > A > B > C.
    Comparison ids are ``<10-character group><X>vs<Y>`` without ``_``, which the authors' loaders group by their
    first 10 characters.
    """
    from datasets import Features, Image, Value

    features = Features({"id": Value("string"), "instruction": Value("string"), "source_image": Image(),
                         "candidate_1": Image(), "candidate_2": Image(), "ranking": Value("string"),
                         "comparison_type": Value("string"), "score_1": Value("float64"), "score_2": Value("float64"),
                         "model_1": Value("string"), "model_2": Value("string"), "dataset": Value("string")})
    plans = {"2pair": [{"A": 7.0, "B": 4.0}, {"A": 3.0, "B": 6.0}, {"A": 5.0, "B": 5.0}],
             "3pair": [{"A": 8.0, "B": 5.0, "C": 2.0}],
             "4pair": [{"A": 6.0, "B": 4.0, "C": 2.0, "D": 8.0}]}
    truth = {"pairs": {}, "candidates": {}}
    index = 0
    for subset, groups in plans.items():
        rows = []
        for scores in groups:
            index += 1
            group = f"erb{index:07d}"
            source = source_photo(index)
            images = {k: image_bytes(edited_version(source, s / 10, 100 * index + n))
                      for n, (k, s) in enumerate(sorted(scores.items()))}
            letters = sorted(scores)
            for i, a in enumerate(letters):
                for b in letters[i + 1:]:
                    row = _editreward_row(group, (a, b), subset, image_bytes(source), images, scores)
                    rows.append(row)
                    truth["pairs"][row["id"]] = ("tie" if scores[a] == scores[b]
                                                 else "a" if scores[a] > scores[b] else "b")
            truth["candidates"].update({f"{subset}-{group}_{k}": s for k, s in scores.items()})
        write_parquet(Path(dir) / subset / "train-00000-of-00001.parquet", rows, features)
    return truth


def make_raw_editscore_bench(dir: str | os.PathLike, n_pairs: int = 6) -> dict:
    """EditScore/EditReward-Bench as ``save_to_disk`` writes it (``state.json``, ``dataset_info.json``, Arrow).

    Pairs cycle through the three dimensions and two task types; ``output_images[0]`` is the preferred one.
    """
    from datasets import Dataset, Features, Image, List, Value

    dimensions = ("prompt_following", "consistency", "overall")
    tasks = ("color_alter", "subject-add")
    rows = {"key": [], "instruction": [], "input_image": [], "output_images": [], "task_type": [], "dimension": []}
    for i in range(n_pairs):
        source = source_photo(i)
        keys = [f"k{i:03d}a", f"k{i:03d}b"]
        rows["key"].append(keys)
        rows["instruction"].append(f"recolour photo {i}")
        rows["input_image"].append(_image(image_bytes(source), f"{keys[0]}_input.jpg"))
        rows["output_images"].append([_image(image_bytes(edited_version(source, q, 20 * i + n)), f"{k}.jpg")
                                      for n, (k, q) in enumerate(zip(keys, (0.9, 0.3)))])
        rows["task_type"].append(tasks[i % len(tasks)])
        rows["dimension"].append(dimensions[i % len(dimensions)])
    features = Features({"key": List(Value("string")), "instruction": Value("string"), "input_image": Image(),
                         "output_images": List(Image()), "task_type": Value("string"), "dimension": Value("string")})
    Dataset.from_dict(rows, features=features).save_to_disk(str(dir))
    return {"keys": rows["key"], "dimensions": rows["dimension"], "tasks": rows["task_type"]}


# Rater cells [SC, PQ] as they occur in ImagenHub's Text-Guided_IE_rater*.tsv (values in {0, 0.5, 1}, spacing as
# typed by the raters); a row's raters disagree, so sqrt(mean SC * mean PQ) differs from the mean of sqrt(SC * PQ).
_IMAGENHUB_CELLS = ("[0, 1]", "[0.5, 0.5]", "[1,1]", "[0, 0.5]", "[1, 0.5]", "[0.5,1]", "[0, 0]", "[1 , 0]")


def make_raw_imagenhub(dir: str | os.PathLike, n_samples: int = 4, models=("MagicBrush", "SDEdit")) -> dict:
    """ImagenHub text-guided editing: ``data/filtered-*.parquet`` inputs, rater TSVs, ``<model>/sample_*.jpg`` outputs.

    Rater k gives model m on sample s the cell ``_IMAGENHUB_CELLS[(3s + 5m + 2k) % 8]``; the truth holds, per row,
    the raters' mean SC and PQ and the authors' overall, the mean over raters of each cell's sqrt(SC * PQ)
    (``AnalyzeHumanEval.ipynb``).
    """
    import json
    import math

    from datasets import Features, Image, Value

    root = Path(dir)
    inputs, uids = [], []
    for s in range(n_samples):
        source = source_photo(s)
        img_id, turn = str(1000 + s), 1 + s % 2
        uids.append(f"sample_{img_id}_{turn}.jpg")
        inputs.append({"img_id": img_id, "turn_index": turn, "source_img": _image(image_bytes(source), None),
                       "instruction": f"make photo {s} warmer", "source_global_caption": "a photo",
                       "target_global_caption": "a warm photo"})
        for m, model in enumerate(models):
            edited = edited_version(source, 0.3 + 0.3 * m, 7 * s + m)
            save_jpeg(edited, root / "ImagenHub_Text-Guided_IE" / model / uids[-1])
    features = Features({"img_id": Value("string"), "turn_index": Value("int32"), "source_img": Image(),
                         "instruction": Value("string"), "source_global_caption": Value("string"),
                         "target_global_caption": Value("string")})
    write_parquet(root / "data" / "filtered-00000-of-00001.parquet", inputs, features)
    votes: dict[str, list] = {}
    ratings = root / "eval" / "human_ratings" / "Text-Guided_IE"
    ratings.mkdir(parents=True, exist_ok=True)
    for k in range(3):  # three raters
        lines = ["\t".join(["uid", *models])]
        for s, uid in enumerate(uids):
            cells = [_IMAGENHUB_CELLS[(3 * s + 5 * m + 2 * k) % len(_IMAGENHUB_CELLS)] for m in range(len(models))]
            for model, cell in zip(models, cells):
                votes.setdefault(f"{model}/{uid}", []).append(json.loads(cell))
            lines.append("\t".join([uid, *cells]))
        (ratings / f"Text-Guided_IE_rater{k + 1}.tsv").write_text("\n".join(lines) + "\n")
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    return {"scores": {key: (mean([v[0] for v in cells]), mean([v[1] for v in cells])) for key, cells in votes.items()},
            "overall": {key: mean([math.sqrt(v[0] * v[1]) for v in cells]) for key, cells in votes.items()}}
