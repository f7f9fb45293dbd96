"""TIGER-Lab's EditReward-Bench (Wu et al. 2025) -> pointwise and pairwise single-source edits.

Naming: the MIEScore paper's Table 6 column "EditReward-Bench (Wu et al. 2025c)" is this benchmark (registry name
``editreward-bench``); the SpatialReward paper's "EditReward-Bench" is EditScore's, :mod:`.editscore_bench`.

Release format (read from https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench , its file listing
``2pair/train-*.parquet``, ``3pair/train-*.parquet``, ``4pair/train-*.parquet``, and the authors' loaders
https://github.com/TIGER-AI-Lab/EditReward/tree/main/EditReward/evaluate ``inference_{2,3,4}pair_hf.py``): one row
per pairwise comparison with ``id``, ``instruction``, ``source_image``, ``candidate_1``, ``candidate_2``,
``ranking`` (2-pair: ``A>B`` / ``B>A`` / ``A=B``; ``eval_bench.py`` also knows ``A=B=Good`` / ``A=B=Bad``; 3- and
4-pair: ``X>Y`` over the group's letters), ``comparison_type`` (``XvsY``: which letters ``candidate_1`` /
``candidate_2`` are), ``score_1``, ``score_2`` (the human score of each candidate), ``model_1``, ``model_2`` and
``dataset`` (``2pair`` / ``3pair`` / ``4pair``). Rows of one group share an id prefix: the authors' loaders
(``inference_3pair_hf.py``, ``inference_4pair_hf.py``) group by ``id.split('_')[0]`` when the id has a ``_`` and by
``id[:10]`` otherwise, and so does :func:`group_of`.

Rows: the **pairwise** config has one row per comparison (``edited_a`` = ``candidate_1``); the **pointwise** config
has one row per distinct candidate (group + letter) with its human score. The released columns carry one human
score per candidate (``score_1`` / ``score_2``), which is mapped to ``overall``; no per-dimension scores are in
the release's columns, so the MIEScore paper's "average across dimensions" reduces to this one score.
"""

from __future__ import annotations

import re

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import embedded_image, read_parquet_rows
from .schema import BenchmarkSpec, EditItem, PairItem, bibtex

__all__ = ["EditRewardBenchConverter", "SPEC", "group_of"]

COLUMNS = ("id", "instruction", "source_image", "candidate_1", "candidate_2", "ranking", "score_1", "score_2",
           "dataset")
_TIES = {"A=B", "A=B=Good", "A=B=Bad"}
_PAIR = re.compile(r"^\s*([A-Z])\s*([<>])\s*([A-Z])\s*$")

SPEC = BenchmarkSpec(
    name="editreward-bench", title="TIGER-Lab EditReward-Bench", kinds=("pointwise", "pairwise"), license="apache-2.0",
    protocol="srcc", columns={"zero-shot": {"editreward-bench": "mean"}},
    format_source="https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench ; "
                  "https://github.com/TIGER-AI-Lab/EditReward/tree/main/EditReward/evaluate",
    format_note="The converter reads the Hub's Parquet shards 2pair/, 3pair/, 4pair/ as downloaded.",
    release_folder="the TIGER-Lab/EditReward-Bench folder as downloaded (2pair/, 3pair/, 4pair/ with train-*.parquet)",
    main_file="2pair",
    dimensions={"score (human score of each candidate)": "overall"},
    tie_rule=("Pointwise (what MIEScore's Table 6 reports, and what 'benchmark zero-shot' computes): SRCC with the "
              "human score; tied human scores get average ranks. The pairwise config keeps the comparisons with "
              "their human ties (2-pair 'A=B' -> tie); the authors' own pairwise protocol (eval_bench.py) counts a "
              "2-pair tie correct when |score_a - score_b| <= epsilon, epsilon tie-calibrated on the 2-pair data, "
              "and a predicted tie wrong in 3-/4-pair data (calc_accuracy_without_ties)."),
    citation=bibtex("article", "wu2025editreward",
                    title="EditReward: A Human-Aligned Reward Model for Instruction-Guided Image Editing",
                    author=("Wu, Keming", "Jiang, Sicong", "Ku, Max", "Nie, Ping", "Liu, Minghao", "Chen, Wenhu"),
                    journal="arXiv preprint arXiv:2509.26346", year=2025),
    paper_reference="MIEScore paper, Table 6 (EditReward-Bench, SRCC)",
)


