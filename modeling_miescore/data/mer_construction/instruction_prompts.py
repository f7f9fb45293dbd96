"""The MER-Bench instruction-synthesis prompts, appendix D.3 of the SpatialReward paper (arXiv 2602.07458), word
for word, and the subtask taxonomy they are planned with.

Normalisation, the same as for the D.1 and D.2 prompts: HTML entities of the paper's rendering are unescaped,
typographic quotes are ASCII (``person’s`` -> ``person's``) and the listings' line breaks, lost in text
extraction, are restored at heading and list boundaries. Nothing else changes:
``tests/data/mer_construction/test_mer_construction.py`` diffs both prompts against the paper's text with whitespace collapsed.
Placeholders are filled by plain replacement (:func:`~modeling_miescore.data.spatialreward_pipeline.prompts.fill`):
the prompts contain JSON braces.

The subtask line (:func:`subtask_hint`) is ours: the paper names three categories, "15 fine-grained subtasks"
and a 2:1:1 ratio (sec. 4.2) but not the subtasks; :data:`MER_SUBTASKS` is our split of the categories
along the edit types the two prompts list. The hint is appended after the verbatim prompt (``hint=False``
sends the bare prompt).
"""

from __future__ import annotations

from ..schema import MER_CATEGORIES

__all__ = ["GENERAL_PROMPT", "HUMAN_PROMPT", "MER_SUBTASKS", "PROMPT_OF_CATEGORY", "subtask_hint"]


def _output_format(region_description: str, instruction: str) -> str:
    """The "Output Format (JSON)" block both D.3 prompts end with (they differ only in two example values)."""
    return ("## Output Format (JSON)\n"
            "{\n"
            '  "is_editable": true,\n'
            '  "reason": "...",\n'
            '  "edit_regions": [\n'
            f'    {{"region_id": 1, "description": "{region_description}", "bbox": [...]}},\n'
            "    ...\n"
            "  ],\n"
            f'  "edit_instruction": "{instruction}",\n'
            '  "num_edits": {num_edits}\n'
            "}")


# D.3.1 General Domain Instruction Generation
GENERAL_PROMPT = (
    "You are an expert in image analysis and multi-edit prompt writing.\n"
    "Task: Evaluate the image and generate a multi-edit instruction with exactly {num_edits} edits.\n"
    "\n"
    "## Task 1: Assess Image Suitability\n"
    "First, determine if the image is suitable for multi-edit tasks:\n"
    "- Suitable: Clear, high quality, recognizable objects/scenes, distinct foreground/background.\n"
    "- Unsuitable: Abstract patterns, low quality, blurred, text screenshots, or overly simple scenes.\n"
    'Provide: "is_editable": true/false, "reason": "brief explanation".\n'
    "\n"
    "## Task 2: Annotate Editable Regions (If Suitable)\n"
    "Identify and annotate {num_edits} key editable regions:\n"
    "- Use normalized bounding boxes [x1, y1, x2, y2] (0-1000 range).\n"
    "- Describe content (e.g., \"sky\", \"person's shirt\").\n"
    "- Minimize overlap between regions.\n"
    "\n"
    "## Task 3: Generate Multi-Edit Prompt\n"
    "Write a single prompt describing {num_edits} complementary edits:\n"
    "- Types: Object Modification (color/size/attr), Addition, Removal.\n"
    "- Requirements: English only, creative yet feasible, coordinated edits.\n"
    "\n"
    + _output_format("...", "Complete prompt describing {num_edits} complementary edits...")
)

# D.3.2 Human Domain Instruction Generation
HUMAN_PROMPT = (
    "You are an expert human image editing instruction generator.\n"
    "Filter images and generate multi-edit instructions with {num_edits} edits.\n"
    "\n"
    "## Filtering Rules\n"
    "- 1 to 4 people maximum.\n"
    "- Person must occupy a significant portion of the image (no tiny figures in landscapes).\n"
    "\n"
    "## Editing Types (Choose {num_edits} consistent/reasonable types)\n"
    "1. Face/Skin: Makeup, freckles, skin tone (Only if face is clearly visible!).\n"
    "2. Expression/Gaze: Smile, eyes open/closed, gaze direction.\n"
    "3. Hair: Color, style, length, accessories (hats, clips).\n"
    "4. Body/Action: Pose change, hand gestures.\n"
    "5. Clothing/Accessories: Color/style of shirt/pants, glasses, jewelry, watches.\n"
    "6. Objects/Interaction: Books, cups, etc.\n"
    "7. Lighting/Atmosphere: Lighting direction, tone (warm/cool), shadows.\n"
    "\n"
    "## Constraints\n"
    "- Do NOT edit face if face is small or not visible.\n"
    "- For accessories, target one specific location per edit.\n"
    "- Edits must be self-consistent.\n"
    "\n"
    + _output_format("[region]: from... to...", "Concise instruction containing {num_edits} edits...")
)

PROMPT_OF_CATEGORY = {"general": GENERAL_PROMPT, "human_basic": HUMAN_PROMPT, "human_fine": HUMAN_PROMPT}

# Sec. 4.2: general editing (attributes, background), human-centric basics (pose, clothing) and human-centric fine
# details (micro-expressions, texture), 15 subtasks in all. The names and the split are ours (see the docstring);
# each value is the edit type the hint asks for.
MER_SUBTASKS = {
    "general": {
        "color_change": "object color change", "object_addition": "object addition",
        "object_removal": "object removal", "material_change": "object material or texture change",
        "background_change": "background change", "count_change": "object count or size change",
        "text_change": "text or sign change",
    },
    "human_basic": {
        "pose_change": "body pose or hand gesture change", "clothing_change": "clothing color or style change",
        "hair_change": "hair color, style or length change", "accessory_change": "accessories (glasses, jewelry, hats)",
    },
    "human_fine": {
        "expression_change": "facial micro-expression change", "makeup": "makeup",
        "skin_texture": "skin texture, freckles or skin tone", "gaze_change": "gaze direction or eyes open/closed",
    },
}
assert tuple(MER_SUBTASKS) == MER_CATEGORIES and sum(map(len, MER_SUBTASKS.values())) == 15


def subtask_hint(category: str, subtask: str) -> str:
    """The line appended after the verbatim prompt to steer the edit types towards one subtask."""
    return f"\n\nFocus the edits mainly on this edit type: {MER_SUBTASKS[category][subtask]}."
