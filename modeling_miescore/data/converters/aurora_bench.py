"""AURORA-Bench human ratings (Krojer et al. 2024) -> pairwise single-source edits.

Release format. The AURORA repository (https://github.com/McGill-NLP/AURORA) releases the benchmark itself as
``test.json`` (``input``, ``output``, ``prompt``, ``task``) but its README lists "Human ratings" as a to-do, and no
public release of the human ratings was found (searched: the repository, its README versions, the Hub). The only
public description of the ratings' format is the pairwise JSON that EditReward's evaluation script reads
(https://github.com/TIGER-AI-Lab/EditReward/blob/main/EditReward/evaluate/eval_bench.py, benchmark
``aurora_bench_pairwise``): a JSON array of ``{"prompt", "path_src", "path1", "path2", "model1_dim1_score",
"model2_dim1_score"}`` (optional ``model1`` / ``model2`` names). The converter reads that file
(``--file``, default ``valid_aurora_human_ratings_pairwise.json``, the name eval_bench.py uses) with the images it
names; absolute image paths of the authors' machines can be made relative with ``--strip-prefix``.

Rows: one pairwise row per record; the human label follows eval_bench.py: ``model1_dim1_score`` >
``model2_dim1_score`` -> ``a``, < -> ``b``, equal -> ``tie``. Pair ids are ``aurora-<line>``; an edited image's id is its path (so an image in several pairs is
scored once).
"""

from __future__ import annotations

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from .base import (
    BenchmarkConverter,
    ReleaseChoiceOption,
    StripPrefixOption,
)
from .benchmark_specs import SPECS
from .release_files import read_json_records
from .schema import PairItem

__all__ = ["AuroraBenchConverter", "SPEC"]

DEFAULT_FILE = "valid_aurora_human_ratings_pairwise.json"

SPEC = SPECS["aurora-bench"]

KEYS = ("prompt", "path_src", "path1", "path2", "model1_dim1_score", "model2_dim1_score")


class AuroraBenchConverter(StripPrefixOption, ReleaseChoiceOption, BenchmarkConverter):
    """AURORA-Bench pairwise human ratings (EditReward's JSON) -> pairwise rows (see the module docstring)."""

    spec = SPEC
    raw_help = f"folder holding {DEFAULT_FILE} (or --file) and the images it names"
    main_file = DEFAULT_FILE
    choice_option, default_choice = "file", DEFAULT_FILE

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        records = read_json_records(self.raw / self.choice, problems, required=KEYS)
        for line, record in self.progress_bar(records, desc="checking ratings"):
            check = RecordCheck(problems, self.choice, line, images)
            instruction = check.text(record["prompt"], "prompt must be a non-empty string")
            scores = [finite_float(record[k]) for k in ("model1_dim1_score", "model2_dim1_score")]
            if None in scores:
                check.fail("model1_dim1_score and model2_dim1_score must be finite numbers")
            source = self.file_image(check, self.release_path(record["path_src"]), "path_src")
            first = self.file_image(check, self.release_path(record["path1"]), "path1")
            second = self.file_image(check, self.release_path(record["path2"]), "path2")
            if not check.ok:
                continue
            label = "a" if scores[0] > scores[1] else "b" if scores[0] < scores[1] else "tie"
            item_id = f"aurora-{line}"
            self.add_pair(PairItem(
                id=item_id, sources=[source], instruction=instruction.strip(), edited_a=first, edited_b=second,
                edited_a_id=first.rel, edited_b_id=second.rel, label=label,
                model_a=str(record.get("model1") or ""), model_b=str(record.get("model2") or "")),
                (self.choice, line), problems)
