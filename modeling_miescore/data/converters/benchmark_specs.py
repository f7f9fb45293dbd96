"""The registry table of the converted benchmarks: one :class:`~.schema.BenchmarkSpec` each (title, kinds,
where the release format was read, the benchmark's dimensions -> MIEScore score keys, the tie rule, the citation,
the paper column it fills, the license), keyed in :data:`SPECS` by registry name (the names of
:data:`~modeling_miescore.data.converters.CONVERTERS`).

The converter modules read their entry (``SPEC = SPECS[name]``) and cite in their docstrings how the release is laid
out; the dataset cards and the benchmark runner take the rest from here.
"""

from __future__ import annotations

from .schema import BenchmarkSpec

__all__ = ["SPECS"]

GENAI_BENCH = BenchmarkSpec(
    name="genai-bench",
    title="GenAI-Bench (image editing)",
    kinds=("pairwise",),
    format_source="https://huggingface.co/datasets/TIGER-Lab/GenAI-Bench (config image_edition); "
                  "https://github.com/TIGER-AI-Lab/GenAI-Bench/blob/main/inference.py",
    format_note="The converter reads the Hub's Parquet shards image_edition/<split>-*.parquet as downloaded.",
    dimensions={"vote (overall preference)": "overall"},
    tie_rule=("Human: tievote and bothbad_vote are both ties (the authors' parse_response accepts an 'A=B' verdict "
              "for either). Prediction: a pointwise scorer's tie is |score_a - score_b| <= epsilon with epsilon "
              "tie-calibrated (Deutsch et al. 2023, arXiv 2305.14324), as EditReward's eval_bench.py reports "
              "GenAI-Bench ('Accuracy with ties (paper metric)'); accuracy = share of pairs whose predicted "
              "A>B / B>A / tie equals the human one."),
    citation="""@article{jiang2024genai,
  title   = {GenAI Arena: An Open Evaluation Platform for Generative Models},
  author  = {Jiang, Dongfu and Ku, Max and Li, Tianle and Ni, Yuansheng and Sun, Shizhuo and Fan, Rongqi and Chen, Wenhu},
  journal = {arXiv preprint arXiv:2406.04485},
  year    = {2024}
}""",
    paper_reference="MIEScore paper, Table 6 (GenAI-Bench, Acc. %)",
    license="cc-by-4.0",
)

AURORA_BENCH = BenchmarkSpec(
    name="aurora-bench",
    title="AURORA-Bench (human ratings)",
    kinds=("pairwise",),
    format_source="https://github.com/TIGER-AI-Lab/EditReward/blob/main/EditReward/evaluate/eval_bench.py "
                  "(aurora_bench_pairwise); https://github.com/McGill-NLP/AURORA (README, section Human Ratings: "
                  "task_scores_finegrained.json on Google Drive)",
    format_note=("The AURORA authors release their human ratings as task_scores_finegrained.json (README, Google "
                 "Drive); that file's fields are not published in a readable form, so the input is the pairwise "
                 "JSON that EditReward's eval_bench.py builds from those ratings (a derived format)."),
    dimensions={"dim1 score (human rating of each output)": "overall"},
    tie_rule=("Human: equal model1_dim1_score and model2_dim1_score is a tie (eval_bench.py). Prediction: "
              "tie-calibrated (epsilon chosen to maximise accuracy, Deutsch et al. 2023, arXiv 2305.14324), the "
              "'accuracy with ties' that eval_bench.py reports for this file."),
    citation="""@inproceedings{krojer2024aurora,
  title     = {Learning Action and Reasoning-Centric Image Editing from Videos and Simulations},
  author    = {Krojer, Benno and Vattikonda, Dheeraj and Lara, Luis and Jampani, Varun and Portelance, Eva and
               Pal, Christopher and Reddy, Siva},
  booktitle = {NeurIPS Datasets and Benchmarks},
  year      = {2024}
}""",
    paper_reference="MIEScore paper, Table 6 (AROURA-Bench, Acc. %)",
)

