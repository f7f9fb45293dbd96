"""The prompts of SpatialReward's data pipeline, appendix D.2 of the paper (arXiv 2602.07458), word for word.

:data:`ALIGNMENT_PROMPT` (D.2.3) has no placeholders: it lists its inputs, which :func:`alignment_inputs_text`
appends after it (our layout).

Normalisation, the same as for the D.1 prompts in ``configuration_spatialreward``: HTML entities of the paper's
rendering are unescaped (``&lt;|global|&gt;`` -> ``<|global|>``, ``&amp;`` -> ``&``), typographic quotes are
ASCII (``’score1’`` -> ``'score1'``, ``‘check_result: true‘`` -> ``'check_result: true'``), and the listings'
line breaks, lost in text extraction, are restored at sentence, heading and list boundaries. Nothing else
changes, typos included ("editeded", "wheather", "evaluata", "metioned"): ``tests/data/spatialreward_pipeline/test_spatialreward_pipeline.py``
diffs every prompt against the paper's text with whitespace collapsed.

Placeholders are filled with plain string replacement (:func:`fill`), never ``str.format``: the prompts contain
JSON braces and the literal ``<|bbox_{id}|>``.

User text (issue 22): the instruction is the only text of these prompts that nobody here wrote, so it is filled
as a JSON string literal (:func:`~modeling_miescore.utils.text_hygiene.quoted`: in quotes, its quotes and line
breaks escaped): ``Editing instruction: "make the sky blue"``. The published wording around it is unchanged; an
instruction can no longer end the prompt early or pose as an answer object. ``PipelineConfig(quote_user_text=
False)`` fills it raw, as the paper prints the templates.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence

from ...utils.text_hygiene import quoted

__all__ = ["ALIGNMENT_PROMPT", "GROUNDING_PROMPT", "PQ_PROMPT", "PROMPT_NAMES", "SC_GENERAL_PROMPT",
           "SC_HUMAN_PROMPT", "alignment_inputs_text", "fill", "user_text"]

# D.2.1 Grounding Prompt (Stage 1)
GROUNDING_PROMPT = (
    "You are a professional image editing evaluation expert. You need to locate the edited regions in the images:\n"
    "\n"
    "## Input\n"
    "**Editing Instruction**: {instruction}\n"
    "**Number of Edit Regions**: {box_num}\n"
    "Image 1 (original image) and Image 2 (edited image)\n"
    "\n"
    "## Output Format\n"
    "{\n"
    '  "edit_region": [\n'
    '    {"id":"0~n", "label": "instance name", "bbox_2d": [x1, y1, x2, y2]}\n'
    "  ]\n"
    "}\n"
    "\n"
    "**Annotation Rules**:\n"
    "- You should annotate exactly {box_num} region(s) as specified\n"
    "- Label should be consistent with the editing instruction, **Only mention the names of the instances** in "
    "the editeded areas; do not describe the changes or add any adjectives except for directional or possessive "
    "ones.\n"
    "- If there are multiple instances, annotate them separately\n"
    "- Special task types:\n"
    "  - Removal tasks: Annotate the position of removed objects in **Image 1**\n"
    "  - Addition/Modification tasks: Annotate the position of objects in **Image 2**\n"
    "\n"
    "## Start Grounding\n"
    "Now please analyze the provided images and output the results in the specified format."
)

_SC_SCALE = (
    "From scale 0 to 25:\n"
    "A score from 0 to 25 will be given based on the success of the editing. (0 indicates that the scene in the "
    "edited image does not follow the editing instruction at all. 25 indicates that the scene in the edited image "
    "follow the editing instruction text perfectly.)\n"
    "A second score from 0 to 25 will rate the degree of overediting in the second image. (0 indicates that the "
    "scene in the edited image is completely different from the original. 25 indicates that the edited image can "
    "be recognized as a minimal edited yet effective version of original. "
)
_SC_SCORE_LIST = (
    "Put the score in a list such that output score = [score1, score2], where 'score1' evaluates the editing "
    "success and 'score2' evaluates the degree of overediting.\n"
)
_REASONING_SCHEMA = (
    "IMPORTANT: You will have to give your output in this way (Keep your reasoning concise and short.):\n"
    '{\n"reasoning" : "...",\n"score" : [...]\n}\n\n'
)
_ARTIST = ("You are a professional digital artist. You will have to evaluate the effectiveness of the AI-generated "
           "image(s) based on given rules.\n")

# D.2.2 Reasoning Generation Prompts (Stage 2): SC, general domain (box overlays on both images)
SC_GENERAL_PROMPT = (
    _ARTIST
    + "All the input images are AI-generated. All human in the images are AI-generated too. so you need not worry "
    "about the privacy confidentials.\n\n"
    + _REASONING_SCHEMA
    + "RULES:\n\n"
    "Two images will be provided: The first being the original AI-generated image and the second being an edited "
    "version of the first.\n"
    "**Note:** Both images contain visual annotations (bounding boxes) indicating the edit regions.\n"
    "The objective is to evaluate how successfully the editing instruction has been executed in the second "
    "image.\n\n"
    "Note that sometimes the two images might look identical due to the failure of image edit.\n\n"
    + _SC_SCALE
    + "Please pay attention to the preservation of global layout and overall color tone.)\n"
    + _SC_SCORE_LIST
    + "\nEditing instruction: {instruction}"
)

# D.2.2: SC, human domain (full images, then a before/after crop pair per edit region)
SC_HUMAN_PROMPT = (
    _ARTIST
    + "All the input images are AI-generated.\n\n"
    + _REASONING_SCHEMA
    + "RULES:\n\n"
    "Input images will be provided in the following order:\n"
    "1. Original Image (Full Size)\n"
    "2. Edited Image (Full Size)\n"
    "3. Sequence of Cropped Patches: For each edit region, a pair of crops (Before Edit, After Edit) is provided.\n"
    "The objective is to evaluate how successfully the editing instruction has been executed in the second image "
    "focusing on the details shown in the patches.\n\n"
    "Note that sometimes the two images might look identical due to the failure of image edit.\n\n"
    + _SC_SCALE
    + "Please pay attention to the preservation of the person's pose and their position in the image have not been "
    "metioned in instruction.)\n"
    + _SC_SCORE_LIST
    + "\nIMPORTANT ANALYSIS:\n"
    "- If the instruction involves facial expressions, verify that the changes are present, natural and "
    "appropriate.\n"
    "- Please verify wheather every changes are reasonable and successful.\n"
    "- Your don't need to evaluata overall quality.\n"
    "- The second score must monitor any unmentioned elements-pose, face orientations, gaze direction, "
    "background, etc. If these are altered, deduct points in proportion to the degree of change.\n"
    "- The character's size and placement in the frame (composition) must remain exactly identical.\n"
    '- For "remove" edits, check both that the original object is completely gone and that its replacement (if '
    "any) does not introduce new, unintended content.\n"
    "- The consistency of skin/cloth texture should be taken into consideration for the second score.\n"
    '- "reasoning" should be concise and short, mentioning every changes in instruction and the overall '
    "over-editing situation briefly.\n\n"
    "Editing instruction: {instruction}"
)

# D.2.2: Perceptual Quality (PQ) Scoring (the edited image alone)
PQ_PROMPT = (
    _ARTIST
    + "\n"
    + _REASONING_SCHEMA
    + "RULES:\n\n"
    "The image is an AI-generated image.\n"
    "The objective is to evaluate how successfully the image has been generated.\n\n"
    "From scale 0 to 25:\n"
    "A score from 0 to 25 will be given based on image naturalness.\n"
    "(\n"
    "    0 indicates that the scene in the image does not look natural at all or give a unnatural feeling such as "
    "wrong sense of distance, or wrong shadow, or wrong lighting.\n"
    "    25 indicates that the image looks natural.\n"
    ")\n"
    "A second score from 0 to 25 will rate the image artifacts.\n"
    "(\n"
    "    0 indicates that the image contains a large portion of distortion, or watermark, or scratches, or blurred "
    "faces, or unusual body parts, or subjects not harmonized.\n"
    "    25 indicates the image has no artifacts.\n"
    ")\n"
    "Put the score in a list such that output score = [naturalness, artifacts]"
)

# D.2.3 Reasoning Refinement & Check (Stage 3)
ALIGNMENT_PROMPT = (
    "You are an expert image editing evaluator. Your task is to check the consistency of the original reasoning "
    "and then insert special tokens to ground the edited regions, **maintaining the original text as much as "
    "possible**.\n\n"
    "## Input\n"
    "1. **Images (Before/After)**\n"
    "2. **Editing Instruction**\n"
    "3. **List of Edit Regions**: Each region has an id, label, and bbox_2d.\n"
    "4. **Original Reasoning**\n\n"
    "## Core Principles\n"
    "**Task 1: Consistency Check**\n"
    "First, verify if the original reasoning accurately reflects the actual edits in the images.\n"
    "- Output 'check_result: true' if the reasoning is consistent and accurate.\n"
    "- Output 'check_result: false' if there are hallucinations or major errors.\n"
    "- **Only proceed to Task 2 if check_result is true.**\n\n"
    "**Task 2: Token Insertion (If Consistent)**\n"
    "**Priority 1: Maintain Original Text**\n"
    "- Do not change the wording, word order, or structure of the original reasoning.\n"
    "- Only insert tokens at appropriate positions.\n\n"
    "**Priority 2: Complete Coverage**\n"
    "- There must be exactly one <|global|> token in the text.\n"
    "- Each edit_region must have a corresponding <|bbox_{id}|> token.\n"
    "- If the original reasoning misses some regions, add a **very brief** description (1 sentence) to cover it.\n"
    "- If edit_region is empty, do not insert any <|bbox_id|> tokens.\n\n"
    "## Token Usage Rules\n"
    "**<|bbox_{id}|>** - Region Marker\n"
    "- Insert immediately **before the noun** describing the region content.\n"
    "- Insert N bbox tokens for N edit regions.\n\n"
    "**<|global|>** - Global Assessment Marker\n"
    "- Insert at the **beginning of the sentence** discussing overall effects, harmony, or over-editing.\n"
    "- **Must be inserted once.**\n"
    "- No need to expand text; just insert the token into the existing global description.\n\n"
    "## Output Format\n"
    "If inconsistent:\n"
    "check_result: false\n\n"
    "If consistent:\n"
    "check_result: true\n"
    "[Refined Reasoning Text Here]\n\n"
    "- Direct plain text output.\n"
    "- Keep original language style.\n"
    "- Length should be close to original.\n\n"
    "## Example\n"
    "**Input:**\n"
    '- edit_region: [{"id": 0, "label": "background neon city lights", "bbox_2d": [0,0,999,999]}]\n'
    '- Original Reasoning: "The edited image successfully removes the neon city lights and replaces them with a '
    'clear night sky. The main subject is retained with minimal alterations."\n\n'
    "**Output:**\n"
    "check_result: true\n"
    "The edited image successfully removes the <|bbox_0|>neon city lights and replaces them with a clear night "
    "sky. <|global|> The main subject is retained with minimal alterations."
)

PROMPT_NAMES = {
    "grounding": "D.2.1 Grounding Prompt (Stage 1): Edit Region Grounding",
    "sc_general": "D.2.2 Reasoning Generation Prompts (Stage 2): SC Reasoning Generation (General Domain)",
    "sc_human": "D.2.2 Reasoning Generation Prompts (Stage 2): SC Reasoning Generation (Human Domain)",
    "pq": "D.2.2 Reasoning Generation Prompts (Stage 2): Perceptual Quality (PQ) Scoring",
    "alignment": "D.2.3 Reasoning Refinement & Check (Stage 3): Reasoning Consistency Check & Token Interleaving",
}


def fill(template: str, **values: Any) -> str:
    """Replace ``{name}`` for each given value (plain replacement; every other brace stays literal)."""
    for name, value in values.items():
        template = template.replace("{" + name + "}", str(value))
    return template


def user_text(instruction: str, quote: bool = True) -> str:
    """What an instruction placeholder is filled with: the JSON string literal (default), or the raw text."""
    return quoted(instruction) if quote else str(instruction)


def alignment_inputs_text(instruction: str, regions: Sequence[Dict[str, Any]], reasoning: str,
                          quote: bool = True) -> str:
    """The D.2.3 inputs after the prompt, in the prompt's own input order and example layout (ours: the paper
    gives the prompt without placeholders). The reasoning is always a JSON string literal, as in the prompt's
    example; the instruction is one too unless ``quote`` is False."""
    listed: List[Dict[str, Any]] = [{"id": r["id"], "label": r.get("label", ""), "bbox_2d": list(r["bbox_2d"])}
                                    for r in regions]
    return ("\n\n## Now Check\n**Input:**\n"
            f"- Editing Instruction: {user_text(instruction, quote)}\n"
            f"- edit_region: {json.dumps(listed, ensure_ascii=False)}\n"
            f"- Original Reasoning: {json.dumps(reasoning, ensure_ascii=False)}\n\n"
            "**Output:**\n")
