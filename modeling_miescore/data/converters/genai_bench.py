"""GenAI-Bench, image-editing subset (Jiang et al. 2024, GenAI-Arena) -> pairwise single-source edits.

Release format (read from the Hub dataset card https://huggingface.co/datasets/TIGER-Lab/GenAI-Bench , config
``image_edition``, and the authors' evaluation script https://github.com/TIGER-AI-Lab/GenAI-Bench/blob/main/inference.py):
Parquet shards ``image_edition/<split>-XXXXX-of-XXXXX.parquet`` (the repository currently holds the splits ``test``,
983 votes, and ``test_v1``, 919 votes; ``--split`` picks one) with the columns ``source_prompt, target_prompt,
instruct_prompt, source_image, left_model, left_output_image, right_model, right_output_image, vote_type``.
``vote_type`` is one of ``leftvote``, ``rightvote``, ``tievote``, ``bothbad_vote``.

Rows: one pairwise row per vote (``edited_a`` = left output, ``edited_b`` = right output, instruction =
``instruct_prompt``); labels ``leftvote`` -> ``a``, ``rightvote`` -> ``b``, ``tievote`` -> ``tie``,
``bothbad_vote`` -> ``both_bad``. Ids are ``<split>-<row>`` (row in file order, 1-based); the edited images get
``<id>-left`` / ``<id>-right``.

Default split: ``test_v1``, the 919 image-editing votes that GenAI-Bench's README reports ("919 votes for image
editing", https://github.com/TIGER-AI-Lab/GenAI-Bench/blob/main/README.md) and its leaderboard is computed on; the
card's ``miescore_benchmark`` block and the zero-shot report name the split that was converted.
"""

from __future__ import annotations

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import embedded_image, read_parquet_rows
from .schema import BenchmarkSpec, PairItem, bibtex

__all__ = ["GenAIBenchConverter", "SPEC", "VOTE_LABELS"]

VOTE_LABELS = {"leftvote": "a", "rightvote": "b", "tievote": "tie", "bothbad_vote": "both_bad"}
COLUMNS = ("instruct_prompt", "source_image", "left_model", "left_output_image", "right_model",
           "right_output_image", "vote_type")

SPEC = BenchmarkSpec(
    name="genai-bench", title="GenAI-Bench (image editing)", kinds=("pairwise",), license="cc-by-4.0",
    protocol="calibrated", columns={"zero-shot": {"genai-bench": "accuracy"}},
    format_source="https://huggingface.co/datasets/TIGER-Lab/GenAI-Bench (config image_edition); "
                  "https://github.com/TIGER-AI-Lab/GenAI-Bench/blob/main/inference.py",
    format_note="The converter reads the Hub's Parquet shards image_edition/<split>-*.parquet as downloaded.",
    release_folder="folder holding image_edition/<split>-*.parquet (TIGER-Lab/GenAI-Bench as downloaded)",
    main_file="image_edition", default_split="test_v1",
    dimensions={"vote (overall preference)": "overall"},
    tie_rule=("Human: tievote and bothbad_vote are both ties (the authors' parse_response accepts an 'A=B' verdict "
              "for either). Prediction: a pointwise scorer's tie is |score_a - score_b| <= epsilon with epsilon "
              "tie-calibrated (Deutsch et al. 2023, arXiv 2305.14324), as EditReward's eval_bench.py reports "
              "GenAI-Bench ('Accuracy with ties (paper metric)'); accuracy = share of pairs whose predicted "
              "A>B / B>A / tie equals the human one."),
    citation=bibtex("article", "jiang2024genai", title="GenAI Arena: An Open Evaluation Platform for Generative Models",
                    author=("Jiang, Dongfu", "Ku, Max", "Li, Tianle", "Ni, Yuansheng", "Sun, Shizhuo", "Fan, Rongqi",
                            "Chen, Wenhu"), journal="arXiv preprint arXiv:2406.04485", year=2024),
    paper_reference="MIEScore paper, Table 6 (GenAI-Bench, Acc. %)",
)


@register_converter
class GenAIBenchConverter(BenchmarkConverter):
    """GenAI-Bench image_edition Parquet shards -> pairwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        files = self.release_files(f"image_edition/{self.choice}-*.parquet", problems)
        rows = read_parquet_rows(self.raw, files, problems, required=COLUMNS)
        for number, (file, row, record) in enumerate(self.progress_bar(rows, desc="checking votes"), start=1):
            check = RecordCheck(problems, file, row, images)
            item_id = f"{self.choice}-{number:05d}"
            label = check.choice(VOTE_LABELS, record["vote_type"], "vote_type", key=str(record["vote_type"]).strip())
            instruction = check.text(record["instruct_prompt"], "instruct_prompt must be a non-empty string")
            source = embedded_image(check, record["source_image"], f"{item_id}-source", "source_image")
            left = embedded_image(check, record["left_output_image"], f"{item_id}-left", "left_output_image")
            right = embedded_image(check, record["right_output_image"], f"{item_id}-right", "right_output_image")
            if not check.ok:
                continue
            self.add(PairItem(
                id=item_id, sources=[source], instruction=instruction.strip(), edited_a=left, edited_b=right,
                edited_a_id=f"{item_id}-left", edited_b_id=f"{item_id}-right", label=label,
                model_a=str(record["left_model"] or ""), model_b=str(record["right_model"] or ""),
                subset=self.choice), (file, row), problems)