EDITSCORE_BENCH = BenchmarkSpec(
    name="editscore-bench",
    title="EditScore's EditReward-Bench",
    kinds=("pairwise",),
    format_source="https://huggingface.co/datasets/EditScore/EditReward-Bench ; "
                  "https://github.com/VectorSpaceLab/EditScore/blob/main/evaluation.py",
    format_note="The converter reads the save_to_disk folder (state.json + data-*.arrow) as downloaded from the Hub.",
    dimensions={"prompt_following": "instruction_following", "consistency": "attribute_preservation",
                "overall": "overall"},
    tie_rule=("Human: no ties (every pair has a preferred output). Prediction: a pair is correct only when "
              "score(preferred) > score(other) on the judged dimension, so a predicted tie is wrong "
              "(EditScore's calculate_statistics.py and SpatialReward's calculate_accuracy.py). Accuracy is computed "
              "per task_type and averaged over task types (macro), per dimension."),
    citation="""@article{luo2025editscore,
  title   = {EditScore: Unlocking Online RL for Image Editing via High-Fidelity Reward Modeling},
  author  = {Luo, Xin and Wang, Jiahao and Wu, Chenyuan and Xiao, Shitao and Jiang, Xiyan and Lian, Defu and
             Zhang, Jiajun and Liu, Dong and others},
  journal = {arXiv preprint arXiv:2509.23909},
  year    = {2025}
}""",
    paper_reference="MIEScore paper, Table 6 (EditScore-Bench, Acc. %); SpatialReward paper, Table 1 "
                    "(EditReward-Bench PF / Cons. / Ovrl.)",
    license="apache-2.0",
)

IMAGENHUB = BenchmarkSpec(
    name="imagenhub",
    title="ImagenHub text-guided image editing",
    kinds=("pointwise",),
    format_source="https://github.com/TIGER-AI-Lab/ImagenHub/tree/main/eval/human_ratings/Text-Guided_IE ; "
                  "https://huggingface.co/datasets/ImagenHub/Text_Guided_Image_Editing",
    format_note=("The ratings TSVs and the inputs' Parquet shards are read as released; the edited images are read "
                 "from <model>/sample_<img_id>_<turn>.jpg as ImagenHub names its outputs."),
    dimensions={"SC (semantic consistency)": "instruction_following", "PQ (perceptual quality)": "visual_quality"},
    tie_rule=("Pointwise: SRCC per dimension with the raters' mean SC / PQ (average ranks for ties, which are "
              "frequent on the {0, 0.5, 1} scale); the Table 6 value is the mean SRCC over SC and PQ."),
    citation="""@inproceedings{ku2024imagenhub,
  title     = {ImagenHub: Standardizing the evaluation of conditional image generation models},
  author    = {Ku, Max and Li, Tianle and Zhang, Kai and Lu, Yujie and Fu, Xingyu and Zhuang, Wenwen and Chen, Wenhu},
  booktitle = {ICLR},
  year      = {2024}
}""",
    paper_reference="MIEScore paper, Table 6 (ImagenHub, SRCC)",
    license="cc-by-4.0",
)

EBENCH_18K = BenchmarkSpec(
    name="ebench-18k",
    title="EBench-18K",
    kinds=("pointwise",),
    format_source="https://github.com/IntMeGroup/LMM4Edit (data/test_v.json, test_e.json, test_c.json)",
    format_note=("The three JSON Lines files are read as released; image paths are made relative with "
                 "--strip-prefix (default /mnt/data/xzt/MM/editing_all/)."),
    dimensions={"visual quality (test_v)": "visual_quality", "editing correspondence (test_e)":
                "instruction_following", "attribute preservation (test_c)": "attribute_preservation"},
    tie_rule=("Pointwise: SRCC per dimension with the MOS (average ranks for ties); the Table 6 value is the mean "
              "SRCC over the three dimensions."),
    citation="""@inproceedings{xu2025lmm4edit,
  title     = {LMM4Edit: Benchmarking and Evaluating Multimodal Image Editing with LMMs},
  author    = {Xu, Zitong and Duan, Huiyu and others},
  booktitle = {ACM Multimedia},
  year      = {2025}
}""",
    paper_reference="MIEScore paper, Table 6 (EBench-18K, SRCC)",
)

