"""AURORA-Bench human ratings (Krojer et al. 2024) -> pairwise single-source edits.

Release format. The AURORA repository (https://github.com/McGill-NLP/AURORA) releases the benchmark as ``test.json``
(``input``, ``output``, ``prompt``, ``task``), and its current README (section "Human Ratings"; earlier versions
listed them as a to-do) releases the human ratings of the models' outputs on AURORA-Bench: "The output images and
associated human ratings (``task_scores_finegrained.json``) can be downloaded from Google Drive". The fields of
that file are not described in the README, the datasheet or any script of the repository, and the file itself (a
Google Drive download) could not be read here, so it is **not** an input format of this converter yet. The converter reads the
pairwise JSON that EditReward's evaluation script builds from those ratings
(https://github.com/TIGER-AI-Lab/EditReward/blob/main/EditReward/evaluate/eval_bench.py, benchmark
``aurora_bench_pairwise``): a JSON array of ``{"prompt", "path_src", "path1", "path2", "model1_dim1_score",
"model2_dim1_score"}`` (optional ``model1`` / ``model2`` names), ``--file`` (default
``valid_aurora_human_ratings_pairwise.json``, the name eval_bench.py uses) with the images it names; absolute image
paths of the authors' machines can be made relative with ``--strip-prefix``.

Rows: one pairwise row per record; the human label follows eval_bench.py: ``model1_dim1_score`` >
``model2_dim1_score`` -> ``a``, < -> ``b``, equal -> ``tie``. A pair's id is the record's own identity,
``aurora-<key of (prompt, path_src, path1, path2)>``, so it does not depend on how the file is laid out (one line or
indented); a record repeated with the same scores is kept once (counted in the warnings), repeated with other scores
is a problem. An edited image's id is its path (an image in several pairs is scored once).
"""

from __future__ import annotations

from ...utils.numbers import finite_float
from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter, StripPrefixOption, content_key
from .release_files import read_json_records
from .schema import BenchmarkSpec, PairItem, bibtex

__all__ = ["AuroraBenchConverter", "SPEC"]

DEFAULT_FILE = "valid_aurora_human_ratings_pairwise.json"

SPEC = BenchmarkSpec(
    name="aurora-bench", title="AURORA-Bench (human ratings)", kinds=("pairwise",),
    protocol="calibrated", columns={"zero-shot": {"aurora-bench": "accuracy"}},
    format_source="https://github.com/TIGER-AI-Lab/EditReward/blob/main/EditReward/evaluate/eval_bench.py "
                  "(aurora_bench_pairwise); https://github.com/McGill-NLP/AURORA (README, section Human Ratings: "
                  "task_scores_finegrained.json on Google Drive)",
    format_note=("The AURORA authors release their human ratings as task_scores_finegrained.json (README, Google "
                 "Drive); that file's fields are not published in a readable form, so the input is the pairwise "
                 "JSON that EditReward's eval_bench.py builds from those ratings (a derived format)."),
    release_folder=f"folder holding {DEFAULT_FILE} (or --file) and the images it names", default_file=DEFAULT_FILE,
    dimensions={"dim1 score (human rating of each output)": "overall"},
    tie_rule=("Human: equal model1_dim1_score and model2_dim1_score is a tie (eval_bench.py). Prediction: "
              "tie-calibrated (epsilon chosen to maximise accuracy, Deutsch et al. 2023, arXiv 2305.14324), the "
              "'accuracy with ties' that eval_bench.py reports for this file."),
    citation=bibtex("inproceedings", "krojer2024aurora",
                    title="Learning Action and Reasoning-Centric Image Editing from Videos and Simulations",
                    author=("Krojer, Benno", "Vattikonda, Dheeraj", "Lara, Luis", "Jampani, Varun", "Portelance, Eva",
                            "Pal, Christopher", "Reddy, Siva"), booktitle="NeurIPS Datasets and Benchmarks", year=2024),
    paper_reference="MIEScore paper, Table 6 (AROURA-Bench, Acc. %)",
)

KEYS = ("prompt", "path_src", "path1", "path2", "model1_dim1_score", "model2_dim1_score")


@register_converter
class AuroraBenchConverter(StripPrefixOption, BenchmarkConverter):
    """AURORA-Bench pairwise human ratings (EditReward's JSON) -> pairwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        records = read_json_records(self.raw / self.choice, problems, required=KEYS)
        seen: dict[str, tuple[int, list]] = {}
        repeated = 0
        for line, record in self.progress_bar(records, desc="checking ratings"):
            check = RecordCheck(problems, self.choice, line, images)
            instruction = check.text(record["prompt"], "prompt must be a non-empty string")
            scores = [finite_float(record[k]) for k in ("model1_dim1_score", "model2_dim1_score")]
            if None in scores:
                check.fail("model1_dim1_score and model2_dim1_score must be finite numbers")
            paths = [self.release_path(record[k]) for k in ("path_src", "path1", "path2")]
            if not check.ok:
                continue
            item_id = f"aurora-{content_key(instruction.strip(), *map(str, paths))}"
            if item_id in seen:
                first_line, first_scores = seen[item_id]
                if first_scores == scores:
                    repeated += 1
                else:
                    check.fail(f"the same pair (prompt and images) as line {first_line} with other scores "
                               f"{scores} (there {first_scores})")
                continue
            seen[item_id] = (line, scores)
            source, first, second = (check.image(path, key)
                                     for path, key in zip(paths, ("path_src", "path1", "path2")))
            if not check.ok:
                continue
            label = "a" if scores[0] > scores[1] else "b" if scores[0] < scores[1] else "tie"
            self.add(PairItem(
                id=item_id, sources=[source], instruction=instruction.strip(), edited_a=first, edited_b=second,
                edited_a_id=first.rel, edited_b_id=second.rel, label=label,
                model_a=str(record.get("model1") or ""), model_b=str(record.get("model2") or "")),
                (self.choice, line), problems)
        if repeated:
            self.warnings.append(f"{repeated} record(s) repeat an earlier one exactly (same prompt, images and "
                                 "scores) and were kept once")
