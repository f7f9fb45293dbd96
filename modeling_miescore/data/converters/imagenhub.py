"""ImagenHub, text-guided image editing (Ku et al. 2024) -> pointwise single-source edits with SC / PQ ratings.

Release format, three public pieces laid out as their sources publish them:

* ``data/<split>-*.parquet``: the benchmark inputs, Hub dataset https://huggingface.co/datasets/ImagenHub/Text_Guided_Image_Editing
  (columns ``img_id, turn_index, source_img, instruction, ...``; splits ``dev`` / ``filtered`` / ``extra``; the
  human evaluation used ``filtered``, ``--split`` picks another).
* ``eval/human_ratings/Text-Guided_IE/Text-Guided_IE_rater<k>.tsv``: the human ratings as released in
  https://github.com/TIGER-AI-Lab/ImagenHub/tree/main/eval/human_ratings/Text-Guided_IE : a header ``uid`` +
  one column per editing model, one row per sample ``sample_<img_id>_<turn_index>.jpg``, each cell ``[SC, PQ]``
  with SC (semantic consistency) and PQ (perceptual quality) in {0, 0.5, 1}.
* ``ImagenHub_Text-Guided_IE/<model>/sample_<img_id>_<turn_index>.jpg``: the models' outputs, named as ImagenHub
  saves them for ImagenMuseum (https://github.com/TIGER-AI-Lab/ImagenHub , docs "Submit to ImagenMuseum":
  ``sample_{img_id}_{turn_index}`` for text-guided editing).

Rows: one pointwise row per (sample, model) rated by at least one rater: SC and PQ averaged over the raters
(``human_instruction_following`` = SC, ``human_visual_quality`` = PQ), ``human_overall`` = ImagenHub's overall
score O as the authors compute it (``eval/human_ratings/AnalyzeHumanEval.ipynb``: ``get_HumanEval_score_from_cell``
takes sqrt(SC x PQ) of each rater's cell, then the raters' values are averaged), i.e. the mean over raters of
sqrt(SC_k x PQ_k), not sqrt(mean SC x mean PQ) (the two differ whenever raters disagree: 291 of 1,611 released
rows, by up to 0.333).
"""

from __future__ import annotations

import json
import math
import re

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck, read_csv
from . import register_converter
from .base import BenchmarkConverter
from .release_files import embedded_image, read_parquet_rows
from .schema import BenchmarkSpec, EditItem, bibtex

__all__ = ["ImagenHubConverter", "SPEC"]

RATINGS = "eval/human_ratings/Text-Guided_IE"
OUTPUTS = "ImagenHub_Text-Guided_IE"
_UID = re.compile(r"^sample_(.+)_(\d+)\.[A-Za-z]+$")

SPEC = BenchmarkSpec(
    name="imagenhub", title="ImagenHub text-guided image editing", kinds=("pointwise",), license="cc-by-4.0",
    protocol="srcc", columns={"zero-shot": {"imagenhub": "mean"}},
    format_source="https://github.com/TIGER-AI-Lab/ImagenHub/tree/main/eval/human_ratings/Text-Guided_IE ; "
                  "https://huggingface.co/datasets/ImagenHub/Text_Guided_Image_Editing",
    format_note=("The ratings TSVs and the inputs' Parquet shards are read as released; the edited images are read "
                 "from <model>/sample_<img_id>_<turn>.jpg as ImagenHub names its outputs."),
    release_folder=(f"folder holding data/<split>-*.parquet, {RATINGS}/Text-Guided_IE_rater*.tsv and "
                    f"{OUTPUTS}/<model>/sample_<img_id>_<turn>.jpg"),
    main_file=RATINGS, default_split="filtered",
    dimensions={"SC (semantic consistency)": "instruction_following", "PQ (perceptual quality)": "visual_quality"},
    tie_rule=("Pointwise: SRCC per dimension with the raters' mean SC / PQ (average ranks for ties, which are "
              "frequent on the {0, 0.5, 1} scale); the Table 6 value is the mean SRCC over SC and PQ."),
    citation=bibtex("inproceedings", "ku2024imagenhub",
                    title="ImagenHub: Standardizing the evaluation of conditional image generation models",
                    author=("Ku, Max", "Li, Tianle", "Zhang, Kai", "Lu, Yujie", "Fu, Xingyu", "Zhuang, Wenwen",
                            "Chen, Wenhu"), booktitle="ICLR", year=2024),
    paper_reference="MIEScore paper, Table 6 (ImagenHub, SRCC)",
)


