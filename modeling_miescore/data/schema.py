"""The MIE-Bench and MER-Bench schemas: tasks, categories, dimensions, MOS columns, tiers and split names.

One home for every constant that the builders, the benchmark runner, the reports, the trainer and the skill
optimiser share. Orders are part of the datasets' format and never change (the ``task`` ClassLabel stores
the index into :data:`TASKS`).
"""

from __future__ import annotations

from ..hub.miescore_overall import DIMENSIONS, MOS_SCALE


# MIEScore paper, appendix "Editing Tasks Define": 8 regional, 4 global and 4 complex-reasoning tasks.
REGIONAL_TASKS = (
    "attribute_transfer", "character_composition", "object_composition", "object_replacement",
    "pose_change", "text_composition", "text_style", "text_replacement",
)
GLOBAL_TASKS = ("style_transfer", "background_transfer", "assisted_drawing", "filter_composition")
REASONING_TASKS = ("spatial_composition", "interaction", "physical_understanding", "story_generation")
TASKS = REGIONAL_TASKS + GLOBAL_TASKS + REASONING_TASKS
MIE_CATEGORIES = ("regional", "global", "reasoning")
TASK_CATEGORY = {
    **{t: "regional" for t in REGIONAL_TASKS},
    **{t: "global" for t in GLOBAL_TASKS},
    **{t: "reasoning" for t in REASONING_TASKS},
}

# "Subjective Experiment Setup": three dimensions (DIMENSIONS) rated on a 0-5 continuous scale; MOS on 0-100 (eq. 1).
SCORE_KEYS = DIMENSIONS + ("overall",)
DIMENSION_ABBREVIATIONS = {"visual_quality": "vq", "instruction_following": "if", "attribute_preservation": "ap"}
MOS_COLUMNS = ("mos_vq", "mos_if", "mos_ap")  # the dataset's MOS columns, in the order of DIMENSIONS
MOS_COLUMN_OF = {**dict(zip(DIMENSIONS, MOS_COLUMNS)), "overall": "mos_overall"}
RATING_RANGE = (0.0, 5.0)
MOS_RANGE = (0.0, MOS_SCALE)

# Display names (MIEScore paper, tables 3-4 column names).
SHORT_NAMES = {"visual_quality": "VQ", "instruction_following": "IF", "attribute_preservation": "AP",
               "overall": "Overall"}
LONG_NAMES = {
    "visual_quality": "Visual Quality",
    "instruction_following": "Instruction Following",
    "attribute_preservation": "Attribute Preservation",
    "overall": "Overall Score",
}

# "Implementation Details": train/validation/test = 3:1:1, by instance.
MIE_SPLITS = ("train", "validation", "test")


# SpatialReward paper sec. 4.2: general, human-basic and human-fine instructions in a 2:1:1 ratio.
MER_CATEGORIES = ("general", "human_basic", "human_fine")
MER_CATEGORY_LABELS = {"general": "General", "human_basic": "Human-B.", "human_fine": "Human-F."}  # table 2
TIERS = ("poor", "medium", "good")  # rank = index; appendix A.1 calls poor "bad"
# Appendix A.1: each candidate gets a tier for overall quality, semantic consistency (SC) and perceptual quality (PQ).
MER_TIER_DIMENSIONS = ("overall", "sc", "pq")
GROUP_SIZES = (2, 3, 4)  # sec. 4.3: groups of 2, 3 and 4 edited images
MER_SPLITS = tuple(f"{k}pair" for k in GROUP_SIZES)