def group_of(row_id: str) -> str:
    """The group of a comparison id, by the authors' rule: the part before the first ``_``, else the first 10
    characters."""
    return row_id.split("_")[0] if "_" in row_id else row_id[:10]


def _letters(comparison_type, subset: str) -> tuple[str, str] | None:
    if comparison_type in (None, "") and subset == "2pair":
        return "A", "B"
    match = re.fullmatch(r"\s*([A-Z])\s*vs\s*([A-Z])\s*", str(comparison_type or ""))
    return (match.group(1), match.group(2)) if match else None


def _label(ranking, letters: tuple[str, str]) -> str | None:
    text = str(ranking or "").strip()
    if text in _TIES:
        return "tie"
    match = _PAIR.match(text)
    if not match or {match.group(1), match.group(3)} != set(letters):
        return None
    better = match.group(1) if match.group(2) == ">" else match.group(3)
    return "a" if better == letters[0] else "b"


@register_converter
class EditRewardBenchConverter(BenchmarkConverter):
    """TIGER-Lab/EditReward-Bench Parquet shards -> pointwise + pairwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        files = self.release_files("[234]pair/*.parquet", problems)
        rows = read_parquet_rows(self.raw, files, problems, required=COLUMNS)
        candidates: dict[str, tuple[EditItem, str]] = {}
        for file, row, record in self.progress_bar(rows, desc="checking comparisons"):
            self._read_row(RecordCheck(problems, file, row, images), record, candidates)
        for item, where in candidates.values():
            file, _, row = where.rpartition(":")
            self.add(item, (file, int(row)), problems)

    def _read_row(self, check: RecordCheck, record: dict, candidates: dict) -> None:
        problems, file, row = check.problems, check.file, check.line
        row_id, subset = str(record["id"] or ""), str(record["dataset"] or "")
        letters = _letters(record.get("comparison_type"), subset)
        label = _label(record["ranking"], letters) if letters else None
        if not row_id or letters is None or label is None:
            problems.add(file, row, f"id {record['id']!r}, comparison_type {record.get('comparison_type')!r} and "
                                    f"ranking {record['ranking']!r} do not describe one comparison")
            return
        instruction = record["instruction"]
        scores = [finite_float(record["score_1"]), finite_float(record["score_2"])]
        if not isinstance(instruction, str) or not instruction.strip() or None in scores:
            problems.add(file, row, "instruction must be a non-empty string and score_1 / score_2 finite numbers")
            return
        group = f"{subset}-{group_of(row_id)}"
        source = embedded_image(check, record["source_image"], f"{group}-source", "source_image")
        edited = [embedded_image(check, record[f"candidate_{k}"], f"{group}-{letters[k - 1]}", f"candidate_{k}")
                  for k in (1, 2)]
        if not check.ok:
            return
        ids = [f"{group}_{letter}" for letter in letters]
        models = [str(record.get(f"model_{k}") or "") for k in (1, 2)]
        self.add(PairItem(id=row_id, sources=[source], instruction=instruction.strip(), edited_a=edited[0],
                          edited_b=edited[1], edited_a_id=ids[0], edited_b_id=ids[1], label=label, model_a=models[0],
                          model_b=models[1], subset=subset, group_id=group), (file, row), problems)
        for k in (0, 1):
            known = candidates.get(ids[k])
            if known is not None and known[0].human["overall"] != scores[k]:
                problems.add(file, row, f"candidate {ids[k]} has score {scores[k]} here but "
                                        f"{known[0].human['overall']} at {known[1]}")
            elif known is None:
                candidates[ids[k]] = (EditItem(id=ids[k], sources=[source], edited=edited[k],
                                               instruction=instruction.strip(), human={"overall": scores[k]},
                                               editing_model=models[k], group_id=group, subset=subset),
                                      f"{file}:{row}")