def _cell(text: str) -> tuple[float, float] | None:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(value, list) or len(value) != 2:
        return None
    sc, pq = (finite_float(v) for v in value)
    return (sc, pq) if sc is not None and pq is not None and 0 <= sc <= 1 and 0 <= pq <= 1 else None


@register_converter
class ImagenHubConverter(BenchmarkConverter):
    """ImagenHub text-guided editing ratings + inputs + outputs -> pointwise rows (see the module docstring)."""

    spec = SPEC

    def _inputs(self, problems: ProblemCollector, images: ImageChecker) -> dict[tuple[str, int], tuple]:
        files = self.release_files(f"data/{self.choice}-*.parquet", problems)
        inputs = {}
        for file, row, record in read_parquet_rows(self.raw, files, problems,
                                                   required=("img_id", "turn_index", "source_img", "instruction")):
            if not isinstance(record["turn_index"], int):
                problems.add(file, row, f"turn_index must be an integer, got {record['turn_index']!r}")
                continue
            key = (str(record["img_id"]), record["turn_index"])
            check = RecordCheck(problems, file, row, images)
            source = embedded_image(check, record["source_img"], f"source-{key[0]}-{key[1]}", "source_img")
            if check.ok and check.text(record["instruction"], "instruction must be a non-empty string"):
                inputs[key] = (source, record["instruction"].strip())
        return inputs

    def _ratings(self, problems: ProblemCollector) -> dict[tuple[str, str], list]:
        """``{(uid, model): [(sc, pq, "file:line"), ...]}`` over all rater files."""
        ratings: dict[tuple[str, str], list] = {}
        for path in self.release_files(f"{RATINGS}/Text-Guided_IE_rater*.tsv", problems):
            file = path.relative_to(self.raw).as_posix()
            for line, row in read_csv(path, problems, required=("uid",), delimiter="\t") or []:
                for model, text in row.items():
                    if model == "uid":
                        continue
                    cell = _cell(text)
                    if cell is None:
                        problems.add(file, line, f"{model}: expected [SC, PQ] with values in [0, 1], got {text!r}")
                        continue
                    ratings.setdefault((row["uid"], model), []).append((*cell, f"{file}:{line}"))
        return ratings

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        inputs = self._inputs(problems, images)
        for (uid, model), votes in self.progress_bar(self._ratings(problems).items(), desc="checking ratings"):
            file, _, line = votes[0][2].rpartition(":")
            match = _UID.match(uid)
            key = (match.group(1), int(match.group(2))) if match else None
            if key not in inputs:
                problems.add(file, int(line), f"uid {uid!r} names no input of split {self.choice!r} "
                                              "(expected sample_<img_id>_<turn_index>.jpg)")
                continue
            check = RecordCheck(problems, file, int(line), images)
            edited = check.image(f"{OUTPUTS}/{model}/{uid}", f"output of {model} for {uid}")
            if edited is None:
                continue
            sc = sum(v[0] for v in votes) / len(votes)
            pq = sum(v[1] for v in votes) / len(votes)
            overall = sum(math.sqrt(v[0] * v[1]) for v in votes) / len(votes)  # per rater cell, then the mean
            source, instruction = inputs[key]
            self.add(EditItem(
                id=f"{model}/{uid}", sources=[source], edited=edited, instruction=instruction,
                human={"instruction_following": sc, "visual_quality": pq, "overall": overall},
                editing_model=model, group_id=uid), (file, int(line)), problems)