EDITREWARD_BENCH = BenchmarkSpec(
    name="editreward-bench",
    title="TIGER-Lab EditReward-Bench",
    kinds=("pointwise", "pairwise"),
    format_source="https://huggingface.co/datasets/TIGER-Lab/EditReward-Bench ; "
                  "https://github.com/TIGER-AI-Lab/EditReward/tree/main/EditReward/evaluate",
    format_note="The converter reads the Hub's Parquet shards 2pair/, 3pair/, 4pair/ as downloaded.",
    dimensions={"score (human score of each candidate)": "overall"},
    tie_rule=("Pointwise (what MIEScore's Table 6 reports, and what 'benchmark zero-shot' computes): SRCC with the "
              "human score; tied human scores get average ranks. The pairwise config keeps the comparisons with "
              "their human ties (2-pair 'A=B' -> tie); the authors' own pairwise protocol (eval_bench.py) counts a "
              "2-pair tie correct when |score_a - score_b| <= epsilon, epsilon tie-calibrated on the 2-pair data, "
              "and a predicted tie wrong in 3-/4-pair data (calc_accuracy_without_ties)."),
    citation="""@article{wu2025editreward,
  title   = {EditReward: A Human-Aligned Reward Model for Instruction-Guided Image Editing},
  author  = {Wu, Keming and Jiang, Sicong and Ku, Max and Nie, Ping and Liu, Minghao and Chen, Wenhu},
  journal = {arXiv preprint arXiv:2509.26346},
  year    = {2025}
}""",
    paper_reference="MIEScore paper, Table 6 (EditReward-Bench, SRCC)",
    license="apache-2.0",
)

IEQA = BenchmarkSpec(
    name="ieqa",
    title="IEQA (EditHF-1M subset)",
    kinds=("pointwise",),
    format_source="https://github.com/IntMeGroup/EditHF (inference.py: the JSON Lines reader and the queries; "
                  "README: dataset at huggingface.co/datasets/sparkling621/IEQA)",
    format_note=("JSON Lines as EditHF's inference.py reads them ({images: [source, edited], query, response: 'The "
                 "quality score is XX.XX'}), the dimension named in the query; the Hub dataset's file names were not "
                 "read, so --file (a glob, default *.jsonl) picks the files."),
    dimensions={"visual_quality": "visual_quality", "editing_alignment": "instruction_following",
                "attribute_preservation": "attribute_preservation"},
    tie_rule=("Pointwise: SRCC per dimension with the MOS (average ranks for ties); the Table 6 value is the mean "
              "SRCC over the three dimensions."),
    citation="""@article{xu2026edithf1m,
  title   = {EditHF-1M: A Million-Scale Rich Human Preference Feedback for Image Editing},
  author  = {Xu, Zitong and Duan, Huiyu and Ji, Zhongpeng and Zhang, Xinyun and Liu, Yutao and Min, Xiongkuo and others},
  journal = {arXiv preprint arXiv:2603.14916},
  year    = {2026}
}""",
    paper_reference="MIEScore paper, Table 6 (IEQA, SRCC)",
)

MMRB2 = BenchmarkSpec(
    name="mmrb2",
    title="MMRB2 (image editing)",
    kinds=("pairwise",),
    format_source="https://github.com/facebookresearch/MMRB2/tree/main/benchmark (edit.json, README.md)",
    format_note="The converter reads the built release folder (edit.json, images/, input_images/) as is.",
    dimensions={"chosen (overall preference)": "overall"},
    tie_rule=("Human: no ties (chosen is A or B). Prediction: correct only when the chosen response scores strictly "
              "higher; a predicted tie is wrong (MMRB2's compute_accuracy.py counts any verdict other than A/B as "
              "wrong; it judges each pair in both orders, which for a pointwise scorer gives the same verdict "
              "twice, so the accuracy is unchanged). Single / Multi = pairs with one / several input images; "
              "Ovrl. = all pairs (micro)."),
    citation="""@article{hu2025mmrb2,
  title   = {Multimodal RewardBench 2: Evaluating Omni Reward Models for Interleaved Text and Image},
  author  = {Hu, Yushi and Askari-Hemmat, Reyhane and Hall, Melissa and Dinan, Emily and Zettlemoyer, Luke and
             Ghazvininejad, Marjan},
  journal = {arXiv preprint arXiv:2512.16899},
  year    = {2025}
}""",
    paper_reference="SpatialReward paper, Table 1 (MMRB2 (ImgEdit) Single / Multi / Ovrl.)",
)

