"""Configuration of the MIEScore regression scorer (Hub file: copied into every saved checkpoint)."""

from __future__ import annotations

from transformers import AutoConfig, PreTrainedConfig
from transformers.configuration_utils import SubConfigSpec

from .miescore_overall import DIMENSIONS
from .miescore_score_heads import SCORE_HEADS, score_head_class
from .skill_miescore import DEFAULT_SKILL

SCORE_NAMES = DIMENSIONS

# Rendered by `processing_miescore.build_messages`: `{skill}`, `{sources}` (one labelled image per source),
# `{instruction}` and `{edited}` (the labelled edited image). Sources and instruction come first so that
# the many edits of one instance share one prompt prefix (prefix_reuse).
DEFAULT_PROMPT_TEMPLATE = (
    "{skill}\n\n"
    "{sources}\n"
    "Editing instruction: {instruction}\n\n"
    "{edited}\n"
    "Rate the edited image for visual quality, instruction following and attribute preservation."
)
# MIEScore paper, "Zero-shot Results on Other Benchmarks": MIEScore is "adapted to the single-source setting by
# slightly modifying the evaluation prompt while keeping the model parameters unchanged". Used automatically for a
# sample with exactly one source (`processing_miescore.build_messages`); the skill, head and weights are the same.
DEFAULT_SINGLE_SOURCE_PROMPT_TEMPLATE = (
    "{skill}\n\n"
    "This edit has a single source image: judge attribute preservation against it alone.\n"
    "{sources}\n"
    "Editing instruction: {instruction}\n\n"
    "{edited}\n"
    "Rate the edited image for visual quality, instruction following and attribute preservation."
)


class MIEScoreConfig(PreTrainedConfig):
    r"""Configuration of :class:`MIEScoreModel`.

    Args:
        backbone_config (`dict` or `PreTrainedConfig`): the configuration of the backbone's base model, any
            transformers model type (built with `AutoModel.from_config`); a dict without `model_type` is Qwen3-VL.
            Qwen-VL and InternVL are tuned families (`backbone_families`): pixel budgets and prefix reuse.
        score_names (`list[str]`): names of the regression outputs, in head order.
        overall_weights (`list[float]`): exponents of the weighted geometric mean giving the overall score
            (MIEScore paper eq. 2: VQ 0.3, IF 0.4, AP 0.3).
        head_hidden_size (`int`): width of the regression head's hidden layer.
        head_dropout (`float`): dropout inside the regression head.
        score_scale (`float`): the sigmoid outputs in [0, 1] are multiplied by this (100 = MOS scale).
        skill (`str`): the evaluation rubric placed at the start of every prompt.
        prompt_template (`str`): user-turn template with `{skill}`, `{sources}`, `{instruction}`, `{edited}`.
        single_source_prompt_template (`str`): the template used instead of `prompt_template` when a sample has
            exactly one source (the paper's single-source variant); `""` disables the variant.
        source_label (`str`): text before each source image; `{index}` is 1-based.
        single_source_label (`str`): text before the source image of a one-source sample.
        edited_label (`str`): text before the edited image.
        image_order (`str`): `"sources_first"` (default: sources and instruction, edited image last, so a
            shared prefix can be reused) or `"edited_first"` (the `{edited}` and `{sources}` blocks swap).
        max_pixels (`int`): pixel budget per image (paper: 1,048,576). Qwen-VL: images are resized into
            [min_pixels, max_pixels]; InternVL: at most max_pixels // tile² tiles (+ a thumbnail); other families:
            not applied (see `backbone_families`).
        min_pixels (`int`): images smaller than this are upscaled (Qwen3-VL's default); InternVL: the least
            number of tiles is min_pixels // tile².
        padding_side (`str`): tokenizer padding side used for batches (`"left"` or `"right"`).
        score_head (`str`): a key of `miescore_score_heads.SCORE_HEADS`: `"regression"` (the paper's MLP head) or
            `"lm_digits"` (no head: each score is the expected digit the language model writes in a JSON answer,
            `lm_digit_scores`; Table 5 rows 1 and 4).
        lm_score_max (`int`): `lm_digits` only: the answer's scale is 0..lm_score_max (the default skill's 0-5).
        lm_answer_token_ids (`list[list[int]]`) / lm_digit_token_ids (`list[int]`): `lm_digits` only: the answer
            text before each score and the digit tokens, tokenised (set by `MIEScoreModel.from_backbone`).
    """

    model_type = "miescore"
    sub_configs_defaults = {"backbone_config": SubConfigSpec(config_class=AutoConfig, model_type="qwen3_vl")}

    backbone_config: dict | PreTrainedConfig | None = None
    score_names: list[str] | None = None
    overall_weights: list[float] | None = None
    head_hidden_size: int = 1024
    head_dropout: float = 0.0
    score_scale: float = 100.0
    skill: str | None = None
    prompt_template: str | None = None
    single_source_prompt_template: str | None = None
    source_label: str = "Source image {index}:"
    single_source_label: str = "Source image:"
    edited_label: str = "Edited image:"
    image_order: str = "sources_first"
    # MIEScore paper, supplement "Supervised Fine-Tuning": "a maximum pixel budget of 1,048,576 pixels".
    max_pixels: int = 1_048_576
    min_pixels: int = 65_536
    padding_side: str = "left"
    score_head: str = "regression"
    lm_score_max: int = 5
    lm_answer_token_ids: list[list[int]] | None = None
    lm_digit_token_ids: list[int] | None = None

    def __post_init__(self, **kwargs):
        defaults = (("score_names", list(SCORE_NAMES)), ("overall_weights", [0.3, 0.4, 0.3]), ("skill", DEFAULT_SKILL),
                    ("prompt_template", DEFAULT_PROMPT_TEMPLATE),
                    ("single_source_prompt_template", DEFAULT_SINGLE_SOURCE_PROMPT_TEMPLATE))
        for name, default in defaults:  # fresh lists per config: defaults are built on each call
            if getattr(self, name) is None:
                setattr(self, name, default)
        suffix = score_head_class(self.score_head).prompt_suffix(self) if self.score_head in SCORE_HEADS else ""
        if suffix:  # e.g. a model without head must be told the answer format
            for name, default in (("prompt_template", DEFAULT_PROMPT_TEMPLATE),
                                  ("single_source_prompt_template", DEFAULT_SINGLE_SOURCE_PROMPT_TEMPLATE)):
                if getattr(self, name) == default:
                    setattr(self, name, default + suffix)
        super().__post_init__(**kwargs)
        self.validate_scoring_fields()

    def validate_scoring_fields(self):
        if len(self.overall_weights) != len(self.score_names):
            raise ValueError(
                f"overall_weights has {len(self.overall_weights)} entries but there are "
                f"{len(self.score_names)} score_names"
            )
        if self.image_order not in ("sources_first", "edited_first"):
            raise ValueError(f"image_order must be 'sources_first' or 'edited_first', got {self.image_order!r}")
        if self.padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {self.padding_side!r}")
        templates = {"prompt_template": self.prompt_template,
                     "single_source_prompt_template": self.single_source_prompt_template}
        for name, template in templates.items():
            for field in ("{sources}", "{edited}", "{instruction}"):
                if template and field not in template:
                    raise ValueError(f"{name} must contain {field}")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        self.validate_score_head()

    def validate_score_head(self):
        score_head_class(self.score_head).check_config(self)


__all__ = ["MIEScoreConfig", "SCORE_HEADS", "SCORE_NAMES", "DEFAULT_PROMPT_TEMPLATE", "DEFAULT_SINGLE_SOURCE_PROMPT_TEMPLATE"]
