"""EditScore's EditReward-Bench (Luo et al. 2025) -> pairwise single-source edits, one row per judged pair.

Naming: this is the benchmark the EditScore paper calls *EditReward-Bench* (Hub ``EditScore/EditReward-Bench``).
The MIEScore paper's Table 6 calls it **EditScore-Bench** (its "EditReward-Bench" column is TIGER-Lab's different
benchmark, :mod:`.editreward_bench`); the SpatialReward paper's Table 1 calls it **EditReward-Bench** (Luo et al.,
2025), with the columns PF / Cons. / Ovrl. Registry name: ``editscore-bench``.

Release format (read from https://huggingface.co/datasets/EditScore/EditReward-Bench , its ``state.json``, and the
evaluation code https://github.com/VectorSpaceLab/EditScore/blob/main/evaluation.py and SpatialReward's
``eval/EditReward-Bench/calculate_accuracy.py``): a ``datasets`` ``save_to_disk`` folder (``state.json``,
``dataset_info.json``, ``data-XXXXX-of-XXXXX.arrow``) whose rows hold ``key`` (two ids, one per output image),
``instruction``, ``input_image``, ``output_images`` (two images; **the first is the human-preferred one**: the
scripts count a pair correct when ``score[0] > score[1]``), ``task_type`` (13 edit types) and ``dimension``
(``prompt_following``, ``consistency`` or ``overall``: the dimension the preference is about).

Rows: one pairwise row per record, ``edited_a`` = ``output_images[0]`` (label ``a``), ``edited_b`` = the other;
``edited_a_id`` / ``edited_b_id`` = the two keys (an output judged on several dimensions is scored once);
``subset`` = ``task_type``; ``dimension`` = the MIEScore score key of the judged dimension.
"""

from __future__ import annotations

from ..builders.raw_files import ImageChecker, ProblemCollector, RecordCheck
from . import register_converter
from .base import BenchmarkConverter
from .release_files import embedded_image, read_saved_dataset
from .schema import BenchmarkSpec, PairItem, bibtex

__all__ = ["DIMENSIONS", "EditScoreBenchConverter", "SPEC"]

SPEC = BenchmarkSpec(
    name="editscore-bench", title="EditScore's EditReward-Bench", kinds=("pairwise",), license="apache-2.0",
    protocol="editscore",
    columns={"zero-shot": {"editscore-bench": "mean"},
             "reward": {"editreward_pf": "prompt_following", "editreward_cons": "consistency",
                        "editreward_ovrl": "overall"}},
    format_source="https://huggingface.co/datasets/EditScore/EditReward-Bench ; "
                  "https://github.com/VectorSpaceLab/EditScore/blob/main/evaluation.py",
    format_note="The converter reads the save_to_disk folder (state.json + data-*.arrow) as downloaded from the Hub.",
    release_folder="the EditScore/EditReward-Bench folder as downloaded (state.json, dataset_info.json, data-*.arrow)",
    main_file="state.json",
    dimensions={"prompt_following": "instruction_following", "consistency": "attribute_preservation",
                "overall": "overall"},
    tie_rule=("Human: no ties (every pair has a preferred output). Prediction: a pair is correct only when "
              "score(preferred) > score(other) on the judged dimension, so a predicted tie is wrong "
              "(EditScore's calculate_statistics.py and SpatialReward's calculate_accuracy.py). Accuracy is computed "
              "per task_type and averaged over task types (macro), per dimension."),
    citation=bibtex("article", "luo2025editscore",
                    title="EditScore: Unlocking Online RL for Image Editing via High-Fidelity Reward Modeling",
                    author=("Luo, Xin", "Wang, Jiahao", "Wu, Chenyuan", "Xiao, Shitao", "Jiang, Xiyan", "Lian, Defu",
                            "Zhang, Jiajun", "Liu, Dong", "others"), journal="arXiv preprint arXiv:2509.23909",
                    year=2025),
    paper_reference="MIEScore paper, Table 6 (EditScore-Bench, Acc. %); SpatialReward paper, Table 1 "
                    "(EditReward-Bench PF / Cons. / Ovrl.)",
)
DIMENSIONS = dict(SPEC.dimensions)  # the release's dimension -> MIEScore score key
COLUMNS = ("key", "instruction", "input_image", "output_images", "task_type", "dimension")


@register_converter
class EditScoreBenchConverter(BenchmarkConverter):
    """EditScore/EditReward-Bench save_to_disk folder -> pairwise rows (see the module docstring)."""

    spec = SPEC

    def read(self, problems: ProblemCollector, images: ImageChecker) -> None:
        rows = read_saved_dataset(self.raw, problems, required=COLUMNS)
        for file, row, record in self.progress_bar(rows, desc="checking pairs"):
            check = RecordCheck(problems, file, row, images)
            keys = record["key"]
            if not (isinstance(keys, list) and len(keys) == 2 and all(isinstance(k, str) and k for k in keys)):
                check.fail(f"key must hold two non-empty ids, got {keys!r}")
                continue
            dimension = check.choice(DIMENSIONS, record["dimension"], "dimension")
            instruction = check.text(record["instruction"], "instruction must be a non-empty string")
            outputs = record["output_images"]
            if not isinstance(outputs, list) or len(outputs) != 2:
                check.fail("output_images must hold exactly two images (preferred first)")
                continue
            source = embedded_image(check, record["input_image"], f"{keys[0]}-input", "input_image")
            edited = [embedded_image(check, value, keys[i], f"output_images[{i}]") for i, value in enumerate(outputs)]
            if not check.ok:
                continue
            self.add(PairItem(
                id=f"{keys[0]}|{keys[1]}|{record['dimension']}", sources=[source], instruction=instruction.strip(),
                edited_a=edited[0], edited_b=edited[1], edited_a_id=keys[0], edited_b_id=keys[1], label="a",
                dimension=dimension, subset=str(record["task_type"] or "")), (file, row), problems)