# Editor benchmarks (SpatialReward paper, Table 3): editing inputs for an editor, judged by an MLLM. ``dimensions``
# maps the judge's scores to the nearest MIEScore score key (used to pair a reward model's view with the judge's);
# ``tie_rule`` states the judging protocol (:mod:`modeling_miescore.evaluation.editor_benchmarks`).
GEDIT_BENCH = BenchmarkSpec(
    name="gedit-bench",
    title="GEdit-Bench",
    kinds=("editing",),
    format_source="https://huggingface.co/datasets/stepfun-ai/GEdit-Bench (split train); "
                  "https://github.com/stepfun-ai/Step1X-Edit/blob/main/GEdit-Bench/generate_image_example.py",
    format_note=("The converter reads the release as downloaded: Parquet shards data/train-*.parquet, or the "
                 "datasets save_to_disk Arrow files (train/state.json + data-*.arrow; the Hub page lists the format "
                 "as Arrow). source_images holds input_image, the image GEdit's scripts save as <key>_SRCIMG.png "
                 "and judge against; input_image_raw is not kept."),
    dimensions={"SC (semantic consistency, 0-10)": "instruction_following",
                "PQ (perceptual quality, 0-10)": "visual_quality", "O = sqrt(SC * PQ)": "overall"},
    tie_rule=("VIEScore task 'tie' (TIGER-AI-Lab/VIEScore viescore/__init__.py): SC = min(editing success, "
              "over-editing) from [source, edited] + instruction, PQ = min(naturalness, artifacts) from the edited "
              "image alone, both 0-10, O = sqrt(SC * PQ) per sample; the edited image is resized to the source's "
              "size first; SC, PQ and O are averaged per task type, then over the 11 task types (unweighted), for "
              "the full set and the Intersection_exist subset, per instruction language."),
    citation="""@article{liu2025step1xedit,
  title   = {Step1X-Edit: A Practical Framework for General Image Editing},
  author  = {Liu, Shiyu and others},
  journal = {arXiv preprint arXiv:2504.17761},
  year    = {2025}
}""",
    paper_reference="SpatialReward paper, Table 3 (GEdit-EN SC / PQ / Ovrl.)",
    license="mit",
    subset_flags=("intersection_exist",),
)

IMGEDIT_BENCH = BenchmarkSpec(
    name="imgedit-bench",
    title="ImgEdit-Bench (Basic)",
    kinds=("editing",),
    format_source="https://github.com/PKU-YuanGroup/ImgEdit/tree/main/Benchmark/Basic (basic_edit.json, "
                  "basic_bench.py, basic_bench_readme.md); source images: Benchmark.tar of "
                  "https://huggingface.co/datasets/sysuyy/ImgEdit",
    format_note=("basic_edit.json ({key: {id, prompt, edit_type}}) is read as released, each source image from "
                 "<images>/<id> (the extracted Benchmark.tar; --images, relative to --raw)."),
    dimensions={"mean of the type's three 1-5 criteria": "overall"},
    tie_rule=("basic_bench.py: the judge sees the type's rubric (prompts.json, <edit_prompt> replaced), the source "
              "and the edited image, and answers three 'Name: <1-5>' lines; step1_get_avgscore.py takes the "
              "per-image mean (rounded to 2 places), step2_typescore.py the per-type means (rounded to 2 places). "
              "The scripts define no overall score; the mean over the types is our reading."),
    citation="""@article{ye2025imgedit,
  title   = {ImgEdit: A Unified Image Editing Dataset and Benchmark},
  author  = {Ye, Yang and others},
  journal = {arXiv preprint arXiv:2505.20275},
  year    = {2025}
}""",
    paper_reference="SpatialReward paper, Table 3 (ImgEdit Ovrl.)",
)

SPECS: dict[str, BenchmarkSpec] = {spec.name: spec for spec in (
    GENAI_BENCH, AURORA_BENCH, EDITSCORE_BENCH, IMAGENHUB, EBENCH_18K, EDITREWARD_BENCH, IEQA, MMRB2, GEDIT_BENCH,
    IMGEDIT_BENCH)}
